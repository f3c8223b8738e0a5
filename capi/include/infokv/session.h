/*
 * infokv: sessions: sequences, decoding, logits, the compressed KV cache, what auto chose, tuning profiles.
 * Part of the public C API: include <infokv/infokv.h>, which includes this header (conventions there).
 */
#ifndef INFOKV_SESSION_H
#define INFOKV_SESSION_H

#ifndef INFOKV_INFOKV_H
#error "include <infokv/infokv.h>, not <infokv/session.h>"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- session ---- */

/* KV cache element types. Q8_0 and Q4_0 store K and V in blocks of 32 values with an f16 scale (ggml's block_q8_0
 * and block_q4_0; Q4_0 after a fixed randomised Hadamard rotation of each block, which spreads outlier channels
 * before 4-bit rounding): 34 and 18 bytes per 32 values against f16's 64. They need a model whose head size is a
 * multiple of 32 and the CPU backend (IKV_ERR_UNSUPPORTED otherwise). */
#define IKV_KV_F32 1
#define IKV_KV_F16 2
#define IKV_KV_BF16 3
#define IKV_KV_Q8_0 4
#define IKV_KV_Q4_0 5

/* Compression policies. */
#define IKV_POLICY_NONE 0
#define IKV_POLICY_INFOKV 1
#define IKV_POLICY_SNAPKV 2
#define IKV_POLICY_H2O 3
#define IKV_POLICY_STREAMING 4
#define IKV_POLICY_TOVA 5
#define IKV_POLICY_PYRAMIDKV 6
/* Chooses per sequence and per layer which evidence ranks the tokens and how the budget is spread across layers
 * (packaging/docs/quality.md "Choosing what to keep: auto"); with max_loss > 0 it needs no budget. Asked for a later
 * question under a byte budget (ikv_seq_compress with the default question), it reads the context replay as
 * IKV_POLICY_KVZIP does, and the probe (packaging/docs/c_api.md "Which question"). */
#define IKV_POLICY_AUTO 7
/* KVzip's context replay: a token's score is the most attention any head gives it while the model re-reads the
 * context after a "repeat the previous context" prompt, and the blocks a uniform budget would hold go to the layers
 * whose tokens rank highest across all layers (some layers keep many tokens, others one block). Made for a cache
 * that is asked something later (a chat's history, a saved snapshot); each compression costs one more pass over the
 * sequence's tokens (packaging/docs/c_api.md "Which question"). */
#define IKV_POLICY_KVZIP 8

/* ikv_session_options.layer_precision: may IKV_POLICY_AUTO hold a layer at a lower precision than kv_dtype? */
#define IKV_LAYER_PRECISION_AUTO 0 /* default: yes, q8_0 where auto's proxy says the bytes buy more (CPU only) */
#define IKV_LAYER_PRECISION_OFF 1  /* no: every layer stays in kv_dtype */

/* Layer budget shapes. */
#define IKV_SHAPE_UNIFORM 0
#define IKV_SHAPE_PYRAMID 1

/* Revisions (fields are only appended, never reordered or removed; defaults never change):
 *   1: struct_size ... compress_after_prefill
 *   2: device
 *   3: max_sequences
 *   4: max_loss
 *   5: layer_precision */
#define IKV_SESSION_OPTIONS_VERSION 5

/**
 * Session options: a versioned struct. Initialise with IKV_SESSION_OPTIONS_INIT or ikv_session_options_init()
 * (the two agree), then change what you need. Zero means "default" for every size.
 * Callers built against an older header pass their smaller struct_size and older version; the fields they do not
 * have take their defaults (see ikv_session_create).
 */
typedef struct ikv_session_options {
  uint32_t struct_size;      /* sizeof(ikv_session_options) as compiled by the caller */
  uint32_t version;          /* IKV_SESSION_OPTIONS_VERSION */
  int32_t n_threads;         /* 0: available cores */
  int32_t kv_dtype;          /* IKV_KV_*; default IKV_KV_F16 */
  int32_t block_size;        /* tokens per KV block; default 16 */
  int32_t ubatch;            /* tokens per forward chunk; default 256 */
  int64_t kv_pool_blocks;    /* pool size in blocks (all layers together); 0: use kv_pool_bytes */
  int64_t kv_pool_bytes;     /* pool size in bytes; 0 and kv_pool_blocks 0: 4 x trained context, <= 1 GiB */
  /* compression */
  int32_t policy;            /* IKV_POLICY_*; default IKV_POLICY_NONE */
  int32_t budget_tokens;     /* tokens kept per layer; 0: use budget_fraction */
  double budget_fraction;    /* of the sequence's length at compression time, (0, 1] */
  int32_t window;            /* observation window; -1: min(32, budget / 4) */
  int32_t interval;          /* 0 or 1024 (default): compress when the sequence holds more than its budget plus a slack
                              * the runtime chooses (ikv_seq_budget); 1024, once a step count, is read as 0. Another
                              * value: every `interval` tokens appended, if then over the budget (a fixed schedule) */
  float alpha;               /* attention weight in the InfoKV mix; default 0.9 */
  float tau;                 /* representation-change offset; default 1 */
  int32_t entropy_top_k;     /* default 256 */
  int32_t pool_kernel_prefill; /* default 5; a probe's attention (IKV_QUESTION_LATER, BOTH) pools over >= 15 */
  int32_t pool_kernel_decode;  /* default 7 */
  int32_t shape;             /* IKV_SHAPE_*; pyramidkv always uses the pyramid */
  float beta;                /* pyramid steepness; default 20 */
  int32_t sink;              /* streaming: sink tokens; default 4 */
  int32_t compress_after_prefill; /* non-zero (default): compress once right after the first decode */
  /* ---- version 2 ---- */
  /* Where the session runs: NULL or "" (default) is "auto", the runtime's choice (packaging/docs/cli.md says which device it
   * picks: today the CPU); "cpu"; "cuda" (device 0) or "cuda:N". UTF-8, NUL-terminated, owned by the caller: ikv_session_create
   * copies what it needs, so the string only has to live until that call returns.
   * A string rather than an enum + index: the C++ core, the CLI's --device and configs name devices with the same
   * strings, one parser judges them all, a new device kind needs no new constant, and SWIG gives it to Python (str),
   * Java (String) and Go (string) as it is, with no per-language parser of "cuda:N". */
  const char *device;
  /* ---- version 3 ---- */
  /* Most sequences the session holds at once, in [1, 2^20]; 0: the default, 4096. Every sequence costs host memory
   * outside the KV pool (block tables, its logits and, with a policy, an observation window of
   * [layers x window x n_heads*head_dim] floats: 2.3 MiB for SmolLM2-135M, which a fork shares until either
   * decodes; IKV_KV_STAT_HOST_BYTES counts it), so a server facing untrusted callers bounds it. ikv_seq_add, ikv_seq_fork and restores beyond it fail with
   * IKV_ERR_OUT_OF_RANGE, changing nothing. */
  int32_t max_sequences;
  /* ---- version 4 ---- */
  /* A quality target instead of a byte budget, for IKV_POLICY_AUTO only: 0 (default) compresses to the budget
   * (budget_tokens / budget_fraction); > 0 keeps, at each compression and in each layer, as few tokens as hold auto's
   * proxy loss (the relative error of the observation window's attention output, ikv_seq_auto_report) at or under
   * max_loss, and then no budget is needed. Must be finite and >= 0; > 0 with another policy is
   * IKV_ERR_INVALID_ARGUMENT. */
  double max_loss;
  /* ---- version 5 ---- */
  /* IKV_LAYER_PRECISION_AUTO (0, default): under a byte budget IKV_POLICY_AUTO chooses per layer both the tokens and
   * the precision, holding a layer at q8_0 (a block of the same bytes then holds about 1.9x the tokens of an f16 one)
   * where its proxy loss, rounding included, is clearly lower; beside an f32, f16 or bf16 cache, on the CPU backend,
   * for heads whose size is a multiple of 32. Measured: KL to the full cache 0.32-0.69x of the f16-only choice at
   * 12.5% and 25% of the bytes (packaging/docs/kv_dtypes.md). It applies to the automatic compressions and to one
   * asked for IKV_QUESTION_NEXT; one asked for a later question (ikv_seq_compress's default: the context replay) and
   * a quality target keep every layer in kv_dtype. ikv_seq_layer_dtype says which layers it chose.
   * IKV_LAYER_PRECISION_OFF (1): every layer stays in kv_dtype. Another value is IKV_ERR_INVALID_ARGUMENT. */
  int32_t layer_precision;
} ikv_session_options;

#define IKV_SESSION_OPTIONS_INIT                                                                          \
  { (uint32_t)sizeof(ikv_session_options), IKV_SESSION_OPTIONS_VERSION, 0, IKV_KV_F16, 16, 256, 0, 0,   \
    IKV_POLICY_NONE, 0, 0.0, -1, 1024, 0.9f, 1.0f, 256, 5, 7, IKV_SHAPE_UNIFORM, 20.0f, 4, 1, NULL, 0, 0.0,    \
    IKV_LAYER_PRECISION_AUTO }

/**
 * Fills `opts` with the defaults of revision `version` (same values as IKV_SESSION_OPTIONS_INIT): writes at most
 * `struct_size` bytes (sizeof(ikv_session_options) as the caller compiled it), sets opts->struct_size to it and
 * opts->version to `version`, and never writes past the fields that revision has (libgit2's pattern). Call it
 * through ikv_session_options_init(opts), which passes this header's size and version.
 * @return IKV_OK; IKV_ERR_INVALID_ARGUMENT (NULL opts; version 0; struct_size smaller than that revision's fields);
 *         IKV_ERR_VERSION (version newer than this library's IKV_SESSION_OPTIONS_VERSION: the message gives both).
 *         On failure nothing is written.
 */
IKV_API int32_t ikv_session_options_init_version(ikv_session_options *opts, size_t struct_size, uint32_t version);
/**
 * The entry point of programs built before the versioned initialiser (no size, no version): writes revision 4, the
 * released 0.1 header's (its size and version 4), and will never write a later one, so it never writes past such a
 * caller's struct; fields a later revision adds take their defaults in ikv_session_create. Sources built against
 * this header reach ikv_session_options_init_version instead through the macro below, with this header's size and
 * version; FFI callers (ctypes, JNA, bindgen) should call ikv_session_options_init_version themselves.
 * @return IKV_OK; IKV_ERR_INVALID_ARGUMENT (NULL opts).
 */
IKV_API int32_t ikv_session_options_init(ikv_session_options *opts);
#define ikv_session_options_init(opts) \
  ikv_session_options_init_version((opts), sizeof(ikv_session_options), IKV_SESSION_OPTIONS_VERSION)

/**
 * Creates a session over a model with one empty sequence, id 0.
 * @param opts  NULL for defaults. Otherwise struct_size must be at least the version-1 size
 *              (offsetof(ikv_session_options, device)) and version at least 1. `device` is read only when
 *              version >= 2 (a version-1 struct from an older caller runs on the CPU), `max_sequences` only when
 *              version >= 3 (older callers get 4096), `max_loss` only when version >= 4 (older callers get 0: a byte
 *              budget); a struct of version >= 2 (>= 3, >= 4) must be large enough to hold `device`
 *              (`max_sequences`, `max_loss`). opts and the device string are not used after the call returns.
 * @return IKV_OK;
 *         IKV_ERR_BAD_HANDLE (model);
 *         IKV_ERR_INVALID_ARGUMENT (NULL out; struct_size or version too small; a bad option value, e.g. a policy
 *           without a budget (IKV_POLICY_AUTO may have max_loss > 0 instead), max_loss > 0 with another policy, a
 *           negative or non-finite max_loss; a malformed device string, anything but "", "cpu", "cuda", "cuda:N" or
 *           "auto": the message names the option);
 *         IKV_ERR_NO_DEVICE ("cuda" or "cuda:N" when there is no such usable CUDA device: always in a build without
 *           CUDA; the message says why, e.g. no driver);
 *         IKV_ERR_UNSUPPORTED (a CUDA device for a model whose weight types the CUDA path does not run; kv_dtype
 *           IKV_KV_Q8_0 or IKV_KV_Q4_0 on a CUDA device or for a model whose head size is not a multiple of 32);
 *         IKV_ERR_OUT_OF_MEMORY (host or device memory; also an explicit kv_pool_blocks/kv_pool_bytes larger than
 *           the device can hold: on the CPU the machine's physical memory, on a GPU its free memory; the message
 *           gives both sizes).
 * The model must outlive the session. Threads may create sessions over one model at the same time.
 */
IKV_API int32_t ikv_session_create(ikv_session **out, ikv_model *model, const ikv_session_options *opts);
/** Frees a session and its KV cache; NULL is ignored. */
IKV_API void ikv_session_free(ikv_session *session);

/**
 * Adds an empty sequence; *out_seq receives its id. IKV_OK, IKV_ERR_BAD_HANDLE, IKV_ERR_INVALID_ARGUMENT;
 * IKV_ERR_OUT_OF_RANGE when the session already holds max_sequences (nothing changed).
 */
IKV_API int32_t ikv_seq_add(int32_t *out_seq, ikv_session *session);
/** Removes a sequence and returns its blocks to the pool. IKV_OK, IKV_ERR_BAD_HANDLE, IKV_ERR_NOT_FOUND. */
IKV_API int32_t ikv_seq_remove(ikv_session *session, int32_t seq);
/**
 * Forks `src`: the new sequence shares its cache blocks and its observation window (both copy-on-write: copied
 * only when one of the two changes them), and copies its logits, protected spans and compression state; *out_seq
 * receives its id (-1 on failure).
 * @return IKV_OK; IKV_ERR_INVALID_ARGUMENT (NULL out_seq); IKV_ERR_NOT_FOUND (no sequence `src`);
 *         IKV_ERR_OUT_OF_RANGE (the session already holds max_sequences); IKV_ERR_OUT_OF_MEMORY (checked before
 *         anything is made: the session's sequences, every shared window counted as if copied, and on the CPU its
 *         KV pool, could then take more host memory than the machine's physical memory; or an allocation failed);
 *         IKV_ERR_BAD_HANDLE. On failure nothing changed.
 */
IKV_API int32_t ikv_seq_fork(int32_t *out_seq, ikv_session *session, int32_t src);
/**
 * Drops positions >= length in every layer (logits are cleared; decode before sampling). Emptied blocks return to
 * the pool; blocks shared with a fork stay with it.
 * @return IKV_OK; IKV_ERR_OUT_OF_RANGE (length < 0 or beyond the sequence's length); IKV_ERR_NOT_FOUND;
 *         IKV_ERR_BAD_HANDLE. On failure nothing changed.
 */
IKV_API int32_t ikv_seq_truncate(ikv_session *session, int32_t seq, int64_t length);
/**
 * Drops the cached tokens at positions [begin, end) in every layer (the logical length is unchanged; later tokens
 * keep their positions; an empty range or one past the end drops nothing). Emptied blocks return to the pool.
 * @return IKV_OK; IKV_ERR_OUT_OF_RANGE (begin < 0 or end < begin); IKV_ERR_KV_FULL (blocks shared with a fork
 *         would need copies and the pool has no room); IKV_ERR_OUT_OF_MEMORY (host memory for the compaction);
 *         IKV_ERR_NOT_FOUND; IKV_ERR_BAD_HANDLE. On failure nothing changed.
 */
IKV_API int32_t ikv_seq_remove_range(ikv_session *session, int32_t seq, int64_t begin, int64_t end);
/**
 * The sequence's logical length (positions appended) into *out (0 on failure).
 * @return IKV_OK; IKV_ERR_INVALID_ARGUMENT (NULL out); IKV_ERR_NOT_FOUND; IKV_ERR_BAD_HANDLE.
 */
IKV_API int32_t ikv_seq_length(int64_t *out, const ikv_session *session, int32_t seq);
/**
 * Tokens kept in `layer` (after compression this is below the length) into *out (0 on failure).
 * @return IKV_OK; IKV_ERR_INVALID_ARGUMENT (NULL out); IKV_ERR_OUT_OF_RANGE (layer < 0 or >= the model's layers);
 *         IKV_ERR_NOT_FOUND; IKV_ERR_BAD_HANDLE.
 */
IKV_API int32_t ikv_seq_kept(int64_t *out, const ikv_session *session, int32_t seq, int32_t layer);
/**
 * Bytes of KV blocks the sequence holds (block rounding included; shared blocks counted in full) into *out (0 on
 * failure).
 * @return IKV_OK; IKV_ERR_INVALID_ARGUMENT (NULL out); IKV_ERR_NOT_FOUND; IKV_ERR_BAD_HANDLE.
 */
IKV_API int32_t ikv_seq_kv_bytes(int64_t *out, const ikv_session *session, int32_t seq);
/**
 * Bytes of KV blocks the sequence would hold uncompressed: every position of its logical length in every layer, in
 * whole blocks, counted as ikv_seq_kv_bytes counts what it holds (compare the two for what compression saved) into
 * *out (0 on failure). A query; changes nothing.
 * @return IKV_OK; IKV_ERR_INVALID_ARGUMENT (NULL out); IKV_ERR_NOT_FOUND; IKV_ERR_BAD_HANDLE.
 */
IKV_API int32_t ikv_seq_kv_bytes_uncompressed(int64_t *out, const ikv_session *session, int32_t seq);
/**
 * What compression holds the sequence to now, in tokens per layer (mean over layers): its budget
 * (*out_budget_tokens: budget_tokens, or budget_fraction x its length rounded, at least 1) and the slack above it
 * (*out_slack_tokens). With the default `interval` the session compresses the sequence back to its budget whenever
 * it holds more than budget + slack after a decode, a message or a generated token (the slack is a quarter of the
 * budget rounded up to whole blocks, at least one block); with an explicit interval the slack is that interval.
 * Protected tokens never take a layer past budget + slack (packaging/docs/cli.md "When compression runs"). With
 * IKV_POLICY_NONE both are 0; with a quality target alone (max_loss, no budget) the budget is 0 and the slack is
 * how far the sequence may grow past what its latest compression kept. A query; changes nothing.
 * @return IKV_OK; IKV_ERR_INVALID_ARGUMENT (NULL out_budget_tokens or out_slack_tokens); IKV_ERR_NOT_FOUND;
 *         IKV_ERR_BAD_HANDLE. On failure both outputs are 0.
 */
IKV_API int32_t ikv_seq_budget(int64_t *out_budget_tokens, int64_t *out_slack_tokens, const ikv_session *session,
                               int32_t seq);
/**
 * The sequence's protection: never-evicted tokens (its protected spans, within its length: *out_protected_tokens)
 * and the protected tokens released so far (*out_released_tokens) because protection must stay within the budget:
 * when never-evicted tokens would take more than budget + slack of a layer, or the spans after the first more than
 * half of the budget beyond the observation window, whole spans are released at the next compression, the oldest
 * first and the first span (a system prompt) last, and become ordinary tokens the policy ranks. The released count
 * starts at 0 for a restored sequence. A query; changes nothing.
 * @return IKV_OK; IKV_ERR_INVALID_ARGUMENT (NULL out_protected_tokens or out_released_tokens); IKV_ERR_NOT_FOUND;
 *         IKV_ERR_BAD_HANDLE. On failure both outputs are 0.
 */
IKV_API int32_t ikv_seq_protection(int64_t *out_protected_tokens, int64_t *out_released_tokens,
                                   const ikv_session *session, int32_t seq);

/**
 * Appends tokens to one sequence and runs the model; the logits of the last token become available.
 * All or nothing: on failure nothing changes, in any sequence of the session. When the pool cannot hold the step and
 * a compression policy is on, the sequences over their budget whose compression costs least per freed block (by
 * the policy's own scores) are compressed, only as many as the step needs and only if the step then fits; when
 * even compressing them all would not make room, the call fails with IKV_ERR_KV_FULL having compressed nothing.
 * @return IKV_OK, IKV_ERR_BAD_HANDLE, IKV_ERR_INVALID_ARGUMENT (NULL tokens or n == 0), IKV_ERR_NOT_FOUND,
 *         IKV_ERR_OUT_OF_RANGE (a token outside the vocabulary), IKV_ERR_KV_FULL, IKV_ERR_OUT_OF_MEMORY.
 */
IKV_API int32_t ikv_decode(ikv_session *session, int32_t seq, const int32_t *tokens, size_t n_tokens);

/**
 * Decodes a batch that may mix sequences: item i appends tokens[i] to seq_ids[i] (items of one sequence in order).
 * Each sequence's last item gets logits (read with ikv_get_logits). Same statuses as ikv_decode.
 */
IKV_API int32_t ikv_decode_batch(ikv_session *session, const int32_t *seq_ids, const int32_t *tokens, size_t n_items);

/**
 * Copies the logits of the sequence's latest token.
 * @param out       buffer of `capacity` floats; *out_count receives n_vocab.
 * @return IKV_OK; IKV_ERR_BUFFER_TOO_SMALL; IKV_ERR_BAD_STATE before the first decode (or after a truncate);
 *         IKV_ERR_NOT_FOUND; IKV_ERR_BAD_HANDLE.
 */
IKV_API int32_t ikv_get_logits(float *out, size_t capacity, size_t *out_count, const ikv_session *session, int32_t seq);

/* ---- KV accounting ---- */
/* Pool statistics for ikv_kv_stat. Their own prefix, apart from the IKV_KV_F32 ... Q4_0 element types. */
#define IKV_KV_STAT_BLOCKS_TOTAL 1
#define IKV_KV_STAT_BLOCKS_USED 2
#define IKV_KV_STAT_BLOCKS_FREE 3
#define IKV_KV_STAT_BLOCK_BYTES 4
#define IKV_KV_STAT_BYTES_USED 5
#define IKV_KV_STAT_BLOCK_SIZE 6
/* Host memory outside the pool, in bytes: the pool's block bookkeeping and every sequence's block tables, importance
 * channels, observation window, token history and logits (forks share the observation window until one of them
 * changes it; shared windows are counted once). */
#define IKV_KV_STAT_HOST_BYTES 7
/* The names before IKV_KV_STAT_*, kept as aliases (same values). */
#define IKV_KV_BLOCKS_TOTAL 1
#define IKV_KV_BLOCKS_USED 2
#define IKV_KV_BLOCKS_FREE 3
#define IKV_KV_BLOCK_BYTES 4
#define IKV_KV_BYTES_USED 5
#define IKV_KV_BLOCK_SIZE 6
#define IKV_KV_HOST_BYTES 7
/**
 * Reads one pool statistic (IKV_KV_STAT_*) into *out (0 on failure).
 * @return IKV_OK; IKV_ERR_INVALID_ARGUMENT (NULL out or an unknown stat); IKV_ERR_BAD_HANDLE.
 */
IKV_API int32_t ikv_kv_stat(int64_t *out, const ikv_session *session, int32_t stat);
/**
 * The estimate memory pressure ranks sequences by (see ikv_decode): what compressing `seq` to its budget now would
 * free, in whole KV blocks returned to the pool (*out_blocks), and the estimated loss per freed block
 * (*out_cost_per_block: the share of the policy's own score mass the compression would evict, mean over layers, in
 * 0..1, divided by *out_blocks). Under pressure the sequences with the lowest cost per block are compressed first.
 * Both are 0 when the sequence is at or under its budget, when compressing it would free no block (e.g. blocks it
 * shares with a fork), or when the session's policy is IKV_POLICY_NONE. A query: the compression is planned (the
 * policy scores the cache, on the session's device) but not applied, and nothing in the session changes.
 * Ownership: both outputs are plain values written by the call. Thread safety: as every session call.
 * @return IKV_OK; IKV_ERR_INVALID_ARGUMENT (NULL out_blocks or out_cost_per_block); IKV_ERR_NOT_FOUND (no such
 *         sequence); IKV_ERR_BAD_HANDLE; IKV_ERR_OUT_OF_MEMORY (scoring's scratch could not be allocated).
 *         On failure both outputs are 0.
 */
IKV_API int32_t ikv_seq_pressure_estimate(int64_t *out_blocks, double *out_cost_per_block, const ikv_session *session,
                                          int32_t seq);

/* ---- compression ---- */
/**
 * Marks positions [begin, end) of `seq` as never evicted (fair == 0) or as a fair-share span (fair != 0). An empty
 * span does nothing; never-evicted spans that overlap or touch merge into one.
 * @return IKV_OK; IKV_ERR_INVALID_ARGUMENT (begin < 0 or end < begin); IKV_ERR_OUT_OF_RANGE (the sequence would
 *         hold more than 4096 spans); IKV_ERR_NOT_FOUND; IKV_ERR_BAD_HANDLE. On failure nothing changed.
 */
IKV_API int32_t ikv_seq_protect(ikv_session *session, int32_t seq, int64_t begin, int64_t end, int32_t fair);
/**
 * Compresses `seq` now, to budget_tokens per layer (0: the session's configured budget; a layer holding no more
 * than that is left as it is). Freed blocks return to the pool.
 * @return IKV_OK; IKV_ERR_INVALID_ARGUMENT (budget_tokens < 0); IKV_ERR_BAD_STATE (the session's policy is
 *         IKV_POLICY_NONE); IKV_ERR_KV_FULL (the sequence shares blocks with a fork and the pool has no free blocks
 *         for the copies compaction needs, or, under IKV_POLICY_KVZIP, none for the replay's smallest chunk);
 *         IKV_ERR_OUT_OF_MEMORY (scoring's scratch or the compaction's host
 *         memory); IKV_ERR_NOT_FOUND; IKV_ERR_BAD_HANDLE. On failure nothing changed.
 */
IKV_API int32_t ikv_seq_compress(ikv_session *session, int32_t seq, int32_t budget_tokens);

/* Which question a compression serves, i.e. whose queries rank the tokens for the window policies (snapkv, infokv,
 * tova, pyramidkv) and for auto (packaging/docs/c_api.md "Which question"): */
#define IKV_QUESTION_BOTH 0  /* the two below together: what either ranks high is kept */
#define IKV_QUESTION_NEXT 1  /* the tokens that follow at once (a reply being generated): the latest tokens' queries */
#define IKV_QUESTION_LATER 2 /* a question not yet asked (a chat's history, a document, a cache about to be saved): a
                              * probe's queries ("Summarize the text above.", "Repeat the previous context exactly.");
                              * the default of ikv_seq_compress and of automatic compressions (measured: it serves the
                              * next tokens about as well as NEXT does, packaging/docs/c_api.md "Which question") */
/**
 * ikv_seq_compress for a stated question (IKV_QUESTION_*; ikv_seq_compress serves the config's compression.question,
 * LATER unless set). LATER and BOTH first run the probe questions (a few dozen tokens) through the model after the
 * sequence, in a temporary fork that is removed at once; when the pool has no
 * room for it the latest tokens' queries alone are used, and ikv_seq_compression_question says so. Under
 * IKV_POLICY_AUTO, LATER with a byte budget (budget_tokens > 0, or the session's budget without a quality target)
 * also replays the context, as IKV_POLICY_KVZIP does (one more pass over the sequence's tokens; the probe alone where
 * the pool has no room for it); automatic compressions (the memory trigger, memory pressure) use the probe alone.
 * Policies that read no queries (h2o, streaming, kvzip) ignore `question`.
 * @return as ikv_seq_compress; IKV_ERR_INVALID_ARGUMENT also for a question outside IKV_QUESTION_*. On failure nothing
 *         changed.
 */
IKV_API int32_t ikv_seq_compress_for(ikv_session *session, int32_t seq, int32_t budget_tokens, int32_t question);
/**
 * What the sequence's latest compression served: *out_question an IKV_QUESTION_* (NEXT before any compression, under
 * a policy that reads no queries, or when the probe did not fit the pool), *out_probe_seconds what its evidence for a
 * later question took: the probe's run, or auto's context replay (0 without either). Ownership: plain values written by the call.
 * @return IKV_OK; IKV_ERR_INVALID_ARGUMENT (a NULL output); IKV_ERR_NOT_FOUND; IKV_ERR_BAD_HANDLE. On failure both
 *         outputs are 0.
 */
IKV_API int32_t ikv_seq_compression_question(int32_t *out_question, double *out_probe_seconds, const ikv_session *session,
                                             int32_t seq);

/* ---- what IKV_POLICY_AUTO chose ---- */
/* What ranked a layer's tokens (ikv_seq_auto_layer's *out_evidence). Stable values, only ever appended. */
#define IKV_EVIDENCE_WINDOW_ATTENTION 0      /* attention from the observation window, pooled (as SnapKV) */
#define IKV_EVIDENCE_INFOKV 1                /* window attention mixed with entropy and representation change */
#define IKV_EVIDENCE_ACCUMULATED_ATTENTION 2 /* mean attention received from every later query (as H2O) */
#define IKV_EVIDENCE_LAST_QUERY 3            /* attention from the latest query (as TOVA) */
#define IKV_EVIDENCE_RECENCY 4               /* sink tokens and the most recent (as StreamingLLM) */
#define IKV_EVIDENCE_KEY_NORM 5              /* keys of small norm first */
#define IKV_EVIDENCE_REPLAY 6                /* the context replay (as IKV_POLICY_KVZIP) spreads the budget over the
                                              * layers, and each keeps what the replay or the probe ranks high: a
                                              * compression asked for a later question under a byte budget
                                              * (packaging/docs/c_api.md "Which question") */

/**
 * The name of an IKV_EVIDENCE_* value: "window_attention", "infokv", "accumulated_attention", "last_query",
 * "recency", "key_norm", "replay"; "unknown" for any other value. Static storage, never NULL. Thread-safe.
 */
IKV_API const char *ikv_evidence_name(int32_t evidence);

/**
 * What IKV_POLICY_AUTO chose at the sequence's latest compression, in sum (each layer: ikv_seq_auto_layer). Every
 * compression replaces the report (one by another policy leaves it empty: *out_layers 0); it describes that
 * compression (tokens appended since are not in it), a fork starts with its source's, and a snapshot saves it and
 * restores it with the sequence.
 * @param out_layers          receives the layers the report covers: the model's layer count, or 0 when the
 *                            sequence's latest compression was not under IKV_POLICY_AUTO, or it has had none
 *                            (then every output is 0; a restored snapshot brings the report it saved).
 * @param out_kept_tokens     receives the tokens that compression kept, all layers together: the sum of the layers'
 *                            budgets, or more where protected spans (ikv_seq_protect) held tokens beyond them.
 * @param out_uniform_tokens  receives what a uniform budget would have kept, all layers together; 0 under a quality
 *                            target.
 * @param out_loss            receives the mean over layers of the layers' losses at the chosen budgets
 *                            (ikv_seq_auto_layer's: the relative squared error of the observation window's attention
 *                            output against the full cache, or the replay's dropped share).
 * @param out_max_loss        receives the quality target that compression was held to; 0 when it compressed to a
 *                            byte budget.
 * Ownership: every output is a plain value written by the call. Thread safety: as every session call.
 * @return IKV_OK; IKV_ERR_INVALID_ARGUMENT (a NULL output); IKV_ERR_NOT_FOUND (no such sequence);
 *         IKV_ERR_BAD_HANDLE. On failure every output is 0.
 */
IKV_API int32_t ikv_seq_auto_report(int32_t *out_layers, int64_t *out_kept_tokens, int64_t *out_uniform_tokens,
                                    double *out_loss, double *out_max_loss, const ikv_session *session, int32_t seq);

/**
 * One layer of the report ikv_seq_auto_report describes.
 * @param out_evidence  receives the IKV_EVIDENCE_* value that ranked the layer's tokens.
 * @param out_budget    receives the tokens the layer kept.
 * @param out_alpha     receives the attention weight of the InfoKV mix (the session's alpha) when the evidence is
 *                      IKV_EVIDENCE_INFOKV; 1 otherwise.
 * @param out_loss      receives the layer's proxy loss at that budget; for IKV_EVIDENCE_REPLAY, the share of the
 *                      replay's attention scores that the layer's dropped tokens held.
 * Ownership: every output is a plain value written by the call. Thread safety: as every session call.
 * @return IKV_OK; IKV_ERR_OUT_OF_RANGE (layer < 0 or not below the report's *out_layers, which includes every layer
 *         while the sequence has no report); IKV_ERR_INVALID_ARGUMENT (a NULL output); IKV_ERR_NOT_FOUND (no such
 *         sequence); IKV_ERR_BAD_HANDLE. On failure *out_evidence is -1 and the other outputs are 0.
 */
IKV_API int32_t ikv_seq_auto_layer(int32_t *out_evidence, int32_t *out_budget, double *out_alpha, double *out_loss,
                                   const ikv_session *session, int32_t seq, int32_t layer);

/**
 * The precision a layer of a sequence holds its K/V in now: the session's kv_dtype unless IKV_POLICY_AUTO chose a
 * lower one for it (ikv_session_options.layer_precision) or a snapshot restored it so. Blocks have the same bytes
 * whatever their dtype; a q8_0 layer beside an f16 cache holds about 1.9x the tokens per block.
 * @param out_value  receives the IKV_KV_* value.
 * Ownership: a plain value written by the call. Thread safety: as every session call.
 * @return IKV_OK; IKV_ERR_OUT_OF_RANGE (layer < 0 or >= the model's layers); IKV_ERR_INVALID_ARGUMENT (NULL
 *         out_value); IKV_ERR_NOT_FOUND (no such sequence); IKV_ERR_BAD_HANDLE. On failure *out_value is 0.
 */
IKV_API int32_t ikv_seq_layer_dtype(int32_t *out_value, const ikv_session *session, int32_t seq, int32_t layer);

/* ---- tuning profiles (what IKV_POLICY_AUTO learned on a workload; schemas/profile.fbs) ---- */

/**
 * Loads a tuning profile (written by `infokv tune` or ikv_session_save_profile) into the session. From then on each
 * IKV_POLICY_AUTO compression under a byte budget starts from the profile's layer shape (a layer's floor is half
 * the budget times its recorded share of the uniform budget, clamped to [0.5, 1.5]), and every such compression
 * refines the profile (running mean of the shares, evidence counts, compressions).
 * Ownership: the path is read during the call and not retained. Thread safety: as every session call.
 * @return IKV_OK; IKV_ERR_IO (missing or not a regular file); IKV_ERR_BAD_CONFIG (not a profile, truncated,
 *         corrupted or invalid values); IKV_ERR_VERSION (needs a newer reader); IKV_ERR_WRONG_MODEL (another
 *         model's or tokenizer's fingerprint, or another layer count); IKV_ERR_INVALID_ARGUMENT (NULL path);
 *         IKV_ERR_BAD_HANDLE. On failure the session is unchanged.
 */
IKV_API int32_t ikv_session_load_profile(ikv_session *session, const char *path);

/**
 * Writes the session's tuning profile to `path` atomically (readers see the old file or the whole new one). A
 * session without a loaded profile starts an empty, record-only one at its first IKV_POLICY_AUTO compression under a
 * byte budget, so this also saves what auto did in a session that never loaded one.
 * @return IKV_OK; IKV_ERR_BAD_STATE (no profile: none loaded and no auto compression under a byte budget yet);
 *         IKV_ERR_IO; IKV_ERR_INVALID_ARGUMENT (NULL path); IKV_ERR_BAD_HANDLE.
 */
IKV_API int32_t ikv_session_save_profile(const ikv_session *session, const char *path);

/**
 * The session's tuning profile in sum.
 * @param out_compressions  receives the byte-budget auto compressions the profile has seen (0 without one).
 * @param out_layers        receives its layer count: the model's, or 0 when the session has no profile.
 * @param out_guides        receives 1 when the profile was loaded (it sets the floors), 0 when it only records or
 *                          there is none.
 * @return IKV_OK; IKV_ERR_INVALID_ARGUMENT (a NULL output); IKV_ERR_BAD_HANDLE. On failure every output is 0.
 */
IKV_API int32_t ikv_session_profile_info(int64_t *out_compressions, int32_t *out_layers, int32_t *out_guides,
                                         const ikv_session *session);

/**
 * The profile's tag (NUL-terminated; empty when it has none), with the size-query protocol: *out_len receives its
 * length without the NUL; a `capacity` under *out_len + 1 gives IKV_ERR_BUFFER_TOO_SMALL (out[0] = NUL if capacity
 * > 0). out may be NULL with capacity 0.
 * @return IKV_OK; IKV_ERR_BUFFER_TOO_SMALL; IKV_ERR_BAD_STATE (no profile); IKV_ERR_INVALID_ARGUMENT;
 *         IKV_ERR_BAD_HANDLE.
 */
IKV_API int32_t ikv_session_profile_tag(char *out, size_t capacity, size_t *out_len, const ikv_session *session);

#ifdef __cplusplus
}
#endif

#endif /* INFOKV_SESSION_H */
