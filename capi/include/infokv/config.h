/*
 * infokv configs: one FlatBuffers schema (schemas/config.fbs, compiled into the library) for everything a user
 * may set. Build a config from JSON text or from the binary form, read it back in either form, and create models,
 * sessions and samplers from it. Included by infokv.h; the conventions at the top of infokv.h apply.
 *
 * Thread safety: an ikv_config is immutable after it is made, so it may be shared by threads.
 */
#ifndef INFOKV_CONFIG_H
#define INFOKV_CONFIG_H

#ifndef INFOKV_INFOKV_H
#error "include <infokv/infokv.h>, not <infokv/config.h>"
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ikv_config ikv_config;

/**
 * Creates a config holding every default.
 * @return IKV_OK, IKV_ERR_INVALID_ARGUMENT (NULL out), IKV_ERR_OUT_OF_MEMORY. Free with ikv_config_free().
 */
IKV_API int32_t ikv_config_create(ikv_config **out);

/**
 * Parses a JSON config (the field names of schemas/config.fbs, e.g. {"threads": 4, "compression": {"policy":
 * "infokv", "budget_fraction": 0.25}}). Absent fields keep their defaults.
 * What is accepted, exactly: one RFC 8259 JSON object, nothing else. Refused: comments, single quotes, unquoted
 * keys, trailing commas, hex or octal-looking numbers (0x10, 010), a leading '+', NaN and Infinity, numbers
 * outside double range, duplicate keys, invalid UTF-8. Each value must have its field's JSON type: a table is an
 * object; a number field takes a JSON number (a string such as "4" is refused), and an integer field one written
 * without fraction or exponent; a flag takes true or false; a string field a string; an enum field (kv_dtype,
 * compression.shape) one of its names as a string. compression.policy takes exactly one policy name as a string
 * ("none", "infokv", "snapkv", "h2o", "streaming", "tova", "pyramidkv", "auto"): a number (the schema's numbering
 * differs from IKV_POLICY_*) or several names ("infokv h2o") is refused. A policy other than "none" needs
 * compression.budget_fraction or budget_tokens, except "auto" with compression.max_loss > 0 (a quality target);
 * max_loss > 0 with another policy is refused.
 * @param text  UTF-8 JSON of `len` bytes (need not be NUL-terminated; must not contain NUL).
 * @return IKV_OK; IKV_ERR_BAD_CONFIG for text that is not such JSON, a value of the wrong JSON type, an unknown
 *         field or an out-of-range value (the message names the field; for malformed JSON it gives the byte
 *         offset); IKV_ERR_INVALID_ARGUMENT for NULL arguments; IKV_ERR_OUT_OF_MEMORY.
 */
IKV_API int32_t ikv_config_from_json(ikv_config **out, const char *text, size_t len);

/**
 * Reads the binary form (a FlatBuffer with identifier "IKVC"); it is verified before it is read. Enum fields carry
 * the schema's values (compression.policy: UNSPECIFIED = 0 means none, then none = 1 ... pyramidkv = 7, auto = 8,
 * which are not the IKV_POLICY_* values); a value the schema does not name is refused.
 * @return IKV_OK; IKV_ERR_BAD_CONFIG (not a config, fails verification, an unknown enum value or an out-of-range
 *         value, the message naming the field);
 *         IKV_ERR_INVALID_ARGUMENT; IKV_ERR_OUT_OF_MEMORY.
 */
IKV_API int32_t ikv_config_from_binary(ikv_config **out, const void *bytes, size_t len);

/**
 * Writes the config as indented JSON listing every field (NUL-terminated) into the caller's buffer.
 * @param out      buffer of `capacity` bytes (NULL with capacity 0 to query the size).
 * @param out_len  receives the length without the NUL.
 * @return IKV_OK; IKV_ERR_BUFFER_TOO_SMALL (only *out_len set); IKV_ERR_BAD_HANDLE; IKV_ERR_INVALID_ARGUMENT.
 */
IKV_API int32_t ikv_config_to_json(char *out, size_t capacity, size_t *out_len, const ikv_config *config);

/**
 * Writes the binary form into the caller's buffer (same size-query protocol as ikv_config_to_json; no NUL).
 * @return IKV_OK; IKV_ERR_BUFFER_TOO_SMALL; IKV_ERR_BAD_HANDLE; IKV_ERR_INVALID_ARGUMENT.
 */
IKV_API int32_t ikv_config_to_binary(void *out, size_t capacity, size_t *out_len, const ikv_config *config);

/** Frees a config; NULL is ignored. Objects made from it do not need it any more. */
IKV_API void ikv_config_free(ikv_config *config);

/**
 * Copies the config's model path ("" when unset), NUL-terminated, with the size-query protocol.
 * @return IKV_OK; IKV_ERR_BUFFER_TOO_SMALL; IKV_ERR_BAD_HANDLE; IKV_ERR_INVALID_ARGUMENT.
 */
IKV_API int32_t ikv_config_get_model_path(char *out, size_t capacity, size_t *out_len, const ikv_config *config);

/**
 * Loads the model named by the config's model_path: an absolute path as it is; a relative one under the working
 * directory or, when nothing is there, under $INFOKV_MODELS_DIR (when set) — the one rule the CLI's --config follows
 * too. Any file the process can read.
 * When configs come from someone the embedder does not trust, use ikv_model_load_with_config_confined instead.
 * @return the statuses of ikv_model_load; IKV_ERR_BAD_CONFIG when model_path is empty; IKV_ERR_BAD_HANDLE.
 */
IKV_API int32_t ikv_model_load_with_config(ikv_model **out, const ikv_config *config);

/**
 * Loads the model named by the config's model_path, confined to the directory `allowed_dir`: a relative
 * model_path is taken relative to allowed_dir (an absolute one as it is), the result is resolved with realpath
 * (every symlink followed, "." and ".." removed) and must lie inside allowed_dir's own resolved path; a Hugging
 * Face checkpoint directory must moreover hold no entry that resolves outside. So "..", absolute paths and
 * symlinks that escape are refused. Every such refusal, and a model_path that does not exist or cannot be
 * resolved, gives the same status and the same message, so a config cannot learn which files exist outside the
 * directory (or inside it, beyond what the loader's own errors say about a file inside).
 * The check and the open are two steps: a directory that someone else may rearrange between them (swapping a
 * checked file for a link) is not protected; allowed_dir should be one that only the embedder writes.
 * @param allowed_dir  UTF-8, NUL-terminated; read only during the call.
 * @return IKV_OK; IKV_ERR_IO ("model_path '...' does not name a model inside the allowed directory") for a
 *         missing, unresolvable or escaping model_path; IKV_ERR_BAD_CONFIG when model_path is empty;
 *         IKV_ERR_INVALID_ARGUMENT (NULL out or allowed_dir, or allowed_dir not an existing directory);
 *         IKV_ERR_BAD_HANDLE; then the statuses of ikv_model_load for the resolved file.
 * Thread-safe (the config is immutable).
 */
IKV_API int32_t ikv_model_load_with_config_confined(ikv_model **out, const ikv_config *config, const char *allowed_dir);

/**
 * Creates a session (with one empty sequence, id 0) from the config's threads, KV layout, pool size, compression
 * and protection settings. protection.protect_prefix is applied to sequence 0 and to every sequence added later
 * with ikv_seq_add. The config's device is resolved as ikv_session_options.device is (but a config defaults to
 * "auto"): "cuda" or "cuda:N" without such a usable GPU gives IKV_ERR_NO_DEVICE.
 * self_tuning is deprecated (never applied): a config with self_tuning.enabled = true is refused when read.
 * @return the statuses of ikv_session_create; IKV_ERR_NO_DEVICE.
 */
IKV_API int32_t ikv_session_create_with_config(ikv_session **out, ikv_model *model, const ikv_config *config);

/** Creates a sampler from the config's sampler settings. Statuses as ikv_sampler_create, plus IKV_ERR_BAD_HANDLE. */
IKV_API int32_t ikv_sampler_create_with_config(ikv_sampler **out, const ikv_config *config);

#ifdef __cplusplus
}
#endif

#endif /* INFOKV_CONFIG_H */
