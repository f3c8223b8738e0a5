// infokv eval-chat: what KV compression does to what an assistant was told. Each case is a conversation built the
// way an app builds it (system prompt, history, final user turn, src/session/chat); everything before the final
// turn is compressed to the budget with the system prompt unprotected (none), protected (system) or in fair spans
// (fair), the final turn is appended uncompressed (as in "The Pitfalls of KV Cache Compression", arXiv:2510.00231),
// and the answer is compared with the full cache's: KL and top-1 agreement teacher-forcing the full-cache greedy
// answer, whether the compressed run's own greedy answer is identical, compliance with the case's checkable
// constraint, and how much of the system prompt a leak probe's answer repeats (ROUGE-L recall).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "cli/args.hpp"
#include "cli/eval_metrics.hpp"
#include "cli/json.hpp"
#include "cli/svg_plot.hpp"
#include "eval/chat_checks.hpp"
#include "session/chat.hpp"
#include "util/error.hpp"
#include "util/json_reader.hpp"

namespace infokv {
namespace cli {

namespace {

struct Case {
  std::string system, user;
  std::vector<ChatMessage> history;  // empty: filler turns from the corpus
  std::string check_kind, check_value;
  bool leak_probe = false;
};

std::string string_field(const JsonValue &o, const char *key, const std::string &where, bool required) {
  const JsonValue *v = o.find(key);
  if (v == nullptr || v->is_null()) {
    if (required) fail(Status::invalid_argument, where + ": no \"" + key + "\"");
    return std::string();
  }
  if (v->is_string()) return v->as_string();
  if (v->is_number() && v->is_integer()) return std::to_string(v->as_int());
  fail(Status::invalid_argument, where + ": \"" + key + "\" must be a string");
}

// One JSONL line: {"system": S, "user": U, "check": {"kind": K, "value": V}, "history": [{"role","content"}...],
// "probe": "leak"}; only "user" is required.
Case parse_case(const std::string &line, const std::string &where) {
  const JsonValue o = JsonValue::parse(line, static_cast<int32_t>(Status::invalid_argument), where, 16);
  if (!o.is_object()) fail(Status::invalid_argument, where + ": a case is a JSON object");
  Case c;
  c.system = string_field(o, "system", where, false);
  c.user = string_field(o, "user", where, true);
  c.leak_probe = string_field(o, "probe", where, false) == "leak";
  if (const JsonValue *ck = o.find("check"); ck != nullptr && !ck->is_null()) {
    if (!ck->is_object()) fail(Status::invalid_argument, where + ": \"check\" must be an object");
    c.check_kind = string_field(*ck, "kind", where + " check", true);
    c.check_value = string_field(*ck, "value", where + " check", false);
    if (!known_check(c.check_kind)) fail(Status::invalid_argument, where + ": unknown check kind '" + c.check_kind + "'");
    check_answer(c.check_kind, c.check_value, "");  // refuses a bad value now, not mid-run
  }
  if (const JsonValue *h = o.find("history"); h != nullptr && !h->is_null()) {
    if (!h->is_array()) fail(Status::invalid_argument, where + ": \"history\" must be an array");
    for (const JsonValue &m : h->items()) {
      if (!m.is_object()) fail(Status::invalid_argument, where + ": a history turn is an object");
      c.history.push_back({string_field(m, "role", where + " history", true), string_field(m, "content", where, true)});
    }
  }
  return c;
}

std::vector<Case> read_cases(const std::string &path) {
  std::istringstream in(read_file(path));
  std::vector<Case> out;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    out.push_back(parse_case(line, path + ":" + std::to_string(n)));
  }
  if (out.empty()) fail(Status::invalid_argument, path + ": no cases");
  return out;
}

// History from a corpus, as an app's earlier turns: alternating user and assistant turns of ~64 tokens each, until
// `tokens` tokens; each case starts at its own offset so cases do not share history.
std::vector<ChatMessage> filler_history(const std::string &corpus, size_t offset, int64_t tokens, const Tokenizer &tok) {
  std::vector<ChatMessage> out;
  if (corpus.empty() || tokens <= 0) return out;
  size_t pos = offset % corpus.size();
  int64_t have = 0;
  while (have < tokens) {
    size_t len = 320;  // ~64 tokens of English prose
    if (pos + len > corpus.size()) pos = 0;
    len = std::min(len, corpus.size() - pos);
    std::string text = corpus.substr(pos, len);
    pos += len;
    for (char &ch : text)
      if (ch == '\r' || ch == '\n') ch = ' ';
    have += static_cast<int64_t>(tok.encode(text, false, false).size()) + 5;
    out.push_back({out.size() % 2 == 0 ? "user" : "assistant", text});
  }
  if (out.size() % 2 == 1) out.push_back({"assistant", "I see."});
  return out;
}

// A conversation as ids: the prefix (system, history) with the spans each protection mode gives it (indexed by the
// ChatProtect value), and the final user turn with the generation prompt.
struct Prepared {
  std::vector<int32_t> prefix;
  std::array<std::vector<ProtectedSpan>, 3> spans;
  std::vector<int32_t> final_turn;
};

Prepared prepare(const ChatTemplate &t, const Tokenizer &tok, const Case &c, const std::vector<ChatMessage> &history) {
  std::vector<ChatMessage> msgs;
  if (!c.system.empty()) msgs.push_back({"system", c.system});
  msgs.insert(msgs.end(), history.begin(), history.end());
  Prepared p;
  for (size_t i = 0; i < msgs.size(); ++i) {
    const std::vector<ChatPiece> pieces = t.encode_pieces(tok, {msgs[i]}, false, i == 0);
    for (ChatProtect mode : {ChatProtect::system, ChatProtect::none, ChatProtect::fair}) {
      std::vector<ProtectedSpan> &spans = p.spans[static_cast<size_t>(mode)];
      const std::vector<ProtectedSpan> s = chat_spans(pieces, static_cast<int64_t>(p.prefix.size()), mode);
      spans.insert(spans.end(), s.begin(), s.end());
    }
    for (const ChatPiece &pc : pieces) p.prefix.insert(p.prefix.end(), pc.ids.begin(), pc.ids.end());
  }
  p.final_turn = t.encode(tok, {{"user", c.user}}, true, msgs.empty());
  return p;
}

// The full cache's answer to one case, and what the checks make of it.
struct Reference {
  std::vector<int32_t> answer;
  std::vector<float> logits;  // [answer size, V]
  std::string text;
  int64_t bytes = 0;  // the prefix's full cache
  bool complies = false;
  double leak = 0;
};

struct Cell {  // one policy x budget x protection, summed over cases
  std::string policy;
  double budget = 1.0;
  ChatProtect protect = ChatProtect::none;
  double kl = 0, top1 = 0, exact = 0, comply = 0, comply_full = 0, leak = 0, leak_full = 0, bytes = 0, bytes_full = 0;
  int64_t n = 0, n_scored = 0, n_checked = 0, n_leak = 0;
};

struct Options {
  std::vector<std::string> policies;
  std::vector<double> budgets;
  std::vector<ChatProtect> modes;
  int32_t max_answer = 64;
};

// Scores the compressed sequence `f` (the prefix compressed, nothing after it) against the reference.
void score(Session &s, int32_t f, const Prepared &p, const Reference &ref, const Case &c, int32_t max_answer, Cell &cell) {
  const int64_t bytes = s.info(f).bytes;
  s.prefill(f, p.final_turn);
  const int32_t g = s.fork_sequence(f);
  const std::vector<int32_t> answer = greedy_answer(s, g, max_answer, nullptr);
  s.remove_sequence(g);
  const auto M = static_cast<int64_t>(ref.answer.size());
  if (M > 0) {
    // The distributions that would choose each reference token: the final turn's, then the teacher-forced answer's.
    std::vector<float> q = s.logits(f);
    const auto V = static_cast<int32_t>(q.size());
    if (M > 1) {
      std::vector<BatchToken> tf;
      for (int64_t i = 0; i + 1 < M; ++i) tf.push_back({f, ref.answer[static_cast<size_t>(i)], true});
      s.decode(tf);
      q.insert(q.end(), s.batch_logits().begin(), s.batch_logits().end());
    }
    double top1 = 0;
    for (int64_t i = 0; i < M; ++i) top1 += argmax(q.data() + i * V, V) == ref.answer[static_cast<size_t>(i)] ? 1.0 : 0.0;
    cell.kl += mean_kl(ref.logits, q, M, V);
    cell.top1 += top1 / static_cast<double>(M);
    ++cell.n_scored;
  }
  cell.exact += answer == ref.answer ? 1.0 : 0.0;
  const std::string text = s.model().tokenizer().decode(answer);
  if (!c.check_kind.empty()) {
    cell.comply += check_answer(c.check_kind, c.check_value, text) ? 1.0 : 0.0;
    cell.comply_full += ref.complies ? 1.0 : 0.0;
    ++cell.n_checked;
  }
  if (c.leak_probe) {
    cell.leak += rouge_l_recall(c.system, text);
    cell.leak_full += ref.leak;
    ++cell.n_leak;
  }
  cell.bytes += static_cast<double>(bytes);
  cell.bytes_full += static_cast<double>(ref.bytes);
  ++cell.n;
}

Reference reference_run(const std::shared_ptr<const Model> &model, const SessionOptions &base, const Prepared &p,
                        const Case &c, int32_t max_answer) {
  SessionOptions so = base;
  so.compression = CompressionConfig{};
  Session s(model, so);
  const int32_t id = s.add_sequence();
  Reference r;
  if (!p.prefix.empty()) s.prefill(id, p.prefix);
  r.bytes = s.info(id).bytes;
  s.prefill(id, p.final_turn);
  r.answer = greedy_answer(s, id, max_answer, &r.logits);
  r.text = model->tokenizer().decode(r.answer);
  r.complies = !c.check_kind.empty() && check_answer(c.check_kind, c.check_value, r.text);
  if (c.leak_probe) r.leak = rouge_l_recall(c.system, r.text);
  return r;
}

// One policy over every budget and protection mode of one case: the prefix is prefilled once; each run compresses
// a fork of it with that mode's spans. `cells` are the policy's, budget-major as the rows are printed.
void run_policy(const std::shared_ptr<const Model> &model, const SessionOptions &base, const std::string &policy,
                const Options &o, const Prepared &p, const Reference &ref, const Case &c, Cell *cells) {
  Session s(model, compress_on_demand(base, parse_policy(policy)));
  const int32_t id = s.add_sequence();
  if (!p.prefix.empty()) s.prefill(id, p.prefix);
  const int64_t N = s.info(id).length;
  for (double b : o.budgets)
    for (ChatProtect mode : o.modes) {
      const int32_t f = s.fork_sequence(id);
      s.compressor().set_spans(f, p.spans[static_cast<size_t>(mode)]);
      if (N > 0) s.compressor().compress(f, budget_tokens(b, N));
      score(s, f, p, ref, c, o.max_answer, *cells++);
      s.remove_sequence(f);
    }
}

double avg(double sum, int64_t n) { return n > 0 ? sum / static_cast<double>(n) : std::nan(""); }

void print_results(const std::vector<Cell> &rows, bool json) {
  if (json) {
    std::string arr = "[";
    for (size_t i = 0; i < rows.size(); ++i) {
      const Cell &r = rows[i];
      JsonObject o;
      o.str("policy", r.policy).num("budget", r.budget).str("protect", chat_protect_name(r.protect))
          .num("kl", avg(r.kl, r.n_scored)).num("top1", avg(r.top1, r.n_scored)).num("exact", avg(r.exact, r.n))
          .num("compliance", avg(r.comply, r.n_checked)).num("compliance_full", avg(r.comply_full, r.n_checked))
          .num("leak", avg(r.leak, r.n_leak)).num("leak_full", avg(r.leak_full, r.n_leak))
          .integer("kv_bytes", static_cast<int64_t>(std::llround(avg(r.bytes, r.n))))
          .integer("kv_bytes_full", static_cast<int64_t>(std::llround(avg(r.bytes_full, r.n))))
          .integer("cases", r.n).integer("checked", r.n_checked).integer("leak_probes", r.n_leak);
      arr += (i ? "," : "") + o.dump();
    }
    std::printf("%s]\n", arr.c_str());
    return;
  }
  std::printf("%-10s %7s %-7s %9s %6s %6s %8s %8s %6s %6s %10s\n", "policy", "budget", "protect", "KL", "top1", "exact",
              "comply", "c_full", "leak", "l_full", "kv_bytes");
  for (const Cell &r : rows)
    std::printf("%-10s %7.3f %-7s %9.4f %6.3f %6.3f %8.3f %8.3f %6.3f %6.3f %10lld\n", r.policy.c_str(), r.budget,
                chat_protect_name(r.protect), avg(r.kl, r.n_scored), avg(r.top1, r.n_scored), avg(r.exact, r.n),
                avg(r.comply, r.n_checked), avg(r.comply_full, r.n_checked), avg(r.leak, r.n_leak),
                avg(r.leak_full, r.n_leak), static_cast<long long>(std::llround(avg(r.bytes, r.n))));
}

void plot_results(const std::string &path, const std::vector<Cell> &rows) {
  std::vector<NamedPoint> points;
  for (const Cell &r : rows)
    points.push_back({r.policy + " / " + chat_protect_name(r.protect), r.budget, avg(r.kl, r.n_scored)});
  write_named_plot(path, "eval-chat: KL of the answer (nats) by budget", "budget (fraction of the prefix)", "KL",
                   points);
}

Options options_from(const Args &a) {
  Options o;
  o.policies = split_list(a.str("policies", "snapkv,h2o,streaming,tova,infokv,auto"));
  for (const std::string &p : o.policies) parse_policy(p);
  o.budgets = fraction_list(a.str("budgets", "0.5,0.25,0.125"), "eval-chat");
  for (const std::string &m : split_list(a.str("protect", "none,system,fair"))) o.modes.push_back(parse_chat_protect(m));
  o.max_answer = static_cast<int32_t>(a.integer("max-answer", 64, 1, 4096));
  return o;
}

}  // namespace

int cmd_eval_chat(int argc, char **argv) {
  std::set<std::string> valued = {"model", "cases", "policies", "budgets", "protect", "history-tokens", "filler",
                                  "max-answer", "plot", "limit"};
  for (const auto &n : session_option_names()) valued.insert(n);
  Args a(argc, argv, 2, valued, {"json"});
  const Options o = options_from(a);
  const std::vector<Case> cases = read_cases(a.required("cases"));
  const int64_t history_tokens = a.integer("history-tokens", 512, 0, 1 << 20);
  const auto limit = static_cast<size_t>(a.integer("limit", static_cast<int64_t>(cases.size()), 1, 1 << 20));
  std::string corpus;
  if (a.has("filler")) {
    corpus = read_file(a.str("filler"));
  } else if (history_tokens > 0) {
    const char *d = std::getenv("INFOKV_CORPORA_DIR");
    const std::string path = std::string(d != nullptr && *d ? d : "../shared/corpora") + "/emma.txt";
    try {
      corpus = read_file(path);
    } catch (const Error &e) {
      fail(Status::invalid_argument, std::string(e.what()) + " (the default filler for histories: give --filler FILE, "
                                     "--history-tokens 0, or cases with their own history)");
    }
  }
  auto model = Model::load(resolve_model_path(a.str("model", default_model_path())));
  const SessionOptions base = session_options_from(a);
  const ChatTemplate tmpl = chat_template_of(*model);
  // The rows as printed: policy-major, then budget, then protection.
  std::vector<Cell> rows;
  for (const std::string &policy : o.policies)
    for (double b : o.budgets)
      for (ChatProtect m : o.modes) {
        rows.emplace_back();
        rows.back().policy = policy;
        rows.back().budget = b;
        rows.back().protect = m;
      }
  const size_t per_policy = o.budgets.size() * o.modes.size();
  for (size_t i = 0; i < cases.size() && i < limit; ++i) {
    const Case &c = cases[i];
    const std::vector<ChatMessage> history =
        !c.history.empty() ? c.history : filler_history(corpus, 7919 * (i + 1), history_tokens, model->tokenizer());
    const Prepared p = prepare(tmpl, model->tokenizer(), c, history);
    const Reference ref = reference_run(model, base, p, c, o.max_answer);
    for (size_t k = 0; k < o.policies.size(); ++k)
      run_policy(model, base, o.policies[k], o, p, ref, c, rows.data() + k * per_policy);
    std::fprintf(stderr, "\reval-chat: case %zu/%zu", i + 1, std::min(limit, cases.size()));
  }
  std::fprintf(stderr, "\n");
  print_results(rows, a.flag("json"));
  if (a.has("plot")) plot_results(a.str("plot"), rows);
  return 0;
}

}  // namespace cli
}  // namespace infokv
