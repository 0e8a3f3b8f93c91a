package io.epp4j.sim;

import io.epp4j.sim.Main.UsageException;

/**
 * The command-line knobs of the two seed workloads (shared-prefix, multi-turn), starting from
 * their defaults; {@link Main.Options} builds the workloads from them once every option is read.
 */
final class WorkloadOptions {
  int groups;
  int users;
  LengthDist system;
  LengthDist question;
  LengthDist output;
  int concurrency;
  double rate;
  int dialogs;
  int turns;
  int mtSystem;
  LengthDist user;
  LengthDist reply;
  double think;
  double startSpread;

  WorkloadOptions(SharedPrefixWorkload shared, MultiTurnWorkload multi) {
    groups = shared.groups();
    users = shared.usersPerGroup();
    system = shared.systemPromptLength();
    question = shared.questionLength();
    output = shared.outputLength();
    concurrency = shared.concurrency();
    rate = shared.rate();
    dialogs = multi.dialogs();
    turns = multi.turns();
    mtSystem = multi.systemPromptLength();
    user = multi.userLength();
    reply = multi.replyLength();
    think = multi.thinkTimeSeconds();
    startSpread = multi.startSpreadSeconds();
  }

  /** Applies a workload option; false when {@code name} is not one. */
  boolean apply(String name, String v) throws UsageException {
    switch (name) {
      case "--groups" -> groups = Main.Options.intArg(name, v, 1, 1_000_000);
      case "--users-per-group" -> users = Main.Options.intArg(name, v, 1, 1_000_000);
      case "--system-prompt-len" -> system = Main.Options.lengthArg(name, v);
      case "--question-len" -> question = Main.Options.lengthArg(name, v);
      case "--output-len" -> output = Main.Options.lengthArg(name, v);
      case "--concurrency" -> concurrency = Main.Options.intArg(name, v, 1, 1_000_000);
      case "--rate" -> rate = Main.Options.doubleArg(name, v, 0.000001, 1e9);
      case "--dialogs" -> dialogs = Main.Options.intArg(name, v, 1, 1_000_000);
      case "--turns" -> turns = Main.Options.intArg(name, v, 1, 10_000);
      case "--mt-system-len" -> mtSystem = Main.Options.intArg(name, v, 1, 10_000_000);
      case "--user-len" -> user = Main.Options.lengthArg(name, v);
      case "--reply-len" -> reply = Main.Options.lengthArg(name, v);
      case "--think-time" -> think = Main.Options.doubleArg(name, v, 0, 1e6);
      case "--start-spread" -> startSpread = Main.Options.doubleArg(name, v, 0, 1e6);
      default -> {
        return false;
      }
    }
    return true;
  }
}
