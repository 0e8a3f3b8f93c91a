package io.epp4j.testkit;

import static io.epp4j.testkit.ContractRuns.assertFailsExactly;
import static io.epp4j.testkit.ContractRuns.assertPasses;

import io.epp4j.api.PluginProvider;
import java.util.Map;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * {@link ProviderContract} against the providers of {@link ProviderFixtures}, each of which
 * breaks one rule: every check must fail for the provider that breaks its rule, and only for it;
 * a correct provider passes them all.
 */
class ProviderContractMetaTest {
  static final String TYPE = "typeIsLowerKebabCase";
  static final String SERVICES = "serviceLoaderFindsTheProvider";
  static final String VALID = "validParametersCreateAPlugin";
  static final String UNKNOWN = "unknownParametersAreLeftForTheLoaderToReport";
  static final String BAD = "badValuesAreRejectedNamingTheParameter";
  static final String WRONG_TYPE = "valuesOfTheWrongTypeGiveErrorsNotExceptions";

  /** The parameters of the fixtures' {@code weight} and {@code mode}. */
  @Tag(ContractRuns.FIXTURE_TAG)
  abstract static class WeightAndMode extends ProviderContract {
    @Override
    protected Map<String, ?> validParameters() {
      return Map.of("weight", 0.5, "mode", "fast");
    }

    @Override
    protected Map<String, Map<String, ?>> badParameters() {
      return Map.of("weight", Map.of("weight", 2.0), "mode", Map.of("mode", "medium"));
    }
  }

  @Tag(ContractRuns.FIXTURE_TAG)
  static class Good extends WeightAndMode {
    @Override
    protected PluginProvider provider() {
      return new ProviderFixtures.Good();
    }
  }

  /** Without bad parameters listed, the bad-values check is skipped, not passed. */
  @Tag(ContractRuns.FIXTURE_TAG)
  static class GoodWithoutBadParameters extends WeightAndMode {
    @Override
    protected PluginProvider provider() {
      return new ProviderFixtures.Good();
    }

    @Override
    protected Map<String, Map<String, ?>> badParameters() {
      return Map.of();
    }
  }

  @Tag(ContractRuns.FIXTURE_TAG)
  static class CamelCaseType extends WeightAndMode {
    @Override
    protected PluginProvider provider() {
      return new ProviderFixtures.CamelCaseType();
    }
  }

  @Tag(ContractRuns.FIXTURE_TAG)
  static class Unregistered extends WeightAndMode {
    @Override
    protected PluginProvider provider() {
      return new ProviderFixtures.Unregistered();
    }
  }

  @Tag(ContractRuns.FIXTURE_TAG)
  static class OwnConstructorThrows extends WeightAndMode {
    @Override
    protected PluginProvider provider() {
      return new ProviderFixtures.OwnConstructorThrows("meta-own-constructor-throws-scorer");
    }
  }

  @Tag(ContractRuns.FIXTURE_TAG)
  static class RejectsAValidValue extends WeightAndMode {
    @Override
    protected PluginProvider provider() {
      return new ProviderFixtures.RejectsAValidValue();
    }
  }

  @Tag(ContractRuns.FIXTURE_TAG)
  static class ReadsEveryName extends WeightAndMode {
    @Override
    protected PluginProvider provider() {
      return new ProviderFixtures.ReadsEveryName();
    }
  }

  @Tag(ContractRuns.FIXTURE_TAG)
  static class AcceptsABadValue extends WeightAndMode {
    @Override
    protected PluginProvider provider() {
      return new ProviderFixtures.AcceptsABadValue();
    }
  }

  @Tag(ContractRuns.FIXTURE_TAG)
  static class VagueError extends WeightAndMode {
    @Override
    protected PluginProvider provider() {
      return new ProviderFixtures.VagueError();
    }
  }

  @Tag(ContractRuns.FIXTURE_TAG)
  static class NamesTheWrongParameter extends ProviderContract {
    @Override
    protected PluginProvider provider() {
      return new ProviderFixtures.NamesTheWrongParameter();
    }

    @Override
    protected Map<String, ?> validParameters() {
      return Map.of("k", 10, "kvCacheThreshold", 0.9);
    }

    @Override
    protected Map<String, Map<String, ?>> badParameters() {
      return Map.of("k", Map.of("k", 0));
    }
  }

  @Tag(ContractRuns.FIXTURE_TAG)
  static class ThrowsOnAWrongType extends WeightAndMode {
    @Override
    protected PluginProvider provider() {
      return new ProviderFixtures.ThrowsOnAWrongType();
    }
  }

  @Tag(ContractRuns.FIXTURE_TAG)
  static class IgnoresAWrongType extends WeightAndMode {
    @Override
    protected PluginProvider provider() {
      return new ProviderFixtures.IgnoresAWrongType();
    }
  }

  @Test
  void aCorrectProviderPassesEveryCheck() {
    assertPasses(Good.class);
  }

  @Test
  void withoutBadParametersTheBadValueCheckIsSkipped() {
    assertPasses(GoodWithoutBadParameters.class, BAD);
    org.assertj.core.api.Assertions.assertThat(ContractRuns.run(GoodWithoutBadParameters.class)
        .get(BAD).status()).isEqualTo("ABORTED");
  }

  @Test
  void aTypeThatIsNotKebabCaseFailsTheTypeCheck() {
    assertFailsExactly(CamelCaseType.class, TYPE);
  }

  @Test
  void aProviderMissingFromServicesFailsTheServiceLoaderCheck() {
    assertFailsExactly(Unregistered.class, SERVICES);
  }

  /** The service loader's reason is in the message, not only "not found". */
  @Test
  void aProviderTheServiceLoaderCannotMakeFailsTheServiceLoaderCheckSayingWhy() {
    Map<String, ContractRuns.Outcome> outcomes =
        assertFailsExactly(OwnConstructorThrows.class, SERVICES);
    org.assertj.core.api.Assertions.assertThat(outcomes.get(SERVICES).message())
        .contains("reads a setting that is not there");
  }

  @Test
  void rejectingAValidValueFailsTheValidParametersCheck() {
    assertFailsExactly(RejectsAValidValue.class, VALID);
  }

  @Test
  void readingEveryNameFailsTheUnknownNameCheck() {
    assertFailsExactly(ReadsEveryName.class, UNKNOWN);
  }

  @Test
  void acceptingABadValueFailsTheBadValueCheck() {
    assertFailsExactly(AcceptsABadValue.class, BAD);
  }

  @Test
  void anErrorNamingNoParameterFailsTheBadValueCheck() {
    assertFailsExactly(VagueError.class, BAD);
  }

  @Test
  void anErrorNamingAnotherParameterFailsTheBadValueCheck() {
    assertFailsExactly(NamesTheWrongParameter.class, BAD);
  }

  @Test
  void throwingOnAValueOfTheWrongTypeFailsTheWrongTypeCheck() {
    assertFailsExactly(ThrowsOnAWrongType.class, WRONG_TYPE);
  }

  @Test
  void silentlyIgnoringAValueOfTheWrongTypeFailsTheWrongTypeCheck() {
    assertFailsExactly(IgnoresAWrongType.class, WRONG_TYPE);
  }
}
