/*
 * infokv: the engine: many conversations over one KV pool, decoded in continuous batches; when a step does not fit
 * the pool, conversations are compressed further, moved out to a spill directory or dropped and recomputed from
 * their tokens, whichever a cost model measured on this machine says is cheapest, and nothing fails while one of
 * those options exists. Part of the public C API: include <infokv/infokv.h>, which includes this header
 * (conventions there).
 *
 * Use: ikv_engine_create; ikv_engine_open a conversation; ikv_engine_submit a turn (tokens appended, then up to
 * max_tokens generated); call ikv_engine_step until ikv_engine_pending is 0, reading the tokens each step produced;
 * submit the conversation's next turn when it is done; ikv_engine_close it. A conversation moved or dropped while it
 * waited comes back exactly: moved ones bit for bit, recomputed ones with the same tokens (a compressed one with the
 * same positions kept).
 */
#ifndef INFOKV_ENGINE_H
#define INFOKV_ENGINE_H

#ifndef INFOKV_INFOKV_H
#error "include <infokv/infokv.h>, not <infokv/engine.h>"
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ikv_engine ikv_engine;

/* What the engine does when a step does not fit the pool. */
#define IKV_STRATEGY_AUTO 0      /* per victim, the cheapest of compress, move and recompute (the default) */
#define IKV_STRATEGY_FAIL 1      /* the turn that does not fit fails (llama.cpp's server) */
#define IKV_STRATEGY_RECOMPUTE 2 /* drop a victim's cache; prefill its tokens again when it runs (vLLM V1) */
#define IKV_STRATEGY_MOVE 3      /* move a victim's cache to the spill directory and back */
#define IKV_STRATEGY_COMPRESS 4  /* compress victims further (never under a quarter of their length), then fail */

/* A conversation's latest turn. */
#define IKV_TURN_QUEUED 0
#define IKV_TURN_RUNNING 1
#define IKV_TURN_DONE 2   /* also a conversation that has had no turn yet */
#define IKV_TURN_FAILED 3 /* ikv_engine_failure says why; its memory went back to the pool, its tokens stay */

/* Where a conversation's cache is. */
#define IKV_WHERE_NONE 0     /* no turn has run yet */
#define IKV_WHERE_RESIDENT 1 /* in the pool */
#define IKV_WHERE_MOVED 2    /* in the spill directory */
#define IKV_WHERE_DROPPED 3  /* to be recomputed from its tokens */

/* Counters of ikv_engine_stat. */
#define IKV_ENGINE_STAT_STEPS 1
#define IKV_ENGINE_STAT_DECODED_TOKENS 2
#define IKV_ENGINE_STAT_PREFILLED_TOKENS 3
#define IKV_ENGINE_STAT_COMPRESSIONS 4
#define IKV_ENGINE_STAT_MOVES 5
#define IKV_ENGINE_STAT_RECOMPUTES 6
#define IKV_ENGINE_STAT_FAILURES 7
#define IKV_ENGINE_STAT_BYTES_MOVED 8      /* written to and read back from the spill directory */
#define IKV_ENGINE_STAT_RECOMPUTED_TOKENS 9  /* prefilled again by recomputes */
#define IKV_ENGINE_STAT_CONVERSATIONS 10   /* open conversations */
#define IKV_ENGINE_STAT_POOL_BLOCKS_FREE 11
#define IKV_ENGINE_STAT_PREFIX_HITS 12        /* turns started from the prefix cache */
#define IKV_ENGINE_STAT_PREFIX_HIT_TOKENS 13  /* prompt tokens they did not prefill */
#define IKV_ENGINE_STAT_PREFIX_SAVES 14
#define IKV_ENGINE_STAT_PREFIX_REFUSED 15     /* entries refused (damaged, foreign, not the request's) and erased */
#define IKV_ENGINE_STAT_PREFIX_STORE_ERRORS 16 /* a store down, slow or garbled: the prompt was prefilled */
#define IKV_ENGINE_STAT_RECOMPUTE_HIT_TOKENS 17 /* restored from the prefix cache by recomputes, not prefilled */

/**
 * Makes an engine over one new session made with `opts` (NULL: defaults; see ikv_session_create), measuring at
 * start-up what its cost model needs (this model's prefill rate, the spill directory's bandwidth: a fraction of a
 * second). spill_dir: where moved conversations go: the engine makes a directory of its own (mode 0700) inside it
 * (made if missing), so that engines sharing one never meet; NULL or "": inside the system's temp directory. The
 * engine's directory and its files are removed by ikv_engine_free; the directory holds a lock while its engine
 * lives, and one left by a process that was killed is removed by the next engine made in the same place. A session's compression policy (opts->policy) lets the engine
 * compress under pressure; with IKV_POLICY_NONE it only moves and recomputes.
 * Thread safety: an engine is used by one thread at a time (IKV_ERR_BUSY otherwise, as a session).
 * @return IKV_OK; IKV_ERR_INVALID_ARGUMENT (NULL out, an unknown strategy, bad options); IKV_ERR_BAD_HANDLE;
 *         IKV_ERR_IO (the spill directory cannot be made); the statuses of ikv_session_create.
 */
IKV_API int32_t ikv_engine_create(ikv_engine **out, ikv_model *model, const ikv_session_options *opts, int32_t strategy,
                                  const char *spill_dir);
/**
 * Turns the prefix cache on (or off, when memory_bytes is 0 and disk_dir and redis_address are NULL or ""). A new
 * conversation whose first turn starts with a cached prefix starts from its snapshot instead of prefilling it. Each
 * turn's prompt is saved, in every tier, as far as one prefill from the start computed it (a turn after decoded
 * answers adds nothing; prefixes of at least 64 tokens, of uncompressed caches). On x86 with AVX-512 and a ubatch of
 * 32 or more, where a prompt's K/V and logits do not depend on where its prefill chunks start, it is saved at its end
 * and at the end of its last whole prefill chunk (the session's ubatch, 256 by default) or 16 tokens before its end
 * if that is earlier, and a hit is the longest saved prefix of the new prompt that leaves at least 16 tokens (Redis
 * is asked for its 64 longest lengths only); elsewhere it is saved at the last multiple of the chunk within it, and
 * a hit is such a prefix shorter than the new prompt. Either way the rest is prefilled with the same logits as
 * without the cache (a policy's attention sums restored with a prefix may differ in their last bits, so a request
 * later compressed may evict otherwise). Tiers, looked up in this order: this process's memory (memory_bytes, least
 * recently used evicted), a directory (disk_dir, made if missing; entries written atomically, the oldest removed
 * past 4 GiB), and a Redis or Valkey server shared by many processes and machines (redis_address "host:port" or
 * "unix:/path"; 0.5 s per command; entries expire after 7 days, and the server's maxmemory policy evicts).
 * Entries are keyed by the model's weights and tokenizer, the KV dtype and block size, the compression
 * configuration and the prefix's tokens, and are never trusted: a hit is restored through the snapshot checks and
 * its tokens compared one by one; one that fails is erased (IKV_ENGINE_STAT_PREFIX_REFUSED). A store that is down,
 * slow or answers garbage costs a prefill, not a failure (IKV_ENGINE_STAT_PREFIX_STORE_ERRORS; retried after 5 s).
 * A conversation dropped to make room is recomputed from the longest cached prefix of its tokens when there is one
 * and it fits the pool (IKV_ENGINE_STAT_RECOMPUTE_HIT_TOKENS), and the cost model counts the prefix the memory and
 * disk tiers hold at the measured restore rate.
 * @return IKV_OK; IKV_ERR_INVALID_ARGUMENT (negative memory_bytes); IKV_ERR_IO (disk_dir cannot be made: nothing
 *         changed); IKV_ERR_BAD_HANDLE.
 */
IKV_API int32_t ikv_engine_prefix_cache(ikv_engine *engine, int64_t memory_bytes, const char *disk_dir,
                                        const char *redis_address);
/** Frees the engine, its conversations and their spill files. NULL and stale handles are ignored. */
IKV_API void ikv_engine_free(ikv_engine *engine);

/**
 * Opens a conversation (it takes no memory until its first turn runs) and writes its id (> 0, never reused) to
 * *out_id. priority: higher is admitted first and preempted last; a queued turn of higher priority may preempt a
 * running one of lower priority. memory_limit_tokens > 0: the conversation is compressed to that many tokens (mean
 * over layers) whenever it holds more plus a slack (needs a compression policy: IKV_ERR_BAD_CONFIG otherwise).
 * sampling: NULL for greedy; otherwise as ikv_sampler_create's options.
 * @return IKV_OK; IKV_ERR_INVALID_ARGUMENT (NULL out_id, a limit outside [0, 2^28], bad sampling options); IKV_ERR_BAD_CONFIG;
 *         IKV_ERR_BAD_HANDLE.
 */
IKV_API int32_t ikv_engine_open(int64_t *out_id, ikv_engine *engine, int32_t priority, int64_t memory_limit_tokens,
                                const ikv_sampler_options *sampling);
/**
 * Queues a turn of `conversation`: tokens[0..n_tokens) are appended to it, then up to max_tokens tokens generated
 * (fewer when the model ends its turn). A first turn needs at least one token; later turns may have none.
 * @return IKV_OK; IKV_ERR_INVALID_ARGUMENT (NULL tokens with n_tokens > 0, n_tokens of 2^24 or more, max_tokens < 0,
 *         an empty first turn);
 *         IKV_ERR_OUT_OF_RANGE (a token outside the vocabulary); IKV_ERR_BAD_STATE (its previous turn is queued or
 *         running); IKV_ERR_NOT_FOUND (no such open conversation); IKV_ERR_BAD_HANDLE. On failure nothing is queued.
 */
IKV_API int32_t ikv_engine_submit(ikv_engine *engine, int64_t conversation, const int32_t *tokens, size_t n_tokens,
                                  int32_t max_tokens);
/** Queued and running turns, into *out. @return IKV_OK; IKV_ERR_INVALID_ARGUMENT (NULL out); IKV_ERR_BAD_HANDLE. */
IKV_API int32_t ikv_engine_pending(int64_t *out, const ikv_engine *engine);
/**
 * One scheduling step: goes on with the prompts earlier steps began and admits queued turns by priority (within
 * one, prompts that fit in a step's prefill before longer ones, a longer one passed over in the last step first),
 * then arrival (bringing moved and dropped conversations back: recomputing a dropped one is prefill too), prefilling
 * until this step has prefilled a prefill chunk's worth (the session's ubatch, 256 by default): a longer prompt goes
 * in by whole chunks, at least one per step it is given, at least every other step, and the turns behind it wait
 * for a later step; then
 * decodes one token for every running turn whose prompt is in, in one batch, making room as the strategy says. A
 * turn is IKV_TURN_RUNNING from its admission, its prompt part-way in included. Without memory pressure a turn's
 * tokens do not depend on the steps that carried it. The tokens it
 * produced go to out as pairs (conversation id, token): *out_count = 2 x the number of tokens. capacity must be at
 * least 2 x ikv_engine_pending(): otherwise IKV_ERR_BUFFER_TOO_SMALL with *out_count = that need, before the step
 * runs. A turn that no allowed means can give memory fails (IKV_TURN_FAILED) and the step goes on with the others.
 * A step that throws (host memory exhausted: IKV_ERR_OUT_OF_MEMORY; a bug: IKV_ERR_INTERNAL) leaves every turn queued
 * or running with its sampler as before the step, to be tried again at the next one.
 * @return IKV_OK; IKV_ERR_INVALID_ARGUMENT (NULL out_count, NULL out with capacity > 0); IKV_ERR_BUFFER_TOO_SMALL;
 *         IKV_ERR_BAD_HANDLE; IKV_ERR_BUSY; IKV_ERR_OUT_OF_MEMORY; IKV_ERR_INTERNAL.
 */
IKV_API int32_t ikv_engine_step(int64_t *out, size_t capacity, size_t *out_count, ikv_engine *engine);
/** The state of the conversation's latest turn (IKV_TURN_*). @return IKV_OK; IKV_ERR_INVALID_ARGUMENT; IKV_ERR_NOT_FOUND; IKV_ERR_BAD_HANDLE. */
IKV_API int32_t ikv_engine_turn_state(int32_t *out_status, const ikv_engine *engine, int64_t conversation);
/** Where the conversation's cache is now (IKV_WHERE_*). @return as ikv_engine_turn_state. */
IKV_API int32_t ikv_engine_where(int32_t *out, const ikv_engine *engine, int64_t conversation);
/**
 * The tokens the conversation's latest turn generated, with the size-query convention of infokv.h.
 * @return IKV_OK; IKV_ERR_INVALID_ARGUMENT; IKV_ERR_BUFFER_TOO_SMALL; IKV_ERR_NOT_FOUND; IKV_ERR_BAD_HANDLE.
 */
IKV_API int32_t ikv_engine_generated(int32_t *out_tokens, size_t capacity, size_t *out_count, const ikv_engine *engine,
                                     int64_t conversation);
/** Why the conversation's latest turn failed ("" when it did not), with the text size-query convention. */
IKV_API int32_t ikv_engine_failure(char *out, size_t capacity, size_t *out_len, const ikv_engine *engine,
                                   int64_t conversation);
/** Closes a conversation, freeing its memory wherever it is (a running turn is cancelled). @return IKV_OK; IKV_ERR_NOT_FOUND; IKV_ERR_BAD_HANDLE. */
IKV_API int32_t ikv_engine_close(ikv_engine *engine, int64_t conversation);
/** One counter (IKV_ENGINE_STAT_*) into *out. @return IKV_OK; IKV_ERR_INVALID_ARGUMENT (NULL out, unknown stat); IKV_ERR_BAD_HANDLE. */
IKV_API int32_t ikv_engine_stat(int64_t *out, const ikv_engine *engine, int32_t stat);
/**
 * Every decision so far as JSON, with the text size-query convention: {"strategy": ..., "rates": {prefill tokens/s,
 * disk write and read bytes/s, prefix cache restore bytes/s, compress tokens/s}, "decisions": [{"conversation", "step", "action" ("compress",
 * "move", "recompute", "fail"), "why", "blocks", "tokens", "est_seconds", "est_loss", "measured_seconds" (a move: the
 * time out at once, out and back once it has returned; a recompute: -1 until it has been recomputed)}]}.
 */
IKV_API int32_t ikv_engine_report_json(char *out, size_t capacity, size_t *out_len, const ikv_engine *engine);

#ifdef __cplusplus
}
#endif

#endif /* INFOKV_ENGINE_H */
