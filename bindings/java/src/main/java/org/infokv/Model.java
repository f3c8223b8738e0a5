package org.infokv;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;

/**
 * A loaded GGUF model: memory-mapped, immutable, shareable by threads and sessions. Close it after its sessions
 * (try-with-resources); a Cleaner frees it if it becomes unreachable unclosed.
 */
public final class Model implements AutoCloseable {
  private static final class State implements Runnable {
    volatile SWIGTYPE_p_ikv_model handle;
    // the open sessions' native states (not the Session objects, so that those can still be collected)
    final java.util.Set<Runnable> sessions = java.util.Collections.newSetFromMap(new java.util.IdentityHashMap<>());

    State(SWIGTYPE_p_ikv_model h) { handle = h; }

    @Override
    public synchronized void run() {
      Runnable[] open;
      synchronized (sessions) {
        open = sessions.toArray(new Runnable[0]);
      }
      for (Runnable r : open) r.run(); // the C contract: sessions are freed before their model
      SWIGTYPE_p_ikv_model h = handle;
      handle = null;
      if (h != null) InfokvNative.ikv_model_free(h);
    }
  }

  private final State state;
  private final java.lang.ref.Cleaner.Cleanable cleanable;
  private final String path;

  private Model(String path, SWIGTYPE_p_ikv_model h) {
    this.path = path;
    this.state = new State(h);
    this.cleanable = Handles.CLEANER.register(this, state);
  }

  /** Loads a model; InfokvException (Status.IO, BAD_MODEL, UNSUPPORTED, ...) on failure. */
  public static Model load(String path) {
    long[] out = new long[1];
    MissingFileException.check(InfokvNative.ikv_model_load(out, path), path);
    return new Model(path, new SWIGTYPE_p_ikv_model(out[0], false));
  }

  /** Loads a GGUF model (or a safetensors checkpoint directory); see {@link #load(String)}. */
  public static Model load(java.nio.file.Path path) { return load(path.toString()); }

  /** Loads the model named by the config's model_path (Status.BAD_CONFIG when it is empty; a MissingFileException
   * when it names no file). */
  public static Model load(Config config) {
    long[] out = new long[1];
    // Read before the load: the size query would overwrite the load's error message.
    String path = config.modelPath();
    MissingFileException.check(config.use(h -> InfokvNative.ikv_model_load_with_config(out, h)), path.isEmpty() ? null : path);
    return new Model(path, new SWIGTYPE_p_ikv_model(out[0], false));
  }

  /**
   * Loads the config's model_path only when it resolves inside {@code allowedDir} (symlinks and ".." that escape
   * are refused); Status.IO with one fixed message otherwise. See ikv_model_load_with_config_confined.
   */
  public static Model load(Config config, String allowedDir) {
    long[] out = new long[1];
    InfokvException.check(config.use(h -> InfokvNative.ikv_model_load_with_config_confined(out, h, allowedDir)));
    return new Model(config.modelPath(), new SWIGTYPE_p_ikv_model(out[0], false));
  }

  /** Same as {@link #load(Config)}. */
  public static Model fromConfig(Config config) { return load(config); }

  java.util.Set<Runnable> sessionStates() { return state.sessions; }

  SWIGTYPE_p_ikv_model handle() {
    SWIGTYPE_p_ikv_model h = state.handle;
    if (h == null) throw Handles.closed("model");
    return h;
  }

  /** Frees the model, closing its open sessions first. Idempotent. */
  @Override
  public void close() { cleanable.clean(); }

  public String path() { return path; }

  /** An integer property by its IKV_MODEL_* code. */
  public long getInt(int property) {
    long[] out = new long[1];
    InfokvException.check(InfokvNative.ikv_model_get_int(out, handle(), property));
    return out[0];
  }

  public int nVocab() { return (int) getInt(InfokvNativeConstants.IKV_MODEL_N_VOCAB); }
  public int nLayer() { return (int) getInt(InfokvNativeConstants.IKV_MODEL_N_LAYER); }
  public int nEmbd() { return (int) getInt(InfokvNativeConstants.IKV_MODEL_N_EMBD); }
  public int nHead() { return (int) getInt(InfokvNativeConstants.IKV_MODEL_N_HEAD); }
  public int nHeadKv() { return (int) getInt(InfokvNativeConstants.IKV_MODEL_N_HEAD_KV); }
  public int nCtxTrain() { return (int) getInt(InfokvNativeConstants.IKV_MODEL_N_CTX_TRAIN); }
  public int bos() { return (int) getInt(InfokvNativeConstants.IKV_MODEL_BOS); }
  public int eos() { return (int) getInt(InfokvNativeConstants.IKV_MODEL_EOS); }
  public long nParams() { return getInt(InfokvNativeConstants.IKV_MODEL_N_PARAMS); }
  public long weightBytes() { return getInt(InfokvNativeConstants.IKV_MODEL_WEIGHT_BYTES); }

  /** The model's description (architecture, sizes, tokenizer, tensor types) as a JSON object. */
  public String describe() {
    long[] len = new long[1];
    int st = InfokvNative.ikv_model_describe(null, len, handle());
    if (st != Status.BUFFER_TOO_SMALL.code()) InfokvException.check(st);
    byte[] buf = new byte[(int) len[0] + 1];
    InfokvException.check(InfokvNative.ikv_model_describe(buf, len, handle()));
    return new String(buf, 0, (int) len[0], StandardCharsets.UTF_8);
  }

  /**
   * Text to token ids; addBos prepends the model's BOS token. Text is text: "&lt;|im_start|&gt;" in it is tokenised
   * as those characters, never as the control token, so user input cannot forge a chat turn (see
   * {@link #tokenize(String, boolean, boolean)} to parse such texts).
   */
  public int[] tokenize(String text, boolean addBos) {
    return tokenize(text, addBos, false);
  }

  /**
   * Text to token ids; with parseSpecial the texts of control tokens ("&lt;|im_start|&gt;") become those tokens: only
   * for text the program trusts (chats should use {@link #chatTokenize} or Session.chat).
   */
  public int[] tokenize(String text, boolean addBos, boolean parseSpecial) {
    byte[] utf8 = text.getBytes(StandardCharsets.UTF_8);
    int[] out = new int[utf8.length + 2];
    long[] count = new long[1];
    long flags = (addBos ? InfokvNativeConstants.IKV_TOKENIZE_ADD_BOS : 0)
        | (parseSpecial ? InfokvNativeConstants.IKV_TOKENIZE_PARSE_SPECIAL : 0);
    int st = InfokvNative.ikv_tokenize_ex(out, count, handle(), utf8, flags);
    if (st == Status.BUFFER_TOO_SMALL.code()) {
      out = new int[(int) count[0]];
      st = InfokvNative.ikv_tokenize_ex(out, count, handle(), utf8, flags);
    }
    InfokvException.check(st);
    return Arrays.copyOf(out, (int) count[0]);
  }

  /** The model's chat format: "chatml", "llama3", or "none" (chat calls then throw UNSUPPORTED). */
  public String chatFormat() {
    int[] out = new int[1];
    InfokvException.check(InfokvNative.ikv_chat_format(out, handle()));
    return out[0] == InfokvNativeConstants.IKV_CHAT_FORMAT_CHATML ? "chatml"
        : out[0] == InfokvNativeConstants.IKV_CHAT_FORMAT_LLAMA3 ? "llama3" : "none";
  }

  /**
   * The token ids of a conversation as the model's template writes it (what {@link Session#chat} decodes): the first
   * message opens it (BOS, the template's default system turn); addGenerationPrompt ends with the assistant header.
   */
  public int[] chatTokenize(java.util.List<ChatMessage> messages, boolean addGenerationPrompt) {
    java.util.List<Integer> ids = new java.util.ArrayList<>();
    if (messages.isEmpty()) {
      for (int id : chatIds("", "", true, addGenerationPrompt)) ids.add(id);
    }
    for (int i = 0; i < messages.size(); ++i) {
      ChatMessage m = messages.get(i);
      for (int id : chatIds(m.role(), m.content(), i == 0, addGenerationPrompt && i == messages.size() - 1)) ids.add(id);
    }
    return ids.stream().mapToInt(Integer::intValue).toArray();
  }

  private int[] chatIds(String role, String content, boolean first, boolean gen) {
    byte[] utf8 = content.getBytes(StandardCharsets.UTF_8);
    int[] out = new int[utf8.length + 64];
    long[] count = new long[1];
    int st = InfokvNative.ikv_chat_tokenize(out, count, handle(), role, utf8, first ? 1 : 0, gen ? 1 : 0);
    if (st == Status.BUFFER_TOO_SMALL.code()) {
      out = new int[(int) count[0]];
      st = InfokvNative.ikv_chat_tokenize(out, count, handle(), role, utf8, first ? 1 : 0, gen ? 1 : 0);
    }
    InfokvException.check(st);
    return Arrays.copyOf(out, (int) count[0]);
  }

  /** Token ids to text. */
  public String detokenize(int[] tokens) {
    byte[] buf = new byte[8 * tokens.length + 16];
    long[] len = new long[1];
    int st = InfokvNative.ikv_detokenize(buf, len, handle(), tokens);
    if (st == Status.BUFFER_TOO_SMALL.code()) {
      buf = new byte[(int) len[0] + 1];
      st = InfokvNative.ikv_detokenize(buf, len, handle(), tokens);
    }
    InfokvException.check(st);
    return new String(buf, 0, (int) len[0], StandardCharsets.UTF_8);
  }

  /** A new session with default options. */
  public Session newSession() { return new Session(this, (SessionOptions) null); }

  /** A new session with the given options. */
  public Session newSession(SessionOptions options) { return new Session(this, options); }

  /** A new session from the config's threads, KV layout, pool, compression and protection settings. */
  public Session newSession(Config config) { return new Session(this, config); }

  /** The library's version string. */
  public static String version() { return InfokvNative.ikv_version_string(); }
}
