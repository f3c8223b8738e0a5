package org.infokv;

/**
 * KV cache element types (the C IKV_KV_F32 ... values); {@link #toString} gives "f32", "f16", "bf16", "q8_0" or
 * "q4_0". Q8_0 and Q4_0 store blocks of 32 values with an f16 scale, on the CPU, for models whose head size is a
 * multiple of 32.
 */
public enum KvDtype {
  F32(InfokvNativeConstants.IKV_KV_F32),
  F16(InfokvNativeConstants.IKV_KV_F16),
  BF16(InfokvNativeConstants.IKV_KV_BF16),
  Q8_0(InfokvNativeConstants.IKV_KV_Q8_0),
  Q4_0(InfokvNativeConstants.IKV_KV_Q4_0);

  private final int code;

  KvDtype(int code) { this.code = code; }

  /** The C value. */
  public int code() { return code; }

  /** Reads a name ("f16", "BF16"); INVALID_ARGUMENT naming the known ones otherwise. */
  public static KvDtype parse(String name) { return Names.parse(KvDtype.class, values(), name, "KV dtype"); }

  @Override
  public String toString() { return name().toLowerCase(java.util.Locale.ROOT); }
}
