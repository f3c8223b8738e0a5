package org.infokv;

import java.io.IOException;
import java.io.InputStream;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * Loads libinfokv and the JNI wrapper. The jar carries them under {@code org/infokv/native/<os>-<arch>/} with a
 * {@code libraries.txt} listing the load order; they are extracted to a temporary directory and loaded from
 * there. Without them in the jar (e.g. a development classpath), {@code System.loadLibrary("infokv_jni")} is used,
 * which honours {@code java.library.path}. The system property {@code infokv.native.dir} points to a directory
 * holding the libraries instead.
 */
final class NativeLoader {
  private static boolean loaded;

  private NativeLoader() {}

  static synchronized void load() {
    if (loaded) return;
    String dir = System.getProperty("infokv.native.dir");
    try {
      if (dir != null) {
        loadList(Path.of(dir), readList(Files.newInputStream(Path.of(dir, "libraries.txt"))));
      } else {
        String res = "/org/infokv/native/" + platform() + "/";
        InputStream list = NativeLoader.class.getResourceAsStream(res + "libraries.txt");
        if (list == null) {
          System.loadLibrary("infokv_jni");
        } else {
          List<String> names = readList(list);
          Path tmp = Files.createTempDirectory("infokv-native");
          tmp.toFile().deleteOnExit();
          for (String n : names) {
            try (InputStream in = NativeLoader.class.getResourceAsStream(res + n)) {
              if (in == null) throw new UnsatisfiedLinkError("infokv: " + res + n + " is missing from the jar");
              Path f = tmp.resolve(n);
              Files.copy(in, f, StandardCopyOption.REPLACE_EXISTING);
              f.toFile().deleteOnExit();
            }
          }
          loadList(tmp, names);
        }
      }
    } catch (IOException e) {
      UnsatisfiedLinkError err = new UnsatisfiedLinkError("infokv: cannot extract the native libraries: " + e);
      err.initCause(e);
      throw err;
    }
    loaded = true;
  }

  private static void loadList(Path dir, List<String> names) {
    // libinfokv first: the JNI wrapper's dependency is then satisfied by the already-loaded library (by SONAME)
    for (String n : names) System.load(dir.resolve(n).toAbsolutePath().toString());
  }

  private static List<String> readList(InputStream in) throws IOException {
    List<String> names = new ArrayList<>();
    try (BufferedReader r = new BufferedReader(new InputStreamReader(in, StandardCharsets.UTF_8))) {
      for (String line; (line = r.readLine()) != null; ) {
        if (!line.isBlank()) names.add(line.trim());
      }
    }
    return names;
  }

  static String platform() {
    String os = System.getProperty("os.name").toLowerCase(Locale.ROOT);
    String arch = System.getProperty("os.arch").toLowerCase(Locale.ROOT);
    if (arch.equals("amd64") || arch.equals("x86-64")) arch = "x86_64";
    if (arch.equals("arm64")) arch = "aarch64";
    String o = os.contains("linux") ? "linux" : os.contains("mac") ? "darwin" : os.contains("win") ? "windows" : os;
    return o + "-" + arch;
  }
}
