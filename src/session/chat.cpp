#include "session/chat.hpp"

#include <utility>
#include <vector>

#include "util/error.hpp"

namespace infokv {

std::vector<ProtectedSpan> chat_spans(const std::vector<ChatPiece> &pieces, int64_t start, ChatProtect protect) {
  std::vector<ProtectedSpan> out;
  if (protect == ChatProtect::none) return out;
  int64_t pos = start;
  int32_t fair_message = -2;
  for (const ChatPiece &p : pieces) {
    const int64_t n = static_cast<int64_t>(p.ids.size());
    if (n == 0) continue;
    const bool keep = p.markup || (protect == ChatProtect::system && p.system);
    if (keep) {
      out.push_back({pos, pos + n, false});
      fair_message = -2;
    } else if (protect == ChatProtect::fair) {
      if (fair_message == p.message && !out.empty() && out.back().fair && out.back().end == pos)
        out.back().end = pos + n;  // one span per message (Llama 3 writes the role and the text as two pieces)
      else
        out.push_back({pos, pos + n, true});
      fair_message = p.message;
    }
    pos += n;
  }
  return out;
}

namespace {

// Protects and decodes `pieces` at the end of `seq`; all or nothing.
ChatSpan append(Session &session, int32_t seq, const std::vector<ChatPiece> &pieces, ChatProtect protect) {
  std::vector<int32_t> ids;
  for (const ChatPiece &p : pieces) ids.insert(ids.end(), p.ids.begin(), p.ids.end());
  const int64_t start = session.info(seq).length;
  std::vector<ProtectedSpan> saved = session.compressor().spans(seq);
  // The spans go in before the tokens: a long message is prefilled in chunks with compression between them, and a
  // system prompt must not be evicted by its own prefill.
  try {
    for (const ProtectedSpan &s : chat_spans(pieces, start, protect)) session.compressor().protect(seq, s);
    if (!ids.empty()) session.prefill(seq, ids);
  } catch (...) {
    session.compressor().set_spans(seq, std::move(saved));
    throw;
  }
  return {start, start + static_cast<int64_t>(ids.size())};
}

}  // namespace

void check_chat_role(const std::string &role) {
  bool ok = !role.empty() && role.size() <= 32;
  for (char c : role) ok = ok && ((c >= 'a' && c <= 'z') || c == '_');
  if (!ok) fail(Status::invalid_argument, "chat role must be a lower-case word (system, user, assistant, ...)");
}

const char *chat_protect_name(ChatProtect p) {
  switch (p) {
    case ChatProtect::system: return "system";
    case ChatProtect::none: return "none";
    case ChatProtect::fair: return "fair";
  }
  return "unknown";
}

ChatProtect parse_chat_protect(const std::string &name) {
  for (ChatProtect p : {ChatProtect::system, ChatProtect::none, ChatProtect::fair})
    if (name == chat_protect_name(p)) return p;
  fail(Status::invalid_argument, "chat protection '" + name + "' is not one of system, fair, none");
}

ChatTemplate chat_template_of(const Model &model) {
  const ChatTemplate t = ChatTemplate::detect(model.chat_template(), model.tokenizer());
  if (t.format == ChatFormat::none)
    fail(Status::unsupported, "the model has no chat template infokv knows (ChatML or Llama 3)");
  return t;
}

ChatTemplate chat_template_of(const Session &session) { return chat_template_of(session.model()); }

ChatSpan chat_add(Session &session, int32_t seq, const ChatMessage &m, ChatProtect protect) {
  check_chat_role(m.role);
  const ChatTemplate t = chat_template_of(session);
  const bool first = session.info(seq).length == 0;
  return append(session, seq, t.encode_pieces(session.model().tokenizer(), {m}, false, first), protect);
}

ChatSpan chat_begin_reply(Session &session, int32_t seq, ChatProtect protect) {
  const ChatTemplate t = chat_template_of(session);
  const bool first = session.info(seq).length == 0;
  return append(session, seq, t.encode_pieces(session.model().tokenizer(), {}, true, first), protect);
}

ChatSpan chat_end_reply(Session &session, int32_t seq, ChatProtect protect) {
  const ChatTemplate t = chat_template_of(session);
  ChatPiece end{t.turn_end(session.model().tokenizer()), true, -1, false};
  return append(session, seq, {end}, protect);
}

GenerateResult chat_reply(Session &session, int32_t seq, int32_t max_tokens, Sampler &sampler,
                          const TokenCallback &on_token, ChatProtect protect) {
  if (max_tokens < 0) fail(Status::invalid_argument, "max_tokens must not be negative");
  chat_begin_reply(session, seq, protect);
  GenerateResult r = generate(session, seq, {}, max_tokens, sampler, on_token);
  if (r.error == Status::ok) chat_end_reply(session, seq, protect);
  return r;
}

}  // namespace infokv
