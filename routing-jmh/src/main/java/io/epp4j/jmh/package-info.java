/** JMH benchmarks of the routing hot path. */
@NullMarked
package io.epp4j.jmh;

import org.jspecify.annotations.NullMarked;
