package org.infokv;

/** Sampling settings and state (the repetition penalty's history). Use by one thread at a time. */
public final class Sampler implements AutoCloseable {
  private static final class State implements Runnable {
    volatile SWIGTYPE_p_ikv_sampler handle;

    State(SWIGTYPE_p_ikv_sampler h) { handle = h; }

    @Override
    public synchronized void run() {
      SWIGTYPE_p_ikv_sampler h = handle;
      handle = null;
      if (h != null) InfokvNative.ikv_sampler_free(h);
    }
  }

  private final State state;
  private final java.lang.ref.Cleaner.Cleanable cleanable;

  public Sampler(SamplerOptions options) {
    long[] out = new long[1];
    ikv_sampler_options o = (options == null ? SamplerOptions.defaults() : options).toNative();
    try {
      InfokvException.check(InfokvNative.ikv_sampler_create(out, o));
    } finally {
      o.delete();
    }
    state = new State(new SWIGTYPE_p_ikv_sampler(out[0], false));
    cleanable = Handles.CLEANER.register(this, state);
  }

  /** A sampler from the config's sampler settings. */
  public Sampler(Config config) {
    long[] out = new long[1];
    InfokvException.check(config.use(h -> InfokvNative.ikv_sampler_create_with_config(out, h)));
    state = new State(new SWIGTYPE_p_ikv_sampler(out[0], false));
    cleanable = Handles.CLEANER.register(this, state);
  }

  /** Same as {@link #Sampler(Config)}. */
  public static Sampler fromConfig(Config config) { return new Sampler(config); }

  /** A sampler that always takes the most likely token. */
  public static Sampler greedy() { return new Sampler(SamplerOptions.defaults().temperature(0f)); }

  SWIGTYPE_p_ikv_sampler handle() {
    SWIGTYPE_p_ikv_sampler h = state.handle;
    if (h == null) throw Handles.closed("sampler");
    return h;
  }

  @Override
  public void close() { cleanable.clean(); }
}
