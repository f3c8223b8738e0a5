/*
 * infokv: samplers, and generation (ikv_generate) with a session and a sampler.
 * Part of the public C API: include <infokv/infokv.h>, which includes this header (conventions there).
 */
#ifndef INFOKV_SAMPLER_H
#define INFOKV_SAMPLER_H

#ifndef INFOKV_INFOKV_H
#error "include <infokv/infokv.h>, not <infokv/sampler.h>"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- sampling ---- */
#define IKV_SAMPLER_OPTIONS_VERSION 1
typedef struct ikv_sampler_options {
  uint32_t struct_size;
  uint32_t version;
  float temperature;      /* <= 0 (negative too): greedy; default 0.8 */
  int32_t top_k;          /* <= 0: off; default 40 */
  float top_p;            /* >= 1: off; default 0.95 */
  float min_p;            /* <= 0: off; default 0.05 */
  float repeat_penalty;   /* 1: off (default) */
  int32_t repeat_last_n;  /* default 64 */
  uint64_t seed;          /* default 0 */
} ikv_sampler_options;

#define IKV_SAMPLER_OPTIONS_INIT \
  { (uint32_t)sizeof(ikv_sampler_options), IKV_SAMPLER_OPTIONS_VERSION, 0.8f, 40, 0.95f, 0.05f, 1.0f, 64, 0 }

/**
 * Fills `opts` with the defaults of revision `version` (same values as IKV_SAMPLER_OPTIONS_INIT): writes at most
 * `struct_size` bytes (sizeof(ikv_sampler_options) as the caller compiled it), sets opts->struct_size to it and
 * opts->version to `version`, and never writes past the fields that revision has. Call it through
 * ikv_sampler_options_init(opts), which passes this header's size and version.
 * @return IKV_OK; IKV_ERR_INVALID_ARGUMENT (NULL opts; version 0; struct_size smaller than that revision's fields);
 *         IKV_ERR_VERSION (version newer than this library's IKV_SAMPLER_OPTIONS_VERSION: the message gives both).
 *         On failure nothing is written.
 */
IKV_API int32_t ikv_sampler_options_init_version(ikv_sampler_options *opts, size_t struct_size, uint32_t version);
/**
 * The entry point of programs built before the versioned initialiser (no size, no version): writes revision 1,
 * the released 0.1 header's, and will never write a later one, so it never writes past such a caller's struct.
 * Sources built against this header reach ikv_sampler_options_init_version instead through the macro below, with
 * this header's size and version.
 * @return IKV_OK; IKV_ERR_INVALID_ARGUMENT (NULL opts).
 */
IKV_API int32_t ikv_sampler_options_init(ikv_sampler_options *opts);
#define ikv_sampler_options_init(opts) \
  ikv_sampler_options_init_version((opts), sizeof(ikv_sampler_options), IKV_SAMPLER_OPTIONS_VERSION)
/**
 * Creates a sampler (NULL opts: defaults). A temperature <= 0 (negative included) means greedy, as in llama.cpp.
 * @return IKV_OK; IKV_ERR_INVALID_ARGUMENT (out NULL; a temperature that is NaN or infinite; top_p NaN or < 0; min_p
 *         outside [0, 1]; repeat_penalty not a positive finite number; repeat_last_n < 0; struct_size or version
 *         not from IKV_SAMPLER_OPTIONS_INIT / ikv_sampler_options_init).
 */
IKV_API int32_t ikv_sampler_create(ikv_sampler **out, const ikv_sampler_options *opts);
/** Frees a sampler; NULL is ignored. */
IKV_API void ikv_sampler_free(ikv_sampler *sampler);
/**
 * Samples the next token from the sequence's current logits and records it for the repetition penalty.
 * @return IKV_OK, IKV_ERR_BAD_STATE (no logits yet), IKV_ERR_NOT_FOUND, IKV_ERR_BAD_HANDLE.
 */
IKV_API int32_t ikv_sample(int32_t *out_token, ikv_sampler *sampler, const ikv_session *session, int32_t seq);

/**
 * Streaming callback: called once per generated token with the text it completed (valid UTF-8, possibly empty,
 * not NUL-terminated; `text` is valid only during the call). token is -1 for a final flush of held-back bytes.
 * Return 0 to continue, non-zero to stop (ikv_generate then returns IKV_ERR_CANCELLED, keeping what was made).
 */
typedef int32_t (*ikv_token_callback)(void *user_data, int32_t token, const char *text, size_t text_len);

/**
 * Generates up to max_tokens tokens into `seq`: decodes `prompt` first (may be NULL/0 when the sequence already has
 * logits), then samples, streaming each token to `callback` (may be NULL). Stops at EOS. With a compression policy,
 * the prompt is prefilled in chunks of the session's ubatch (256) tokens, or fewer when the pool has less room
 * (down to one token), and compressed once at its end; part-way only when it would otherwise hold more than 4x the
 * budget it will have at its end, or when the pool cannot take the next chunk (so a prompt longer than the pool
 * fits, and fails with IKV_ERR_KV_FULL only when not one more token fits after compressing it to its budget). Then
 * each generated token is compressed by the session's trigger (ikv_seq_budget). The prefill is all or nothing (on
 * failure the sequence is as before; meanwhile memory pressure compresses only this sequence).
 * @param out_tokens  buffer for the generated ids (may be NULL: then capacity must be 0 and only *out_count is
 *                    set); *out_count receives how many were generated. When out_tokens is not NULL and capacity
 *                    < max_tokens the call returns IKV_ERR_BUFFER_TOO_SMALL before doing anything, with
 *                    *out_count = max_tokens (the capacity to allocate), like every other buffer call.
 * Each token is decoded into the sequence before it is reported, stored or streamed, and only then recorded by the
 * sampler. When a decode fails part-way (e.g. IKV_ERR_KV_FULL), the call returns that status with *out_count (and
 * out_tokens) holding the tokens generated before it: they are in the sequence, the sampler has accepted exactly
 * those, and its random state is as before the draw whose decode failed, so a later call continues identically.
 * @return IKV_OK; IKV_ERR_CANCELLED (callback stopped it; generated tokens stay in the sequence);
 *         IKV_ERR_BUFFER_TOO_SMALL (nothing done, see out_tokens); IKV_ERR_INVALID_ARGUMENT (max_tokens < 0, prompt
 *         NULL with n_prompt > 0, out_tokens NULL with capacity > 0); every status of ikv_decode (a failed prompt decode changes nothing; a later one keeps what was made).
 */
IKV_API int32_t ikv_generate(int32_t *out_tokens, size_t capacity, size_t *out_count, ikv_session *session,
                             int32_t seq, const int32_t *prompt, size_t n_prompt, int32_t max_tokens,
                             ikv_sampler *sampler, ikv_token_callback callback, void *user_data);

#ifdef __cplusplus
}
#endif

#endif /* INFOKV_SAMPLER_H */
