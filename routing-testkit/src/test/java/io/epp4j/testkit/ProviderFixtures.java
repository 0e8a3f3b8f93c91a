package io.epp4j.testkit;

import io.epp4j.api.AbstractPluginProvider;
import io.epp4j.api.Parameters;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import java.util.Set;

/**
 * Providers for {@link ProviderContractMetaTest}: a correct one and one for each rule of
 * {@link ProviderContract} that it breaks. All but {@link Unregistered} are listed in this
 * module's test {@code META-INF/services/io.epp4j.api.PluginProvider}, so only the service-loader
 * check fails for that one. Public, with public constructors, for the service loader.
 */
public final class ProviderFixtures {
  private ProviderFixtures() {}

  /** The plugin every provider here makes: a correct scorer. */
  static Plugin plugin() {
    return new ScorerContractMetaTest.GoodScorer();
  }

  /**
   * A correct provider: {@code weight} a number in [0, 1] (default 1), {@code mode} one of
   * {@code fast}, {@code slow}.
   */
  public static class Good extends AbstractPluginProvider {
    public Good() {
      this("meta-good-scorer");
    }

    Good(String type) {
      super(type);
    }

    @Override
    protected Plugin build(PluginContext context, Parameters parameters) {
      parameters.getDouble("weight", 1.0, 0.0, 1.0);
      parameters.getEnum("mode", "fast", Set.of("fast", "slow"));
      return plugin();
    }
  }

  /**
   * Listed in META-INF/services, but its constructor throws, as one of another jar's providers
   * might: the router skips it and reports it, so the service-loader check of every other
   * provider must not fail because of it.
   */
  public static class FailsToLoad extends Good {
    public FailsToLoad() {
      super("meta-fails-to-load-scorer");
      throw new IllegalStateException("cannot start without its native library");
    }
  }

  /**
   * Listed in META-INF/services, but its public constructor (the one the service loader calls)
   * throws; the contract is handed one made otherwise, so only the service-loader check can see
   * that the router cannot load it.
   */
  public static class OwnConstructorThrows extends Good {
    public OwnConstructorThrows() {
      super("meta-own-constructor-throws-scorer");
      throw new IllegalStateException("reads a setting that is not there");
    }

    OwnConstructorThrows(String type) {
      super(type);
    }
  }

  /** Its type is not lower-kebab-case. */
  public static class CamelCaseType extends Good {
    public CamelCaseType() {
      super("metaCamelCaseScorer");
    }
  }

  /** Correct, but not listed in META-INF/services. */
  public static class Unregistered extends Good {
    public Unregistered() {
      super("meta-unregistered-scorer");
    }
  }

  /** Its range check for {@code weight} is off: 0.5, a valid weight, is rejected. */
  public static class RejectsAValidValue extends AbstractPluginProvider {
    public RejectsAValidValue() {
      super("meta-rejects-valid-scorer");
    }

    @Override
    protected Plugin build(PluginContext context, Parameters parameters) {
      parameters.getDouble("weight", 0.1, 0.0, 0.4);
      parameters.getEnum("mode", "fast", Set.of("fast", "slow"));
      return plugin();
    }
  }

  /** Reads every parameter it is given (to log them), so a misspelt name goes unreported. */
  public static class ReadsEveryName extends Good {
    public ReadsEveryName() {
      super("meta-reads-every-name-scorer");
    }

    @Override
    protected Plugin build(PluginContext context, Parameters parameters) {
      for (String name : parameters.names()) {
        parameters.raw(name);
      }
      return super.build(context, parameters);
    }
  }

  /** Does not check the range of {@code weight}. */
  public static class AcceptsABadValue extends AbstractPluginProvider {
    public AcceptsABadValue() {
      super("meta-accepts-bad-value-scorer");
    }

    @Override
    protected Plugin build(PluginContext context, Parameters parameters) {
      parameters.getDouble("weight", 1.0);
      parameters.getEnum("mode", "fast", Set.of("fast", "slow"));
      return plugin();
    }
  }

  /** Rejects a bad {@code weight} with a message that names no parameter. */
  public static class VagueError extends AbstractPluginProvider {
    public VagueError() {
      super("meta-vague-error-scorer");
    }

    @Override
    protected Plugin build(PluginContext context, Parameters parameters) {
      double w = parameters.getDouble("weight", 1.0);
      parameters.getEnum("mode", "fast", Set.of("fast", "slow"));
      if (w < 0 || w > 1) {
        throw new IllegalArgumentException("invalid configuration");
      }
      return plugin();
    }
  }

  /**
   * Parameters {@code k} (an integer ≥ 1) and {@code kvCacheThreshold}; a bad {@code k} is
   * reported under the other name (a copy-and-paste slip).
   */
  public static class NamesTheWrongParameter extends AbstractPluginProvider {
    public NamesTheWrongParameter() {
      super("meta-names-wrong-parameter-scorer");
    }

    @Override
    protected Plugin build(PluginContext context, Parameters parameters) {
      int k = parameters.getInt("k", 10);
      if (k < 1) {
        parameters.error("kvCacheThreshold", "must be >= 1, got " + k);
      }
      parameters.getDouble("kvCacheThreshold", 0.9, 0.0, 1.0);
      return plugin();
    }
  }

  /** Casts the raw {@code weight}, which throws for a value of another type. */
  public static class ThrowsOnAWrongType extends AbstractPluginProvider {
    public ThrowsOnAWrongType() {
      super("meta-throws-on-wrong-type-scorer");
    }

    @Override
    protected Plugin build(PluginContext context, Parameters parameters) {
      Object w = parameters.raw("weight");
      double weight = w == null ? 1.0 : ((Number) w).doubleValue();
      if (weight < 0 || weight > 1) {
        parameters.error("weight", "must be in [0, 1], got " + weight);
      }
      parameters.getEnum("mode", "fast", Set.of("fast", "slow"));
      return plugin();
    }
  }

  /** Takes a {@code weight} that is not a number as the default, silently. */
  public static class IgnoresAWrongType extends AbstractPluginProvider {
    public IgnoresAWrongType() {
      super("meta-ignores-wrong-type-scorer");
    }

    @Override
    protected Plugin build(PluginContext context, Parameters parameters) {
      double weight = parameters.raw("weight") instanceof Number n ? n.doubleValue() : 1.0;
      if (weight < 0 || weight > 1) {
        parameters.error("weight", "must be in [0, 1], got " + weight);
      }
      parameters.getEnum("mode", "fast", Set.of("fast", "slow"));
      return plugin();
    }
  }
}
