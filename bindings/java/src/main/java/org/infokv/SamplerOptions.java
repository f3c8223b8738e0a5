package org.infokv;

import java.util.LinkedHashMap;
import java.util.Map;

/** Sampling settings: the fields of the C ikv_sampler_options, set by name (temperature &lt;= 0 is greedy). */
public final class SamplerOptions {
  private final Map<String, Number> fields = new LinkedHashMap<>();

  public static SamplerOptions defaults() { return new SamplerOptions(); }

  public SamplerOptions set(String field, Number value) { fields.put(field, value); return this; }

  public SamplerOptions temperature(float t) { return set("temperature", t); }
  public SamplerOptions topK(int k) { return set("top_k", k); }
  public SamplerOptions topP(float p) { return set("top_p", p); }
  public SamplerOptions minP(float p) { return set("min_p", p); }
  public SamplerOptions repeatPenalty(float p) { return set("repeat_penalty", p); }
  public SamplerOptions repeatLastN(int n) { return set("repeat_last_n", n); }
  public SamplerOptions seed(long seed) { return set("seed", seed); }

  @Override
  public String toString() { return "SamplerOptions" + fields; }

  ikv_sampler_options toNative() {
    ikv_sampler_options o = new ikv_sampler_options();
    InfokvException.check(InfokvNative.ikv_sampler_options_init(o));
    for (Map.Entry<String, Number> e : fields.entrySet()) Handles.setField(o, e.getKey(), e.getValue());
    return o;
  }
}
