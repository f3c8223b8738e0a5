package org.infokv;

/**
 * What chat calls protect from eviction (the C IKV_CHAT_PROTECT_* values): SYSTEM, the default, keeps the system
 * prompt and the template's control tokens in every layer; FAIR keeps the control tokens and makes each message a
 * fair span (each keeps the same fraction); NONE protects nothing.
 */
public enum ChatProtect {
  SYSTEM(InfokvNativeConstants.IKV_CHAT_PROTECT_SYSTEM),
  NONE(InfokvNativeConstants.IKV_CHAT_PROTECT_NONE),
  FAIR(InfokvNativeConstants.IKV_CHAT_PROTECT_FAIR);

  private final int code;

  ChatProtect(int code) { this.code = code; }

  public int code() { return code; }

  @Override
  public String toString() { return name().toLowerCase(java.util.Locale.ROOT); }
}
