package example;

import org.infokv.GenerationResult;
import org.infokv.Model;
import org.infokv.Policy;
import org.infokv.Session;
import org.infokv.SessionOptions;

/** Generates greedily with an auto-compressed cache from the installed infokv jar. */
public final class Generate {
  public static void main(String[] args) {
    if (args.length < 1) {
      System.err.println("usage: Generate MODEL.gguf");
      System.exit(2);
    }
    try (Model model = Model.load(java.nio.file.Path.of(args[0]));
         Session s = model.newSession(SessionOptions.defaults().policy(Policy.AUTO).budgetFraction(0.5))) {
      GenerationResult r = s.generate("Once upon a time", 40, null, null);
      System.out.println("Once upon a time" + r.text());
      System.out.println("KV bytes " + s.kvBytes(0) + ", policy " + Policy.AUTO);
    }
  }
}
