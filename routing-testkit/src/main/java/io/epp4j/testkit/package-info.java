/**
 * Contract tests for plugin authors: extend {@link io.epp4j.testkit.ScorerContract},
 * {@link io.epp4j.testkit.FilterContract}, {@link io.epp4j.testkit.PickerContract} or
 * {@link io.epp4j.testkit.ProviderContract} in a JUnit 5 test, implement the factory method, and
 * the inherited tests check what the router relies on: thread safety, score range, no mutation of
 * inputs, idempotent close, and a provider that reports bad parameters by name.
 * {@link io.epp4j.testkit.CapturedLog} captures what a test's code logs, to check that no prompt
 * reaches a log.
 */
@NullMarked
package io.epp4j.testkit;

import org.jspecify.annotations.NullMarked;
