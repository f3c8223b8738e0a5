package org.infokv;

/** What {@link Session#generate} made. */
public final class GenerationResult {
  private final int[] tokens;
  private final String text;
  private final boolean cancelled;

  GenerationResult(int[] tokens, String text, boolean cancelled) {
    this.tokens = tokens;
    this.text = text;
    this.cancelled = cancelled;
  }

  /** The generated token ids. */
  public int[] tokens() { return tokens.clone(); }

  /** Their text. */
  public String text() { return text; }

  /** True when the listener stopped generation early. */
  public boolean cancelled() { return cancelled; }

  @Override
  public String toString() {
    return "GenerationResult{tokens=" + java.util.Arrays.toString(tokens) + ", text=\"" + text + "\", cancelled="
        + cancelled + "}";
  }
}
