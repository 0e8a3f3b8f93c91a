/**
 * The types a gateway and a plugin author need: endpoints and their metrics, inference requests,
 * the filter/scorer/picker/profile-handler SPIs, routing decisions and the plugin provider SPI
 * discovered through {@link java.util.ServiceLoader}.
 */
@NullMarked
package io.epp4j.api;

import org.jspecify.annotations.NullMarked;
