/** A plain HTTP gateway in front of vLLM replicas, routed by the library. */
@NullMarked
package com.example.epp4j.gateway;

import org.jspecify.annotations.NullMarked;
