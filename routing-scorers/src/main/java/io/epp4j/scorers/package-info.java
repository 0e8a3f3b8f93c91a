/** Built-in filters, scorers, pickers and profile handlers. */
@NullMarked
package io.epp4j.scorers;

import org.jspecify.annotations.NullMarked;
