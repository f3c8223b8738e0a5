import org.infokv.Model;
import org.infokv.Sampler;
import org.infokv.Session;
import org.infokv.SessionOptions;

/**
 * Generate with an InfoKV-compressed KV cache and print how many bytes the cache holds.
 *
 *   java -cp infokv-0.1.0.jar GenerateCompressed.java [model.gguf]
 *
 * TODO(snapshots): save the session to a snapshot, restore it into a fresh session and continue, once the C ABI
 * has ikv_session_save/restore.
 */
public class GenerateCompressed {
  public static void main(String[] args) {
    String path = args.length > 0 ? args[0] : System.getenv("INFOKV_MODELS_DIR") + "/stories260K/stories260K.gguf";
    String prompt = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
        + "One day, she saw a big, red ball. She wanted to play with it.";
    SessionOptions opts = SessionOptions.defaults().policy(SessionOptions.POLICY_INFOKV).budgetFraction(0.5);
    try (Model model = Model.load(path); Session session = model.newSession(opts); Sampler greedy = Sampler.greedy()) {
      session.generate(prompt, 48, greedy, (token, text) -> {
        System.out.print(text);
        return true;
      });
      System.out.println();
      System.out.println("length: " + session.length(0) + "  kept in layer 0: " + session.kept(0, 0));
      System.out.println("kv_bytes before compression: " + session.kvBytes(0));
      session.compress(0, 0); // to the session's budget: half of the sequence
      System.out.println("kv_bytes after compression: " + session.kvBytes(0));
    }
  }
}
