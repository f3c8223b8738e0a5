package org.infokv;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;

/**
 * A KV cache over a model with sequences (sequence 0 exists from the start). Methods are synchronized, so a
 * session may be handed between threads; sessions on one model run in parallel.
 */
public final class Session implements AutoCloseable {
  private static final class State implements Runnable {
    volatile SWIGTYPE_p_ikv_session handle;

    State(SWIGTYPE_p_ikv_session h) { handle = h; }

    @Override
    public synchronized void run() {
      SWIGTYPE_p_ikv_session h = handle;
      handle = null;
      if (h != null) InfokvNative.ikv_session_free(h);
    }
  }

  public static final int KV_BLOCKS_TOTAL = InfokvNativeConstants.IKV_KV_BLOCKS_TOTAL;
  public static final int KV_BLOCKS_USED = InfokvNativeConstants.IKV_KV_BLOCKS_USED;
  public static final int KV_BLOCKS_FREE = InfokvNativeConstants.IKV_KV_BLOCKS_FREE;
  public static final int KV_BLOCK_BYTES = InfokvNativeConstants.IKV_KV_BLOCK_BYTES;
  public static final int KV_BYTES_USED = InfokvNativeConstants.IKV_KV_BYTES_USED;
  public static final int KV_BLOCK_SIZE = InfokvNativeConstants.IKV_KV_BLOCK_SIZE;

  private final Model model;
  private final State state;
  private final java.lang.ref.Cleaner.Cleanable cleanable;

  Session(Model model, SessionOptions options) {
    this.model = model;
    long[] out = new long[1];
    ikv_session_options o = (options == null ? SessionOptions.defaults() : options).toNative();
    try {
      InfokvException.check(InfokvNative.ikv_session_create(out, model.handle(), o));
    } finally {
      o.delete();
    }
    state = new State(new SWIGTYPE_p_ikv_session(out[0], false));
    // the Cleaner's action holds no reference to the model; the session object does, so the model outlives it
    cleanable = Handles.CLEANER.register(this, state);
  }

  private SWIGTYPE_p_ikv_session h() {
    SWIGTYPE_p_ikv_session h = state.handle;
    if (h == null) throw Handles.closed("session");
    return h;
  }

  @Override
  public synchronized void close() { cleanable.clean(); }

  public Model model() { return model; }

  public synchronized int addSequence() {
    int[] out = new int[1];
    InfokvException.check(InfokvNative.ikv_seq_add(out, h()));
    return out[0];
  }

  /** A new sequence sharing src's cache (copy-on-write) and logits. */
  public synchronized int fork(int src) {
    int[] out = new int[1];
    InfokvException.check(InfokvNative.ikv_seq_fork(out, h(), src));
    return out[0];
  }

  public synchronized void remove(int seq) { InfokvException.check(InfokvNative.ikv_seq_remove(h(), seq)); }

  public synchronized void truncate(int seq, long length) {
    InfokvException.check(InfokvNative.ikv_seq_truncate(h(), seq, length));
  }

  public synchronized long length(int seq) {
    long[] out = new long[1];
    InfokvException.check(InfokvNative.ikv_seq_length(out, h(), seq));
    return out[0];
  }

  /** Tokens kept in one layer (below the length after compression). */
  public synchronized long kept(int seq, int layer) {
    long[] out = new long[1];
    InfokvException.check(InfokvNative.ikv_seq_kept(out, h(), seq, layer));
    return out[0];
  }

  /** Bytes of KV blocks the sequence holds. */
  public synchronized long kvBytes(int seq) {
    long[] out = new long[1];
    InfokvException.check(InfokvNative.ikv_seq_kv_bytes(out, h(), seq));
    return out[0];
  }

  /** One pool statistic (KV_BLOCKS_TOTAL, KV_BYTES_USED, ...). */
  public synchronized long kvStat(int stat) {
    long[] out = new long[1];
    InfokvException.check(InfokvNative.ikv_kv_stat(out, h(), stat));
    return out[0];
  }

  /** Appends tokens to a sequence and runs the model (all or nothing). */
  public synchronized void decode(int seq, int[] tokens) {
    InfokvException.check(InfokvNative.ikv_decode(h(), seq, tokens));
  }

  /** Item i appends tokens[i] to seqIds[i], in one batch. */
  public synchronized void decodeBatch(int[] seqIds, int[] tokens) {
    if (seqIds.length != tokens.length) throw new IllegalArgumentException("seqIds and tokens differ in length");
    int[] pairs = new int[2 * tokens.length];
    for (int i = 0; i < tokens.length; i++) {
      pairs[2 * i] = seqIds[i];
      pairs[2 * i + 1] = tokens[i];
    }
    InfokvException.check(InfokvNative.ikv_decode_batch(h(), pairs));
  }

  /** The logits of the sequence's latest token (n_vocab floats). */
  public synchronized float[] logits(int seq) {
    float[] out = new float[model.nVocab()];
    long[] n = new long[1];
    InfokvException.check(InfokvNative.ikv_get_logits(out, n, h(), seq));
    return n[0] == out.length ? out : Arrays.copyOf(out, (int) n[0]);
  }

  /** Marks positions [begin, end) as never evicted (fair: a fair-share span instead). */
  public synchronized void protect(int seq, long begin, long end, boolean fair) {
    InfokvException.check(InfokvNative.ikv_seq_protect(h(), seq, begin, end, fair ? 1 : 0));
  }

  /** Compresses now to budgetTokens per layer (0: the session's budget). */
  public synchronized void compress(int seq, int budgetTokens) {
    InfokvException.check(InfokvNative.ikv_seq_compress(h(), seq, budgetTokens));
  }

  public synchronized int sample(Sampler sampler, int seq) {
    int[] out = new int[1];
    InfokvException.check(InfokvNative.ikv_sample(out, sampler.handle(), h(), seq));
    return out[0];
  }

  /**
   * Decodes the prompt into seq (may be null/empty when the sequence has logits), then generates up to maxTokens
   * tokens, stopping at EOS, streaming each to the listener (may be null), which can stop it by returning false.
   * An exception thrown by the listener propagates. Generated tokens stay in the sequence either way.
   */
  public synchronized GenerationResult generate(int seq, int[] prompt, int maxTokens, Sampler sampler,
                                                TokenListener listener) {
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
    int st = InfokvNative.ikv_generate(out, count, h(), seq, prompt, maxTokens, sampler.handle(), sink);
    boolean cancelled = st == Status.CANCELLED.code() && stopped[0];
    if (!cancelled) InfokvException.check(st);
    int n = (int) Math.min(count[0], out.length);
    return new GenerationResult(Arrays.copyOf(out, n), text.toString(StandardCharsets.UTF_8), cancelled);
  }

  /** Tokenizes text (with BOS) and generates into sequence 0. */
  public GenerationResult generate(String prompt, int maxTokens, Sampler sampler, TokenListener listener) {
    return generate(0, model.tokenize(prompt, true), maxTokens, sampler, listener);
  }
}
