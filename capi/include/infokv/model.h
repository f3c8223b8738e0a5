/*
 * infokv: loading a model (GGUF or a Hugging Face directory), what it is, and its tokenizer.
 * Part of the public C API: include <infokv/infokv.h>, which includes this header (conventions there).
 */
#ifndef INFOKV_MODEL_H
#define INFOKV_MODEL_H

#ifndef INFOKV_INFOKV_H
#error "include <infokv/infokv.h>, not <infokv/model.h>"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- model ---- */

/**
 * Loads a GGUF model (memory-mapped; weights are not copied).
 * @param out   receives the model; NULL on failure.
 * @param path  file path (UTF-8).
 * @return IKV_OK, IKV_ERR_INVALID_ARGUMENT (NULL argument), IKV_ERR_IO (also for a path that is not a regular
 *         file or directory: a FIFO or device is refused without blocking), IKV_ERR_BAD_MODEL (also a GGUF version
 *         of 0 or above 255: damage, not a newer format), IKV_ERR_UNSUPPORTED (GGUF version 1 or 4..255,
 *         architecture, tensor type or tokenizer this version does not run), IKV_ERR_OUT_OF_MEMORY.
 * Ownership: free with ikv_model_free() after every session that uses it is freed.
 */
IKV_API int32_t ikv_model_load(ikv_model **out, const char *path);
/** Frees a model; NULL is ignored. Sessions made from it must be freed first. */
IKV_API void ikv_model_free(ikv_model *model);

/* Integer properties for ikv_model_get_int. */
#define IKV_MODEL_N_VOCAB 1
#define IKV_MODEL_N_EMBD 2
#define IKV_MODEL_N_LAYER 3
#define IKV_MODEL_N_HEAD 4
#define IKV_MODEL_N_HEAD_KV 5
#define IKV_MODEL_HEAD_DIM 6
#define IKV_MODEL_N_FF 7
#define IKV_MODEL_N_CTX_TRAIN 8
#define IKV_MODEL_BOS 9          /* -1 when the model has none */
#define IKV_MODEL_EOS 10         /* -1 when the model has none */
#define IKV_MODEL_N_PARAMS 11
#define IKV_MODEL_WEIGHT_BYTES 12

/**
 * Reads an integer property (IKV_MODEL_*).
 * @return IKV_OK, IKV_ERR_BAD_HANDLE, IKV_ERR_INVALID_ARGUMENT (NULL out or unknown property).
 */
IKV_API int32_t ikv_model_get_int(int64_t *out, const ikv_model *model, int32_t property);

/**
 * Describes the model as a JSON object (architecture, sizes, tokenizer, tensor types) into the caller's buffer.
 * @param out       buffer of `capacity` bytes (may be NULL when capacity is 0 to query the size).
 * @param out_len   receives the length without the terminating NUL.
 * @return IKV_OK; IKV_ERR_BUFFER_TOO_SMALL when capacity < *out_len + 1 (nothing written but the size);
 *         IKV_ERR_BAD_HANDLE; IKV_ERR_INVALID_ARGUMENT.
 */
IKV_API int32_t ikv_model_describe(char *out, size_t capacity, size_t *out_len, const ikv_model *model);

/**
 * Text to token ids. Text is text: a control token's text in it (e.g. "<|im_start|>", "<|eot_id|>", "</s>") is
 * tokenised as the characters it is made of, never as the control token, so user input cannot forge a chat turn
 * or end one. Parsing those texts into their tokens is a choice the caller makes explicitly: ikv_tokenize_ex with
 * IKV_TOKENIZE_PARSE_SPECIAL (for prompts the program writes itself; chats should use ikv_chat_tokenize).
 * @param out_tokens  buffer for `capacity` ids (may be NULL when capacity is 0).
 * @param out_count   receives the number of ids the text needs.
 * @param add_bos     non-zero: prepend the model's BOS token (if it has one).
 * @return IKV_OK; IKV_ERR_BUFFER_TOO_SMALL (then *out_count is the size to allocate); IKV_ERR_BAD_HANDLE;
 *         IKV_ERR_INVALID_ARGUMENT. Any bytes are accepted (invalid UTF-8 becomes byte tokens).
 */
IKV_API int32_t ikv_tokenize(int32_t *out_tokens, size_t capacity, size_t *out_count, const ikv_model *model,
                             const char *text, size_t text_len, int32_t add_bos);

/* Flags of ikv_tokenize_ex (bitwise or). */
#define IKV_TOKENIZE_ADD_BOS 1u       /* prepend the model's BOS token (if it has one) */
#define IKV_TOKENIZE_PARSE_SPECIAL 2u /* the texts of control and user-defined tokens become those tokens */

/**
 * ikv_tokenize with flags (IKV_TOKENIZE_*): ikv_tokenize(..., add_bos) is ikv_tokenize_ex(..., add_bos ?
 * IKV_TOKENIZE_ADD_BOS : 0). With IKV_TOKENIZE_PARSE_SPECIAL, "<|im_start|>user" becomes the control token and
 * "user": only for text the program trusts.
 * @return as ikv_tokenize; IKV_ERR_INVALID_ARGUMENT also for an unknown flag bit.
 */
IKV_API int32_t ikv_tokenize_ex(int32_t *out_tokens, size_t capacity, size_t *out_count, const ikv_model *model,
                                const char *text, size_t text_len, uint32_t flags);

/**
 * Token ids to text (the bytes they stand for; control tokens give nothing). The result is NUL-terminated.
 * @return IKV_OK; IKV_ERR_BUFFER_TOO_SMALL when capacity < *out_len + 1; IKV_ERR_OUT_OF_RANGE for a bad id;
 *         IKV_ERR_BAD_HANDLE; IKV_ERR_INVALID_ARGUMENT.
 */
IKV_API int32_t ikv_detokenize(char *out, size_t capacity, size_t *out_len, const ikv_model *model,
                               const int32_t *tokens, size_t n_tokens);

#ifdef __cplusplus
}
#endif

#endif /* INFOKV_MODEL_H */
