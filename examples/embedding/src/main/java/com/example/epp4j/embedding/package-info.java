/** Embedding the router in an application. */
@NullMarked
package com.example.epp4j.embedding;

import org.jspecify.annotations.NullMarked;
