package org.infokv;

/**
 * An {@link Status#IO} failure because the named file does not exist. Its cause is a
 * {@link java.nio.file.NoSuchFileException} naming the file, as java.nio.file would throw.
 */
public final class NoSuchFileException extends InfokvException {
  private static final long serialVersionUID = 1L;
  private final String file;

  NoSuchFileException(int status, String message, String file) {
    super(status, message);
    this.file = file;
    initCause(new java.nio.file.NoSuchFileException(file));
  }

  /** The path that does not exist. */
  public String file() { return file; }

  /** Throws for a failed status; an I/O failure about a path that does not exist as a NoSuchFileException. */
  static void check(int status, String path) {
    if (status >= 0) return;
    String message = InfokvNative.ikv_last_error_message();
    if (status == Status.IO.code() && path != null && !java.nio.file.Files.exists(java.nio.file.Paths.get(path),
                                                                                    java.nio.file.LinkOption.NOFOLLOW_LINKS))
      throw new NoSuchFileException(status, message, path);
    throw new InfokvException(status, message);
  }
}
