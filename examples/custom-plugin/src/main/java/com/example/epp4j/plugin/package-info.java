/** A third-party scorer plugin, packaged for ServiceLoader discovery. */
@NullMarked
package com.example.epp4j.plugin;

import org.jspecify.annotations.NullMarked;
