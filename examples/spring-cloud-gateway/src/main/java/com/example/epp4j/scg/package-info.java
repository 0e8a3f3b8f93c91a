/** A Spring Cloud Gateway that routes {@code /v1/**} through the epp4j filter. */
@NullMarked
package com.example.epp4j.scg;

import org.jspecify.annotations.NullMarked;
