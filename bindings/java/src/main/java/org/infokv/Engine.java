package org.infokv;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/**
 * Many conversations over one KV pool, decoded in continuous batches (the C ikv_engine). When a step does not fit
 * the pool, conversations are compressed further, moved to a spill directory and back, or dropped and recomputed
 * from their tokens, by the {@link Strategy} (AUTO: whichever a cost model measured at start-up says is cheapest).
 * A moved or recomputed conversation continues exactly. Use by one thread at a time (calls are synchronized).
 */
public final class Engine implements AutoCloseable {
  /** What happens when a step does not fit the pool (the C IKV_STRATEGY_* values). */
  public enum Strategy {
    AUTO(InfokvNativeConstants.IKV_STRATEGY_AUTO),
    FAIL(InfokvNativeConstants.IKV_STRATEGY_FAIL),
    RECOMPUTE(InfokvNativeConstants.IKV_STRATEGY_RECOMPUTE),
    MOVE(InfokvNativeConstants.IKV_STRATEGY_MOVE),
    COMPRESS(InfokvNativeConstants.IKV_STRATEGY_COMPRESS);

    private final int code;

    Strategy(int code) { this.code = code; }

    public int code() { return code; }
  }

  /** The state of a conversation's latest turn (IKV_TURN_*). */
  public enum TurnState { QUEUED, RUNNING, DONE, FAILED }

  /** Where a conversation's cache is (IKV_WHERE_*). */
  public enum Where { NONE, RESIDENT, MOVED, DROPPED }

  /** A token one step produced for one conversation. */
  public static final class Event {
    public final long conversation;
    public final int token;

    Event(long conversation, int token) {
      this.conversation = conversation;
      this.token = token;
    }
  }

  private final Model model;
  private final Handles.Owned<SWIGTYPE_p_ikv_engine> state;
  private final java.lang.ref.Cleaner.Cleanable cleanable;

  /** An engine over a new session made with {@code options} (null: defaults); spillDir null: a private temp dir. */
  public Engine(Model model, SessionOptions options, Strategy strategy, String spillDir) {
    long[] out = new long[1];
    ikv_session_options o = (options == null ? SessionOptions.defaults() : options).toNative();
    try {
      InfokvException.check(InfokvNative.ikv_engine_create(out, model.handle(), o,
                                                           (strategy == null ? Strategy.AUTO : strategy).code(), spillDir));
    } finally {
      o.delete();
    }
    this.model = model;
    state = new Handles.Owned<>(new SWIGTYPE_p_ikv_engine(out[0], false), InfokvNative::ikv_engine_free, "engine",
                                model.sessionStates());
    cleanable = Handles.CLEANER.register(this, state);
  }

  public Model model() { return model; }

  @Override
  public void close() { cleanable.clean(); }

  private SWIGTYPE_p_ikv_engine h() { return state.get(); }

  /**
   * Turns the prefix cache on with these tiers (memoryBytes of this process's memory, a directory, a Redis/Valkey
   * "host:port"; null for none), or off when none is given: new conversations start from the longest cached prefix.
   */
  public void prefixCache(long memoryBytes, String diskDir, String redisAddress) {
    synchronized (state) {
      InfokvException.check(InfokvNative.ikv_engine_prefix_cache(h(), memoryBytes, diskDir, redisAddress));
    }
  }

  /** A new conversation, greedy; see {@link #open(int, long, SamplerOptions)}. */
  public long open() { return open(0, 0, null); }

  /**
   * A new conversation's id. Higher priority runs first and is preempted last; memoryLimitTokens &gt; 0 compresses
   * it to that many tokens when it holds more (needs a compression policy); sampling null: greedy.
   */
  public long open(int priority, long memoryLimitTokens, SamplerOptions sampling) {
    synchronized (state) {
      long[] out = new long[1];
      ikv_sampler_options so = sampling == null ? null : sampling.toNative();
      try {
        InfokvException.check(InfokvNative.ikv_engine_open(out, h(), priority, memoryLimitTokens, so));
      } finally {
        if (so != null) so.delete();
      }
      return out[0];
    }
  }

  /** Queues a turn: tokens appended to the conversation, then up to maxTokens generated. */
  public void submit(long conversation, int[] tokens, int maxTokens) {
    synchronized (state) {
      InfokvException.check(InfokvNative.ikv_engine_submit(h(), conversation, tokens, maxTokens));
    }
  }

  /** Queued and running turns. */
  public long pending() {
    synchronized (state) {
      long[] out = new long[1];
      InfokvException.check(InfokvNative.ikv_engine_pending(out, h()));
      return out[0];
    }
  }

  /** One scheduling step; the tokens it produced. */
  public List<Event> step() {
    synchronized (state) {
      long[] buf = new long[(int) Math.max(2, 2 * pending())];
      long[] n = new long[1];
      InfokvException.check(InfokvNative.ikv_engine_step(buf, n, h()));
      List<Event> out = new ArrayList<>();
      for (int i = 0; i + 1 < n[0]; i += 2) out.add(new Event(buf[i], (int) buf[i + 1]));
      return out;
    }
  }

  /** Steps until no turn is pending; every token produced, in order. */
  public List<Event> run() {
    List<Event> all = new ArrayList<>();
    while (pending() > 0) all.addAll(step());
    return all;
  }

  public TurnState state(long conversation) {
    synchronized (state) {
      int[] out = new int[1];
      InfokvException.check(InfokvNative.ikv_engine_turn_state(out, h(), conversation));
      return TurnState.values()[out[0]];
    }
  }

  public Where where(long conversation) {
    synchronized (state) {
      int[] out = new int[1];
      InfokvException.check(InfokvNative.ikv_engine_where(out, h(), conversation));
      return Where.values()[out[0]];
    }
  }

  /** The tokens the conversation's latest turn generated. */
  public int[] generated(long conversation) {
    synchronized (state) {
      long[] n = new long[1];
      int st = InfokvNative.ikv_engine_generated(null, n, h(), conversation);
      if (st != Status.BUFFER_TOO_SMALL.code()) InfokvException.check(st);
      int[] buf = new int[(int) n[0]];
      if (buf.length > 0) InfokvException.check(InfokvNative.ikv_engine_generated(buf, n, h(), conversation));
      return buf;
    }
  }

  /** Why the conversation's latest turn failed ("" when it did not). */
  public String failure(long conversation) {
    synchronized (state) {
      long[] len = new long[1];
      int st = InfokvNative.ikv_engine_failure(null, len, h(), conversation);
      if (st != Status.BUFFER_TOO_SMALL.code()) InfokvException.check(st);
      byte[] buf = new byte[(int) len[0] + 1];
      InfokvException.check(InfokvNative.ikv_engine_failure(buf, len, h(), conversation));
      return new String(buf, 0, (int) len[0], StandardCharsets.UTF_8);
    }
  }

  /** Frees a conversation's memory wherever it is. */
  public void closeConversation(long conversation) {
    synchronized (state) {
      InfokvException.check(InfokvNative.ikv_engine_close(h(), conversation));
    }
  }

  /** One counter (InfokvNativeConstants.IKV_ENGINE_STAT_*). */
  public long stat(int stat) {
    synchronized (state) {
      long[] out = new long[1];
      InfokvException.check(InfokvNative.ikv_engine_stat(out, h(), stat));
      return out[0];
    }
  }

  /** The cost model's rates and every decision so far, as JSON (see ikv_engine_report_json). */
  public String reportJson() {
    synchronized (state) {
      long[] len = new long[1];
      int st = InfokvNative.ikv_engine_report_json(null, len, h());
      if (st != Status.BUFFER_TOO_SMALL.code()) InfokvException.check(st);
      byte[] buf = new byte[(int) len[0] + 1];
      InfokvException.check(InfokvNative.ikv_engine_report_json(buf, len, h()));
      return new String(buf, 0, (int) len[0], StandardCharsets.UTF_8);
    }
  }
}
