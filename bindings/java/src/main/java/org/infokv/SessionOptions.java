package org.infokv;

import java.util.LinkedHashMap;
import java.util.Map;

/**
 * Session settings: the fields of the C ikv_session_options, set by name. The named setters cover the common
 * ones; {@link #set(String, Number)} and {@link #set(String, String)} reach any field, including ones added to the
 * C ABI later.
 */
public final class SessionOptions {
  public static final int POLICY_NONE = InfokvNativeConstants.IKV_POLICY_NONE;
  public static final int POLICY_INFOKV = InfokvNativeConstants.IKV_POLICY_INFOKV;
  public static final int POLICY_SNAPKV = InfokvNativeConstants.IKV_POLICY_SNAPKV;
  public static final int POLICY_H2O = InfokvNativeConstants.IKV_POLICY_H2O;
  public static final int POLICY_STREAMING = InfokvNativeConstants.IKV_POLICY_STREAMING;
  public static final int POLICY_TOVA = InfokvNativeConstants.IKV_POLICY_TOVA;
  public static final int POLICY_PYRAMIDKV = InfokvNativeConstants.IKV_POLICY_PYRAMIDKV;
  /** Chooses per layer what ranks the tokens and how the budget is spread ({@link Session#autoReport}). */
  public static final int POLICY_AUTO = InfokvNativeConstants.IKV_POLICY_AUTO;
  public static final int KV_F32 = InfokvNativeConstants.IKV_KV_F32;
  public static final int KV_F16 = InfokvNativeConstants.IKV_KV_F16;
  public static final int KV_BF16 = InfokvNativeConstants.IKV_KV_BF16;
  public static final int KV_Q8_0 = InfokvNativeConstants.IKV_KV_Q8_0;
  public static final int KV_Q4_0 = InfokvNativeConstants.IKV_KV_Q4_0;

  private final Map<String, Object> fields = new LinkedHashMap<>();

  public static SessionOptions defaults() { return new SessionOptions(); }

  /** Sets a field by its C name ("interval", "alpha", "window", "kv_pool_bytes", ...). */
  public SessionOptions set(String field, Number value) { fields.put(field, value); return this; }

  /** Sets a text field by its C name ("device"); null gives the field's default. */
  public SessionOptions set(String field, String value) { fields.put(field, value); return this; }

  /**
   * Where the session runs: "auto" (the default; also null: the runtime's choice, the CPU for now), "cpu", "cuda" or "cuda:N". Creating
   * the session throws an InfokvException of kind {@link Status#NO_DEVICE} when there is no such CUDA device (the
   * message says why) and {@link Status#INVALID_ARGUMENT} for any other name.
   */
  public SessionOptions device(String device) { return set("device", device); }

  public SessionOptions threads(int n) { return set("n_threads", n); }
  public SessionOptions kvDtype(int dtype) { return set("kv_dtype", dtype); }
  /** The KV cache element type (F16 by default). */
  public SessionOptions kvDtype(KvDtype dtype) { return set("kv_dtype", dtype.code()); }
  public SessionOptions blockSize(int tokens) { return set("block_size", tokens); }
  public SessionOptions kvPoolBlocks(long blocks) { return set("kv_pool_blocks", blocks); }
  public SessionOptions kvPoolBytes(long bytes) { return set("kv_pool_bytes", bytes); }
  /** Most sequences the session holds, [1, 2^20] (0: 4096); adding or forking beyond it throws OUT_OF_RANGE. */
  public SessionOptions maxSequences(int n) { return set("max_sequences", n); }
  /** The compression policy (POLICY_INFOKV, ...); it needs a budget. */
  public SessionOptions policy(int policy) { return set("policy", policy); }
  /** The compression policy; it needs a budget (or, for AUTO, a {@link #maxLoss}). */
  public SessionOptions policy(Policy policy) { return set("policy", policy.code()); }
  /** Keeps this fraction of a sequence's tokens per layer when compressing, (0, 1]. */
  public SessionOptions budgetFraction(double f) { set("budget_tokens", 0); return set("budget_fraction", f); }
  /** Keeps this many tokens per layer when compressing. */
  public SessionOptions budgetTokens(int n) { set("budget_fraction", 0.0); return set("budget_tokens", n); }
  /**
   * POLICY_AUTO only: a quality target instead of a budget (each compression keeps, per layer, as few tokens as hold
   * the proxy loss at or under it); 0: compress to the budget. Creating the session throws INVALID_ARGUMENT for a
   * negative or non-finite value, or a positive one with another policy.
   */
  public SessionOptions maxLoss(double maxLoss) { return set("max_loss", maxLoss); }
  /**
   * POLICY_AUTO under a byte budget: true (the default) lets it hold a layer at q8_0 where the bytes keep more than
   * rounding loses (CPU, heads a multiple of 32; {@link Session#layerDtype} says which); false keeps every layer in
   * the session's KV dtype.
   */
  public SessionOptions layerPrecision(boolean auto) {
    return set("layer_precision", auto ? InfokvNativeConstants.IKV_LAYER_PRECISION_AUTO : InfokvNativeConstants.IKV_LAYER_PRECISION_OFF);
  }

  @Override
  public String toString() { return "SessionOptions" + fields; }

  ikv_session_options toNative() {
    ikv_session_options o = new ikv_session_options();
    InfokvException.check(InfokvNative.ikv_session_options_init(o));
    try {
      for (Map.Entry<String, Object> e : fields.entrySet()) Handles.setField(o, e.getKey(), e.getValue());
    } catch (RuntimeException e) {
      o.delete(); // frees a device string already copied into it
      throw e;
    }
    return o;
  }
}
