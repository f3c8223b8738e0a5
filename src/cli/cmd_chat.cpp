// infokv chat: an interactive conversation in the model's chat format, streamed token by token. Each turn is
// appended to the same sequence, so the conversation is never re-read; the session's compression policy (if
// --policy is given) keeps a long chat within its KV budget, with the system prompt and the template's control tokens
// protected (--protect system, the default; fair; none).
#include <cstdio>
#include <iostream>
#include <unistd.h>

#include "cli/args.hpp"
#include "sampling/sampler.hpp"
#include "session/chat.hpp"
#include "session/generate.hpp"
#include "tokenizer/chat.hpp"
#include "util/error.hpp"

namespace infokv {
namespace cli {

int cmd_chat(int argc, char **argv) {
  std::set<std::string> valued = {"model", "system", "max-tokens", "temperature", "top-k", "top-p", "min-p",
                                  "repeat-penalty", "repeat-last-n", "seed", "protect"};
  for (const auto &n : session_option_names()) valued.insert(n);
  Args a(argc, argv, 2, valued, {});
  const std::string path = resolve_model_path(a.str("model", default_model_path()));
  const int32_t max_tokens = static_cast<int32_t>(a.integer("max-tokens", 512, 1, 1 << 24));
  SamplerParams sp;
  sp.temperature = static_cast<float>(a.number("temperature", 0.7, 0.0, 100.0));
  sp.top_k = static_cast<int32_t>(a.integer("top-k", 40, 0, 1 << 24));
  sp.top_p = static_cast<float>(a.number("top-p", 0.95, 0.0, 1.0));
  sp.min_p = static_cast<float>(a.number("min-p", 0.05, 0.0, 1.0));
  sp.repeat_penalty = static_cast<float>(a.number("repeat-penalty", 1.1, 1e-3, 100.0));
  sp.repeat_last_n = static_cast<int32_t>(a.integer("repeat-last-n", 64, 0, 1 << 20));
  sp.seed = static_cast<uint64_t>(a.integer("seed", 0, 0, INT64_MAX));

  const ChatProtect protect = parse_chat_protect(a.str("protect", "system"));

  auto model = Model::load(path);
  Session session(model, session_options_from(a));
  const ChatTemplate tmpl = chat_template_of(session);  // unsupported when the model has no known chat format
  apply_profile(profile_from_args(a), session);
  const int32_t seq = session.add_sequence();
  Sampler sampler(sp);
  const bool tty = isatty(0) != 0;
  if (tty)
    std::fprintf(stderr, "[chat format %s, protect %s; an empty line or end of input ends the chat]\n",
                 chat_format_name(tmpl.format), chat_protect_name(protect));
  if (a.has("system")) chat_add(session, seq, {"system", a.str("system")}, protect);

  // The same path as ikv_chat_add / ikv_chat_reply: each turn is appended to the sequence (never re-read), the reply
  // is closed with the template's end-of-turn markup.
  std::string line;
  while (true) {
    if (tty) std::fprintf(stderr, "> ");
    if (!std::getline(std::cin, line) || line.empty()) break;
    chat_add(session, seq, {"user", line}, protect);
    GenerateResult r = chat_reply(session, seq, max_tokens, sampler, [](int32_t, const std::string &text) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
      return true;
    }, protect);
    std::printf("\n");
    std::fflush(stdout);
    if (r.error != Status::ok) fail(r.error, r.error_message);
  }
  return 0;
}

}  // namespace cli
}  // namespace infokv
