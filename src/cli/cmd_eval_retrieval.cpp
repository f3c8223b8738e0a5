// infokv eval-retrieval: retrieval after compression, the quality users feel. kvpress's RULER protocol on the CPU:
// tasks are generated from any haystack text with a seed (RULER's needle tasks and variable tracking), the context
// is one user turn in the model's chat template, the sequence is compressed to each budget, and only then is the
// question appended (a new user turn, the generation prompt and RULER's answer prefix; original positions kept),
// answered greedily and scored by string match. --query inside puts the question at the end of the compressed turn
// instead (the query-aware setting SnapKV was made for). Per policy x budget: the accuracy per task and overall, the
// KV bytes actually held after compression, and what compressing cost. packaging/docs/quality.md has the protocol and
// how it differs from kvpress's.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "cli/args.hpp"
#include "cli/eval_metrics.hpp"
#include "cli/json.hpp"
#include "cli/svg_plot.hpp"
#include "sampling/sampler.hpp"
#include "session/chat.hpp"
#include "util/error.hpp"

namespace infokv {
namespace cli {

namespace {

// Words for needle keys ("keen-harbor"), as RULER draws keys from a word list.
const char *const kAdjectives[] = {"amber",  "brave",  "calm",   "dusty",  "eager",  "faint",  "gentle", "hollow",
                                   "icy",    "jolly",  "keen",   "lively", "mellow", "noble",  "odd",    "proud",
                                   "quiet",  "rapid",  "silent", "tidy",   "upper",  "vivid",  "wary",   "young",
                                   "zesty",  "bitter", "clever", "dark",   "early",  "fierce", "grand",  "humble"};
const char *const kNouns[] = {"anchor", "bridge", "candle", "desert", "engine", "forest", "garden", "harbor",
                              "island", "jacket", "kettle", "ladder", "meadow", "needle", "orchard", "pepper",
                              "quarry", "river",  "saddle", "temple", "umbrella", "valley", "window", "yarn",
                              "zipper", "basket", "castle", "dragon", "falcon", "glacier", "hammer", "lantern"};

const char *const kTaskNames[] = {"niah_single", "niah_multikey", "niah_multivalue", "niah_multiquery", "vt"};

struct Task {
  std::string name;
  std::string instruction;              // before the context
  std::vector<std::string> needles;     // sentences hidden in the haystack, in order of depth
  std::string question;
  std::string answer_prefix;
  std::vector<std::string> expected;    // strings the answer must contain (score: the fraction found)
  int32_t max_answer = 32;
};

struct Gen {
  Rng rng;
  explicit Gen(uint64_t seed) : rng(seed) {}
  size_t pick(size_t n) { return static_cast<size_t>(rng.next() % n); }
  std::string number() { return std::to_string(1000000 + rng.next() % 9000000); }  // 7 digits, as RULER's
  std::string key(std::set<std::string> *used) {
    for (;;) {
      std::string k = std::string(kAdjectives[pick(std::size(kAdjectives))]) + "-" + kNouns[pick(std::size(kNouns))];
      if (used->insert(k).second) return k;
    }
  }
  std::string var(std::set<std::string> *used) {
    for (;;) {
      std::string v;
      for (int i = 0; i < 5; ++i) v += static_cast<char>('A' + pick(26));
      if (used->insert(v).second) return v;
    }
  }
};

const char *kNiahInstruction =
    "Some special magic numbers are hidden within the following text. Make sure to memorize it. I will quiz you "
    "about the numbers afterwards.\n";

std::string needle(const std::string &key, const std::string &value) {
  return "One of the special magic numbers for " + key + " is: " + value + ".";
}

std::string join_keys(const std::vector<std::string> &k) {
  std::string s;
  for (size_t i = 0; i < k.size(); ++i) s += (i == 0 ? "" : i + 1 == k.size() ? ", and " : ", ") + k[i];
  return s;
}

// RULER's definitions (its synthetic.yaml), with its question and answer-prefix wording.
Task make_task(const std::string &name, Gen &g) {
  Task t;
  t.name = name;
  std::set<std::string> used;
  if (name == "niah_single" || name == "niah_multikey") {
    t.instruction = kNiahInstruction;
    const std::string key = g.key(&used), value = g.number();
    t.needles.push_back(needle(key, value));
    if (name == "niah_multikey")  // three distractors with other keys
      for (int i = 0; i < 3; ++i) t.needles.push_back(needle(g.key(&used), g.number()));
    t.question = "What is the special magic number for " + key + " mentioned in the provided text?";
    t.answer_prefix = "The special magic number for " + key + " mentioned in the provided text is";
    t.expected = {value};
  } else if (name == "niah_multivalue") {
    t.instruction = kNiahInstruction;
    const std::string key = g.key(&used);
    for (int i = 0; i < 4; ++i) {
      t.expected.push_back(g.number());
      t.needles.push_back(needle(key, t.expected.back()));
    }
    t.question = "What are all the special magic numbers for " + key + " mentioned in the provided text?";
    t.answer_prefix = "The special magic numbers for " + key + " mentioned in the provided text are";
    t.max_answer = 64;
  } else if (name == "niah_multiquery") {
    t.instruction = kNiahInstruction;
    std::vector<std::string> keys;
    for (int i = 0; i < 4; ++i) {
      keys.push_back(g.key(&used));
      t.expected.push_back(g.number());
      t.needles.push_back(needle(keys.back(), t.expected.back()));
    }
    t.question = "What are all the special magic numbers for " + join_keys(keys) + " mentioned in the provided text?";
    t.answer_prefix = "The special magic numbers for " + join_keys(keys) + " mentioned in the provided text are";
    t.max_answer = 64;
  } else if (name == "vt") {
    // One chain of five variables: VAR A = 12345, VAR B = VAR A, ...
    t.instruction = "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n";
    const std::string value = std::to_string(10000 + g.rng.next() % 90000);
    std::string prev;
    for (int i = 0; i < 5; ++i) {
      const std::string v = g.var(&used);
      t.needles.push_back(i == 0 ? "VAR " + v + " = " + value + "." : "VAR " + v + " = VAR " + prev + ".");
      t.expected.push_back(v);
      prev = v;
    }
    t.question = "Question: Find all variables that are assigned the value " + value + " in the text above.";
    t.answer_prefix = "Answer: According to the chain(s) of variable assignment in the text above, 5 variables are "
                      "assigned the value " + value + ", they are:";
    t.max_answer = 48;
  } else {
    fail(Status::invalid_argument, "eval-retrieval: unknown task '" + name +
                                       "' (niah_single, niah_multikey, niah_multivalue, niah_multiquery, vt)");
  }
  return t;
}

// The haystack as sentences (split after ". ", "! ", "? " and at blank lines), whitespace folded.
std::vector<std::string> sentences(const std::string &text) {
  std::vector<std::string> out;
  std::string cur;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '\r' || c == '\n' || c == '\t') c = ' ';
    if (c == ' ' && (cur.empty() || cur.back() == ' ')) continue;
    cur += c;
    const bool end = (c == '.' || c == '!' || c == '?') && (i + 1 == text.size() || text[i + 1] == ' ' ||
                                                             text[i + 1] == '\n' || text[i + 1] == '\r');
    if (end && cur.size() > 1) {
      out.push_back(cur);
      cur.clear();
    }
  }
  if (cur.size() > 1) out.push_back(cur);
  return out;
}

// The context: haystack sentences from a seeded start, about `tokens` tokens with the needles, each needle placed at
// its depth (fractions of the haystack, ascending).
std::string build_context(const std::vector<std::string> &hay, const std::vector<int64_t> &hay_tokens,
                          const std::vector<std::string> &needles, const std::vector<double> &depths, int64_t tokens,
                          int64_t needle_tokens, Gen &g) {
  std::vector<std::string> picked;
  int64_t have = needle_tokens;
  size_t at = g.pick(hay.size());
  for (size_t n = 0; n < hay.size() && have < tokens; ++n, at = (at + 1) % hay.size()) {
    picked.push_back(hay[at]);
    have += hay_tokens[at];
  }
  std::string out;
  size_t k = 0;
  for (size_t i = 0; i <= picked.size(); ++i) {
    while (k < needles.size() &&
           static_cast<double>(i) >= depths[k] * static_cast<double>(picked.size())) {
      out += (out.empty() ? "" : " ") + needles[k++];
    }
    if (i < picked.size()) out += (out.empty() ? "" : " ") + picked[i];
  }
  return out;
}

// The fraction of `expected` found in the answer.
double match(const std::string &answer, const std::vector<std::string> &expected) {
  double found = 0;
  for (const std::string &e : expected) found += answer.find(e) != std::string::npos ? 1.0 : 0.0;
  return expected.empty() ? 0.0 : found / static_cast<double>(expected.size());
}

// One case, tokenised: what is compressed, and what follows it.
struct Prepared {
  std::vector<int32_t> compressed;  // the context turn (with the question when query = inside)
  std::vector<ProtectedSpan> spans; // what the chat API would protect in it (--protect)
  std::vector<int32_t> after;       // question turn (after) or nothing, then the answer prefix
};

Prepared prepare(const Model &model, const Task &t, const std::string &context, bool inside, ChatProtect protect) {
  const Tokenizer &tok = model.tokenizer();
  const ChatTemplate tmpl = ChatTemplate::detect(model.chat_template(), tok);
  const std::string user = t.instruction + context;
  Prepared p;
  if (tmpl.format == ChatFormat::none) {  // a base model: plain text
    p.compressed = tok.encode(user + (inside ? "\n\n" + t.question : std::string()), true, false);
    p.after = tok.encode((inside ? "\n" : "\n\n" + t.question + "\n") + t.answer_prefix, false, false);
    return p;
  }
  // As the chat API builds and protects it (Session chat calls): the template's default system turn and markup.
  const std::vector<ChatPiece> pieces =
      tmpl.encode_pieces(tok, {{"user", inside ? user + "\n\n" + t.question : user}}, inside, true);
  for (const ChatPiece &pc : pieces) p.compressed.insert(p.compressed.end(), pc.ids.begin(), pc.ids.end());
  p.spans = chat_spans(pieces, 0, protect);
  if (!inside) p.after = tmpl.encode(tok, {{"user", t.question}}, true, false);
  const std::vector<int32_t> prefix = tok.encode(t.answer_prefix, false, false);
  p.after.insert(p.after.end(), prefix.begin(), prefix.end());
  return p;
}

// The positions in `ids` of the tokens of the needles an answer needs (those that hold an expected string), in order
// of depth, each needle found as the tokens of " " + its sentence (as build_context writes it; a byte-level BPE) or
// of the sentence alone (a SentencePiece vocabulary marks the space itself). A needle whose tokens merged with its
// neighbours' is not found and not counted.
std::vector<int32_t> answer_positions(const Tokenizer &tok, const Task &t, const std::vector<int32_t> &ids) {
  std::vector<int32_t> out;
  auto from = ids.begin();
  for (const std::string &n : t.needles) {
    bool needed = false;
    for (const std::string &e : t.expected) needed = needed || n.find(e) != std::string::npos;
    std::vector<int32_t> nt;
    auto at = ids.end();
    for (const std::string &text : {" " + n, n}) {
      nt = tok.encode(text, false, false);
      at = std::search(from, ids.end(), nt.begin(), nt.end());
      if (at != ids.end()) break;
    }
    if (at == ids.end() || nt.empty()) continue;
    from = at + static_cast<std::ptrdiff_t>(nt.size());
    if (!needed) continue;
    for (size_t i = 0; i < nt.size(); ++i) out.push_back(static_cast<int32_t>(at - ids.begin()) + static_cast<int32_t>(i));
  }
  return out;
}

// The fraction of `want` (ascending positions) a sequence's cache holds, the mean over layers; NaN for none.
double kept_fraction(const Session &s, int32_t seq, const std::vector<int32_t> &want) {
  if (want.empty()) return std::nan("");
  double sum = 0;
  const std::vector<LayerSlots> &layers = s.kv().seq(seq).layers;
  for (const LayerSlots &L : layers) {
    int64_t have = 0;
    for (int32_t p : want) have += std::binary_search(L.pos.begin(), L.pos.end(), p) ? 1 : 0;
    sum += static_cast<double>(have) / static_cast<double>(want.size());
  }
  return layers.empty() ? std::nan("") : sum / static_cast<double>(layers.size());
}

std::string greedy_text(Session &s, int32_t seq, int32_t max_answer) {
  return s.model().tokenizer().decode(greedy_answer(s, seq, max_answer));
}

struct Cell {  // one policy x budget, summed over cases
  std::string policy;
  double budget = 1.0;
  std::string question;  // what its compressions served ("-" for the full cache)
  std::map<std::string, std::pair<double, int64_t>> per_task;  // task -> (score sum, cases)
  double score = 0, bytes = 0, bytes_full = 0, seconds = 0;
  int64_t n = 0;
  double needle_kept = 0;  // sum over the cases whose needles were found of the fraction of their tokens kept
  int64_t needle_cases = 0;
};

// --verbose: each answer on stderr with what it had to contain and how much of its needles the cache kept.
void show(const Task &t, const std::string &policy, double budget, const std::string &answer, double kept) {
  std::string want;
  for (const std::string &e : t.expected) want += (want.empty() ? "" : ",") + e;
  std::string a = answer.substr(0, 160);
  for (char &c : a)
    if (c == '\n') c = ' ';
  std::fprintf(stderr, "\n  %-15s %-9s %5.3f %4.2f needles kept %4.2f want [%s] got \"%s\"", t.name.c_str(),
               policy.c_str(), budget, match(answer, t.expected), kept, want.c_str(), a.c_str());
}

double avg(double sum, int64_t n) { return n > 0 ? sum / static_cast<double>(n) : std::nan(""); }

void add(Cell &c, const std::string &task, double score, int64_t bytes, int64_t bytes_full, double seconds,
         double kept) {
  if (!std::isnan(kept)) {
    c.needle_kept += kept;
    ++c.needle_cases;
  }
  auto &t = c.per_task[task];
  t.first += score;
  ++t.second;
  c.score += score;
  c.bytes += static_cast<double>(bytes);
  c.bytes_full += static_cast<double>(bytes_full);
  c.seconds += seconds;
  ++c.n;
}

void print_results(const std::vector<Cell> &rows, const std::vector<std::string> &tasks, bool json) {
  if (json) {
    std::string arr = "[";
    for (size_t i = 0; i < rows.size(); ++i) {
      const Cell &r = rows[i];
      JsonObject per;
      for (const std::string &t : tasks) {
        auto it = r.per_task.find(t);
        if (it != r.per_task.end()) per.num(t.c_str(), avg(it->second.first, it->second.second));
      }
      JsonObject o;
      o.str("policy", r.policy).num("budget", r.budget).str("question", r.question).num("accuracy", avg(r.score, r.n))
          .raw("tasks", per.dump())
          .integer("kv_bytes", static_cast<int64_t>(std::llround(avg(r.bytes, r.n))))
          .integer("kv_bytes_full", static_cast<int64_t>(std::llround(avg(r.bytes_full, r.n))))
          .num("compress_seconds", avg(r.seconds, r.n)).num("needles_kept", avg(r.needle_kept, r.needle_cases))
          .integer("cases", r.n);
      arr += (i ? "," : "") + o.dump();
    }
    std::printf("%s]\n", arr.c_str());
    return;
  }
  std::printf("%-10s %7s %8s %8s", "policy", "budget", "question", "accuracy");
  for (const std::string &t : tasks) std::printf(" %15s", t.c_str());
  std::printf(" %10s %8s %9s %12s\n", "kv_bytes", "of_full", "compress_s", "needles_kept");
  for (const Cell &r : rows) {
    std::printf("%-10s %7.3f %8s %8.3f", r.policy.c_str(), r.budget, r.question.c_str(), avg(r.score, r.n));
    for (const std::string &t : tasks) {
      auto it = r.per_task.find(t);
      std::printf(" %15.3f", it == r.per_task.end() ? std::nan("") : avg(it->second.first, it->second.second));
    }
    std::printf(" %10lld %8.3f %9.3f %12.3f\n", static_cast<long long>(std::llround(avg(r.bytes, r.n))),
                avg(r.bytes, r.n) / avg(r.bytes_full, r.n), avg(r.seconds, r.n), avg(r.needle_kept, r.needle_cases));
  }
}

void plot_results(const std::string &path, const std::vector<Cell> &rows) {
  std::vector<NamedPoint> points;
  for (const Cell &r : rows)
    if (r.policy != "full") points.push_back({r.policy, r.budget, avg(r.score, r.n)});
  write_named_plot(path, "eval-retrieval: accuracy by budget (question after compression)",
                   "budget (fraction of the context's KV)", "accuracy", points);
}

}  // namespace

int cmd_eval_retrieval(int argc, char **argv) {
  std::set<std::string> valued = {"model", "haystack", "tasks", "context", "cases", "seed", "policies", "budgets",
                                  "query", "protect", "plot", "cases-out"};
  for (const auto &n : session_option_names()) valued.insert(n);
  Args a(argc, argv, 2, valued, {"json", "verbose"});
  const bool verbose = a.flag("verbose");
  std::vector<std::string> tasks = split_list(a.str("tasks", "niah_single,niah_multikey,niah_multivalue,niah_multiquery,vt"));
  const int64_t context_tokens = a.integer("context", 2048, 64, 1 << 20);
  const int64_t n_cases = a.integer("cases", 8, 1, 1 << 16);
  const auto seed = static_cast<uint64_t>(a.integer("seed", 1, 0, INT64_MAX));
  const std::vector<std::string> policies = split_list(a.str("policies", "snapkv,streaming,tova,auto"));
  for (const std::string &p : policies) parse_policy(p);
  const std::vector<double> budgets = fraction_list(a.str("budgets", "0.5,0.25,0.125"), "eval-retrieval");
  const std::string query = a.str("query", "after");
  const ChatProtect protect = parse_chat_protect(a.str("protect", "system"));
  if (query != "after" && query != "inside") fail(Status::invalid_argument, "--query is after or inside");
  std::string hay_path = a.str("haystack", "");
  if (hay_path.empty()) {
    const char *d = std::getenv("INFOKV_CORPORA_DIR");
    hay_path = std::string(d != nullptr && *d ? d : "../shared/corpora") + "/emma.txt";
  }
  const std::vector<std::string> hay = sentences(read_file(hay_path));
  if (hay.size() < 8) fail(Status::invalid_argument, hay_path + ": too little text for a haystack (8 sentences or more)");
  auto model = Model::load(resolve_model_path(a.str("model", default_model_path())));
  const Tokenizer &tok = model->tokenizer();
  std::vector<int64_t> hay_tokens;
  for (const std::string &s : hay) hay_tokens.push_back(static_cast<int64_t>(tok.encode(" " + s, false, false).size()));
  for (const std::string &t : tasks) {
    Gen probe(0);
    make_task(t, probe);  // refuses an unknown name before any work
  }
  const SessionOptions base = session_options_from(a);
  // --cases-out: each case as one JSON line (its token ids, what the answer must contain, and every answer given
  // here), so that another runtime can be run on exactly these cases (packaging/tools/kvpress_retrieval.py).
  // Closed on every path (an error part-way leaves the cases written so far); a failed write is reported at the end.
  struct Closer {
    void operator()(std::FILE *f) const { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, Closer> cases_out;
  if (a.has("cases-out")) {
    cases_out.reset(std::fopen(a.str("cases-out").c_str(), "w"));
    if (cases_out == nullptr) fail(Status::io, a.str("cases-out") + ": cannot be written");
  }

  std::vector<Cell> rows(1 + policies.size() * budgets.size());
  rows[0].policy = "full";
  rows[0].question = "-";
  for (size_t p = 0; p < policies.size(); ++p)
    for (size_t b = 0; b < budgets.size(); ++b) {
      rows[1 + p * budgets.size() + b].policy = policies[p];
      rows[1 + p * budgets.size() + b].budget = budgets[b];
    }
  const int64_t total = static_cast<int64_t>(tasks.size()) * n_cases;
  int64_t done = 0;
  for (size_t ti = 0; ti < tasks.size(); ++ti)
    for (int64_t c = 0; c < n_cases; ++c) {
      Gen g(seed * 1000003u + ti * 7919u + static_cast<uint64_t>(c));
      const Task t = make_task(tasks[ti], g);
      // Depths: the first needle at this case's depth (cases spread over 5%..95%), the others after it in their
      // order (a variable chain stays in order, as RULER writes it), spread up to 95%.
      const double d0 = 0.05 + 0.9 * (static_cast<double>(c) + 0.5) / static_cast<double>(n_cases);
      std::vector<double> depths;
      int64_t needle_tokens = 0;
      for (size_t k = 0; k < t.needles.size(); ++k) {
        depths.push_back(d0 + (0.95 - d0) * static_cast<double>(k) / static_cast<double>(t.needles.size()));
        needle_tokens += static_cast<int64_t>(tok.encode(" " + t.needles[k], false, false).size());
      }
      const std::vector<std::string> &ns = t.needles;
      const std::string context = build_context(hay, hay_tokens, ns, depths, context_tokens, needle_tokens, g);
      if (c == 0 && ti == 0) {
        const auto got = static_cast<int64_t>(tok.encode(context, false, false).size());
        if (got < context_tokens * 9 / 10)
          std::fprintf(stderr, "eval-retrieval: the haystack holds only %lld of the %lld context tokens asked\n",
                       static_cast<long long>(got), static_cast<long long>(context_tokens));
      }
      const Prepared p = prepare(*model, t, context, query == "inside", protect);
      const std::vector<int32_t> want = answer_positions(tok, t, p.compressed);
      JsonObject answers;  // for --cases-out: "policy@budget" -> {answer, score}
      auto record = [&answers](const std::string &key, const std::string &answer, double score) {
        answers.raw(key, JsonObject().str("answer", answer).num("score", score).dump());
      };

      {  // the full cache
        SessionOptions so = base;
        so.compression = CompressionConfig{};
        Session s(model, so);
        const int32_t id = s.add_sequence();
        s.prefill(id, p.compressed);
        const int64_t full = s.info(id).bytes;
        if (!p.after.empty()) s.prefill(id, p.after);
        const std::string answer = greedy_text(s, id, t.max_answer);
        const double kept = kept_fraction(s, id, want);
        if (verbose) show(t, "full", 1.0, answer, kept);
        const double score = match(answer, t.expected);
        add(rows[0], t.name, score, full, full, 0.0, kept);
        record("full", answer, score);
      }
      for (size_t pi = 0; pi < policies.size(); ++pi) {
        Session s(model, compress_on_demand(base, parse_policy(policies[pi])));
        const int32_t id = s.add_sequence();
        s.prefill(id, p.compressed);
        const int64_t N = s.info(id).length, full = s.info(id).bytes;
        for (size_t bi = 0; bi < budgets.size(); ++bi) {
          const int32_t f = s.fork_sequence(id);
          s.compressor().set_spans(f, p.spans);
          const auto t0 = std::chrono::steady_clock::now();
          s.compressor().compress(f, budget_tokens(budgets[bi], N));
          // What the compression served (the question asked unless the policy reads no queries or the probe did not
          // fit): "mixed" when cases differ.
          Cell &cell = rows[1 + pi * budgets.size() + bi];
          const std::string served = question_name(s.compressor().state(f).question);
          cell.question = cell.question.empty() || cell.question == served ? served : "mixed";
          const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          const int64_t held = s.info(f).bytes;
          const double kept = kept_fraction(s, f, want);
          if (!p.after.empty()) s.prefill(f, p.after);
          const std::string answer = greedy_text(s, f, t.max_answer);
          if (verbose) show(t, policies[pi], budgets[bi], answer, kept);
          const double score = match(answer, t.expected);
          add(rows[1 + pi * budgets.size() + bi], t.name, score, held, full, secs, kept);
          record(policies[pi] + "@" + json_num(budgets[bi]), answer, score);
          s.remove_sequence(f);
        }
      }
      if (cases_out != nullptr) {
        std::string expected = "[";
        for (size_t k = 0; k < t.expected.size(); ++k) expected += (k ? "," : "") + json_str(t.expected[k]);
        std::vector<int64_t> spans;
        for (const ProtectedSpan &sp : p.spans) {
          spans.push_back(sp.begin);
          spans.push_back(sp.end);
        }
        JsonObject line;
        line.str("task", t.name).integer("case", c).str("query", query).ints("context_ids", p.compressed)
            .ints("after_ids", p.after).ints("protected", spans).ints("needle_positions", want)
            .raw("expected", expected + "]").integer("max_answer", t.max_answer).raw("answers", answers.dump());
        std::fprintf(cases_out.get(), "%s\n", line.dump().c_str());
        std::fflush(cases_out.get());
      }
      std::fprintf(stderr, "\reval-retrieval: case %lld/%lld", static_cast<long long>(++done),
                   static_cast<long long>(total));
    }
  std::fprintf(stderr, "\n");
  if (cases_out != nullptr && std::fclose(cases_out.release()) != 0) fail(Status::io, a.str("cases-out") + ": write failed");
  print_results(rows, tasks, a.flag("json"));
  if (a.has("plot")) plot_results(a.str("plot"), rows);
  return 0;
}

}  // namespace cli
}  // namespace infokv
