package org.infokv;

import java.util.Objects;

/** One chat message: a role ("system", "user", "assistant", ...) and its text. */
public final class ChatMessage {
  private final String role;
  private final String content;

  public ChatMessage(String role, String content) {
    this.role = Objects.requireNonNull(role, "role");
    this.content = Objects.requireNonNull(content, "content");
  }

  public static ChatMessage system(String content) { return new ChatMessage("system", content); }

  public static ChatMessage user(String content) { return new ChatMessage("user", content); }

  public static ChatMessage assistant(String content) { return new ChatMessage("assistant", content); }

  public String role() { return role; }

  public String content() { return content; }

  @Override
  public boolean equals(Object o) {
    return o instanceof ChatMessage && ((ChatMessage) o).role.equals(role) && ((ChatMessage) o).content.equals(content);
  }

  @Override
  public int hashCode() { return Objects.hash(role, content); }

  @Override
  public String toString() { return "ChatMessage{" + role + ": \"" + content + "\"}"; }
}
