package org.infokv;

/** The C ABI's status codes (stable values). */
public enum Status {
  OK(0), INVALID_ARGUMENT(-1), IO(-2), BAD_MODEL(-3), UNSUPPORTED(-4), OUT_OF_MEMORY(-5), KV_FULL(-6),
  OUT_OF_RANGE(-7), CANCELLED(-8), BAD_SNAPSHOT(-9), WRONG_MODEL(-10), VERSION(-11), BAD_CONFIG(-12),
  NO_DEVICE(-13), BUFFER_TOO_SMALL(-14), NOT_FOUND(-15), BAD_STATE(-16), BAD_HANDLE(-17), BUSY(-18),
  INTERNAL(-100),
  UNKNOWN(Integer.MIN_VALUE);

  private final int code;

  Status(int code) { this.code = code; }

  public int code() { return code; }

  public static Status of(int code) {
    for (Status s : values()) if (s.code == code) return s;
    return UNKNOWN;
  }
}
