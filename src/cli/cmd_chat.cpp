// infokv chat: an interactive conversation in the model's chat format, streamed token by token. Each turn is
// appended to the same sequence, so the conversation is never re-read; the session's compression policy (if
// --policy is given) keeps a long chat within its KV budget, with the system prompt and the template's control tokens
// protected (--protect system, the default; fair; none).
#include <chrono>
#include <cstdio>
#include <iostream>
#include <unistd.h>

#include "cli/args.hpp"
#include "cli/json.hpp"
#include "cli/report.hpp"
#include "cli/svg_plot.hpp"
#include "sampling/sampler.hpp"
#include "session/chat.hpp"
#include "session/generate.hpp"
#include "tokenizer/chat.hpp"
#include "util/error.hpp"

namespace infokv {
namespace cli {

int cmd_chat(int argc, char **argv) {
  std::set<std::string> valued = {"model", "system", "max-tokens", "temperature", "top-k", "top-p", "min-p",
                                  "repeat-penalty", "repeat-last-n", "seed", "protect", "plot"};
  for (const auto &n : session_option_names()) valued.insert(n);
  Args a(argc, argv, 2, valued, {"json"});
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
  const bool json = a.flag("json");

  const ChatProtect protect = parse_chat_protect(a.str("protect", "system"));

  auto model = Model::load(path);
  Session session(model, session_options_from(a));
  const ChatTemplate tmpl = chat_template_of(session);  // unsupported when the model has no known chat format
  apply_profile(profile_from_args(a), session);
  const int32_t seq = session.add_sequence();
  Sampler sampler(sp);
  const bool tty = isatty(0) != 0;
  const bool policy = session.compressor().config().enabled();
  if (tty)
    std::fprintf(stderr, "[chat format %s, protect %s; an empty line or end of input ends the chat]\n",
                 chat_format_name(tmpl.format), chat_protect_name(protect));
  if (a.has("system")) chat_add(session, seq, {"system", a.str("system")}, protect);

  // What the conversation holds after every turn, against what it would hold uncompressed (--plot, --json, and a
  // line on stderr with a policy on).
  PlotSeries held{"KV held", "#1f77b4", {}}, full{"KV uncompressed", "#d62728", {}};
  const double mib = 1048576.0;
  // The same path as ikv_chat_add / ikv_chat_reply: each turn is appended to the sequence (never re-read), the reply
  // is closed with the template's end-of-turn markup.
  std::string line;
  for (int64_t turn = 1;; ++turn) {
    if (tty) std::fprintf(stderr, "> ");
    if (!std::getline(std::cin, line) || line.empty()) break;
    const auto t0 = std::chrono::steady_clock::now();
    chat_add(session, seq, {"user", line}, protect);
    GenerateResult r = chat_reply(session, seq, max_tokens, sampler, [json](int32_t, const std::string &text) {
      if (!json) {
        std::fwrite(text.data(), 1, text.size(), stdout);
        std::fflush(stdout);
      }
      return true;
    }, protect);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const SeqInfo info = session.info(seq);
    held.points.emplace_back(static_cast<double>(turn), static_cast<double>(info.bytes) / mib);
    full.points.emplace_back(static_cast<double>(turn), static_cast<double>(info.uncompressed_bytes) / mib);
    if (json) {
      JsonObject o;
      o.integer("turn", turn).str("user", line).str("reply", r.text).num("seconds", seconds).raw("kv", kv_json(session, seq));
      o.integer("compressions", session.compressor().compressions(seq));
      const std::string prot = protected_json(session, seq);
      if (!prot.empty()) o.raw("protected", prot);
      if (r.error != Status::ok) o.str("error", r.error_message);
      std::printf("%s\n", o.dump().c_str());
    } else {
      std::printf("\n");
      if (policy) {
        const Compressor::Bound b = session.compressor().bound(seq);
        std::fprintf(stderr, "[turn %lld: KV %.2f MiB held of %.2f MiB uncompressed (%.0f%%), %lld tokens; budget %lld + "
                             "slack %lld tokens per layer; %lld compressions]\n",
                     static_cast<long long>(turn), static_cast<double>(info.bytes) / mib,
                     static_cast<double>(info.uncompressed_bytes) / mib,
                     info.uncompressed_bytes > 0 ? 100.0 * static_cast<double>(info.bytes) / static_cast<double>(info.uncompressed_bytes) : 0.0,
                     static_cast<long long>(info.length), static_cast<long long>(b.budget), static_cast<long long>(b.slack),
                     static_cast<long long>(session.compressor().compressions(seq)));
      }
    }
    std::fflush(stdout);
    if (r.error != Status::ok) fail(r.error, r.error_message);
  }
  if (a.has("plot"))
    write_line_plot(a.str("plot"), "chat memory over turns (" + std::string(policy_name(session.compressor().config().policy)) + ")",
                    "turn", "MiB", {held, full});
  return 0;
}

}  // namespace cli
}  // namespace infokv
