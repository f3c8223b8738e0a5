#include <algorithm>
#include <chrono>
#include <cstdio>
#include <unistd.h>

#include "cli/args.hpp"
#include "cli/json.hpp"
#include "cli/report.hpp"
#include "cli/svg_plot.hpp"
#include "compress/auto_report.hpp"
#include "session/chat.hpp"
#include "tokenizer/chat.hpp"
#include "sampling/sampler.hpp"
#include "session/generate.hpp"
#include "snapshot/snapshot.hpp"
#include "util/error.hpp"
#include "util/process_memory.hpp"

namespace infokv {
namespace cli {

namespace {

std::string snapshot_json(const std::string &path, int64_t bytes) {
  snapshot::FileSource f(path);
  const snapshot::Summary sm = snapshot::inspect(f);
  JsonObject o;
  o.str("path", path)
      .integer("bytes", bytes)
      .integer("kept_kv_bytes", sm.kept_kv_bytes)
      .integer("full_kv_bytes", sm.full_kv_bytes)
      .integer("uncompressed_estimate_bytes", sm.uncompressed_estimate_bytes)
      .num("ratio", sm.uncompressed_estimate_bytes > 0 ? static_cast<double>(bytes) / static_cast<double>(sm.uncompressed_estimate_bytes) : 1.0);
  return o.dump();
}

// The dtype each layer of `seq` holds its K/V in (auto may hold some at a lower precision).
std::vector<KvDtype> layer_dtypes(const Session &s, int32_t seq) {
  std::vector<KvDtype> d;
  for (const LayerSlots &L : s.kv().seq(seq).layers) d.push_back(L.dtype);
  return d;
}

// Policy auto: what it chose at the sequence's latest compression, on stderr (nothing for other policies).
void print_auto(const Session &s, int32_t seq, const std::string &prefix) {
  if (!s.compressor().config().is_auto()) return;
  const AutoReport &r = s.compressor().state(seq).auto_report;
  const std::string line = r.empty() ? "no compression yet" : auto_report_summary(r, layer_dtypes(s, seq), s.kv().config().dtype);
  std::fprintf(stderr, "%s[auto: %s]\n", prefix.c_str(), line.c_str());
}

// The sampler flags given on the command line, applied over `base`.
SamplerParams sampler_from(const Args &a, SamplerParams sp) {
  sp.temperature = static_cast<float>(a.number("temperature", sp.temperature, 0.0, 100.0));
  sp.top_k = static_cast<int32_t>(a.integer("top-k", sp.top_k, 0, 1 << 24));
  sp.top_p = static_cast<float>(a.number("top-p", sp.top_p, 0.0, 1.0));
  sp.min_p = static_cast<float>(a.number("min-p", sp.min_p, 0.0, 1.0));
  sp.repeat_penalty = static_cast<float>(a.number("repeat-penalty", sp.repeat_penalty, 1e-3, 100.0));
  sp.repeat_last_n = static_cast<int32_t>(a.integer("repeat-last-n", sp.repeat_last_n, 0, 1 << 20));
  sp.seed = static_cast<uint64_t>(a.integer("seed", static_cast<int64_t>(sp.seed), 0, INT64_MAX));
  return sp;
}


// --load-snapshot: continue as the saving run would have (its policy, KV dtype and sampler), unless a config or
// flag says otherwise.
void snapshot_defaults(const Args &a, const std::string &load_path, SessionOptions &base, SamplerParams &sp) {
  snapshot::FileSource f(load_path);
  const snapshot::Summary loaded = snapshot::inspect(f);
  if (!a.has("config")) {
    base.compression = loaded.compression;
    base.kv_dtype = loaded.kv_dtype;
    base.block_size = loaded.block_size;
  }
  if (loaded.has_sampler) sp = loaded.sampler;
}

// Restores the snapshot's sequences; returns the first one's id. The sampler keeps the restored RNG and history
// under the (possibly overridden) parameters sp.
int32_t continue_snapshot(Session &session, Sampler &sampler, const SamplerParams &sp, const std::string &load_path,
                          JsonObject &loaded_json) {
  Sampler restored(sp);
  const std::vector<int32_t> ids = snapshot::restore_file(session, &restored, load_path);
  if (ids.empty()) fail(Status::invalid_argument, load_path + " holds no sequence");
  const int32_t seq = ids[0];
  sampler.rng().set_state(restored.rng().state());
  sampler.set_history(std::vector<int32_t>(restored.history().begin(), restored.history().end()));
  loaded_json.str("path", load_path).integer("sequences", static_cast<int64_t>(ids.size()))
      .integer("length", session.info(seq).length);
  return seq;
}

// The prompt's tokens: as text (with BOS unless --no-bos) or, with --chat, as the user turn of a conversation in
// the model's chat format (--system adds a system turn).
// --chat: the prompt is the user turn of a conversation in the model's chat format (--system adds a system turn),
// with the system turn and the template's control tokens protected in `seq` as `infokv chat` protects them.
std::vector<int32_t> encode_prompt(const Args &a, Session &session, int32_t seq, const std::string &prompt_text) {
  const Model &model = session.model();
  std::vector<int32_t> prompt;
  if (a.flag("chat")) {
    const ChatTemplate tmpl = chat_template_of(session);
    std::vector<ChatMessage> msgs;
    if (a.has("system")) msgs.push_back({"system", a.str("system")});
    msgs.push_back({"user", prompt_text});
    const std::vector<ChatPiece> pieces = tmpl.encode_pieces(model.tokenizer(), msgs, true);
    for (const ChatPiece &pc : pieces) prompt.insert(prompt.end(), pc.ids.begin(), pc.ids.end());
    for (const ProtectedSpan &sp : chat_spans(pieces, 0, ChatProtect::system)) session.compressor().protect(seq, sp);
  } else {
    prompt = model.tokenizer().encode(prompt_text, !a.flag("no-bos"), a.flag("special"));
  }
  if (prompt.empty()) fail(Status::invalid_argument, "the prompt is empty and the model has no BOS token");
  return prompt;
}

// --plot: the sequence's KV bytes and the process's resident memory after every token, in MiB.
class MemoryPlot {
 public:
  MemoryPlot(const Session &session, int32_t seq, std::string path) : session_(session), seq_(seq), path_(std::move(path)) {
    sample();
  }
  bool on() const { return !path_.empty(); }
  void sample() {
    if (!on()) return;
    const double len = static_cast<double>(session_.info(seq_).length), mib = 1.0 / (1 << 20);
    kv_line_.points.emplace_back(len, static_cast<double>(session_.info(seq_).bytes) * mib);
    rss_line_.points.emplace_back(len, static_cast<double>(current_rss_bytes()) * mib);
  }
  void write(PolicyKind policy) {
    if (!on()) return;
    sample();
    std::vector<PlotSeries> lines{kv_line_};
    if (rss_line_.points.back().second > 0) lines.push_back(rss_line_);
    write_line_plot(path_, "memory while generating (" + std::string(policy_name(policy)) + ")", "tokens in the sequence",
                    "MiB", lines);
  }

 private:
  const Session &session_;
  int32_t seq_;
  std::string path_;
  PlotSeries kv_line_{"KV bytes of the sequence", "#d62728", {}}, rss_line_{"process RSS", "#1f77b4", {}};
};

// The text output's last lines (the tokens were streamed as they came); fails when the generation stopped on an
// error after some tokens.
void print_summary(const Session &session, int32_t seq, const std::vector<int32_t> &prompt, const GenerateResult &r) {
  std::printf("\n");
  std::fflush(stdout);
  std::fprintf(stderr, "[%zu prompt tokens, %zu generated; prefill %.1f tok/s, decode %.1f tok/s; KV %lld bytes; peak RSS %.1f MiB]\n",
               prompt.size(), r.tokens.size(),
               r.prefill_seconds > 0 ? static_cast<double>(r.prefill_tokens) / r.prefill_seconds : 0.0,
               r.decode_seconds > 0 ? static_cast<double>(r.tokens.size()) / r.decode_seconds : 0.0,
               static_cast<long long>(session.info(seq).bytes), static_cast<double>(peak_rss_bytes()) / (1 << 20));
  print_auto(session, seq, "");
  if (r.error != Status::ok) fail(r.error, "after " + std::to_string(r.tokens.size()) + " tokens: " + r.error_message);
}

std::string timings_json(const GenerateResult &r) {
  JsonObject timings;
  timings.integer("prefill_tokens", r.prefill_tokens)
      .num("prefill_seconds", r.prefill_seconds)
      .num("prefill_tokens_per_second", r.prefill_seconds > 0 ? static_cast<double>(r.prefill_tokens) / r.prefill_seconds : 0.0)
      .integer("decode_tokens", static_cast<int64_t>(r.tokens.size()))
      .num("decode_seconds", r.decode_seconds)
      .num("decode_tokens_per_second", r.decode_seconds > 0 ? static_cast<double>(r.tokens.size()) / r.decode_seconds : 0.0);
  return timings.dump();
}

std::string compression_json(const Session &session, int32_t seq, const CompressionConfig &cc, const std::string &kv_before,
                             const std::string &kv_after, int64_t compressions_before) {
  JsonObject comp;
  comp.str("policy", policy_name(cc.policy))
      .num("budget_fraction", cc.budget_fraction)
      .integer("budget_tokens", cc.budget_tokens)
      .integer("compressions", session.compressor().compressions(seq))
      .integer("compressions_after_prefill", compressions_before)
      // What the latest compression served (packaging/docs/c_api.md "Which question") and what its probe took.
      .str("question", question_name(session.compressor().state(seq).question))
      .num("probe_seconds", session.compressor().state(seq).probe_seconds);
  if (cc.is_auto())  // what it chose at the latest compression (null before one)
    comp.num("max_loss", cc.max_loss)
        .raw("auto", auto_report_json(session.compressor().state(seq).auto_report, layer_dtypes(session, seq)));
  if (!kv_before.empty()) comp.raw("kv_before", kv_before).raw("kv_after", kv_after);
  return comp.dump();
}

// With a policy on: prefills alone first, so that the accounting before and after the first compression can be
// reported (*kv_before, *kv_after, *compressions_before), then generates.
GenerateResult prefill_then_generate(Session &session, int32_t seq, const std::vector<int32_t> &prompt, int32_t max_tokens,
                                     Sampler &sampler, const TokenCallback &cb, std::string *kv_before,
                                     std::string *kv_after, int64_t *compressions_before) {
  const bool after = session.compressor().config().compress_after_prefill;
  CompressionConfig cc = session.compressor().config();
  cc.compress_after_prefill = false;
  session.compressor().set_config(cc);
  const auto t0 = std::chrono::steady_clock::now();
  session.prefill(seq, prompt);  // a long prompt in chunks, compressed between them
  const double prefill_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int32_t t : prompt) sampler.accept(t);
  *kv_before = kv_json(session, seq);
  cc.compress_after_prefill = after;
  session.compressor().set_config(cc);
  // The compression prefill() would have made itself: automatic, as the session's own (no context replay).
  if (after) session.compressor().compress(seq, 0, cc.question, Occasion::automatic);
  *kv_after = kv_json(session, seq);
  *compressions_before = session.compressor().compressions(seq);
  GenerateResult r = generate(session, seq, {}, max_tokens, sampler, cb);
  r.prefill_tokens = static_cast<int64_t>(prompt.size());
  r.prefill_seconds = prefill_s;
  return r;
}

// --parallel N: the prompt is prefilled once and its blocks forked to every other sequence, then all decode in one
// batch per step. Returns true when the text output is printed (the command is done); with --json, fills `out`
// and `failure` and returns false.
bool generate_parallel(Session &session, int32_t seq, const std::vector<int32_t> &prompt, const std::string &prompt_text,
                       int32_t parallel, int32_t max_tokens, const SamplerParams &sp, bool json, JsonObject &out,
                       std::pair<Status, std::string> &failure) {
  const SessionOptions &so = session.options();
  std::vector<BatchToken> batch;
  for (int32_t t : prompt) batch.push_back({seq, t, false});
  session.decode(batch);
  std::vector<int32_t> seqs{seq};
  for (int32_t i = 1; i < parallel; ++i) seqs.push_back(session.fork_sequence(seq));
  std::vector<Sampler> samplers;
  for (int32_t i = 0; i < parallel; ++i) {
    SamplerParams p = sp;
    p.seed = sp.seed + static_cast<uint64_t>(i);
    samplers.emplace_back(p);
    for (int32_t t : prompt) samplers.back().accept(t);
  }
  std::vector<GenerateResult> rs = generate_batch(session, seqs, max_tokens, samplers);
  std::string arr = "[";
  for (size_t i = 0; i < rs.size(); ++i) {
    JsonObject so1;
    so1.integer("seed", static_cast<int64_t>(sp.seed + i)).ints("tokens", rs[i].tokens).str("text", rs[i].text);
    if (rs[i].error != Status::ok) so1.str("error", rs[i].error_message);
    so1.raw("kv", kv_json(session, seqs[i]));
    if (so.compression.is_auto())
      so1.raw("auto", auto_report_json(session.compressor().state(seqs[i]).auto_report, layer_dtypes(session, seqs[i])));
    arr += (i ? "," : "") + so1.dump();
  }
  arr += "]";
  if (!json) {
    for (size_t i = 0; i < rs.size(); ++i) std::printf("[%zu] %s%s\n", i, prompt_text.c_str(), rs[i].text.c_str());
    std::fflush(stdout);
    for (size_t i = 0; i < rs.size(); ++i) print_auto(session, seqs[i], "[" + std::to_string(i) + "] ");
    if (rs[0].error != Status::ok) fail(rs[0].error, rs[0].error_message);
    return true;
  }
  out.raw("sequences", arr);
  if (rs[0].error != Status::ok) failure = {rs[0].error, rs[0].error_message};
  const KvStats st = session.kv().stats();
  JsonObject pool;
  pool.integer("blocks_total", st.blocks_total).integer("blocks_used", st.blocks_used).integer("bytes_used", st.bytes_used);
  out.raw("kv_pool", pool.dump());
  return false;
}

}  // namespace

int cmd_generate(int argc, char **argv) {
  std::set<std::string> valued = {"model", "prompt", "max-tokens", "temperature", "top-k", "top-p", "min-p",
                                  "repeat-penalty", "repeat-last-n", "seed", "parallel", "protect-prefix",
                                  "save-snapshot", "load-snapshot", "system", "plot"};
  for (const auto &n : session_option_names()) valued.insert(n);
  Args a(argc, argv, 2, valued, {"json", "no-bos", "chat", "special"});
  const Config cfg = config_from_args(a);
  const std::string path = model_path_from(a);
  const std::string load_path = a.str("load-snapshot");
  const std::string save_path = a.str("save-snapshot");
  if (load_path.empty() && !a.has("prompt")) fail(Status::invalid_argument, "missing required option --prompt");
  const std::string prompt_text = a.str("prompt");
  const int32_t max_tokens = static_cast<int32_t>(a.integer("max-tokens", 64, 0, 1 << 24));
  const int32_t parallel = static_cast<int32_t>(a.integer("parallel", 1, 1, 1024));
  const int64_t protect_prefix = a.integer("protect-prefix", cfg.session.protect_prefix, 0, INT64_MAX);
  const bool json = a.flag("json");
  if (parallel != 1 && (!load_path.empty() || !save_path.empty()))
    fail(Status::invalid_argument, "--save-snapshot and --load-snapshot work with one sequence (--parallel 1)");

  SessionOptions base = cfg.session;
  SamplerParams sp = cfg.sampler;
  if (!load_path.empty()) snapshot_defaults(a, load_path, base, sp);
  sp = sampler_from(a, sp);
  SessionOptions so = session_options_from(a, base);
  so.protect_prefix = protect_prefix;  // the new sequence's (a restored one keeps its saved spans)
  const std::optional<TuningProfile> profile = profile_from_args(a);

  auto model = Model::load(path);
  Session session(model, so);
  apply_profile(profile, session);
  int32_t seq = -1;
  std::vector<int32_t> prompt;
  Sampler sampler(sp);
  JsonObject loaded_json;
  if (a.has("system") && !a.flag("chat")) fail(Status::invalid_argument, "--system needs --chat");
  if (!load_path.empty()) {
    if (a.flag("chat")) fail(Status::invalid_argument, "--chat starts a conversation; it cannot continue a snapshot");
    seq = continue_snapshot(session, sampler, sp, load_path, loaded_json);
    prompt = model->tokenizer().encode(prompt_text, false, a.flag("special"));
  } else {
    seq = session.add_sequence();
    prompt = encode_prompt(a, session, seq, prompt_text);
  }

  JsonObject out;
  std::pair<Status, std::string> failure{Status::ok, ""};  // a decode that stopped generation part-way
  out.ints("prompt_tokens", prompt);
  if (parallel == 1) {
    std::string kv_before, kv_after;
    int64_t compressions_before = 0;
    // Stream to the terminal as tokens come unless JSON was asked for.
    MemoryPlot plot(session, seq, a.has("plot") ? a.str("plot") : "");
    TokenCallback cb;
    if (!json || plot.on()) {
      cb = [&, json](int32_t, const std::string &text) {
        plot.sample();
        if (json) return true;
        std::fwrite(text.data(), 1, text.size(), stdout);
        std::fflush(stdout);
        return true;
      };
    }
    GenerateResult r;
    if (so.compression.enabled() && load_path.empty()) {
      r = prefill_then_generate(session, seq, prompt, max_tokens, sampler, cb, &kv_before, &kv_after, &compressions_before);
    } else {
      if (prompt.empty() && !session.has_logits(seq))
        fail(Status::invalid_argument, load_path + " has no logits to continue from: give --prompt");
      r = generate(session, seq, prompt, max_tokens, sampler, cb);
    }
    plot.write(so.compression.policy);
    // A decode that failed after some tokens (KV full): those tokens are in the sequence and reported; the command
    // still fails, after the output and any snapshot of what was made.
    std::string saved_json;
    if (!save_path.empty()) {
      // generate() decoded every token it returned, so the snapshot continues exactly where this run stopped.
      const int64_t bytes = snapshot::save_file(session, seq, &sampler, save_path);
      saved_json = snapshot_json(save_path, bytes);
      if (!json) std::fprintf(stderr, "[snapshot saved to %s: %lld bytes]\n", save_path.c_str(), static_cast<long long>(bytes));
    }
    if (!json) {
      print_summary(session, seq, prompt, r);
      return 0;
    }
    out.ints("tokens", r.tokens).str("text", r.text);
    out.boolean("stopped_by_eos", r.stopped_by_eos);
    if (r.error != Status::ok) {
      out.str("error", r.error_message);
      failure = {r.error, r.error_message};
    }
    out.raw("timings", timings_json(r));
    out.raw("kv", kv_json(session, seq));
    const std::string prot = protected_json(session, seq);
    if (!prot.empty()) out.raw("protected", prot);
    if (!saved_json.empty()) out.raw("snapshot_saved", saved_json);
    if (!load_path.empty()) out.raw("snapshot_loaded", loaded_json.dump());
    if (so.compression.enabled()) out.raw("compression", compression_json(session, seq, so.compression, kv_before, kv_after, compressions_before));
  } else if (generate_parallel(session, seq, prompt, prompt_text, parallel, max_tokens, sp, json, out, failure)) {
    return 0;
  }
  JsonObject mem;
  mem.integer("peak_rss_bytes", peak_rss_bytes()).integer("rss_bytes", current_rss_bytes());
  out.raw("memory", mem.dump());
  std::printf("%s\n", out.dump().c_str());
  std::fflush(stdout);
  // The JSON above holds what was made; the failure that stopped it still fails the command.
  if (failure.first != Status::ok) fail(failure.first, failure.second);
  return 0;
}

}  // namespace cli
}  // namespace infokv
