package org.infokv;

import static org.junit.jupiter.api.Assertions.*;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

class SnapshotConfigTest {
  static final String PROMPT = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park.";
  static String modelPath;

  @TempDir Path tmp;

  @BeforeAll
  static void setUp() {
    String d = System.getenv("INFOKV_MODELS_DIR");
    if (d == null || d.isEmpty()) fail("INFOKV_MODELS_DIR is not set");
    Path gguf = Path.of(d, "stories260K", "stories260K.gguf");
    if (!Files.isRegularFile(gguf)) fail("test model missing: " + gguf);
    modelPath = gguf.toString();
  }

  static SessionOptions options(boolean compressed) {
    SessionOptions o = SessionOptions.defaults();
    return compressed ? o.policy(SessionOptions.POLICY_INFOKV).budgetFraction(0.5) : o;
  }

  static int[] greedy(Session s, int seq, int[] prompt, int n) {
    try (Sampler g = Sampler.greedy()) {
      return s.generate(seq, prompt, n, g, null).tokens();
    }
  }

  static String jsonString(String path) {
    return "\"" + path.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
  }

  @ParameterizedTest(name = "compressed={0} bytes={1}")
  @CsvSource({"true,false", "true,true", "false,false", "false,true"})
  void snapshotRestoredIntoAFreshSessionAndModelContinuesExactly(boolean compressed, boolean bytes) {
    final int nFirst = 12, nRest = 20;
    int[] whole, first;
    byte[] data = null;
    Path file = tmp.resolve("snap.ikvs");
    try (Model m = Model.load(modelPath)) {
      int[] prompt = m.tokenize(PROMPT, true);
      try (Session s = m.newSession(options(compressed))) {
        whole = greedy(s, 0, prompt, nFirst + nRest);
      }
      try (Session s = m.newSession(options(compressed))) {
        first = greedy(s, 0, prompt, nFirst);
        assertArrayEquals(Arrays.copyOf(whole, nFirst), first);
        if (bytes) data = s.saveBytes(0, null);
        else s.save(file, 0, null);
      }
    }
    String info = bytes ? Snapshot.inspect(data) : Snapshot.inspect(file);
    assertTrue(info.trim().startsWith("{"), info);
    try (Model m2 = Model.load(modelPath); Session s2 = m2.newSession(options(compressed))) {
      int[] ids = bytes ? s2.restore(data, null) : s2.restore(file, null);
      assertEquals(1, ids.length);
      int[] rest = greedy(s2, ids[0], null, nRest);
      int[] got = Arrays.copyOf(first, nFirst + rest.length);
      System.arraycopy(rest, 0, got, nFirst, rest.length);
      assertArrayEquals(whole, got);
    }
  }

  @Test
  void corruptSnapshotIsBadSnapshotAndTheSessionStaysUsable() throws Exception {
    try (Model m = Model.load(modelPath); Session s = m.newSession(); Session s2 = m.newSession()) {
      int[] prompt = m.tokenize("Once upon a time", true);
      greedy(s, 0, prompt, 8);
      byte[] data = s.saveBytes(0, null);
      data[data.length / 2] ^= (byte) 0xFF;
      InfokvException e = assertThrows(InfokvException.class, () -> s2.restore(data, null));
      assertEquals(Status.BAD_SNAPSHOT, e.kind());
      Path bad = tmp.resolve("bad.ikvs");
      Files.write(bad, data);
      assertEquals(Status.BAD_SNAPSHOT, assertThrows(InfokvException.class, () -> s2.restore(bad, null)).kind());
      assertEquals(Status.BAD_SNAPSHOT, assertThrows(InfokvException.class, () -> Snapshot.inspect(bad)).kind());
      assertEquals(Status.IO,
          assertThrows(InfokvException.class, () -> s2.restore(tmp.resolve("missing.ikvs"), null)).kind());
      assertEquals(0, s2.length(0));
      assertEquals(40, greedy(s2, 0, prompt, 40).length); // still usable
    }
  }

  @Test
  void configWithAnUnknownFieldIsBadConfigNamingIt() {
    InfokvException e = assertThrows(InfokvException.class,
        () -> Config.fromJson("{\"threads\": 2, \"no_such_field_xyz\": 1}"));
    assertEquals(Status.BAD_CONFIG, e.kind());
    assertTrue(e.getMessage().contains("no_such_field_xyz"), e.getMessage());
    assertEquals(Status.BAD_CONFIG,
        assertThrows(InfokvException.class, () -> Config.fromBinary("not a config".getBytes())).kind());
  }

  @Test
  void configRoundTripJsonBinaryJson() {
    String src = "{\"model_path\": " + jsonString(modelPath)
        + ", \"threads\": 2, \"compression\": {\"policy\": \"infokv\", \"budget_fraction\": 0.25}}";
    try (Config c = Config.fromJson(src)) {
      String j1 = c.toJson();
      byte[] b = c.toBinary();
      assertEquals(modelPath, c.modelPath());
      try (Config c2 = Config.fromBinary(b)) {
        assertEquals(j1, c2.toJson());
        assertArrayEquals(b, c2.toBinary());
        assertTrue(j1.contains("0.25"), j1);
      }
    }
    try (Config d = new Config()) {
      assertEquals("", d.modelPath());
    }
  }

  @Test
  void modelSessionAndSamplerFromAConfig() {
    String src = "{\"model_path\": " + jsonString(modelPath)
        + ", \"compression\": {\"policy\": \"infokv\", \"budget_fraction\": 0.5}, \"sampler\": {\"temperature\": 0}}";
    try (Config c = Config.fromJson(src); Model m = Model.load(c); Session s = m.newSession(c);
         Sampler smp = new Sampler(c)) {
      assertEquals(40, s.generate("Once upon a time", 40, smp, null).tokens().length);
    }
    try (Config empty = new Config()) {
      assertEquals(Status.BAD_CONFIG, assertThrows(InfokvException.class, () -> Model.load(empty)).kind());
    }
  }

  @Test
  void snapshotOfAnotherModelIsWrongModel() throws Exception {
    byte[] weights = Files.readAllBytes(Path.of(modelPath));
    int mid = weights.length / 2;
    for (int i = mid; i < mid + 4096; i++) weights[i] ^= 1; // slightly different weights: another fingerprint
    Path other = tmp.resolve("other.gguf");
    Files.write(other, weights);
    try (Model m = Model.load(modelPath); Session s = m.newSession(); Model o = Model.load(other.toString());
         Session s2 = o.newSession()) {
      greedy(s, 0, m.tokenize("Once upon a time", true), 5);
      byte[] data = s.saveBytes(0, null);
      assertEquals(Status.WRONG_MODEL, assertThrows(InfokvException.class, () -> s2.restore(data, null)).kind());
      assertEquals(0, s2.length(0));
    }
  }

  @Test
  void savedSamplerStateContinuesASampledRunExactly() {
    SamplerOptions opts = SamplerOptions.defaults().temperature(0.9f).topK(40).seed(1234);
    try (Model m = Model.load(modelPath)) {
      int[] prompt = m.tokenize("Once upon a time", true);
      int[] whole, first;
      byte[] data;
      try (Session s = m.newSession(); Sampler smp = new Sampler(opts)) {
        whole = s.generate(0, prompt, 30, smp, null).tokens();
      }
      try (Session s = m.newSession(); Sampler smp = new Sampler(opts)) {
        first = s.generate(0, prompt, 10, smp, null).tokens();
        data = s.saveBytes(0, smp);
      }
      try (Session s2 = m.newSession(); Sampler smp2 = new Sampler(SamplerOptions.defaults().temperature(0.1f).seed(7))) {
        int seq = s2.restore(data, smp2)[0]; // the sampler takes the saved state
        int[] rest = s2.generate(seq, null, 20, smp2, null).tokens();
        int[] got = Arrays.copyOf(first, first.length + rest.length);
        System.arraycopy(rest, 0, got, first.length, rest.length);
        assertArrayEquals(whole, got);
      }
    }
  }
}
