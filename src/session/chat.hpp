// Chat on a session: messages appended to a sequence in the model's own template, turn by turn (earlier turns are
// never re-read), with what compression must not lose protected: by default the system prompt and the template's
// control tokens are never evicted ("The Pitfalls of KV Cache Compression", arXiv:2510.00231, shows compression
// evicting system instructions first).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "sampling/sampler.hpp"
#include "session/generate.hpp"
#include "session/session.hpp"
#include "tokenizer/chat.hpp"

namespace infokv {

enum class ChatProtect : int32_t {
  system = 0,  // default: system turns (the caller's and the template's default one) and all markup never evicted
  none = 1,    // nothing protected: the policy sees a chat like any text
  fair = 2,    // markup never evicted; each message's text (system's too) is a fair span: every message keeps the
               // same fraction of its tokens
};
const char *chat_protect_name(ChatProtect p);
// "system", "none" or "fair"; throws Error(invalid_argument) naming them for anything else.
ChatProtect parse_chat_protect(const std::string &name);

struct ChatSpan {
  int64_t begin = 0;  // positions [begin, end) of the sequence
  int64_t end = 0;
};

// The spans `protect` asks for when `pieces` are appended at position `start` (what chat_add protects): markup (and,
// under system, system turns) never evicted; under fair, one fair span per message text.
std::vector<ProtectedSpan> chat_spans(const std::vector<ChatPiece> &pieces, int64_t start, ChatProtect protect);

// Throws Error(invalid_argument) unless `role` is a lower-case word of at most 32 letters or '_'.
void check_chat_role(const std::string &role);

// The model's chat template; throws Error(unsupported) when infokv does not know its format.
ChatTemplate chat_template_of(const Model &model);
ChatTemplate chat_template_of(const Session &session);

// Appends message `m` to `seq` and decodes it (chunked with compression between chunks, as Session::prefill). An
// empty sequence opens the conversation (BOS, the template's default system turn). Roles: a lower-case word
// ("system", "user", "assistant", "tool", ...). All or nothing: on failure the sequence and its protected spans are
// as before. Returns the positions the message took, markup included.
ChatSpan chat_add(Session &session, int32_t seq, const ChatMessage &m, ChatProtect protect = ChatProtect::system);

// The assistant's turn: chat_begin_reply decodes the template's generation prompt ("<|im_start|>assistant\n"); the
// caller then generates (generate(), or token by token); chat_end_reply decodes the end-of-turn markup that the
// generation stopped at without decoding ("<|im_end|>\n", "<|eot_id|>"), so the next message follows a closed turn.
ChatSpan chat_begin_reply(Session &session, int32_t seq, ChatProtect protect = ChatProtect::system);
ChatSpan chat_end_reply(Session &session, int32_t seq, ChatProtect protect = ChatProtect::system);

// begin, generate up to max_tokens (stopping at the end of turn), end. The turn is closed after a cancelled or
// cut-short reply too; after a failed decode (r.error) it is left open with what was generated.
GenerateResult chat_reply(Session &session, int32_t seq, int32_t max_tokens, Sampler &sampler,
                          const TokenCallback &on_token, ChatProtect protect = ChatProtect::system);

}  // namespace infokv
