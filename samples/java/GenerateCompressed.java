import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import org.infokv.Config;
import org.infokv.Model;
import org.infokv.Sampler;
import org.infokv.Session;
import org.infokv.Snapshot;

/**
 * Generate with an InfoKV-compressed KV cache (policy infokv, budget 0.5), save a snapshot, restore it into a new
 * session and continue generating; print the KV bytes and the snapshot's size.
 *
 *   java -cp infokv-0.1.0.jar GenerateCompressed.java [model.gguf]
 */
public class GenerateCompressed {
  public static void main(String[] args) throws Exception {
    String path = args.length > 0 ? args[0] : System.getenv("INFOKV_MODELS_DIR") + "/stories260K/stories260K.gguf";
    String prompt = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
        + "One day, she saw a big, red ball. She wanted to play with it.";
    // A config holds every setting (JSON here; config.toBinary() / Config.fromBinary() work as well).
    String json = "{\"model_path\": \"" + path.replace("\\", "\\\\").replace("\"", "\\\"") + "\", "
        + "\"compression\": {\"policy\": \"infokv\", \"budget_fraction\": 0.5}, \"sampler\": {\"temperature\": 0}}";
    Path snap = Files.createTempFile("infokv-sample-", ".ikvs");
    try (Config config = Config.fromJson(json); Model model = Model.load(config);
         Session session = model.newSession(config); Sampler greedy = Sampler.greedy()) {
      session.generate(prompt, 24, greedy, (token, text) -> {
        System.out.print(text);
        return true;
      });
      System.out.println();
      System.out.println("length: " + session.length(0) + "  kept in layer 0: " + session.kept(0, 0));
      System.out.println("kv_bytes before compression: " + session.kvBytes(0));
      session.compress(0, 0); // to the session's budget: half of the sequence
      System.out.println("kv_bytes after compression: " + session.kvBytes(0));

      // Snapshot: only the kept tokens are stored, so the compressed cache gives a small file.
      session.save(snap, 0, null);
      String info = Snapshot.inspect(snap);
      System.out.println("snapshot bytes: " + Files.size(snap) + "  (inspect: " + info.length() + " chars of JSON)");

      // Continue in this session and, from the snapshot, in a new one (the snapshot's policy, to continue exactly).
      int[] expected = session.generate(0, null, 24, greedy, null).tokens();
      try (Session restored = model.newSession(config)) {
        int seq = restored.restore(snap, null)[0];
        System.out.println("restored sequence " + seq + ", kv_bytes: " + restored.kvBytes(seq));
        System.out.print("continued: ");
        int[] got = restored.generate(seq, null, 24, greedy, (token, text) -> {
          System.out.print(text);
          return true;
        }).tokens();
        System.out.println();
        if (!Arrays.equals(got, expected)) {
          System.err.println("restored continuation differs: " + Arrays.toString(got) + " vs " + Arrays.toString(expected));
          System.exit(1);
        }
        System.out.println("continuation matches the uninterrupted session: " + got.length + " tokens");
      }
    } finally {
      Files.deleteIfExists(snap);
    }
  }
}
