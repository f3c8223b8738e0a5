package org.infokv;

/** Sampling settings and state (the repetition penalty's history). Use by one thread at a time. */
public final class Sampler implements AutoCloseable {
  private final Handles.Owned<SWIGTYPE_p_ikv_sampler> state;
  private final java.lang.ref.Cleaner.Cleanable cleanable;

  public Sampler(SamplerOptions options) {
    long[] out = new long[1];
    ikv_sampler_options o = (options == null ? SamplerOptions.defaults() : options).toNative();
    try {
      InfokvException.check(InfokvNative.ikv_sampler_create(out, o));
    } finally {
      o.delete();
    }
    state = owned(out[0]);
    cleanable = Handles.CLEANER.register(this, state);
  }

  /** A sampler from the config's sampler settings. */
  public Sampler(Config config) {
    long[] out = new long[1];
    InfokvException.check(config.use(h -> InfokvNative.ikv_sampler_create_with_config(out, h)));
    state = owned(out[0]);
    cleanable = Handles.CLEANER.register(this, state);
  }

  /** Same as {@link #Sampler(Config)}. */
  public static Sampler fromConfig(Config config) { return new Sampler(config); }

  /** A sampler that always takes the most likely token. */
  public static Sampler greedy() { return new Sampler(SamplerOptions.defaults().temperature(0f)); }

  private static Handles.Owned<SWIGTYPE_p_ikv_sampler> owned(long address) {
    return new Handles.Owned<>(new SWIGTYPE_p_ikv_sampler(address, false), InfokvNative::ikv_sampler_free, "sampler");
  }

  SWIGTYPE_p_ikv_sampler handle() { return state.get(); }

  @Override
  public void close() { cleanable.clean(); }
}
