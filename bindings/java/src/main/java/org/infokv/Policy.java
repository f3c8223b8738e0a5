package org.infokv;

/** Compression policies (the C IKV_POLICY_* values); {@link #toString} gives the name the CLI and configs use. */
public enum Policy {
  NONE(InfokvNativeConstants.IKV_POLICY_NONE),
  INFOKV(InfokvNativeConstants.IKV_POLICY_INFOKV),
  SNAPKV(InfokvNativeConstants.IKV_POLICY_SNAPKV),
  H2O(InfokvNativeConstants.IKV_POLICY_H2O),
  STREAMING(InfokvNativeConstants.IKV_POLICY_STREAMING),
  TOVA(InfokvNativeConstants.IKV_POLICY_TOVA),
  PYRAMIDKV(InfokvNativeConstants.IKV_POLICY_PYRAMIDKV),
  /** Chooses per layer what ranks the tokens and how the budget is spread ({@link Session#autoReport}). */
  AUTO(InfokvNativeConstants.IKV_POLICY_AUTO),
  /** KVzip's context replay: one more pass over the sequence's tokens at each compression. */
  KVZIP(InfokvNativeConstants.IKV_POLICY_KVZIP);

  private final int code;

  Policy(int code) { this.code = code; }

  /** The C value. */
  public int code() { return code; }

  /** The policy with this C value; INVALID_ARGUMENT for another. */
  public static Policy of(int code) {
    for (Policy p : values()) if (p.code == code) return p;
    throw new InfokvException(Status.INVALID_ARGUMENT.code(), "no policy has the value " + code);
  }

  /** Reads a name ("snapkv", "SnapKV"); INVALID_ARGUMENT naming the known ones otherwise. */
  public static Policy parse(String name) { return Names.parse(Policy.class, values(), name, "policy"); }

  @Override
  public String toString() { return name().toLowerCase(java.util.Locale.ROOT); }
}
