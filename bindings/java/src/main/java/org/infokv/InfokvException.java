package org.infokv;

/** A failed infokv call: the C status code, its kind and the library's message. */
public class InfokvException extends RuntimeException {
  private static final long serialVersionUID = 1L;
  private final int status;
  private final String detail;

  public InfokvException(int status, String message) {
    super(InfokvNative.ikv_status_string(status) + (message == null || message.isEmpty() ? "" : ": " + message));
    this.status = status;
    this.detail = message == null ? "" : message;
  }

  /** The C status code (negative). */
  public int status() { return status; }

  /** The status as an enum constant (Status.UNKNOWN for a code this version does not know). */
  public Status kind() { return Status.of(status); }

  /** The library's message for the failed call (without the status text). */
  public String detail() { return detail; }

  static void check(int status) {
    if (status < 0) throw new InfokvException(status, InfokvNative.ikv_last_error_message());
  }
}
