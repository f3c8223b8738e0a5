package org.infokv;

/**
 * Which question a compression serves (the C IKV_QUESTION_* values): NEXT, the tokens that follow at once (the latest
 * tokens' queries rank what is kept); LATER, a question not yet asked (a chat's history, a document, a cache about
 * to be saved: a probe question's queries stand in for it; the default); BOTH, the two together.
 */
public enum Question {
  BOTH(InfokvNativeConstants.IKV_QUESTION_BOTH),
  NEXT(InfokvNativeConstants.IKV_QUESTION_NEXT),
  LATER(InfokvNativeConstants.IKV_QUESTION_LATER);

  private final int code;

  Question(int code) { this.code = code; }

  public int code() { return code; }

  /** The question with this C value; INVALID_ARGUMENT for another. */
  public static Question of(int code) {
    for (Question q : values()) if (q.code == code) return q;
    throw new InfokvException(Status.INVALID_ARGUMENT.code(), "no question has the value " + code);
  }

  @Override
  public String toString() { return name().toLowerCase(java.util.Locale.ROOT); }
}
