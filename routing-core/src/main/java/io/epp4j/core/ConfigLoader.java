package io.epp4j.core;

import com.fasterxml.jackson.core.JsonLocation;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.dataformat.yaml.YAMLFactory;
import io.epp4j.api.Filter;
import io.epp4j.api.Parameters;
import io.epp4j.api.Picker;
import io.epp4j.api.Plugin;
import io.epp4j.api.PluginContext;
import io.epp4j.api.ProfileHandler;
import io.epp4j.api.Result;
import io.epp4j.api.Scorer;
import io.epp4j.api.Ticker;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.AccessDeniedException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.function.Function;
import org.jspecify.annotations.Nullable;
import org.yaml.snakeyaml.error.Mark;
import org.yaml.snakeyaml.error.MarkedYAMLException;

/**
 * Loads the upstream EPP's {@code EndpointPickerConfig} YAML:
 *
 * <pre>
 * apiVersion: inference.networking.x-k8s.io/v1alpha1
 * kind: EndpointPickerConfig
 * plugins:
 * - name: q                # defaults to the type
 *   type: queue-scorer
 *   parameters: {...}
 * schedulingProfiles:
 * - name: default
 *   plugins:
 *   - pluginRef: q
 *     weight: 2            # scorers only; any finite number (negative: a penalty); default 1;
 *                          # a quoted number ('2') is that number, as in parameters
 * </pre>
 *
 * <p>Every problem in a file is collected and reported together, up to 50 messages and a
 * count of the rest; each message names the file, the plugin or profile, and the field, quotes
 * names and values from the file shortened to 64 characters, and is at most 500 characters
 * long. Loading takes time linear in the size of the file. The other upstream sections are read
 * too: {@code featureGates} (harmless gates noticed, others refused), {@code parser} (must name
 * the openai-parser), {@code saturationDetector} (replaces the router's shedding rule) and
 * {@code dataLayer} (references checked; {@code data} is its name in upstream 1.3 and 1.4);
 * {@code metadata} and {@code flowControl} are accepted with a warning. Former type names load the current type with one notice per file.
 */
final class ConfigLoader {
  static final Set<String> KNOWN_TOP_LEVEL = Set.of("apiVersion", "kind", "plugins",
      "schedulingProfiles", "featureGates", "saturationDetector", "parser", "dataLayer",
      "requestHandler", "data");
  static final Set<String> TOLERATED_TOP_LEVEL = Set.of("metadata", "flowControl");
  /** The apiVersions upstream files carry: the Gateway API Inference Extension's and llm-d's. */
  static final Set<String> KNOWN_API_VERSIONS =
      Set.of("inference.networking.x-k8s.io/v1alpha1", "llm-d.ai/v1alpha1");
  /**
   * Upstream feature gates that change nothing in epp4j, and why: each is accepted with a notice.
   * Any other gate is refused, as upstream refuses gates it does not know.
   */
  static final Map<String, String> HARMLESS_GATES = Map.of(
      "dataLayer", "epp4j always scrapes and extracts metrics through its own data layer",
      "prepareDataPlugins", "epp4j's plugins always publish their data (prefix hits, tokens)"
          + " in the cycle state before later plugins read it",
      "enableLegacyMetrics", "epp4j reads the same model-server metrics either way");

  /** At most this many errors (and as many warnings) are reported; the rest are counted. */
  static final int MAX_REPORTED_ERRORS = 50;
  /** No single message is longer than this. */
  static final int MAX_MESSAGE_CHARS = 500;
  /** Names and values from the file are quoted up to this length. */
  static final int MAX_QUOTED_CHARS = 64;
  /** How many defined plugin names the first dangling {@code pluginRef} error lists. */
  static final int MAX_LISTED_NAMES = 20;

  private static final Set<String> PLUGIN_FIELDS = Set.of("name", "type", "parameters");
  private static final Set<String> PROFILE_FIELDS = Set.of("name", "plugins");
  private static final Set<String> REF_FIELDS = Set.of("pluginRef", "weight");
  private static final String MAPPING_EXPECTED =
      "a mapping with 'plugins' and 'schedulingProfiles'";

  // a key given twice is an error, as in upstream's loader: the last one winning silently dropped
  // the first (a second 'plugins' section, a plugin's 'parameters', a parameter)
  private static final ObjectMapper YAML = new ObjectMapper(new YAMLFactory())
      .enable(JsonParser.Feature.STRICT_DUPLICATE_DETECTION);

  private final PluginRegistry registry;
  private final Ticker ticker;
  private final java.time.Duration inFlightMaxAge;
  private final Function<Class<?>, Optional<?>> services;
  /** The instance behind a plugin as a provider returned it (see {@link PluginReuse}). */
  private final java.util.function.UnaryOperator<Plugin> instance;

  /** A loader that resolves plugin types in {@code registry}. */
  ConfigLoader(PluginRegistry registry) {
    this(registry, Ticker.system(), c -> Optional.empty());
  }

  ConfigLoader(PluginRegistry registry, Ticker ticker, Function<Class<?>, Optional<?>> services) {
    this(registry, ticker, services, p -> p);
  }

  ConfigLoader(PluginRegistry registry, Ticker ticker, Function<Class<?>, Optional<?>> services,
      java.util.function.UnaryOperator<Plugin> instance) {
    this(registry, ticker, RouterSettings.DEFAULT_IN_FLIGHT_MAX_AGE, services, instance);
  }

  ConfigLoader(PluginRegistry registry, Ticker ticker, java.time.Duration inFlightMaxAge,
      Function<Class<?>, Optional<?>> services, java.util.function.UnaryOperator<Plugin> instance) {
    this.registry = registry;
    this.ticker = ticker;
    this.inFlightMaxAge = inFlightMaxAge;
    this.services = services;
    this.instance = instance;
  }

  /** Loads a file; all errors are in the result, none thrown. The file must be UTF-8. */
  Result<RouterConfig> load(Path file) {
    Result<String> text = readFile(file);
    return text.isOk() ? load(text.value(), file.toString()) : Result.errors(text.errors());
  }

  /**
   * A configuration file's text, or the one error naming the file and why it cannot be read: a
   * directory, no such file, no permission, or bytes that are not UTF-8 (with where). The router
   * reads its files through this, at startup and on every reload.
   */
  static Result<String> readFile(Path file) {
    byte[] bytes;
    try {
      if (Files.isDirectory(file)) {
        return Result.error(file + ": cannot read: it is a directory");
      }
      bytes = Files.readAllBytes(file);
    } catch (NoSuchFileException e) {
      return Result.error(file + ": cannot read: no such file");
    } catch (AccessDeniedException e) {
      return Result.error(file + ": cannot read: permission denied");
    } catch (IOException e) {
      return Result.error(shorten(file + ": cannot read: " + e.getClass().getSimpleName()
          + (e.getMessage() != null ? ": " + e.getMessage() : "")));
    }
    int bad = Utf8Validator.firstInvalid(bytes);
    if (bad >= 0) {
      return Result.error(file + ": not valid UTF-8: " + Utf8Validator.problem(bytes, bad) + " at "
          + Utf8Validator.position(bytes, bad));
    }
    return Result.ok(new String(bytes, StandardCharsets.UTF_8));
  }

  /**
   * Loads YAML text; {@code source} names it in messages. At most 50 errors are reported, the
   * last entry then counting the rest; warnings likewise.
   */
  Result<RouterConfig> load(String yaml, String source) {
    Result<Document> document = readDocuments(yaml, source);
    if (!document.isOk()) {
      return Result.errors(document.errors());
    }
    Map<?, ?> top = document.value().top();
    FileLoad load = new FileLoad(source);
    int later = document.value().laterDocumentLine();
    if (later > 0) {
      // as upstream, which reads the first document only; said, since a configuration pasted
      // below a '---' would otherwise seem loaded
      load.warnings.add(source + ": the file holds more than one YAML document; only the first"
          + " is read, and the one at line " + later + " (and any after it) is ignored");
    }
    load.checkTopLevel(top);
    load.createPlugins(top.get("plugins"));
    load.buildProfiles(top);
    load.checkParser(top);
    RouterConfig.Saturation saturation = load.saturation(top);
    load.checkDataLayer(top);
    ProfileHandler handler = load.profileHandler();
    return load.finish(handler, saturation);
  }

  /**
   * The YAML text as a mapping, or the one error that stops the load before any plugin exists.
   * Anchors, aliases and merge keys are resolved here, so whatever else reads the file (a reload
   * comparing each plugin's parameters with the running ones) must read it through this too.
   */
  static Result<Map<?, ?>> readDocument(String yaml, String source) {
    return readDocuments(yaml, source).map(Document::top);
  }

  /**
   * The first document of a file, and the line where a later document with content starts (0
   * when there is none: empty documents, such as a trailing {@code ---}, do not count).
   */
  record Document(Map<?, ?> top, int laterDocumentLine) {}

  /** {@link #readDocument}, also telling whether the text holds a later document with content. */
  static Result<Document> readDocuments(String yaml, String source) {
    Object root;
    int later = 0;
    try (JsonParser p = YAML.getFactory().createParser(yaml)) {
      root = p.nextToken() == null ? null : new YamlReader(p, yaml).read();
      later = laterDocumentLine(p);
    } catch (JsonProcessingException e) {
      return Result.error(shorten(source + ": not valid YAML" + yamlProblem(e)));
    } catch (IOException | RuntimeException e) {
      // the YAML library's own failures on odd input; reported, never thrown
      return Result.error(shorten(source + ": not valid YAML: " + e.getClass().getSimpleName()
          + (e.getMessage() != null ? ": " + e.getMessage() : "")));
    }
    if (root == null) {
      return Result.error(source + ": the document is empty; it must be " + MAPPING_EXPECTED);
    }
    if (!(root instanceof Map<?, ?> top)) {
      return Result.error(source + ": the document must be " + MAPPING_EXPECTED + ", got "
          + describe(root));
    }
    return Result.ok(new Document(top, later));
  }

  /**
   * The line of the first later document with content, the parser being past the first one; 0
   * when there is none. A later document that is not valid YAML counts as content: it is not
   * read, so it cannot fail the load.
   */
  private static int laterDocumentLine(JsonParser p) {
    try {
      for (JsonToken t = p.nextToken(); t != null; t = p.nextToken()) {
        if (t != JsonToken.VALUE_NULL) {
          return Math.max(1, p.currentTokenLocation().getLineNr());
        }
      }
      return 0;
    } catch (IOException | RuntimeException e) {
      return Math.max(1, p.currentLocation().getLineNr());
    }
  }


  /**
   * The document as maps, lists and scalars, as Jackson's untyped reading gives them, with what
   * that reading leaves out and upstream's go-yaml does: an alias ({@code *name}) is the node its
   * anchor ({@code &name}) marked, and a merge key ({@code <<: *name} or a list of them) adds the
   * merged mapping's fields that the mapping does not give itself. An alias shares its node, so a
   * file of aliases of aliases could stand for exponentially many nodes: the nodes a document
   * stands for are counted and bounded in proportion to its length, keeping loads linear.
   */
  private static final class YamlReader {
    private final JsonParser p;
    private final String text;
    private final long maxNodes;
    /**
     * The anchors of single values, by the character offset where the value's node starts.
     * Jackson reports the anchor of a mapping or list but not of a single value, so the text's
     * YAML events (the same events Jackson reads) are scanned for them once, when the first one
     * is needed; null until then.
     */
    private @Nullable Map<Long, String> scalarAnchors;
    private final Map<String, @Nullable Object> anchored = new HashMap<>();
    private final Map<String, Long> anchoredNodes = new HashMap<>();
    private long nodes;
    private long lastNodes;

    YamlReader(JsonParser p, String text) {
      this.p = p;
      this.text = text;
      this.maxNodes = 100_000L + 10L * text.length();
    }

    /** The node at the current token, the parser left on its last token. */
    @Nullable Object read() throws IOException {
      if (p instanceof com.fasterxml.jackson.dataformat.yaml.YAMLParser y && y.isCurrentAlias()) {
        String name = p.getText();
        if (!anchored.containsKey(name)) {
          throw new com.fasterxml.jackson.core.JsonParseException(p,
              "alias *" + cut(name, MAX_QUOTED_CHARS) + " names no anchor (&"
                  + cut(name, MAX_QUOTED_CHARS) + ") before it");
        }
        lastNodes = anchoredNodes.getOrDefault(name, 1L);
        count(lastNodes);
        return anchored.get(name);
      }
      Object id = p.getObjectId();
      long before = nodes;
      Object value;
      com.fasterxml.jackson.core.JsonToken t = p.currentToken();
      if (t == com.fasterxml.jackson.core.JsonToken.START_OBJECT) {
        value = mapping();
      } else if (t == com.fasterxml.jackson.core.JsonToken.START_ARRAY) {
        List<@Nullable Object> list = new ArrayList<>();
        while (p.nextToken() != com.fasterxml.jackson.core.JsonToken.END_ARRAY) {
          list.add(read());
        }
        value = list;
      } else {
        value = scalar(t);
        if (id == null) {
          id = scalarAnchor();
        }
      }
      count(1);
      lastNodes = nodes - before;
      if (id != null) {
        anchored.put(String.valueOf(id), value);
        anchoredNodes.put(String.valueOf(id), lastNodes);
      }
      return value;
    }

    private Map<String, @Nullable Object> mapping() throws IOException {
      Map<String, @Nullable Object> map = new LinkedHashMap<>();
      List<Object> merged = new ArrayList<>();
      while (p.nextToken() == com.fasterxml.jackson.core.JsonToken.FIELD_NAME) {
        String key = p.currentName();
        p.nextToken();
        Object v = read();
        if ("<<".equals(key) && (v instanceof Map || v instanceof List)) {
          merged.add(v);
        } else {
          map.put(key, v);
        }
      }
      for (Object m : merged) {
        for (Object one : m instanceof List<?> l ? l : List.of(m)) {
          if (!(one instanceof Map<?, ?> from)) {
            throw new com.fasterxml.jackson.core.JsonParseException(p,
                "a merge key ('<<') takes a mapping or a list of mappings");
          }
          from.forEach((k, v) -> map.putIfAbsent(String.valueOf(k), v));
        }
      }
      return map;
    }

    private @Nullable Object scalar(com.fasterxml.jackson.core.@Nullable JsonToken t)
        throws IOException {
      if (t == null) {
        return null;
      }
      return switch (t) {
        case VALUE_STRING -> p.getText();
        case VALUE_NUMBER_INT -> p.getNumberValue();
        case VALUE_NUMBER_FLOAT -> floatValue();
        case VALUE_TRUE -> Boolean.TRUE;
        case VALUE_FALSE -> Boolean.FALSE;
        case VALUE_EMBEDDED_OBJECT -> embedded(p.getEmbeddedObject());
        default -> null;
      };
    }

    /**
     * A value the YAML parser hands over as an object: a {@code !!binary} scalar's bytes. They
     * are read as the text they decode to, as upstream's YAML reader decodes {@code !!binary}
     * into a string; kept as bytes, an error about the field showed the array's identity
     * ({@code [B@1b6d3586}) as the value given.
     */
    private static @Nullable Object embedded(@Nullable Object o) {
      return o instanceof byte[] b ? new String(b, java.nio.charset.StandardCharsets.UTF_8) : o;
    }

    /**
     * A float scalar. YAML's {@code .nan}, {@code .inf} and {@code -.inf} (in any of their
     * spellings) are typed as floats by the YAML parser, which then cannot read them as a number,
     * so the whole file failed as "not valid YAML" with no field named. They are kept as their
     * text: no field takes a value that is not a finite number (upstream cannot hand one on
     * either), and the field holding one refuses it by name, as it refuses any other text.
     */
    private Object floatValue() throws IOException {
      String text = p.getText();
      return isNonFinite(text) ? text : p.getDoubleValue();
    }

    /** Whether {@code s} is one of YAML's spellings of NaN or an infinity. */
    static boolean isNonFinite(String s) {
      String t = s.startsWith("+") || s.startsWith("-") ? s.substring(1) : s;
      return switch (t) {
        case ".inf", ".Inf", ".INF", ".nan", ".NaN", ".NAN" -> true;
        default -> false;
      };
    }

    /** The anchor of the single value at the current token, or null. */
    private @Nullable String scalarAnchor() {
      if (text.indexOf('&') < 0) {
        return null;
      }
      Map<Long, String> anchors = scalarAnchors;
      if (anchors == null) {
        anchors = new HashMap<>();
        for (org.yaml.snakeyaml.events.Event e
            : new org.yaml.snakeyaml.Yaml().parse(new java.io.StringReader(text))) {
          if (e instanceof org.yaml.snakeyaml.events.ScalarEvent v && v.getAnchor() != null) {
            anchors.put((long) v.getStartMark().getIndex(), v.getAnchor());
          }
        }
        scalarAnchors = anchors;
      }
      return anchors.get(p.currentTokenLocation().getCharOffset());
    }

    private void count(long n) throws IOException {
      nodes += n;
      if (nodes > maxNodes) {
        throw new com.fasterxml.jackson.core.JsonParseException(p, "its aliases stand for more"
            + " than " + maxNodes + " nodes; write the repeated parts out or use fewer aliases");
      }
    }
  }

  /**
   * One load of one file: the messages collected so far and the plugins created so far, which
   * every later step reads (profiles resolve references against them, a failed load closes
   * them). The steps run in file order: top level, plugins, profiles, profile handler.
   */
  private final class FileLoad {
    private final String source;
    private final Messages errors = new Messages();
    private final Messages warnings = new Messages();
    private final Map<String, Plugin> plugins = new LinkedHashMap<>();
    /** Every plugin name defined, loaded or not, and the index of its first definition. */
    private final Map<String, Integer> definedAt = new HashMap<>();
    /** The name of every plugin the file lists, created or not. */
    private final Set<String> fileNames = new HashSet<>();
    /** The names of the data producers and extractors created. */
    private final Set<String> producers = new HashSet<>();
    private final List<SchedulingProfile> profiles = new ArrayList<>();
    private boolean danglingReported;
    /** Whether an unknown plugin type's error left the list of known types to the report's end. */
    private boolean knownTypesListedAtEnd;
    /** Former type names already reported in this file, so each is noticed once. */
    private final Set<String> aliasesNoticed = new HashSet<>();

    /** A saturation section's detector plugin other than the utilization detector, if any. */
    io.epp4j.api.@Nullable SaturationDetector detector;

    FileLoad(String source) {
      this.source = source;
    }

    void checkTopLevel(Map<?, ?> top) {
      for (Object k : top.keySet()) {
        String key = String.valueOf(k);
        if (key.equals("flowControl")) {
          // upstream reads the section only behind the flowControl gate, which is refused, but
          // for its saturationDetector, which it honours either way (see saturation)
          Object fc = top.get(k);
          boolean other = !(fc instanceof Map<?, ?> m) || m.keySet().stream()
              .anyMatch(f -> !"saturationDetector".equals(f));
          if (other) {
            warnings.add(source + ": section 'flowControl' has no effect but for its"
                + " saturationDetector: upstream applies the rest only with the flowControl"
                + " feature gate, and epp4j has no request queueing");
          }
        } else if (TOLERATED_TOP_LEVEL.contains(key)) {
          warnings.add(source + ": section '" + key + "' is not used by epp4j and was ignored");
        } else if (!KNOWN_TOP_LEVEL.contains(key)) {
          errors.add(source + ": unknown top-level field " + quote(k) + "; expected one of "
              + new java.util.TreeSet<>(KNOWN_TOP_LEVEL));
        }
      }
      Object kind = top.get("kind");
      if (kind != null && !"EndpointPickerConfig".equals(kind)) {
        errors.add(source + ": field 'kind' must be EndpointPickerConfig, got " + quote(kind));
      }
      Object api = top.get("apiVersion");
      if (api != null && !(api instanceof String)) {
        // as a wrong-typed kind, or upstream's decoding of a number into its string field
        errors.add(source + ": field 'apiVersion' must be a string (such as "
            + "inference.networking.x-k8s.io/v1alpha1), got " + describe(api) + " " + quote(api));
      } else if (api != null && !KNOWN_API_VERSIONS.contains(String.valueOf(api))) {
        warnings.add(source + ": field 'apiVersion' " + quote(api) + " is none of "
            + new java.util.TreeSet<>(KNOWN_API_VERSIONS) + "; read as an EndpointPickerConfig");
      }
      checkFeatureGates(top.get("featureGates"));
    }

    /** Upstream's list of gate names; harmless gates get a notice, others are refused. */
    private void checkFeatureGates(@Nullable Object node) {
      if (node == null) {
        return;
      }
      List<?> gates = asList(node, source + ": field 'featureGates'", errors);
      for (Object g : gates) {
        String gate = String.valueOf(g);
        String why = HARMLESS_GATES.get(gate);
        if (why != null) {
          warnings.add(source + ": field 'featureGates': " + quote(gate) + " has no effect: "
              + why);
        } else if (gate.equals("flowControl")) {
          errors.add(source + ": field 'featureGates': 'flowControl' turns on upstream's request"
              + " queueing, which epp4j does not have (a request is routed, shed with 429 or"
              + " rejected at once); remove the gate");
        } else {
          errors.add(source + ": field 'featureGates': unknown gate " + quote(gate) + "; known: "
              + new java.util.TreeSet<>(HARMLESS_GATES.keySet()));
        }
      }
    }

    /**
     * {@code requestHandler: {parsers: [{pluginRef: x}, ...]}} (current upstream), else the
     * former {@code parser: {pluginRef: x}}, which upstream reads only without the first: every x
     * must be the openai-parser, which epp4j always runs.
     */
    void checkParser(Map<?, ?> top) {
      Object handler = top.get("requestHandler");
      List<?> parsers = List.of();
      if (handler != null) {
        if (!(handler instanceof Map<?, ?> h)) {
          errors.add(source + ": field 'requestHandler' must be a mapping, got "
              + describe(handler));
          return;
        }
        for (Object k : h.keySet()) {
          if (!"parsers".equals(k)) {
            errors.add(source + ": requestHandler: unknown field " + quote(k)
                + "; expected parsers");
          }
        }
        if (h.get("parsers") != null) {
          parsers = asList(h.get("parsers"), source + ": requestHandler: field 'parsers'",
              errors);
        }
      }
      Object former = top.get("parser");
      if (!parsers.isEmpty()) {
        if (former != null) {
          warnings.add(source + ": section 'parser' is not used: requestHandler.parsers is given,"
              + " and upstream reads the former section only without it");
        }
        for (int i = 0; i < parsers.size(); i++) {
          checkParserRef(parsers.get(i), "requestHandler: parsers[" + i + "]");
        }
      } else if (former != null) {
        checkParserRef(former, "parser");
      }
    }

    private void checkParserRef(@Nullable Object node, String section) {
      refOnly(node, section);
      if (node instanceof Map<?, ?> m && m.get("pluginRef") instanceof String ref
          && !ref.equals("openai-parser") && !definedAt.containsKey(ref)) {
        String why = UpstreamOnlyTypes.why(ref);
        if (why != null) {
          errors.add(source + ": " + section + ": field 'pluginRef' names upstream's " + quote(ref)
              + ", which epp4j does not have: " + why);
          return;
        }
      }
      Plugin p = sectionRef(node, section, "openai-parser");
      if (p != null && !(p instanceof OpenAiParserPlugin)) {
        errors.add(source + ": " + section + ": field 'pluginRef' must name an openai-parser"
            + " plugin; epp4j parses OpenAI requests only, got " + p);
      }
    }

    /**
     * {@code saturationDetector}: either {@code {pluginRef: x}} naming a utilization-detector
     * (upstream 1.3 on) or the detector's fields inline (upstream 1.0–1.2). The result replaces
     * the router's saturation settings.
     */
    RouterConfig.@Nullable Saturation saturation(Map<?, ?> top) {
      Object node = top.get("saturationDetector");
      String section = "saturationDetector";
      // current upstream's place for it, honoured without the flowControl gate; it wins over
      // the former top-level section when both are given, as upstream's loader decides
      if (top.get("flowControl") instanceof Map<?, ?> fc && fc.get("saturationDetector") != null) {
        if (node != null) {
          warnings.add(source + ": section 'saturationDetector' is not used:"
              + " flowControl.saturationDetector is given, and upstream reads the former section"
              + " only without it");
        }
        node = fc.get("saturationDetector");
        section = "flowControl: saturationDetector";
      }
      if (node == null) {
        return null;
      }
      return saturation(node, section);
    }

    private RouterConfig.@Nullable Saturation saturation(Object node, String section) {
      if (node instanceof Map<?, ?> given && given.containsKey("pluginRef")
          && (given.get("pluginRef") == null || "".equals(given.get("pluginRef")))) {
        // upstream's ensureSaturationDetector reads an empty reference (as a chart renders an
        // unset value) as the utilization detector's
        Map<Object, @Nullable Object> named = new LinkedHashMap<>(given);
        named.put("pluginRef", "utilization-detector");
        node = named;
      }
      if (node instanceof Map<?, ?> m && m.containsKey("pluginRef")) {
        refOnly(node, section);
        // a reference to either detector type that names no plugin of the file gets one with
        // default parameters, as upstream's loader adds it
        Plugin p = sectionRef(node, section, "concurrency-detector".equals(m.get("pluginRef"))
            ? "concurrency-detector" : "utilization-detector");
        if (p == null) {
          return null;
        }
        if (p instanceof UtilizationDetector d) {
          return d.saturation;
        }
        if (p instanceof io.epp4j.api.SaturationDetector d) {
          detector = d; // it decides the pool's saturation instead of the utilization rule
          return null;
        }
        errors.add(source + ": " + section + ": field 'pluginRef' must name a saturation"
            + " detector (utilization-detector, concurrency-detector), got " + p);
        return null;
      }
      if (!(node instanceof Map<?, ?> m)) {
        errors.add(source + ": field '" + section + "' must be a mapping, got " + describe(node));
        return null;
      }
      Map<String, Object> fields = new LinkedHashMap<>();
      m.forEach((k, v) -> fields.put(String.valueOf(k), v));
      Parameters p = Parameters.of(fields);
      RouterConfig.Saturation s = UtilizationDetector.fields(p);
      for (String e : p.errors()) {
        errors.add(source + ": " + section + ": " + e.replaceFirst("^parameter", "field"));
      }
      for (String n : p.notices()) {
        warnings.add(source + ": " + section + ": " + n.replaceFirst("^parameter", "field"));
      }
      for (String unread : p.unreadNames()) {
        errors.add(source + ": " + section + ": unknown field " + quote(unread)
            + "; expected pluginRef, or queueDepthThreshold, kvCacheUtilThreshold,"
            + " metricsStalenessThreshold");
      }
      return p.errors().isEmpty() ? s : null;
    }

    /**
     * {@code dataLayer: {sources: [{pluginRef, extractors: [{pluginRef}]}]}}: every reference
     * must name a plugin of the file, each source a data source. The sources map onto epp4j's
     * own (docs/plugins.md, data layer); endpoint discovery is the application's.
     */
    void checkDataLayer(Map<?, ?> top) {
      String section = "dataLayer";
      Object node = top.get("dataLayer");
      if (top.get("data") != null) {
        // the Gateway API Inference Extension 1.3 and 1.4 name the section 'data'; no upstream
        // version reads both, so a file giving both is one whose intent is unclear
        if (node != null) {
          errors.add(source + ": field 'data' is the former name of 'dataLayer' (Gateway API"
              + " Inference Extension 1.3 and 1.4); give one of them, not both");
          return;
        }
        section = "data";
        node = top.get("data");
      }
      if (node == null) {
        return;
      }
      String where = source + ": field '" + section + "'";
      if (!(node instanceof Map<?, ?> m)) {
        errors.add(where + " must be a mapping, got " + describe(node));
        return;
      }
      for (Object k : m.keySet()) {
        String key = String.valueOf(k);
        if (key.equals("discovery")) {
          warnings.add(where + ": field 'discovery' has no effect: the application tells the"
              + " router its endpoints (Router.setEndpoints)");
        } else if (key.equals("injectDefaults")) {
          warnings.add(where + ": field 'injectDefaults' has no effect: epp4j's scraper and"
              + " metrics parser run whether or not sources are listed");
        } else if (!key.equals("sources")) {
          errors.add(where + ": unknown field " + quote(k) + "; expected sources, discovery,"
              + " injectDefaults");
        }
      }
      List<?> sources = asList(m.get("sources"), where + ": field 'sources'", errors);
      for (int i = 0; i < sources.size(); i++) {
        String sw = where + ": sources[" + i + "]";
        Object sn = sources.get(i);
        if (!(sn instanceof Map<?, ?> sm)) {
          errors.add(sw + ": field 'pluginRef' is required; got " + describe(sn));
          continue;
        }
        Plugin p = sectionRef(sn, section + ": sources[" + i + "]");
        if (p != null
            && !(p instanceof MetricsDataSource || p instanceof EndpointNotificationSource)) {
          errors.add(sw + ": field 'pluginRef' must name a metrics-data-source or an"
              + " endpoint-notification-source, got " + p);
        }
        List<?> extractors = asList(sm.get("extractors"), sw + ": field 'extractors'", errors);
        for (int j = 0; j < extractors.size(); j++) {
          String ew = section + ": sources[" + i + "]: extractors[" + j + "]";
          refOnly(extractors.get(j), ew);
          sectionRef(extractors.get(j), ew);
        }
        for (Object k : sm.keySet()) {
          if (!k.equals("pluginRef") && !k.equals("extractors")) {
            errors.add(sw + ": unknown field " + quote(k) + "; expected pluginRef, extractors");
          }
        }
      }
    }

    /**
     * Reports the fields of a reference other than {@code pluginRef}: read by nobody, they would
     * look as if they set something (thresholds beside a detector's reference, say) while the
     * plugin's own parameters apply.
     */
    private void refOnly(@Nullable Object node, String section) {
      if (node instanceof Map<?, ?> m) {
        for (Object k : m.keySet()) {
          if (!"pluginRef".equals(k)) {
            errors.add(source + ": " + section + ": unknown field " + quote(k) + " beside"
                + " 'pluginRef'; set it in the parameters of the plugin it names");
          }
        }
      }
    }

    /**
     * The plugin a section's {@code pluginRef} names, or null after reporting why not (a plugin
     * that failed to load was reported already).
     */
    private @Nullable Plugin sectionRef(@Nullable Object node, String section) {
      return sectionRef(node, section, null);
    }

    /**
     * As {@link #sectionRef(Object, String)}; a reference to {@code defaultType} that names no
     * plugin of the file gets a plugin of that type with default parameters, as upstream's
     * loader adds one for the saturation detector and the parser.
     */
    private @Nullable Plugin sectionRef(@Nullable Object node, String section,
        @Nullable String defaultType) {
      if (!(node instanceof Map<?, ?> m)) {
        errors.add(source + ": " + section + ": must be a mapping with 'pluginRef', got "
            + describe(node));
        return null;
      }
      Object given = m.get("pluginRef");
      if (!(given instanceof String ref)) {
        // a name written as a number or a list is there, not missing: say what it is
        errors.add(source + ": " + section + ": field 'pluginRef' "
            + (given == null ? "is required"
                : "must be a string (a plugin's name), got " + describe(given)));
        return null;
      }
      if (ref.equals(defaultType) && !definedAt.containsKey(ref)) {
        Result<? extends Plugin> created = registry.create(ref, context(ref, plugins, null),
            Parameters.of(Map.of()));
        if (created.isOk()) {
          definedAt.put(ref, definedAt.size());
          plugins.put(ref, created.value());
        }
      }
      Plugin p = plugins.get(ref);
      if (p == null && !definedAt.containsKey(ref)) {
        errors.add(source + ": " + section + ": field 'pluginRef' " + quote(ref)
            + " names no plugin");
      }
      return p == null ? null : instance.apply(p);
    }

    /**
     * Creates the file's plugins in file order, except that data producers and extractors (types
     * named {@code *-producer} or {@code *-extractor}, such as {@code token-producer},
     * {@code approx-prefix-cache-producer} or {@code topology-extractor}) come first, and a
     * plugin that refers to one the file defines later (a profile handler naming its decider, a
     * scorer naming its producer) is created after it, as upstream's loader orders plugins by
     * their references. A reference that stays unresolved (a name the file does not define, a
     * cycle) is reported by the plugin that makes it.
     */
    void createPlugins(@Nullable Object pluginsNode) {
      List<?> pluginList = asList(pluginsNode, source + ": field 'plugins'", errors);
      for (Object node : pluginList) {
        if (node instanceof Map<?, ?> spec && spec.get("type") instanceof String type) {
          Object n = spec.get("name");
          fileNames.add(n == null || "".equals(n) ? type : String.valueOf(n));
        }
      }
      List<Integer> order = new ArrayList<>();
      for (int i = 0; i < pluginList.size(); i++) {
        if (isProducer(pluginList.get(i))) {
          order.add(i);
        }
      }
      for (int i = 0; i < pluginList.size(); i++) {
        if (!isProducer(pluginList.get(i))) {
          order.add(i);
        }
      }
      while (!order.isEmpty()) {
        List<Integer> deferred = new ArrayList<>();
        for (int i : order) {
          if (!createPlugin(i, pluginList.get(i), true)) {
            deferred.add(i);
          }
        }
        if (deferred.size() == order.size()) {
          // no progress: what is still missing will not come; report it
          for (int i : deferred) {
            createPlugin(i, pluginList.get(i), false);
          }
          return;
        }
        order = deferred;
      }
    }

    private boolean isProducer(@Nullable Object node) {
      if (node instanceof Map<?, ?> spec && spec.get("type") instanceof String type) {
        String current = registry.currentName(type);
        String t = current != null ? current : type;
        return t.endsWith("-producer") || t.endsWith("-extractor");
      }
      return false;
    }

    /**
     * Creates plugin {@code i}; false when it was not created because it looked up a plugin the
     * file defines but that was not created yet and {@code mayDefer}: then nothing of this
     * attempt is kept (its messages, its name) and it is tried again later.
     */
    private boolean createPlugin(int i, @Nullable Object node, boolean mayDefer) {
      long errorMark = errors.mark();
      long warningMark = warnings.mark();
      Set<String> missed = new HashSet<>();
      String where = source + ": plugins[" + i + "]";
      if (!(node instanceof Map<?, ?> spec)) {
        errors.add(where + ": must be a mapping with 'type', got " + describe(node));
        return true;
      }
      for (Object k : spec.keySet()) {
        if (!PLUGIN_FIELDS.contains(String.valueOf(k))) {
          errors.add(where + ": unknown field " + quote(k) + "; expected name, type, parameters");
        }
      }
      Object type = spec.get("type");
      if (type != null && !(type instanceof String)) {
        errors.add(where + ": field 'type' must be a string (a plugin type), got "
            + describe(type));
        return true;
      }
      if (!(type instanceof String typeName) || typeName.isBlank()) {
        errors.add(where + ": field 'type' is required");
        return true;
      }
      Object nameNode = spec.get("name");
      if (nameNode != null && !(nameNode instanceof String)) {
        // as upstream, which reads names as strings: taken as its text, a number or a list
        // named a plugin no pluginRef (which must be a string) could refer to
        errors.add(where + " (type " + quote(typeName) + "): field 'name' must be a string, got "
            + describe(nameNode));
        return true;
      }
      // upstream names a plugin after its type when the name is missing or empty
      String name = nameNode == null || "".equals(nameNode) ? typeName : (String) nameNode;
      where = where + " (name " + quote(name) + ", type " + quote(typeName) + ")";
      Integer first = definedAt.putIfAbsent(name, i);
      if (first != null) {
        errors.add(where + ": field 'name': duplicate plugin name " + quote(name)
            + ", first defined at plugins[" + first + "]");
        return true;
      }
      Object paramsNode = spec.get("parameters");
      Map<String, Object> paramMap = new LinkedHashMap<>();
      if (paramsNode instanceof Map<?, ?> pm) {
        pm.forEach((k, v) -> paramMap.put(String.valueOf(k), v));
      } else if (paramsNode != null) {
        errors.add(where + ": field 'parameters' must be a mapping, got " + describe(paramsNode));
        return true;
      }
      if (registry.provider(typeName) == null) {
        unknownType(where, typeName);
        return true;
      }
      Parameters params = Parameters.of(paramMap);
      String current = registry.currentName(typeName);
      boolean aliasNoticed = false;
      if (current != null && aliasesNoticed.add(typeName)) {
        aliasNoticed = true;
        warnings.add(where + ": type " + quote(typeName) + " is a former name of '" + current
            + "'; loaded as '" + current + "' (rename it to silence this notice)");
      }
      Result<? extends Plugin> created =
          registry.create(typeName, context(name, plugins, missed), params);
      missed.retainAll(fileNames);
      if (!created.isOk() && mayDefer && !missed.isEmpty()) {
        errors.rollBack(errorMark);
        warnings.rollBack(warningMark);
        if (first == null) {
          definedAt.remove(name);
        }
        if (aliasNoticed) {
          aliasesNoticed.remove(typeName);
        }
        return false;
      }
      if (!created.isOk()) {
        for (String e : created.errors()) {
          errors.add(where + ": " + e);
        }
        return true;
      }
      for (String notice : params.notices()) {
        warnings.add(where + ": " + notice);
      }
      for (String unread : params.unreadNames()) {
        warnings.add(where + ": parameter " + quote(unread) + " is not used by epp4j");
      }
      plugins.put(name, created.value());
      if (isProducer(node)) {
        producers.add(name);
      }
      return true;
    }

    /**
     * The error for a type no provider makes: why, when it is upstream's and epp4j lacks it, the
     * closest known names, and the known types. A message is at most 500 characters, and the list
     * of a full class path is longer: then it follows, once, at the end of the report.
     */
    private void unknownType(String where, String type) {
      String why = UpstreamOnlyTypes.why(type);
      String head = where + ": " + (why != null
          ? "plugin type " + quote(type) + " is upstream's and not in epp4j: " + why
              + " (docs/plugins.md, Upstream compatibility)"
          : "unknown plugin type " + quote(type) + closest(type));
      Set<String> known = registry.types();
      String inline = head + "; known types: " + known;
      if (inline.length() <= MAX_MESSAGE_CHARS) {
        errors.add(inline);
      } else {
        errors.add(head + "; the " + known.size() + " known types are listed at the end");
        knownTypesListedAtEnd = true;
      }
    }

    /** " (did you mean 'x'?)" for the known types at most a few edits away, else nothing. */
    private String closest(String type) {
      List<String> near = new ArrayList<>();
      int best = Integer.MAX_VALUE;
      int limit = Math.max(2, type.length() / 5);
      for (String t : registry.types()) {
        int d = editDistance(type, t, limit);
        if (d > limit || d > best) {
          continue;
        }
        if (d < best) {
          near.clear();
          best = d;
        }
        near.add(quote(t));
      }
      return near.isEmpty() || near.size() > 3 ? ""
          : " (did you mean " + String.join(" or ", near) + "?)";
    }

    /** The known types in messages of at most 500 characters, after the other errors. */
    private void listKnownTypes() {
      List<String> parts = new ArrayList<>();
      StringBuilder part = new StringBuilder();
      // room for the longest prefix, "<source>: known plugin types (part 99 of 99): "
      int room = MAX_MESSAGE_CHARS - (source.length() + 46);
      for (String t : registry.types()) {
        String name = cut(t, MAX_QUOTED_CHARS);
        if (part.length() > 0 && part.length() + 2 + name.length() > room) {
          parts.add(part.toString());
          part.setLength(0);
        }
        part.append(part.length() > 0 ? ", " : "").append(name);
      }
      parts.add(part.toString());
      for (int i = 0; i < parts.size(); i++) {
        errors.add(source + ": known plugin types" + (parts.size() == 1 ? ""
            : " (part " + (i + 1) + " of " + parts.size() + ")") + ": " + parts.get(i));
      }
    }

    void buildProfiles(Map<?, ?> top) {
      Object profilesNode = top.get("schedulingProfiles");
      List<?> profileList = asList(profilesNode, source + ": field 'schedulingProfiles'", errors);
      if (profileList.isEmpty() && (profilesNode == null || profilesNode instanceof List)) {
        defaultProfile();
        return;
      }
      Set<String> profileNames = new HashSet<>();
      for (int i = 0; i < profileList.size(); i++) {
        buildProfile(i, profileList.get(i), profileNames);
      }
    }

    /**
     * Upstream's rule for a file without profiles (missing, null or empty): one profile named
     * {@code default} with every filter, scorer and picker of the file, scorers at weight 1.
     * Upstream adds them in no particular order; here they keep the file's order.
     */
    private void defaultProfile() {
      SchedulingProfile.Builder b = SchedulingProfile.builder("default");
      String pickerRef = null;
      // in file order (producers were created first), producers left out: they are no filter,
      // scorer or picker upstream
      List<String> names = new ArrayList<>(plugins.keySet());
      names.sort(java.util.Comparator.comparing(
          n -> definedAt.getOrDefault(n, Integer.MAX_VALUE)));
      for (String name : names) {
        Plugin p = plugins.get(name);
        if (!producers.contains(name)
            && (p instanceof Filter || p instanceof Scorer || p instanceof Picker)) {
          pickerRef = addRef(b, source + ": schedulingProfiles (none given; profile 'default' runs"
              + " every filter, scorer and picker): plugins[" + name + "]",
              Map.of("pluginRef", name), pickerRef);
        }
      }
      profiles.add(b.build());
    }

    private void buildProfile(int i, @Nullable Object node, Set<String> profileNames) {
      String where = source + ": schedulingProfiles[" + i + "]";
      if (!(node instanceof Map<?, ?> spec)) {
        errors.add(where + ": must be a mapping with 'name' and 'plugins', got " + describe(node));
        return;
      }
      Object pn = spec.get("name");
      if (pn != null && !(pn instanceof String)) {
        errors.add(where + ": field 'name' must be a string, got " + describe(pn));
        return;
      }
      if (!(pn instanceof String profileName) || profileName.isBlank()) {
        errors.add(where + ": field 'name' is required");
        return;
      }
      where = where + " (profile " + quote(profileName) + ")";
      if (!profileNames.add(profileName)) {
        errors.add(where + ": field 'name': duplicate profile name");
        return;
      }
      for (Object k : spec.keySet()) {
        if (!PROFILE_FIELDS.contains(String.valueOf(k))) {
          errors.add(where + ": unknown field " + quote(k) + "; expected name, plugins");
        }
      }
      SchedulingProfile.Builder b = SchedulingProfile.builder(profileName);
      List<?> refs = asList(spec.get("plugins"), where + ": field 'plugins'", errors);
      String pickerRef = null;
      for (int j = 0; j < refs.size(); j++) {
        pickerRef = addRef(b, where + ": plugins[" + j + "]", refs.get(j), pickerRef);
      }
      if (pickerRef == null) {
        filesPicker(b, where);
      }
      profiles.add(b.build());
    }

    /**
     * Upstream's rule for a profile that names no picker: it takes a picker the file defines,
     * and {@code max-score-picker} (one endpoint) only when the file defines none. Of several,
     * upstream takes any one (Go's map order); here the first defined, with a notice.
     */
    private void filesPicker(SchedulingProfile.Builder b, String where) {
      String first = null;
      int count = 0;
      for (Map.Entry<String, Plugin> e : plugins.entrySet()) {
        if (e.getValue() instanceof Picker) {
          count++;
          if (first == null) {
            first = e.getKey();
            b.picker((Picker) e.getValue());
          }
        }
      }
      if (count > 1) {
        warnings.add(where + ": names no picker and the file defines " + count + "; it uses the"
            + " first defined, " + quote(first) + " (upstream takes any one of them)");
      }
    }

    /**
     * Adds one {@code pluginRef} to the profile being built in the role (or roles) its plugin
     * plays; returns the name of the profile's picker so far.
     */
    private @Nullable String addRef(SchedulingProfile.Builder b, String refWhere,
        @Nullable Object node, @Nullable String pickerRef) {
      if (!(node instanceof Map<?, ?> ref)) {
        errors.add(refWhere + ": must be a mapping with 'pluginRef', got " + describe(node));
        return pickerRef;
      }
      for (Object k : ref.keySet()) {
        if (!REF_FIELDS.contains(String.valueOf(k))) {
          errors.add(refWhere + ": unknown field " + quote(k) + "; expected pluginRef, weight");
        }
      }
      Object r = ref.get("pluginRef");
      if (r != null && !(r instanceof String)) {
        errors.add(refWhere + ": field 'pluginRef' must be a string (a plugin's name), got "
            + describe(r));
        return pickerRef;
      }
      if (!(r instanceof String refName)) {
        errors.add(refWhere + ": field 'pluginRef' is required");
        return pickerRef;
      }
      refWhere = refWhere + " (pluginRef " + quote(refName) + ")";
      Double weight = null;
      Object w = ref.get("weight");
      if (w != null) {
        // any finite number, as upstream's float64 weight: a negative one makes the scorer a
        // penalty, 0 makes it count for nothing. It is read as a plugin's number parameters are,
        // so a number written in quotes ('2') is that number here as it is there
        Parameters read = Parameters.of(Map.of("weight", w));
        double given = read.getDouble("weight", Double.NaN, -Double.MAX_VALUE, Double.MAX_VALUE);
        if (read.errors().isEmpty()) {
          weight = given;
        } else {
          errors.add(refWhere + ": field 'weight' must be a finite number (negative for a"
              + " penalty), got " + quote(w));
          return pickerRef;
        }
      }
      Plugin plugin = plugins.get(refName);
      if (plugin == null) {
        if (!definedAt.containsKey(refName)) {
          // the names are listed once, at the first dangling reference: listing them in every
          // error made a file with many dangling references quadratic in time and size
          errors.add(refWhere + ": field 'pluginRef' names no plugin"
              + (danglingReported ? "" : "; defined plugins: " + listNames(definedAt.keySet())));
          danglingReported = true;
        }
        return pickerRef; // otherwise the plugin failed to load: already reported
      }
      if (producers.contains(refName)) {
        // a producer prepares data for the plugins that read it; upstream's profile passes over
        // it (an approximate or precise producer is a scorer here, and would score twice)
        warnings.add(refWhere + ": plugin is a data producer, not a filter, scorer or picker; it"
            + " plays no part in the profile (as upstream, which passes over it)");
        return pickerRef;
      }
      boolean used = false;
      if (plugin instanceof Filter f) {
        b.filter(f);
        used = true;
      }
      if (plugin instanceof Scorer sc) {
        if (b.hasScorer(sc)) {
          warnings.add(refWhere + ": the profile names scorer " + quote(refName) + " twice; it"
              + " runs twice and its weights add up");
        }
        b.scorer(refName, sc, weight == null ? 1.0 : weight);
        used = true;
      } else if (weight != null) {
        warnings.add(refWhere + ": field 'weight' ignored: the plugin is not a scorer");
      }
      if (plugin instanceof Picker p) {
        if (pickerRef != null) {
          errors.add(refWhere + ": a profile takes one picker; it already has " + quote(pickerRef));
          return pickerRef;
        }
        b.picker(p);
        return refName;
      }
      if (!used) {
        // upstream's profile takes the filters, scorers and picker it is given and passes over
        // any other plugin (llm-d 0.8's precise config lists its tokenizer in the profile)
        warnings.add(refWhere + ": plugin is not a filter, scorer or picker; it plays no part in"
            + " the profile (as upstream, which passes over it)");
      }
      return pickerRef;
    }

    /** The one configured profile handler, or the single-profile default. */
    ProfileHandler profileHandler() {
      ProfileHandler handler = null;
      for (Map.Entry<String, Plugin> e : plugins.entrySet()) {
        if (e.getValue() instanceof ProfileHandler h) {
          if (handler != null) {
            errors.add(source + ": plugin " + quote(e.getKey())
                + ": only one profile handler may be configured");
          }
          handler = h;
        }
      }
      if (handler == null) {
        if (profiles.size() > 1) {
          // a handler the file defines may be among the plugins that failed to load: said, so
          // that the error does not read as if the file had none
          List<String> failed = new ArrayList<>();
          definedAt.entrySet().stream().sorted(Map.Entry.comparingByValue())
              .filter(e -> !plugins.containsKey(e.getKey()))
              .forEach(e -> failed.add(cut(e.getKey(), MAX_QUOTED_CHARS)));
          errors.add(source + ": " + profiles.size()
              + " profiles need a profile handler plugin (e.g. pd-profile-handler)"
              + (failed.isEmpty() ? "" : "; of the file's plugins, " + listed(failed)
                  + " did not load (see above)"));
        }
        return new SingleProfileHandler(); // its check would repeat the error above
      }
      if (!profiles.isEmpty()) {
        java.util.Set<String> names = new java.util.LinkedHashSet<>();
        profiles.forEach(p -> names.add(p.name()));
        String problem = instance.apply(handler) instanceof ProfileHandler h
            ? h.checkProfiles(names) : null;
        if (problem != null) {
          errors.add(source + ": profile handler " + quote(handler) + ": field"
              + " 'schedulingProfiles': " + problem);
        }
      }
      return handler;
    }

    /** The configuration, or every error with the plugins this load created closed. */
    Result<RouterConfig> finish(ProfileHandler handler,
        RouterConfig.@Nullable Saturation saturation) {
      if (profiles.isEmpty() && errors.isEmpty()) {
        errors.add(source + ": field 'schedulingProfiles' is required");
      }
      if (knownTypesListedAtEnd) {
        listKnownTypes();
      }
      if (!errors.isEmpty()) {
        // every plugin is closed, and none may throw out of the load: the errors are the answer
        plugins.forEach((name, p) -> {
          try {
            p.close();
          } catch (RuntimeException e) {
            errors.add(source + ": plugin " + quote(name) + ": closing it after the failed load"
                + " threw " + e.getClass().getName());
          }
        });
        return Result.errors(errors.toList(source, "errors"));
      }
      List<io.epp4j.api.Admitter> admitters = new ArrayList<>();
      for (Plugin p : plugins.values()) {
        if (p instanceof io.epp4j.api.Admitter a) {
          admitters.add(a);
        }
      }
      return Result.ok(new RouterConfig(profiles, handler, plugins,
          warnings.toList(source, "warnings"), admitters, saturation, detector));
    }
  }

  /**
   * Where and what: the YAML library's own problem and its position, rather than its message,
   * which repeats positions and quotes the surrounding lines over several lines of its own.
   */
  private static String yamlProblem(JsonProcessingException e) {
    if (e.getCause() instanceof MarkedYAMLException m && m.getProblemMark() != null) {
      Mark at = m.getProblemMark();
      Mark from = m.getContextMark();
      return " at line " + (at.getLine() + 1) + ", column " + (at.getColumn() + 1) + ": " + m.getProblem()
          + (m.getContext() == null ? ""
              : " (" + m.getContext() + (from == null ? ""
                  : " started at line " + (from.getLine() + 1) + ", column " + (from.getColumn() + 1)) + ")");
    }
    JsonLocation loc = e.getLocation();
    String where = loc != null && loc.getLineNr() > 0
        ? " at line " + loc.getLineNr() + ", column " + loc.getColumnNr() : "";
    String m = String.valueOf(e.getOriginalMessage());
    int open = m.indexOf('\'');
    int close = m.lastIndexOf('\'');
    if (m.startsWith("Duplicate field '") && close > open) {
      return where + ": field " + quote(m.substring(open + 1, close)) + " is given twice in one"
          + " mapping (the second would replace the first)";
    }
    return where + ": " + m;
  }

  /**
   * The first messages, each shortened, and a count of the rest: a generated file with thousands
   * of mistakes still gives a report a person reads and a log line of bounded size.
   */
  private static final class Messages {
    private final List<String> kept = new ArrayList<>();
    private int dropped;

    void add(String message) {
      if (kept.size() < MAX_REPORTED_ERRORS) {
        kept.add(shorten(message));
      } else {
        dropped++;
      }
    }

    boolean isEmpty() {
      return kept.isEmpty();
    }

    /** How many messages there are, for {@link #rollBack}. */
    long mark() {
      return ((long) dropped << 32) | kept.size();
    }

    /** Forgets the messages added since {@code mark}. */
    void rollBack(long mark) {
      int size = (int) mark;
      kept.subList(size, kept.size()).clear();
      dropped = (int) (mark >>> 32);
    }

    List<String> toList(String source, String noun) {
      if (dropped > 0) {
        kept.add(source + ": ... and " + dropped + " more " + noun);
      }
      return kept;
    }
  }

  /** A name or value from the file in quotes, cut to {@link #MAX_QUOTED_CHARS}, one line. */
  static String quote(@Nullable Object value) {
    return "'" + cut(String.valueOf(value), MAX_QUOTED_CHARS) + "'";
  }

  static String shorten(String message) {
    return cut(message, MAX_MESSAGE_CHARS);
  }

  /** At most {@code max} characters: a prefix and the full length; one line (controls as spaces). */
  private static String cut(String s, int max) {
    String out = s;
    if (s.length() > max) {
      String tail = "...(" + s.length() + " chars)";
      int keep = max - tail.length();
      if (Character.isHighSurrogate(s.charAt(keep - 1))) {
        keep--;
      }
      out = s.substring(0, keep) + tail;
    }
    for (int i = 0; i < out.length(); i++) {
      if (Character.isISOControl(out.charAt(i))) {
        return out.replaceAll("\\p{Cntrl}", " ");
      }
    }
    return out;
  }

  /** Levenshtein distance of {@code a} and {@code b}, or {@code limit + 1} once it exceeds it. */
  static int editDistance(String a, String b, int limit) {
    if (Math.abs(a.length() - b.length()) > limit) {
      return limit + 1;
    }
    int[] prev = new int[b.length() + 1];
    int[] cur = new int[b.length() + 1];
    for (int j = 0; j <= b.length(); j++) {
      prev[j] = j;
    }
    for (int i = 1; i <= a.length(); i++) {
      cur[0] = i;
      int rowMin = cur[0];
      for (int j = 1; j <= b.length(); j++) {
        int cost = a.charAt(i - 1) == b.charAt(j - 1) ? 0 : 1;
        cur[j] = Math.min(Math.min(cur[j - 1] + 1, prev[j] + 1), prev[j - 1] + cost);
        rowMin = Math.min(rowMin, cur[j]);
      }
      if (rowMin > limit) {
        return limit + 1;
      }
      int[] t = prev;
      prev = cur;
      cur = t;
    }
    return prev[b.length()];
  }

  /** Names in the given order, at most {@link #MAX_LISTED_NAMES} of them, in brackets. */
  private static String listed(List<String> names) {
    List<String> shown = names.subList(0, Math.min(names.size(), MAX_LISTED_NAMES));
    return shown + (names.size() > shown.size()
        ? " and " + (names.size() - shown.size()) + " more" : "");
  }

  private static String listNames(Set<String> names) {
    List<String> sorted = new ArrayList<>(names);
    java.util.Collections.sort(sorted);
    StringBuilder sb = new StringBuilder("[");
    for (int i = 0; i < sorted.size() && i < MAX_LISTED_NAMES; i++) {
      sb.append(i > 0 ? ", " : "").append(cut(sorted.get(i), MAX_QUOTED_CHARS));
    }
    if (sorted.size() > MAX_LISTED_NAMES) {
      sb.append(", ... and ").append(sorted.size() - MAX_LISTED_NAMES).append(" more");
    }
    return sb.append(']').toString();
  }

  private static String describe(@Nullable Object node) {
    if (node instanceof List) {
      return "a list";
    }
    if (node instanceof Map) {
      return "a mapping";
    }
    if (node instanceof String) {
      return "a string";
    }
    if (node instanceof Number) {
      return "a number";
    }
    if (node instanceof Boolean) {
      return "a boolean";
    }
    return node == null ? "nothing" : "a value";
  }

  private static List<?> asList(@Nullable Object node, String where, Messages errors) {
    if (node == null) {
      return List.of();
    }
    if (node instanceof List<?> l) {
      return l;
    }
    errors.add(where + " must be a list");
    return List.of();
  }

  /** What a provider sees: its name, the clock, the services, and the plugins defined before it. */
  private PluginContext context(String name, Map<String, Plugin> earlier,
      @Nullable Set<String> missed) {
    return new PluginContext() {
      @Override
      public Optional<Plugin> plugin(String other) {
        Plugin p = earlier.get(other);
        if (p == null && missed != null) {
          missed.add(other); // may be a plugin the file defines further down
        }
        return Optional.ofNullable(p).map(instance);
      }

      @Override
      public List<Plugin> earlierPlugins() {
        List<Plugin> all = new ArrayList<>();
        earlier.values().forEach(p -> all.add(instance.apply(p)));
        return all;
      }

      @Override
      public String pluginName() {
        return name;
      }

      @Override
      public Ticker ticker() {
        return ticker;
      }

      @Override
      public java.time.Duration inFlightMaxAge() {
        return inFlightMaxAge;
      }

      @Override
      @SuppressWarnings("unchecked")
      public <T> Optional<T> service(Class<T> type) {
        return (Optional<T>) services.apply(type);
      }
    };
  }
}
