package io.epp4j.spring.gateway;

import io.opentelemetry.api.OpenTelemetry;
import io.opentelemetry.api.common.AttributeKey;
import io.opentelemetry.api.common.Attributes;
import io.opentelemetry.api.logs.LoggerProvider;
import io.opentelemetry.api.metrics.BatchCallback;
import io.opentelemetry.api.metrics.DoubleCounter;
import io.opentelemetry.api.metrics.DoubleCounterBuilder;
import io.opentelemetry.api.metrics.DoubleGauge;
import io.opentelemetry.api.metrics.DoubleGaugeBuilder;
import io.opentelemetry.api.metrics.DoubleHistogram;
import io.opentelemetry.api.metrics.DoubleHistogramBuilder;
import io.opentelemetry.api.metrics.DoubleUpDownCounter;
import io.opentelemetry.api.metrics.DoubleUpDownCounterBuilder;
import io.opentelemetry.api.metrics.LongCounter;
import io.opentelemetry.api.metrics.LongCounterBuilder;
import io.opentelemetry.api.metrics.LongGauge;
import io.opentelemetry.api.metrics.LongGaugeBuilder;
import io.opentelemetry.api.metrics.LongHistogram;
import io.opentelemetry.api.metrics.LongHistogramBuilder;
import io.opentelemetry.api.metrics.LongUpDownCounter;
import io.opentelemetry.api.metrics.LongUpDownCounterBuilder;
import io.opentelemetry.api.metrics.Meter;
import io.opentelemetry.api.metrics.MeterBuilder;
import io.opentelemetry.api.metrics.MeterProvider;
import io.opentelemetry.api.metrics.ObservableDoubleCounter;
import io.opentelemetry.api.metrics.ObservableDoubleGauge;
import io.opentelemetry.api.metrics.ObservableDoubleMeasurement;
import io.opentelemetry.api.metrics.ObservableDoubleUpDownCounter;
import io.opentelemetry.api.metrics.ObservableLongCounter;
import io.opentelemetry.api.metrics.ObservableLongGauge;
import io.opentelemetry.api.metrics.ObservableLongMeasurement;
import io.opentelemetry.api.metrics.ObservableLongUpDownCounter;
import io.opentelemetry.api.metrics.ObservableMeasurement;
import io.opentelemetry.api.trace.TracerProvider;
import io.opentelemetry.context.Context;
import io.opentelemetry.context.propagation.ContextPropagators;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.Consumer;

/**
 * An {@link OpenTelemetry} that adds the attribute {@code pool=<name>} to every metric recorded
 * through it, so that the routers of several named pools, which create the same instruments
 * ({@code epp4j.routing.decisions}, {@code epp4j.pool.endpoints}, ...) in the same meter, report
 * series that can be told apart (two routers' gauges with identical attributes would collide).
 * Tracing, propagators and logs pass through unchanged. The router's plugins, which receive the
 * same {@code OpenTelemetry} as a service, get the attribute too.
 */
final class PoolTelemetry implements OpenTelemetry {
  static final AttributeKey<String> POOL = AttributeKey.stringKey("pool");
  /** Beyond this many distinct attribute sets, merged ones are not cached (plugins may vary). */
  private static final int CACHE_LIMIT = 256;

  private final OpenTelemetry delegate;
  private final Attributes pool;
  private final Map<Attributes, Attributes> merged = new ConcurrentHashMap<>();
  private final MeterProvider meters;

  private PoolTelemetry(OpenTelemetry delegate, String name) {
    this.delegate = delegate;
    this.pool = Attributes.of(POOL, name);
    MeterProvider inner = delegate.getMeterProvider();
    this.meters = scope -> new PoolMeterBuilder(inner.meterBuilder(scope));
  }

  static OpenTelemetry withPool(OpenTelemetry otel, String name) {
    return new PoolTelemetry(otel, name);
  }

  @Override
  public TracerProvider getTracerProvider() {
    return delegate.getTracerProvider();
  }

  @Override
  public MeterProvider getMeterProvider() {
    return meters;
  }

  @Override
  public LoggerProvider getLogsBridge() {
    return delegate.getLogsBridge();
  }

  @Override
  public ContextPropagators getPropagators() {
    return delegate.getPropagators();
  }

  /** The attributes with {@code pool}; the pool's name wins over a {@code pool} given. */
  Attributes with(Attributes attributes) {
    if (attributes.isEmpty()) {
      return pool;
    }
    Attributes m = merged.get(attributes);
    if (m != null) {
      return m;
    }
    m = attributes.toBuilder().putAll(pool).build();
    if (merged.size() < CACHE_LIMIT) {
      merged.put(attributes, m);
    }
    return m;
  }

  private final class PoolMeterBuilder implements MeterBuilder {
    private final MeterBuilder d;

    PoolMeterBuilder(MeterBuilder d) {
      this.d = d;
    }

    @Override
    public MeterBuilder setSchemaUrl(String url) {
      d.setSchemaUrl(url);
      return this;
    }

    @Override
    public MeterBuilder setInstrumentationVersion(String version) {
      d.setInstrumentationVersion(version);
      return this;
    }

    @Override
    public Meter build() {
      return new PoolMeter(d.build());
    }
  }

  private final class PoolMeter implements Meter {
    private final Meter d;

    PoolMeter(Meter d) {
      this.d = d;
    }

    @Override
    public LongCounterBuilder counterBuilder(String name) {
      return new LongCounterB(d.counterBuilder(name));
    }

    @Override
    public LongUpDownCounterBuilder upDownCounterBuilder(String name) {
      return new LongUpDownB(d.upDownCounterBuilder(name));
    }

    @Override
    public DoubleHistogramBuilder histogramBuilder(String name) {
      return new DoubleHistogramB(d.histogramBuilder(name));
    }

    @Override
    public DoubleGaugeBuilder gaugeBuilder(String name) {
      return new DoubleGaugeB(d.gaugeBuilder(name));
    }

    @Override
    public BatchCallback batchCallback(Runnable callback, ObservableMeasurement observable,
        ObservableMeasurement... more) {
      ObservableMeasurement[] rest = new ObservableMeasurement[more.length];
      for (int i = 0; i < more.length; i++) {
        rest[i] = unwrap(more[i]);
      }
      return d.batchCallback(callback, unwrap(observable), rest);
    }
  }

  private static ObservableMeasurement unwrap(ObservableMeasurement m) {
    if (m instanceof LongObs l) {
      return l.d;
    }
    if (m instanceof DoubleObs o) {
      return o.d;
    }
    return m;
  }

  // ------------------------------------------------------------------------ measurements

  private final class LongObs implements ObservableLongMeasurement {
    final ObservableLongMeasurement d;

    LongObs(ObservableLongMeasurement d) {
      this.d = d;
    }

    @Override
    public void record(long value) {
      d.record(value, pool);
    }

    @Override
    public void record(long value, Attributes attributes) {
      d.record(value, with(attributes));
    }
  }

  private final class DoubleObs implements ObservableDoubleMeasurement {
    final ObservableDoubleMeasurement d;

    DoubleObs(ObservableDoubleMeasurement d) {
      this.d = d;
    }

    @Override
    public void record(double value) {
      d.record(value, pool);
    }

    @Override
    public void record(double value, Attributes attributes) {
      d.record(value, with(attributes));
    }
  }

  private Consumer<ObservableLongMeasurement> longs(Consumer<ObservableLongMeasurement> cb) {
    return m -> cb.accept(new LongObs(m));
  }

  private Consumer<ObservableDoubleMeasurement> doubles(Consumer<ObservableDoubleMeasurement> cb) {
    return m -> cb.accept(new DoubleObs(m));
  }

  // ------------------------------------------------------------------------ counters

  private final class LongCounterB implements LongCounterBuilder {
    private final LongCounterBuilder d;

    LongCounterB(LongCounterBuilder d) {
      this.d = d;
    }

    @Override
    public LongCounterBuilder setDescription(String description) {
      d.setDescription(description);
      return this;
    }

    @Override
    public LongCounterBuilder setUnit(String unit) {
      d.setUnit(unit);
      return this;
    }

    @Override
    public DoubleCounterBuilder ofDoubles() {
      return new DoubleCounterB(d.ofDoubles());
    }

    @Override
    public LongCounter build() {
      LongCounter c = d.build();
      return new LongCounter() {
        @Override
        public void add(long value) {
          c.add(value, pool);
        }

        @Override
        public void add(long value, Attributes attributes) {
          c.add(value, with(attributes));
        }

        @Override
        public void add(long value, Attributes attributes, Context context) {
          c.add(value, with(attributes), context);
        }
      };
    }

    @Override
    public ObservableLongCounter buildWithCallback(Consumer<ObservableLongMeasurement> cb) {
      return d.buildWithCallback(longs(cb));
    }

    @Override
    public ObservableLongMeasurement buildObserver() {
      return new LongObs(d.buildObserver());
    }
  }

  private final class DoubleCounterB implements DoubleCounterBuilder {
    private final DoubleCounterBuilder d;

    DoubleCounterB(DoubleCounterBuilder d) {
      this.d = d;
    }

    @Override
    public DoubleCounterBuilder setDescription(String description) {
      d.setDescription(description);
      return this;
    }

    @Override
    public DoubleCounterBuilder setUnit(String unit) {
      d.setUnit(unit);
      return this;
    }

    @Override
    public DoubleCounter build() {
      DoubleCounter c = d.build();
      return new DoubleCounter() {
        @Override
        public void add(double value) {
          c.add(value, pool);
        }

        @Override
        public void add(double value, Attributes attributes) {
          c.add(value, with(attributes));
        }

        @Override
        public void add(double value, Attributes attributes, Context context) {
          c.add(value, with(attributes), context);
        }
      };
    }

    @Override
    public ObservableDoubleCounter buildWithCallback(Consumer<ObservableDoubleMeasurement> cb) {
      return d.buildWithCallback(doubles(cb));
    }

    @Override
    public ObservableDoubleMeasurement buildObserver() {
      return new DoubleObs(d.buildObserver());
    }
  }

  private final class LongUpDownB implements LongUpDownCounterBuilder {
    private final LongUpDownCounterBuilder d;

    LongUpDownB(LongUpDownCounterBuilder d) {
      this.d = d;
    }

    @Override
    public LongUpDownCounterBuilder setDescription(String description) {
      d.setDescription(description);
      return this;
    }

    @Override
    public LongUpDownCounterBuilder setUnit(String unit) {
      d.setUnit(unit);
      return this;
    }

    @Override
    public DoubleUpDownCounterBuilder ofDoubles() {
      return new DoubleUpDownB(d.ofDoubles());
    }

    @Override
    public LongUpDownCounter build() {
      LongUpDownCounter c = d.build();
      return new LongUpDownCounter() {
        @Override
        public void add(long value) {
          c.add(value, pool);
        }

        @Override
        public void add(long value, Attributes attributes) {
          c.add(value, with(attributes));
        }

        @Override
        public void add(long value, Attributes attributes, Context context) {
          c.add(value, with(attributes), context);
        }
      };
    }

    @Override
    public ObservableLongUpDownCounter buildWithCallback(Consumer<ObservableLongMeasurement> cb) {
      return d.buildWithCallback(longs(cb));
    }

    @Override
    public ObservableLongMeasurement buildObserver() {
      return new LongObs(d.buildObserver());
    }
  }

  private final class DoubleUpDownB implements DoubleUpDownCounterBuilder {
    private final DoubleUpDownCounterBuilder d;

    DoubleUpDownB(DoubleUpDownCounterBuilder d) {
      this.d = d;
    }

    @Override
    public DoubleUpDownCounterBuilder setDescription(String description) {
      d.setDescription(description);
      return this;
    }

    @Override
    public DoubleUpDownCounterBuilder setUnit(String unit) {
      d.setUnit(unit);
      return this;
    }

    @Override
    public DoubleUpDownCounter build() {
      DoubleUpDownCounter c = d.build();
      return new DoubleUpDownCounter() {
        @Override
        public void add(double value) {
          c.add(value, pool);
        }

        @Override
        public void add(double value, Attributes attributes) {
          c.add(value, with(attributes));
        }

        @Override
        public void add(double value, Attributes attributes, Context context) {
          c.add(value, with(attributes), context);
        }
      };
    }

    @Override
    public ObservableDoubleUpDownCounter buildWithCallback(
        Consumer<ObservableDoubleMeasurement> cb) {
      return d.buildWithCallback(doubles(cb));
    }

    @Override
    public ObservableDoubleMeasurement buildObserver() {
      return new DoubleObs(d.buildObserver());
    }
  }

  // ------------------------------------------------------------------------ histograms

  private final class DoubleHistogramB implements DoubleHistogramBuilder {
    private final DoubleHistogramBuilder d;

    DoubleHistogramB(DoubleHistogramBuilder d) {
      this.d = d;
    }

    @Override
    public DoubleHistogramBuilder setDescription(String description) {
      d.setDescription(description);
      return this;
    }

    @Override
    public DoubleHistogramBuilder setUnit(String unit) {
      d.setUnit(unit);
      return this;
    }

    @Override
    public DoubleHistogramBuilder setExplicitBucketBoundariesAdvice(List<Double> boundaries) {
      d.setExplicitBucketBoundariesAdvice(boundaries);
      return this;
    }

    @Override
    public LongHistogramBuilder ofLongs() {
      return new LongHistogramB(d.ofLongs());
    }

    @Override
    public DoubleHistogram build() {
      DoubleHistogram h = d.build();
      return new DoubleHistogram() {
        @Override
        public void record(double value) {
          h.record(value, pool);
        }

        @Override
        public void record(double value, Attributes attributes) {
          h.record(value, with(attributes));
        }

        @Override
        public void record(double value, Attributes attributes, Context context) {
          h.record(value, with(attributes), context);
        }
      };
    }
  }

  private final class LongHistogramB implements LongHistogramBuilder {
    private final LongHistogramBuilder d;

    LongHistogramB(LongHistogramBuilder d) {
      this.d = d;
    }

    @Override
    public LongHistogramBuilder setDescription(String description) {
      d.setDescription(description);
      return this;
    }

    @Override
    public LongHistogramBuilder setUnit(String unit) {
      d.setUnit(unit);
      return this;
    }

    @Override
    public LongHistogramBuilder setExplicitBucketBoundariesAdvice(List<Long> boundaries) {
      d.setExplicitBucketBoundariesAdvice(boundaries);
      return this;
    }

    @Override
    public LongHistogram build() {
      LongHistogram h = d.build();
      return new LongHistogram() {
        @Override
        public void record(long value) {
          h.record(value, pool);
        }

        @Override
        public void record(long value, Attributes attributes) {
          h.record(value, with(attributes));
        }

        @Override
        public void record(long value, Attributes attributes, Context context) {
          h.record(value, with(attributes), context);
        }
      };
    }
  }

  // ------------------------------------------------------------------------ gauges

  private final class DoubleGaugeB implements DoubleGaugeBuilder {
    private final DoubleGaugeBuilder d;

    DoubleGaugeB(DoubleGaugeBuilder d) {
      this.d = d;
    }

    @Override
    public DoubleGaugeBuilder setDescription(String description) {
      d.setDescription(description);
      return this;
    }

    @Override
    public DoubleGaugeBuilder setUnit(String unit) {
      d.setUnit(unit);
      return this;
    }

    @Override
    public LongGaugeBuilder ofLongs() {
      return new LongGaugeB(d.ofLongs());
    }

    @Override
    public ObservableDoubleGauge buildWithCallback(Consumer<ObservableDoubleMeasurement> cb) {
      return d.buildWithCallback(doubles(cb));
    }

    @Override
    public ObservableDoubleMeasurement buildObserver() {
      return new DoubleObs(d.buildObserver());
    }

    @Override
    public DoubleGauge build() {
      DoubleGauge g = d.build();
      return new DoubleGauge() {
        @Override
        public void set(double value) {
          g.set(value, pool);
        }

        @Override
        public void set(double value, Attributes attributes) {
          g.set(value, with(attributes));
        }

        @Override
        public void set(double value, Attributes attributes, Context context) {
          g.set(value, with(attributes), context);
        }
      };
    }
  }

  private final class LongGaugeB implements LongGaugeBuilder {
    private final LongGaugeBuilder d;

    LongGaugeB(LongGaugeBuilder d) {
      this.d = d;
    }

    @Override
    public LongGaugeBuilder setDescription(String description) {
      d.setDescription(description);
      return this;
    }

    @Override
    public LongGaugeBuilder setUnit(String unit) {
      d.setUnit(unit);
      return this;
    }

    @Override
    public ObservableLongGauge buildWithCallback(Consumer<ObservableLongMeasurement> cb) {
      return d.buildWithCallback(longs(cb));
    }

    @Override
    public ObservableLongMeasurement buildObserver() {
      return new LongObs(d.buildObserver());
    }

    @Override
    public LongGauge build() {
      LongGauge g = d.build();
      return new LongGauge() {
        @Override
        public void set(long value) {
          g.set(value, pool);
        }

        @Override
        public void set(long value, Attributes attributes) {
          g.set(value, with(attributes));
        }

        @Override
        public void set(long value, Attributes attributes, Context context) {
          g.set(value, with(attributes), context);
        }
      };
    }
  }
}
