package org.infokv;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;

/**
 * Settings for models, sessions and samplers (the FlatBuffers schema schemas/config.fbs), made from JSON or the
 * binary form and read back in either. Immutable and shareable by threads; objects made from it do not need it any
 * more. A malformed config, an unknown field or an out-of-range value throws an InfokvException of kind
 * {@link Status#BAD_CONFIG} whose message names the field.
 *
 * <pre>{@code
 * try (Config cfg = Config.fromJson("{\"model_path\": \"m.gguf\", \"compression\": {\"policy\": \"infokv\", \"budget_fraction\": 0.5}}");
 *      Model model = Model.load(cfg); Session s = model.newSession(cfg); Sampler smp = new Sampler(cfg)) { ... }
 * }</pre>
 */
public final class Config implements AutoCloseable {
  private final Handles.Owned<SWIGTYPE_p_ikv_config> state;
  private final java.lang.ref.Cleaner.Cleanable cleanable;

  private Config(long address) {
    state = new Handles.Owned<>(new SWIGTYPE_p_ikv_config(address, false), InfokvNative::ikv_config_free, "config");
    cleanable = Handles.CLEANER.register(this, state);
  }

  /** A config holding every default. */
  public Config() {
    this(create());
  }

  private static long create() {
    long[] out = new long[1];
    InfokvException.check(InfokvNative.ikv_config_create(out));
    return out[0];
  }

  /** Parses JSON text (absent fields keep their defaults). */
  public static Config fromJson(String json) {
    long[] out = new long[1];
    InfokvException.check(InfokvNative.ikv_config_from_json(out, json.getBytes(StandardCharsets.UTF_8)));
    return new Config(out[0]);
  }

  /** Reads the binary form (a verified FlatBuffer, identifier "IKVC"). */
  public static Config fromBinary(byte[] data) {
    long[] out = new long[1];
    InfokvException.check(InfokvNative.ikv_config_from_binary(out, data));
    return new Config(out[0]);
  }

  /** Runs f with the live handle; close() waits until it returns. */
  <T> T use(java.util.function.Function<SWIGTYPE_p_ikv_config, T> f) {
    synchronized (state) {
      return f.apply(handle());
    }
  }

  SWIGTYPE_p_ikv_config handle() { return state.get(); }

  interface SizedCall {
    int call(byte[] out, long[] len);
  }

  /** Runs a C call with the size-query protocol and returns the bytes it wrote. */
  static byte[] sized(SizedCall f) {
    long[] len = new long[1];
    int st = f.call(null, len);
    if (st != Status.BUFFER_TOO_SMALL.code()) {
      InfokvException.check(st);
      if (len[0] == 0) return new byte[0];
    }
    byte[] buf = new byte[(int) len[0] + 1];
    InfokvException.check(f.call(buf, len));
    return Arrays.copyOf(buf, (int) len[0]);
  }

  /** Every field as indented JSON. */
  public String toJson() {
    synchronized (state) {
      SWIGTYPE_p_ikv_config h = handle();
      return new String(sized((b, n) -> InfokvNative.ikv_config_to_json(b, n, h)), StandardCharsets.UTF_8);
    }
  }

  /** The binary form. */
  public byte[] toBinary() {
    synchronized (state) {
      SWIGTYPE_p_ikv_config h = handle();
      return sized((b, n) -> InfokvNative.ikv_config_to_binary(b, n, h));
    }
  }

  /** The config's model path ("" when unset). */
  public String modelPath() {
    synchronized (state) {
      SWIGTYPE_p_ikv_config h = handle();
      return new String(sized((b, n) -> InfokvNative.ikv_config_get_model_path(b, n, h)), StandardCharsets.UTF_8);
    }
  }

  /** Frees the config. Idempotent. */
  @Override
  public void close() { cleanable.clean(); }

  @Override
  public String toString() { return state.handle == null ? "Config(closed)" : toJson(); }
}
