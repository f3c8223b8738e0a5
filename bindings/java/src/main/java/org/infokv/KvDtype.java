package org.infokv;

/** KV cache element types (the C IKV_KV_F32 ... values); {@link #toString} gives "f32", "f16" or "bf16". */
public enum KvDtype {
  F32(InfokvNativeConstants.IKV_KV_F32),
  F16(InfokvNativeConstants.IKV_KV_F16),
  BF16(InfokvNativeConstants.IKV_KV_BF16);

  private final int code;

  KvDtype(int code) { this.code = code; }

  /** The C value. */
  public int code() { return code; }

  /** Reads a name ("f16", "BF16"); INVALID_ARGUMENT naming the known ones otherwise. */
  public static KvDtype parse(String name) { return Names.parse(KvDtype.class, values(), name, "KV dtype"); }

  @Override
  public String toString() { return name().toLowerCase(java.util.Locale.ROOT); }
}
