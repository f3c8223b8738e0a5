/*
 * infokv chat: conversations in the model's own chat template (ChatML as SmolLM2 and Qwen use, Llama 3's header
 * format), appended to a sequence message by message so earlier turns are never re-read, with what compression must
 * not lose protected. Included by infokv.h; the conventions at the top of infokv.h apply.
 *
 * Protection (`protect` arguments): IKV_CHAT_PROTECT_SYSTEM, the default, keeps the system prompt (the caller's
 * and any the template inserts by itself) and every control token of the template ("<|im_start|>", "<|im_end|>",
 * "<|start_header_id|>", ...) in every layer through any compression; IKV_CHAT_PROTECT_FAIR keeps the control
 * tokens and makes each message's text a fair span (each keeps the same fraction of its tokens); IKV_CHAT_PROTECT_NONE
 * protects nothing. Spans count against the budget like any kept token. A sequence holds at most 4096 spans; a
 * message that would pass it fails with IKV_ERR_OUT_OF_RANGE and changes nothing.
 *
 * Message text is tokenised with special-token parsing off: a user who types "<|im_end|>" cannot end a turn or forge
 * a system message; only the template's own markup becomes control tokens.
 */
#ifndef INFOKV_CHAT_H
#define INFOKV_CHAT_H

#ifndef INFOKV_INFOKV_H
#error "include <infokv/infokv.h>, not <infokv/chat.h>"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Chat formats (ikv_chat_format). */
#define IKV_CHAT_FORMAT_NONE 0
#define IKV_CHAT_FORMAT_CHATML 1
#define IKV_CHAT_FORMAT_LLAMA3 2

/* What a chat call protects from eviction (see above). */
#define IKV_CHAT_PROTECT_SYSTEM 0
#define IKV_CHAT_PROTECT_NONE 1
#define IKV_CHAT_PROTECT_FAIR 2

/**
 * The model's chat format: IKV_CHAT_FORMAT_CHATML or _LLAMA3, detected from tokenizer.chat_template (or the
 * vocabulary's marker tokens); IKV_CHAT_FORMAT_NONE when infokv does not know it (the chat calls then fail with
 * IKV_ERR_UNSUPPORTED). Thread-safe.
 * @return IKV_OK; IKV_ERR_BAD_HANDLE; IKV_ERR_INVALID_ARGUMENT (out NULL).
 */
IKV_API int32_t ikv_chat_format(int32_t *out, const ikv_model *model);

/**
 * The token ids of one message as the template writes it, for display, counting or a caller's own decoding.
 * `first` != 0: the message opens the conversation (BOS when the model adds one, and the template's default system
 * turn when it has one and the message is not a system message). add_generation_prompt != 0: the assistant's header
 * follows. An empty role with add_generation_prompt gives the generation prompt alone. `text` is UTF-8 (any bytes
 * are accepted), `text_len` bytes. Thread-safe.
 * @return IKV_OK; IKV_ERR_BUFFER_TOO_SMALL (then *out_count is the count to allocate); IKV_ERR_UNSUPPORTED (no known
 *         chat format); IKV_ERR_INVALID_ARGUMENT (role not a lower-case word of at most 32 letters or '_', NULL
 *         arguments); IKV_ERR_BAD_HANDLE.
 */
IKV_API int32_t ikv_chat_tokenize(int32_t *out_tokens, size_t capacity, size_t *out_count, const ikv_model *model,
                                  const char *role, const char *text, size_t text_len, int32_t first,
                                  int32_t add_generation_prompt);

/**
 * Appends one message (role "system", "user", "assistant", or another lower-case word) to `seq` and decodes it,
 * protected as `protect` says. A sequence of length 0 opens the conversation (as `first` above). The message is
 * prefilled as ikv_generate's prompt (in chunks that fit the pool, compressed once at its end when the sequence
 * then holds more than its budget plus slack, part-way only when memory requires it); its protection applies from
 * the first chunk and lives inside the budget (ikv_seq_protection). All or nothing: on failure the sequence, its protected spans and its logits are as before.
 * @param out_begin, out_end  receive the positions [begin, end) the message took, its markup included (may be NULL).
 * @return IKV_OK; IKV_ERR_UNSUPPORTED (no known chat format); IKV_ERR_INVALID_ARGUMENT (bad role or protect, NULL
 *         arguments); IKV_ERR_NOT_FOUND (no such sequence); IKV_ERR_OUT_OF_RANGE (too many protected spans);
 *         IKV_ERR_KV_FULL and every other status of ikv_decode; IKV_ERR_BAD_HANDLE; IKV_ERR_BUSY.
 */
IKV_API int32_t ikv_chat_add(int64_t *out_begin, int64_t *out_end, ikv_session *session, int32_t seq, const char *role,
                             const char *text, size_t text_len, int32_t protect);

/**
 * The assistant's turn: decodes the template's generation prompt, generates up to max_tokens tokens (stopping at the
 * end of the turn), then decodes the end-of-turn markup, so the next ikv_chat_add follows a closed turn. Tokens,
 * streaming and failures as ikv_generate (the ids reported are the reply's, not the markup); the turn is closed
 * after a cancelled or cut-short reply too, and left open (with what was generated) after a failed decode.
 * @return as ikv_generate, plus IKV_ERR_UNSUPPORTED (no known chat format) and IKV_ERR_INVALID_ARGUMENT (protect).
 */
IKV_API int32_t ikv_chat_reply(int32_t *out_tokens, size_t capacity, size_t *out_count, ikv_session *session,
                               int32_t seq, int32_t max_tokens, ikv_sampler *sampler, ikv_token_callback callback,
                               void *user_data, int32_t protect);

/**
 * The two halves of ikv_chat_reply, for callers that generate token by token between them (ikv_generate with no
 * prompt, or ikv_sample + ikv_decode): begin decodes the generation prompt, end the end-of-turn markup. Statuses as
 * ikv_chat_add.
 */
IKV_API int32_t ikv_chat_begin_reply(ikv_session *session, int32_t seq, int32_t protect);
IKV_API int32_t ikv_chat_end_reply(ikv_session *session, int32_t seq, int32_t protect);

#ifdef __cplusplus
}
#endif

#endif /* INFOKV_CHAT_H */
