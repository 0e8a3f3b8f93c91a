/**
 * epp4j as an Envoy external processor: {@link io.epp4j.envoy.ExtProcServer} serves Envoy's
 * {@code ext_proc} protocol so that any Envoy-based gateway picks inference endpoints with an
 * epp4j {@link io.epp4j.core.Router}; {@link io.epp4j.envoy.Main} runs it from the command line.
 */
@NullMarked
package io.epp4j.envoy;

import org.jspecify.annotations.NullMarked;
