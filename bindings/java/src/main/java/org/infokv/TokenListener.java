package org.infokv;

/** Receives generated tokens as they are made. */
@FunctionalInterface
public interface TokenListener {
  /**
   * @param token the token id (-1 for a final flush of held-back bytes)
   * @param text  the text this token completed (may be empty)
   * @return true to continue, false to stop generation (the result is then marked cancelled). An exception thrown
   *         here also stops generation and propagates out of {@code generate}.
   */
  boolean onToken(int token, String text);
}
