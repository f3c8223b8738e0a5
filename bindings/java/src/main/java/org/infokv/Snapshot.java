package org.infokv;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * Snapshots: {@link Session#save}, {@link Session#saveBytes} and {@link Session#restore} make and read them; this
 * class checks one without a model. A corrupt snapshot throws an InfokvException of kind {@link Status#BAD_SNAPSHOT},
 * one that needs a newer reader {@link Status#VERSION}, one of another model {@link Status#WRONG_MODEL} (on restore).
 */
public final class Snapshot {
  /** Sequence id that saves every sequence of a session. */
  public static final int ALL_SEQUENCES = -1;

  private Snapshot() {}

  /** Describes a snapshot file as JSON (header, policy, sizes, per-layer kept counts). */
  public static String inspect(String path) {
    try {
      return new String(Config.sized((b, n) -> InfokvNative.ikv_snapshot_inspect(b, n, path)), StandardCharsets.UTF_8);
    } catch (InfokvException e) {
      throw MissingFileException.about(e, path);
    }
  }

  public static String inspect(Path path) { return inspect(path.toString()); }

  /** Describes a snapshot held in memory (written to a temporary file for the check). */
  public static String inspect(byte[] snapshot) {
    Path tmp = null;
    try {
      tmp = Files.createTempFile("infokv-", ".ikvs");
      Files.write(tmp, snapshot);
      return inspect(tmp);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    } finally {
      if (tmp != null) {
        try {
          Files.deleteIfExists(tmp);
        } catch (IOException ignored) {
          // best effort
        }
      }
    }
  }
}
