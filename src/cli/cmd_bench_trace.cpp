// infokv bench --trace: a workload replayed on the engine (src/engine) under each strategy side by side. Many
// conversations with shared system prompts and documents arrive over time, each of --turns turns with a pause
// between them, on a pool that holds --fits of them at their full length. The run with unlimited memory comes first:
// its answers are the reference, and every strategy after it is teacher-forced along them, so that the KL of each
// answer token against the reference measures what memory pressure cost in quality, and every strategy decodes the
// same tokens (their times compare). Reported per strategy: conversations completed, total time, time to first
// token and per-token latency (p50, p95), decisions (compress, move, recompute), bytes moved, KL and top-1 agreement.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <unistd.h>
#include <map>
#include <string>
#include <vector>

#include "cli/args.hpp"
#include "cli/json.hpp"
#include "compress/policy_table.hpp"
#include "engine/engine.hpp"
#include "util/byte_io.hpp"
#include "util/error.hpp"

namespace infokv {
namespace cli {

namespace {

using Clock = std::chrono::steady_clock;

struct TraceSpec {
  std::string model, corpus;
  int64_t conversations = 64, fits = 8, turns = 2, gen = 32, doc_tokens = 256, arrival_every = 2, think = 4;
  int64_t threads = 0, max_batch = 8, max_prefill = -1, topk = 64;
  std::vector<std::string> strategies;
  double max_loss = -1;  // engine default
  bool json = false;
  bool prefix_cache = false;  // the engine's prefix cache, in memory
  std::string spill_dir;      // where moved conversations go (empty: the engine's default, in the temp directory)
  std::string report_dir;     // when set: each run's engine report (rates and every decision) as <strategy>.json
};

// The reference's distribution at one answer token: its top-k log-probabilities and the rest's total.
struct RefDist {
  std::vector<int32_t> ids;
  std::vector<float> logp;
  double tail = 0;  // probability outside the top-k
};

std::vector<double> log_softmax(const std::vector<float> &lg) {
  double mx = -INFINITY;
  for (float x : lg) mx = std::max(mx, static_cast<double>(x));
  double s = 0;
  for (float x : lg) s += std::exp(static_cast<double>(x) - mx);
  const double lse = mx + std::log(s);
  std::vector<double> out(lg.size());
  for (size_t i = 0; i < lg.size(); ++i) out[i] = static_cast<double>(lg[i]) - lse;
  return out;
}

RefDist ref_dist(const std::vector<float> &lg, int64_t k) {
  const std::vector<double> lp = log_softmax(lg);
  std::vector<int32_t> idx(lp.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int32_t>(i);
  const size_t kk = std::min(idx.size(), static_cast<size_t>(k));
  std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(kk), idx.end(),
                    [&](int32_t a, int32_t b) { return lp[static_cast<size_t>(a)] > lp[static_cast<size_t>(b)]; });
  RefDist d;
  double mass = 0;
  for (size_t i = 0; i < kk; ++i) {
    d.ids.push_back(idx[i]);
    d.logp.push_back(static_cast<float>(lp[static_cast<size_t>(idx[i])]));
    mass += std::exp(lp[static_cast<size_t>(idx[i])]);
  }
  d.tail = std::max(0.0, 1.0 - mass);
  return d;
}

// KL(reference || test) over the reference's top-k and the rest lumped together (exact up to the tail's shape).
double kl_topk(const RefDist &r, const std::vector<float> &lg) {
  const std::vector<double> lq = log_softmax(lg);
  double kl = 0, qmass = 0;
  for (size_t i = 0; i < r.ids.size(); ++i) {
    const double lp = r.logp[i], q = lq[static_cast<size_t>(r.ids[i])];
    kl += std::exp(lp) * (lp - q);
    qmass += std::exp(q);
  }
  const double qtail = std::max(1e-30, 1.0 - qmass);
  if (r.tail > 1e-12) kl += r.tail * std::log(r.tail / qtail);
  return std::max(0.0, kl);
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = p * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(pos);
  const size_t hi = std::min(v.size() - 1, lo + 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

// The workload: conversation i's turns (token prompts) and when its first turn arrives (in engine steps).
struct Workload {
  std::vector<std::vector<std::vector<int32_t>>> turns;  // [conversation][turn] -> prompt
  std::vector<int64_t> arrive;
  int64_t longest = 0;  // tokens of the longest conversation at its end (prompts + answers at most)
};

Workload make_workload(const TraceSpec &spec, const Tokenizer &tok) {
  const std::string text = read_file(spec.corpus);
  const std::vector<int32_t> all = tok.encode(text, false);
  const int64_t n_docs = 8;
  if (static_cast<int64_t>(all.size()) < n_docs * spec.doc_tokens)
    fail(Status::invalid_argument, "the corpus " + spec.corpus + " has " + std::to_string(all.size()) +
                                       " tokens; the trace's documents need " + std::to_string(n_docs * spec.doc_tokens));
  const char *systems[] = {
      "System: You are a careful reading assistant. Answer questions about the document in one or two sentences.\n\n",
      "System: You are a literature tutor. Quote the document where you can and keep answers short.\n\n"};
  const char *questions[] = {"Who is mentioned first in the document?", "What happens at the end of the passage?",
                             "Summarize the passage in one sentence.", "Which places are named in the document?",
                             "What does the narrator think of the main character?", "Name two people in the passage.",
                             "What is the mood of the passage?", "What was said last?"};
  Workload w;
  for (int64_t i = 0; i < spec.conversations; ++i) {
    std::vector<std::vector<int32_t>> turns;
    const int64_t doc = (i * 5) % n_docs;
    std::vector<int32_t> first = tok.encode(systems[i % 2], true);
    const std::vector<int32_t> d0 = tok.encode("Document:\n", false);
    first.insert(first.end(), d0.begin(), d0.end());
    first.insert(first.end(), all.begin() + doc * spec.doc_tokens, all.begin() + (doc + 1) * spec.doc_tokens);
    int64_t total = 0;
    for (int64_t t = 0; t < spec.turns; ++t) {
      std::vector<int32_t> q = tok.encode(std::string(t == 0 ? "\n\nQuestion: " : "\nQuestion: ") +
                                              questions[(i + 3 * t) % 8] + "\nAnswer:",
                                          false);
      if (t == 0) {
        first.insert(first.end(), q.begin(), q.end());
        q = first;
      }
      total += static_cast<int64_t>(q.size()) + spec.gen;
      turns.push_back(std::move(q));
    }
    w.longest = std::max(w.longest, total);
    w.turns.push_back(std::move(turns));
    w.arrive.push_back(i * spec.arrival_every);
  }
  return w;
}

struct Result {
  std::string strategy;
  int64_t completed = 0, failed = 0;
  double seconds = 0;
  std::vector<double> ttft, tpot;
  EngineStats stats;
  double kl_sum = 0;
  int64_t kl_n = 0, top1 = 0;
  std::vector<std::vector<std::vector<int32_t>>> answers;  // [conversation][turn]
  std::vector<std::vector<std::vector<RefDist>>> dists;    // reference run only
};

Result run(const std::shared_ptr<const Model> &model, const TraceSpec &spec, const Workload &w, Strategy st,
           int64_t pool_blocks, const Result *ref) {
  EngineOptions o;
  o.strategy = st;
  o.session.n_threads = static_cast<int32_t>(spec.threads);
  o.session.kv_pool_blocks = pool_blocks;
  o.session.compression.policy = PolicyKind::auto_;
  o.session.compression.budget_fraction = 1.0;  // compressed only when memory runs out
  o.max_batch = static_cast<int32_t>(spec.max_batch);
  o.max_prefill_tokens = static_cast<int32_t>(spec.max_prefill);
  if (spec.max_loss >= 0) o.max_loss = spec.max_loss;
  o.prefix_cache = spec.prefix_cache;
  o.spill_dir = spec.spill_dir;
  Engine e(model, o);
  Result r;
  r.strategy = ref == nullptr ? "unlimited" : strategy_name(st);
  const size_t C = w.turns.size();
  r.answers.assign(C, {});
  if (ref == nullptr) r.dists.assign(C, {});
  std::vector<int64_t> ids(C, -1);
  std::vector<size_t> turn(C, 0);
  std::vector<int64_t> ready_at(C, 0);
  std::vector<Clock::time_point> submitted(C), last_token(C);
  std::vector<bool> got_first(C, false), finished(C, false);
  for (size_t i = 0; i < C; ++i) ready_at[i] = w.arrive[i];
  const auto t0 = Clock::now();
  int64_t step = 0;
  auto submit = [&](size_t i) {
    Turn t;
    t.prompt = w.turns[i][turn[i]];
    t.max_tokens = static_cast<int32_t>(spec.gen);
    if (ref != nullptr) {
      t.forced = ref->answers[i][turn[i]];
      t.max_tokens = static_cast<int32_t>(t.forced.size());
    }
    e.submit(ids[i], std::move(t));
    r.answers[i].emplace_back();
    if (ref == nullptr) r.dists[i].emplace_back();
    submitted[i] = Clock::now();
    got_first[i] = false;
  };
  size_t n_finished = 0;
  while (n_finished < C) {
    for (size_t i = 0; i < C; ++i) {
      if (finished[i] || ready_at[i] < 0 || step < ready_at[i]) continue;
      if (ids[i] < 0) ids[i] = e.open();
      submit(i);
      ready_at[i] = -1;
    }
    const std::vector<TokenEvent> ev = e.step();
    const auto now = Clock::now();
    for (const TokenEvent &x : ev) {
      const size_t i = static_cast<size_t>(std::find(ids.begin(), ids.end(), x.conversation) - ids.begin());
      const size_t t = turn[i];
      const size_t k = r.answers[i][t].size();
      r.answers[i][t].push_back(x.token);
      if (ref == nullptr) {
        r.dists[i][t].push_back(ref_dist(*x.logits, spec.topk));
      } else {
        const RefDist &d = ref->dists[i][t][k];
        r.kl_sum += kl_topk(d, *x.logits);
        ++r.kl_n;
        const auto &lg = *x.logits;
        if (std::max_element(lg.begin(), lg.end()) - lg.begin() == d.ids[0]) ++r.top1;
      }
      if (!got_first[i]) {
        r.ttft.push_back(std::chrono::duration<double>(now - submitted[i]).count());
        got_first[i] = true;
      } else {
        r.tpot.push_back(std::chrono::duration<double>(now - last_token[i]).count());
      }
      last_token[i] = now;
    }
    for (size_t i = 0; i < C; ++i) {
      if (finished[i] || ids[i] < 0 || ready_at[i] >= 0) continue;
      const TurnState s = e.state(ids[i]);
      if (s == TurnState::failed) {
        finished[i] = true;
        ++n_finished;
        ++r.failed;
        e.close(ids[i]);
      } else if (s == TurnState::done) {
        if (++turn[i] == w.turns[i].size()) {
          finished[i] = true;
          ++n_finished;
          ++r.completed;
          e.close(ids[i]);
        } else {
          ready_at[i] = step + spec.think;
        }
      }
    }
    ++step;
    if (step > 50000000) fail(Status::internal, "trace did not finish");
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  r.stats = e.stats();
  if (!spec.report_dir.empty()) {
    const std::string path = spec.report_dir + "/" + r.strategy + ".json";
    FileSink out(path);
    const std::string j = report_json(e);
    out.write(j.data(), j.size());
    out.commit();
  }
  return r;
}

}  // namespace

int cmd_bench_trace(int argc, char **argv) {
  Args a(argc, argv, 2,
         {"model", "corpus", "conversations", "fits", "turns", "gen", "doc-tokens", "arrival-every", "think", "threads",
          "max-batch", "max-prefill", "strategies", "max-loss", "spill-dir", "report-dir"},
         {"trace", "json", "prefix-cache"});
  TraceSpec spec;
  spec.model = resolve_model_path(a.str("model", default_model_path()));
  {
    const char *cd = std::getenv("INFOKV_CORPORA_DIR");
    const char *md = std::getenv("INFOKV_MODELS_DIR");
    const std::string dir = cd != nullptr && *cd ? cd : (md != nullptr && *md ? std::string(md) + "/../corpora" : "../shared/corpora");
    spec.corpus = a.str("corpus", dir + "/emma.txt");
  }
  spec.conversations = a.integer("conversations", 64, 1, 100000);
  spec.fits = a.integer("fits", 8, 1, 100000);
  spec.turns = a.integer("turns", 2, 1, 100);
  spec.gen = a.integer("gen", 32, 1, 100000);
  spec.doc_tokens = a.integer("doc-tokens", 256, 1, 1 << 20);
  spec.arrival_every = a.integer("arrival-every", 2, 0, 1 << 20);
  spec.think = a.integer("think", 4, 0, 1 << 20);
  spec.threads = a.integer("threads", 0, 0, 1024);
  spec.max_batch = a.integer("max-batch", 8, 0, 100000);
  spec.max_prefill = a.integer("max-prefill", -1, -1, 1 << 24);  // -1: the engine's default (one prefill chunk)
  spec.max_loss = a.number("max-loss", -1, -1, 1);
  spec.json = a.flag("json");
  spec.prefix_cache = a.flag("prefix-cache");
  spec.spill_dir = a.str("spill-dir", "");
  spec.report_dir = a.str("report-dir", "");
  if (!spec.report_dir.empty()) std::filesystem::create_directories(spec.report_dir);
  spec.strategies = split_list(a.str("strategies", "fail,recompute,move,compress,auto"));
  std::vector<Strategy> strategies;
  for (const std::string &s : spec.strategies) strategies.push_back(parse_strategy(s));

  const std::shared_ptr<const Model> model = Model::load(spec.model);
  const Workload w = make_workload(spec, model->tokenizer());
  const int64_t bs = defaults::block_size, L = model->hparams().n_layer;
  const int64_t per_conv = L * ((w.longest + bs - 1) / bs + 1);
  const int64_t small_pool = spec.fits * per_conv;
  const int64_t big_pool = (static_cast<int64_t>(w.turns.size()) + 1) * per_conv;

  std::vector<Result> results;
  results.push_back(run(model, spec, w, Strategy::automatic, big_pool, nullptr));
  for (Strategy st : strategies) results.push_back(run(model, spec, w, st, small_pool, &results[0]));

  const Result &base = results[0];
  if (spec.json) {
    std::string arr = "[";
    for (size_t i = 0; i < results.size(); ++i) {
      const Result &r = results[i];
      JsonObject o;
      o.str("strategy", r.strategy).integer("conversations", static_cast<int64_t>(w.turns.size()))
          .integer("completed", r.completed).integer("failed", r.failed).num("seconds", r.seconds)
          .num("time_vs_unlimited", r.seconds / base.seconds).num("ttft_p50_ms", percentile(r.ttft, 0.5) * 1e3)
          .num("ttft_p95_ms", percentile(r.ttft, 0.95) * 1e3).num("tpot_p50_ms", percentile(r.tpot, 0.5) * 1e3)
          .num("tpot_p95_ms", percentile(r.tpot, 0.95) * 1e3).integer("compressions", r.stats.compressions)
          .integer("moves", r.stats.moves).integer("recomputes", r.stats.recomputes)
          .integer("bytes_moved", r.stats.bytes_moved).integer("recomputed_tokens", r.stats.recomputed_tokens)
          .integer("prefix_hits", r.stats.prefix_hits).integer("prefix_hit_tokens", r.stats.prefix_hit_tokens)
          .integer("recompute_hit_tokens", r.stats.recompute_hit_tokens)
          .num("kl", r.kl_n ? r.kl_sum / static_cast<double>(r.kl_n) : 0.0)
          .num("top1", r.kl_n ? static_cast<double>(r.top1) / static_cast<double>(r.kl_n) : 1.0)
          .integer("pool_blocks", i == 0 ? big_pool : small_pool);
      arr += (i ? "," : "") + o.dump();
    }
    std::printf("%s]\n", arr.c_str());
    return 0;
  }
  std::printf("trace: %lld conversations x %lld turns (%lld-token documents, %lld-token answers), one arriving every "
              "%lld steps, %lld steps between turns; pool for %lld at full length (%lld blocks); model %s\n\n",
              static_cast<long long>(spec.conversations), static_cast<long long>(spec.turns),
              static_cast<long long>(spec.doc_tokens), static_cast<long long>(spec.gen),
              static_cast<long long>(spec.arrival_every), static_cast<long long>(spec.think),
              static_cast<long long>(spec.fits), static_cast<long long>(small_pool), spec.model.c_str());
  std::printf("| strategy | completed | time s | vs unlimited | TTFT p50/p95 ms | per token p50/p95 ms | compress/move/recompute | MiB moved | recomputed / from cache tokens | prefix hits | KL | top-1 |\n");
  std::printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (const Result &r : results) {
    std::printf("| %s | %lld/%lld | %.2f | %.2fx | %.1f / %.1f | %.1f / %.1f | %lld/%lld/%lld | %.1f | %lld / %lld | %lld | %.4f | %.3f |\n",
                r.strategy.c_str(), static_cast<long long>(r.completed), static_cast<long long>(w.turns.size()),
                r.seconds, r.seconds / base.seconds, percentile(r.ttft, 0.5) * 1e3, percentile(r.ttft, 0.95) * 1e3,
                percentile(r.tpot, 0.5) * 1e3, percentile(r.tpot, 0.95) * 1e3,
                static_cast<long long>(r.stats.compressions), static_cast<long long>(r.stats.moves),
                static_cast<long long>(r.stats.recomputes), static_cast<double>(r.stats.bytes_moved) / (1 << 20),
                static_cast<long long>(r.stats.recomputed_tokens), static_cast<long long>(r.stats.recompute_hit_tokens),
                static_cast<long long>(r.stats.prefix_hits), r.kl_n ? r.kl_sum / static_cast<double>(r.kl_n) : 0.0,
                r.kl_n ? static_cast<double>(r.top1) / static_cast<double>(r.kl_n) : 1.0);
  }
  std::printf("\nKL: mean over answer tokens of KL(unlimited || strategy), the answers teacher-forced along the "
              "unlimited run's; failed turns count only the tokens they produced.\n");
  return 0;
}

}  // namespace cli
}  // namespace infokv

namespace infokv {
namespace cli {

namespace {

// Time to first token of one request on `e`: from its submission to the step that returns its first token.
double ttft(Engine &e, const std::vector<int32_t> &prompt) {
  const auto t0 = Clock::now();
  const int64_t c = e.open();
  e.submit(c, {prompt, 1, {}, {}});
  double s = -1;
  while (e.busy())
    if (!e.step().empty() && s < 0) s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (e.state(c) != TurnState::done) fail(Status::internal, "bench request failed: " + e.failure(c));
  e.close(c);
  return s;
}

}  // namespace

// infokv bench --prefix: time to first token of a request whose first --tokens tokens were seen before, prefilled
// against started from the prefix cache in each tier (memory; a directory; Redis/Valkey with --redis).
int cmd_bench_prefix(int argc, char **argv) {
  Args a(argc, argv, 2, {"model", "corpus", "tokens", "threads", "repetitions", "redis", "disk"}, {"prefix", "json"});
  const std::string model_path = resolve_model_path(a.str("model", default_model_path()));
  const int64_t n = a.integer("tokens", 2048, 64, 1 << 20);
  const int64_t reps = a.integer("repetitions", 3, 1, 100);
  const std::shared_ptr<const Model> model = Model::load(model_path);
  const char *cd = std::getenv("INFOKV_CORPORA_DIR");
  const char *md = std::getenv("INFOKV_MODELS_DIR");
  const std::string dir = cd != nullptr && *cd ? cd : (md != nullptr && *md ? std::string(md) + "/../corpora" : "../shared/corpora");
  const std::vector<int32_t> text = model->tokenizer().encode(read_file(a.str("corpus", dir + "/emma.txt")), true);
  if (static_cast<int64_t>(text.size()) < n + 64 * (reps + 2))
    fail(Status::invalid_argument, "the corpus is too short for --tokens " + std::to_string(n));
  const std::vector<int32_t> prefix(text.begin(), text.begin() + n);
  // Each request: the shared prefix, then 32 tokens of its own (a question).
  int64_t next_tail = n;
  auto request = [&] {
    std::vector<int32_t> r = prefix;
    r.insert(r.end(), text.begin() + next_tail, text.begin() + next_tail + 32);
    next_tail += 64;
    return r;
  };
  EngineOptions o;
  o.session.n_threads = static_cast<int32_t>(a.integer("threads", 0, 0, 1024));
  o.session.kv_pool_blocks = static_cast<int64_t>(model->hparams().n_layer) * ((n + 64) / 16 + 4) * 2;
  std::string disk = a.str("disk");
  const bool own_disk = disk.empty();
  if (own_disk) disk = (std::filesystem::temp_directory_path() / ("infokv-prefix-bench-" + std::to_string(::getpid()))).string();
  struct Row {
    std::string how;
    std::vector<double> s;
  };
  std::vector<Row> rows;
  {
    Engine e(model, o);
    Row r{"prefill", {}};
    ttft(e, request());  // warm-up
    for (int64_t i = 0; i < reps; ++i) r.s.push_back(ttft(e, request()));
    rows.push_back(r);
  }
  auto tier_run = [&](const std::string &how, PrefixCacheOptions p) {
    EngineOptions oo = o;
    oo.prefix_cache = true;
    oo.prefix = p;
    {
      Engine seed(model, oo);  // a first process makes the entry
      ttft(seed, request());
    }
    Row r{how, {}};
    for (int64_t i = 0; i < reps; ++i) {
      Engine e(model, oo);  // a new process each time: nothing in its memory but what the tier gives it
      if (how == "memory") ttft(e, request());
      r.s.push_back(ttft(e, request()));
      if (e.stats().prefix_hits < 1) fail(Status::internal, how + ": the prefix cache did not hit");
    }
    rows.push_back(r);
  };
  PrefixCacheOptions mem;
  mem.memory_bytes = int64_t{1} << 30;
  tier_run("memory", mem);
  PrefixCacheOptions dk;
  dk.memory_bytes = 0;
  dk.disk_dir = disk;
  tier_run("disk", dk);
  if (a.has("redis")) {
    PrefixCacheOptions rd;
    rd.memory_bytes = 0;
    rd.redis = a.str("redis");
    rd.redis_timeout_s = 5;
    tier_run("redis", rd);
  }
  if (own_disk) {
    std::error_code ec;
    std::filesystem::remove_all(disk, ec);
  }
  auto median = [](std::vector<double> v) { return percentile(std::move(v), 0.5); };
  const double base = median(rows[0].s);
  if (a.flag("json")) {
    std::string arr = "[";
    for (size_t i = 0; i < rows.size(); ++i) {
      JsonObject j;
      j.str("from", rows[i].how).integer("prefix_tokens", n).num("ttft_ms", median(rows[i].s) * 1e3)
          .num("speedup", base / median(rows[i].s));
      arr += (i ? "," : "") + j.dump();
    }
    std::printf("%s]\n", arr.c_str());
    return 0;
  }
  std::printf("time to first token, %lld-token prefix seen before + 32 new tokens, median of %lld; model %s\n\n",
              static_cast<long long>(n), static_cast<long long>(reps), model_path.c_str());
  std::printf("| start from | TTFT ms | speed-up |\n| --- | ---: | ---: |\n");
  for (const Row &r : rows)
    std::printf("| %s | %.1f | %.1fx |\n", r.how.c_str(), median(r.s) * 1e3, base / median(r.s));
  return 0;
}

}  // namespace cli
}  // namespace infokv
