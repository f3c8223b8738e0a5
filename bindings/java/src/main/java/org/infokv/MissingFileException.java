package org.infokv;

/**
 * An {@link Status#IO} failure because the named file does not exist. Its cause is a
 * {@link java.nio.file.NoSuchFileException} naming the file, as java.nio.file would throw. (Named so that
 * {@code import org.infokv.*; import java.nio.file.*;} leaves {@code NoSuchFileException} unambiguous.)
 */
public final class MissingFileException extends InfokvException {
  private static final long serialVersionUID = 1L;
  private final String file;

  MissingFileException(int status, String message, String file) {
    super(status, message);
    this.file = file;
    initCause(new java.nio.file.NoSuchFileException(file));
  }

  /** The path that does not exist. */
  public String file() { return file; }

  /** Throws for a failed status; an I/O failure about a path that does not exist as a MissingFileException. */
  static void check(int status, String path) {
    if (status >= 0) return;
    throw about(new InfokvException(status, InfokvNative.ikv_last_error_message()), path);
  }

  /** `e` as a MissingFileException when it is an I/O failure about a path that does not exist; else `e`. */
  static InfokvException about(InfokvException e, String path) {
    if (e.status() == Status.IO.code() && path != null
        && !java.nio.file.Files.exists(java.nio.file.Paths.get(path), java.nio.file.LinkOption.NOFOLLOW_LINKS))
      return new MissingFileException(e.status(), e.detail(), path);
    return e;
  }
}
