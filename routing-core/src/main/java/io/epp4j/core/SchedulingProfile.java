package io.epp4j.core;

import io.epp4j.api.Filter;
import io.epp4j.api.Picker;
import io.epp4j.api.Scorer;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import org.jspecify.annotations.Nullable;

/**
 * One scheduling profile: filters in order, weighted scorers and one picker. A profile built
 * without a picker uses {@code max-score-picker} with one endpoint; a configuration file's
 * profile that names none takes the picker the file defines, as the upstream EPP's loader does.
 */
public final class SchedulingProfile {

  /**
   * A scorer with its weight and the name it was configured under. The weight is any finite
   * number: a negative one makes the scorer a penalty, as upstream's weighted scorer allows.
   */
  public record WeightedScorer(String name, Scorer scorer, double weight) {
    public WeightedScorer {
      Objects.requireNonNull(name, "name");
      Objects.requireNonNull(scorer, "scorer");
      if (!Double.isFinite(weight)) {
        throw new IllegalArgumentException("weight of scorer '" + name + "' must be a finite number, got " + weight);
      }
    }
  }

  private final String name;
  private final List<Filter> filters;
  private final List<WeightedScorer> scorers;
  private final Picker picker;

  private SchedulingProfile(Builder b) {
    this.name = b.name;
    this.filters = List.copyOf(b.filters);
    this.scorers = List.copyOf(b.scorers);
    this.picker = b.picker != null ? b.picker : new MaxScorePicker(1);
  }

  public static Builder builder(String name) {
    return new Builder(name);
  }

  public String name() {
    return name;
  }

  public List<Filter> filters() {
    return filters;
  }

  public List<WeightedScorer> scorers() {
    return scorers;
  }

  public Picker picker() {
    return picker;
  }

  @Override
  public String toString() {
    return "SchedulingProfile{" + name + ", filters=" + filters.size() + ", scorers="
        + scorers.size() + "}";
  }

  /** Builds a {@link SchedulingProfile}. */
  public static final class Builder {
    private final String name;
    private final List<Filter> filters = new ArrayList<>();
    private final List<WeightedScorer> scorers = new ArrayList<>();
    private @Nullable Picker picker;

    private Builder(String name) {
      if (name == null || name.isBlank()) {
        throw new IllegalArgumentException("profile name must not be blank");
      }
      this.name = name;
    }

    public Builder filter(Filter filter) {
      filters.add(Objects.requireNonNull(filter, "filter"));
      return this;
    }

    /** Adds a scorer with weight 1. */
    public Builder scorer(Scorer scorer) {
      return scorer(scorer, 1.0);
    }

    public Builder scorer(Scorer scorer, double weight) {
      return scorer(Objects.requireNonNull(scorer, "scorer").getClass().getSimpleName(), scorer,
          weight);
    }

    public Builder scorer(String name, Scorer scorer, double weight) {
      scorers.add(new WeightedScorer(name, scorer, weight));
      return this;
    }

    /** Whether {@code scorer} (the same instance) was added already. */
    boolean hasScorer(Scorer scorer) {
      for (WeightedScorer ws : scorers) {
        if (ws.scorer() == scorer) {
          return true;
        }
      }
      return false;
    }

    public Builder picker(Picker picker) {
      this.picker = Objects.requireNonNull(picker, "picker");
      return this;
    }

    public SchedulingProfile build() {
      return new SchedulingProfile(this);
    }
  }
}
