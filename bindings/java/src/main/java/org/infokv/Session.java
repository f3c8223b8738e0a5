package org.infokv;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;

/**
 * A KV cache over a model with sequences (sequence 0 exists from the start). Calls on one session are serialised
 * (a session may be handed between threads); sessions on one model run in parallel.
 */
public final class Session implements AutoCloseable {
  public static final int KV_BLOCKS_TOTAL = InfokvNativeConstants.IKV_KV_STAT_BLOCKS_TOTAL;
  public static final int KV_BLOCKS_USED = InfokvNativeConstants.IKV_KV_STAT_BLOCKS_USED;
  public static final int KV_BLOCKS_FREE = InfokvNativeConstants.IKV_KV_STAT_BLOCKS_FREE;
  public static final int KV_BLOCK_BYTES = InfokvNativeConstants.IKV_KV_STAT_BLOCK_BYTES;
  public static final int KV_BYTES_USED = InfokvNativeConstants.IKV_KV_STAT_BYTES_USED;
  public static final int KV_BLOCK_SIZE = InfokvNativeConstants.IKV_KV_STAT_BLOCK_SIZE;
  /** Host memory outside the pool: block bookkeeping and every sequence's tables, windows, tokens and logits. */
  public static final int KV_HOST_BYTES = InfokvNativeConstants.IKV_KV_STAT_HOST_BYTES;

  private final Model model;
  private final Handles.Owned<SWIGTYPE_p_ikv_session> state;
  private final java.lang.ref.Cleaner.Cleanable cleanable;

  Session(Model model, SessionOptions options) {
    this(model, create(model, options));
  }

  Session(Model model, Config config) {
    this(model, create(model, config));
  }

  private static long create(Model model, SessionOptions options) {
    long[] out = new long[1];
    ikv_session_options o = (options == null ? SessionOptions.defaults() : options).toNative();
    try {
      InfokvException.check(InfokvNative.ikv_session_create(out, model.handle(), o));
    } finally {
      o.delete();
    }
    return out[0];
  }

  private static long create(Model model, Config config) {
    long[] out = new long[1];
    InfokvException.check(config.use(h -> InfokvNative.ikv_session_create_with_config(out, model.handle(), h)));
    return out[0];
  }

  private Session(Model model, long address) {
    this.model = model;
    // registered with the model, which frees its open sessions before itself
    state = new Handles.Owned<>(new SWIGTYPE_p_ikv_session(address, false), InfokvNative::ikv_session_free, "session",
                                model.sessionStates());
    // the Cleaner's action holds no reference to the model; the session object does, so the model outlives it
    cleanable = Handles.CLEANER.register(this, state);
  }

  private SWIGTYPE_p_ikv_session h() { return state.get(); }

  @Override
  public void close() { cleanable.clean(); }

  public Model model() { return model; }

  // Every native call runs under the state's lock: the state's run (close, or the model closing) waits for a call in
  // progress, and a call after it finds the handle gone (h() throws).

  /** Runs a native call that returns only a status. */
  private void call(java.util.function.IntSupplier f) {
    synchronized (state) {
      InfokvException.check(f.getAsInt());
    }
  }

  /** Runs a native call with one int out-parameter and returns it. */
  private int intOut(java.util.function.ToIntFunction<int[]> f) {
    synchronized (state) {
      int[] out = new int[1];
      InfokvException.check(f.applyAsInt(out));
      return out[0];
    }
  }

  /** Runs a native call with one int64 out-parameter and returns it. */
  private long longOut(java.util.function.ToIntFunction<long[]> f) {
    synchronized (state) {
      long[] out = new long[1];
      InfokvException.check(f.applyAsInt(out));
      return out[0];
    }
  }

  /** A native call with two int64 out-parameters. */
  private interface LongPairCall { int apply(long[] a, long[] b); }

  /** Runs a native call with two int64 out-parameters and returns them as {a, b}. */
  private long[] longPair(LongPairCall f) {
    synchronized (state) {
      long[] a = new long[1];
      long[] b = new long[1];
      InfokvException.check(f.apply(a, b));
      return new long[] {a[0], b[0]};
    }
  }

  public int addSequence() { return intOut(out -> InfokvNative.ikv_seq_add(out, h())); }

  /** A new sequence sharing src's cache (copy-on-write) and logits. */
  public int fork(int src) { return intOut(out -> InfokvNative.ikv_seq_fork(out, h(), src)); }

  public void remove(int seq) { call(() -> InfokvNative.ikv_seq_remove(h(), seq)); }

  public void truncate(int seq, long length) { call(() -> InfokvNative.ikv_seq_truncate(h(), seq, length)); }

  public long length(int seq) { return longOut(out -> InfokvNative.ikv_seq_length(out, h(), seq)); }

  /** Tokens kept in one layer (below the length after compression). */
  public long kept(int seq, int layer) { return longOut(out -> InfokvNative.ikv_seq_kept(out, h(), seq, layer)); }

  /**
   * The dtype one layer holds its K/V in: the session's KV dtype unless POLICY_AUTO chose a lower precision for it
   * ({@link SessionOptions#layerPrecision}) or a snapshot restored it so. OUT_OF_RANGE for a layer outside the model.
   */
  public KvDtype layerDtype(int seq, int layer) {
    final int code = intOut(out -> InfokvNative.ikv_seq_layer_dtype(out, h(), seq, layer));
    for (KvDtype d : KvDtype.values())
      if (d.code() == code) return d;
    throw new IllegalStateException("unknown KV dtype " + code);
  }

  /** Bytes of KV blocks the sequence holds. */
  public long kvBytes(int seq) { return longOut(out -> InfokvNative.ikv_seq_kv_bytes(out, h(), seq)); }

  /** Bytes of KV blocks the sequence would hold uncompressed, counted as {@link #kvBytes} counts what it holds. */
  public long kvBytesUncompressed(int seq) {
    return longOut(out -> InfokvNative.ikv_seq_kv_bytes_uncompressed(out, h(), seq));
  }

  /**
   * What compression holds the sequence to now, per layer: {@code {budgetTokens, slackTokens}}; it is compressed back
   * to its budget whenever it holds more than budget + slack. Zeros without a policy.
   */
  public long[] budget(int seq) { return longPair((b, sl) -> InfokvNative.ikv_seq_budget(b, sl, h(), seq)); }

  /**
   * {@code {protectedTokens, releasedTokens}}: never-evicted tokens now, and protected tokens released so far so that
   * protection stays within the budget (oldest spans first, the first span last).
   */
  public long[] protection(int seq) {
    return longPair((p, r) -> InfokvNative.ikv_seq_protection(p, r, h(), seq));
  }

  /**
   * What compressing the sequence to its budget now would free and its estimated loss per freed block (the ranking
   * memory pressure compresses by); zeros at or under the budget or without a policy. Changes nothing.
   */
  public PressureEstimate pressureEstimate(int seq) {
    synchronized (state) {
      long[] blocks = new long[1];
      double[] cost = new double[1];
      InfokvException.check(InfokvNative.ikv_seq_pressure_estimate(blocks, cost, h(), seq));
      return new PressureEstimate(blocks[0], cost[0]);
    }
  }

  /**
   * What the auto policy chose at the sequence's latest compression, or empty before one (and under other
   * policies). A fork starts with its source's report; a snapshot keeps it.
   */
  public java.util.Optional<AutoReport> autoReport(int seq) {
    synchronized (state) {
      int[] layers = new int[1];
      long[] tokens = new long[1];
      long[] uniform = new long[1];
      double[] loss = new double[1];
      double[] maxLoss = new double[1];
      InfokvException.check(InfokvNative.ikv_seq_auto_report(layers, tokens, uniform, loss, maxLoss, h(), seq));
      if (layers[0] == 0) return java.util.Optional.empty();
      java.util.List<AutoReport.Layer> list = new java.util.ArrayList<>(layers[0]);
      int[] evidence = new int[1];
      int[] budget = new int[1];
      double[] alpha = new double[1];
      double[] layerLoss = new double[1];
      for (int l = 0; l < layers[0]; ++l) {
        InfokvException.check(InfokvNative.ikv_seq_auto_layer(evidence, budget, alpha, layerLoss, h(), seq, l));
        list.add(new AutoReport.Layer(evidence[0], budget[0], alpha[0], layerLoss[0]));
      }
      return java.util.Optional.of(new AutoReport(list, loss[0], tokens[0], uniform[0], maxLoss[0]));
    }
  }

  /**
   * Loads a tuning profile (from {@code infokv tune} or {@link #saveProfile}): the session's auto compressions under a
   * byte budget then start from its per-layer shares and refine it. Another model's profile or a damaged one throws
   * and leaves the session unchanged.
   */
  public void loadProfile(String path) {
    synchronized (state) {
      MissingFileException.check(InfokvNative.ikv_session_load_profile(h(), path), path);
    }
  }

  /** Writes the session's tuning profile atomically; BAD_STATE before it has one. */
  public void saveProfile(String path) { call(() -> InfokvNative.ikv_session_save_profile(h(), path)); }

  /** Compressions the session's tuning profile has seen, or -1 without a profile. */
  public long profileCompressions() {
    synchronized (state) {
      long[] compressions = new long[1];
      int[] layers = new int[1];
      int[] guides = new int[1];
      InfokvException.check(InfokvNative.ikv_session_profile_info(compressions, layers, guides, h()));
      return layers[0] == 0 ? -1 : compressions[0];
    }
  }

  /** The tuning profile's tag (empty when it has none); BAD_STATE without a profile. */
  public String profileTag() {
    synchronized (state) {
      SWIGTYPE_p_ikv_session hh = h();
      return new String(Config.sized((b, n) -> InfokvNative.ikv_session_profile_tag(b, n, hh)), java.nio.charset.StandardCharsets.UTF_8);
    }
  }

  /** One pool statistic (KV_BLOCKS_TOTAL, KV_BYTES_USED, ...). */
  public long kvStat(int stat) { return longOut(out -> InfokvNative.ikv_kv_stat(out, h(), stat)); }

  /** Appends tokens to a sequence and runs the model (all or nothing). */
  public void decode(int seq, int[] tokens) { call(() -> InfokvNative.ikv_decode(h(), seq, tokens)); }

  /** Item i appends tokens[i] to seqIds[i], in one batch. */
  public void decodeBatch(int[] seqIds, int[] tokens) {
    synchronized (state) {
      if (seqIds.length != tokens.length) throw new IllegalArgumentException("seqIds and tokens differ in length");
      int[] pairs = new int[2 * tokens.length];
      for (int i = 0; i < tokens.length; i++) {
        pairs[2 * i] = seqIds[i];
        pairs[2 * i + 1] = tokens[i];
      }
      InfokvException.check(InfokvNative.ikv_decode_batch(h(), pairs));
    }
  }

  /** The logits of the sequence's latest token (n_vocab floats). */
  public float[] logits(int seq) {
    synchronized (state) {
      float[] out = new float[model.nVocab()];
      long[] n = new long[1];
      InfokvException.check(InfokvNative.ikv_get_logits(out, n, h(), seq));
      return n[0] == out.length ? out : Arrays.copyOf(out, (int) n[0]);
    }
  }

  /** Marks positions [begin, end) as never evicted (fair: a fair-share span instead). */
  public void protect(int seq, long begin, long end, boolean fair) {
    call(() -> InfokvNative.ikv_seq_protect(h(), seq, begin, end, fair ? 1 : 0));
  }

  /** Compresses now to budgetTokens per layer (0: the session's budget). */
  public void compress(int seq, int budgetTokens) { call(() -> InfokvNative.ikv_seq_compress(h(), seq, budgetTokens)); }

  /**
   * {@link #compress(int, int)} for the given question (the two-argument form serves the session's default,
   * {@link Question#LATER} unless its config says otherwise). Under the auto policy with a byte budget, LATER also
   * replays the context as the kvzip policy does (one more pass over the sequence).
   */
  public void compress(int seq, int budgetTokens, Question question) {
    call(() -> InfokvNative.ikv_seq_compress_for(h(), seq, budgetTokens, question.code()));
  }

  /**
   * What the sequence's latest compression served ({@link Question#NEXT} before any, under a policy that reads no
   * queries, or when the probe did not fit the pool).
   */
  public Question compressionQuestion(int seq) {
    synchronized (state) {
      int[] q = new int[1];
      double[] secs = new double[1];
      InfokvException.check(InfokvNative.ikv_seq_compression_question(q, secs, h(), seq));
      return Question.of(q[0]);
    }
  }

  public int sample(Sampler sampler, int seq) { return intOut(out -> InfokvNative.ikv_sample(out, sampler.handle(), h(), seq)); }

  /**
   * Decodes the prompt into seq (may be null/empty when the sequence has logits), then generates up to maxTokens
   * tokens, stopping at EOS, streaming each to the listener (may be null), which can stop it by returning false.
   * An exception thrown by the listener propagates. Generated tokens stay in the sequence either way. A null
   * sampler samples greedily.
   */
  public GenerationResult generate(int seq, int[] prompt, int maxTokens, Sampler sampler,
                                                TokenListener listener) {
    if (sampler == null) {
      try (Sampler greedy = Sampler.greedy()) {
        return generate(seq, prompt, maxTokens, greedy, listener);
      }
    }
    synchronized (state) {
      return stream(maxTokens, listener,
          (out, count, sink) -> InfokvNative.ikv_generate(out, count, h(), seq, prompt, maxTokens, sampler.handle(), sink));
    }
  }

  /** A generating native call: fills out/count and streams through sink; returns its status. */
  private interface NativeRun {
    int run(int[] out, long[] count, NativeTokenSink sink);
  }

  /** Runs a generating call (ikv_generate, ikv_chat_reply) with the listener behind its sink; maps its result. */
  private static GenerationResult stream(int maxTokens, TokenListener listener, NativeRun call) {
    ByteArrayOutputStream text = new ByteArrayOutputStream();
    boolean[] stopped = {false};
    NativeTokenSink sink = (token, utf8) -> {
      text.write(utf8, 0, utf8.length);
      if (listener != null && !listener.onToken(token, new String(utf8, StandardCharsets.UTF_8))) {
        stopped[0] = true;
        return 1;
      }
      return 0;
    };
    int[] out = new int[Math.max(maxTokens, 0)];
    long[] count = new long[1];
    int st = call.run(out, count, sink);
    boolean cancelled = st == Status.CANCELLED.code() && stopped[0];
    if (!cancelled) InfokvException.check(st);
    int n = (int) Math.min(count[0], out.length);
    return new GenerationResult(Arrays.copyOf(out, n), text.toString(StandardCharsets.UTF_8), cancelled);
  }

  // ---- snapshots ----

  private static SWIGTYPE_p_ikv_sampler samplerHandle(Sampler sampler) {
    return sampler == null ? null : sampler.handle();
  }

  /**
   * Saves sequence seq ({@link Snapshot#ALL_SEQUENCES}: every one) and, when sampler is not null, its state to a
   * file (written atomically). Only kept tokens are stored, so a compressed cache gives a smaller snapshot.
   */
  public void save(String path, int seq, Sampler sampler) {
    call(() -> InfokvNative.ikv_session_save_file(h(), seq, samplerHandle(sampler), path));
  }

  public void save(java.nio.file.Path path, int seq, Sampler sampler) { save(path.toString(), seq, sampler); }

  /** Saves sequence seq into a byte array. */
  public byte[] saveBytes(int seq, Sampler sampler) {
    synchronized (state) {
      SWIGTYPE_p_ikv_session h = h();
      SWIGTYPE_p_ikv_sampler smp = samplerHandle(sampler);
      return Config.sized((b, n) -> InfokvNative.ikv_session_save_buffer(b, n, h, seq, smp));
    }
  }

  private interface RestoreCall {
    int call(int[] ids, long[] count);
  }

  private int[] restoreWith(RestoreCall f) {
    synchronized (state) {
      int[] ids = new int[8];
      long[] count = new long[1];
      int st = f.call(ids, count);
      if (st == Status.BUFFER_TOO_SMALL.code() && count[0] > ids.length) {
        ids = new int[(int) count[0]];
        st = f.call(ids, count);
      }
      InfokvException.check(st);
      return Arrays.copyOf(ids, (int) count[0]);
    }
  }

  /**
   * Restores a snapshot file into this session as new sequences and returns their ids in saved order; the sampler,
   * when not null, takes the snapshot's sampler state. All or nothing: on BAD_SNAPSHOT, WRONG_MODEL, VERSION,
   * KV_FULL, ... neither the session nor the sampler changed. Create the session with the snapshot's policy to
   * continue exactly.
   */
  public int[] restore(String path, Sampler sampler) {
    SWIGTYPE_p_ikv_sampler smp = samplerHandle(sampler);
    try {
      return restoreWith((ids, n) -> InfokvNative.ikv_session_restore_file(ids, n, h(), smp, path));
    } catch (InfokvException e) {
      throw MissingFileException.about(e, path);
    }
  }

  public int[] restore(java.nio.file.Path path, Sampler sampler) { return restore(path.toString(), sampler); }

  /** Restores a snapshot from bytes (not retained). */
  public int[] restore(byte[] snapshot, Sampler sampler) {
    SWIGTYPE_p_ikv_sampler smp = samplerHandle(sampler);
    return restoreWith((ids, n) -> InfokvNative.ikv_session_restore_buffer(ids, n, h(), smp, snapshot));
  }

  /**
   * Appends one chat message to seq in the model's template and decodes it; returns the positions {begin, end} it
   * took. An empty sequence opens the conversation. All or nothing. Protection: see {@link ChatProtect}.
   */
  public long[] chatAdd(int seq, ChatMessage message, ChatProtect protect) {
    synchronized (state) {
      long[] b = new long[1], e = new long[1];
      byte[] utf8 = message.content().getBytes(StandardCharsets.UTF_8);
      InfokvException.check(InfokvNative.ikv_chat_add(b, e, h(), seq, message.role(), utf8, protect.code()));
      return new long[] {b[0], e[0]};
    }
  }

  /**
   * Appends the messages to the conversation in seq and returns the assistant's reply, streamed to the listener (may
   * be null; returning false stops it). The reply and its closing markup stay in the sequence, so the next call
   * passes only the new messages. A null sampler is greedy; the system prompt and the template's control tokens are
   * protected ({@link ChatProtect#SYSTEM}).
   */
  public GenerationResult chat(int seq, java.util.List<ChatMessage> messages, int maxTokens, Sampler sampler,
                               TokenListener listener) {
    return chat(seq, messages, maxTokens, sampler, listener, ChatProtect.SYSTEM);
  }

  /** {@link #chat(int, java.util.List, int, Sampler, TokenListener)} with the given protection. */
  public GenerationResult chat(int seq, java.util.List<ChatMessage> messages, int maxTokens, Sampler sampler,
                               TokenListener listener, ChatProtect protect) {
    if (sampler == null) {
      try (Sampler greedy = Sampler.greedy()) {
        return chat(seq, messages, maxTokens, greedy, listener, protect);
      }
    }
    synchronized (state) {
      for (ChatMessage m : messages) chatAdd(seq, m, protect);
      return stream(maxTokens, listener, (out, count, sink) ->
          InfokvNative.ikv_chat_reply(out, count, h(), seq, maxTokens, sampler.handle(), sink, protect.code()));
    }
  }

  /**
   * Tokenizes text (with BOS) and generates into sequence 0; a null prompt continues the sequence (it must have
   * logits), a null sampler samples greedily.
   */
  public GenerationResult generate(String prompt, int maxTokens, Sampler sampler, TokenListener listener) {
    return generate(0, prompt == null ? null : model.tokenize(prompt, true), maxTokens, sampler, listener);
  }
}
