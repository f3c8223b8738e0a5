// infokv bench: prompt processing and generation speed measured the way llama.cpp's llama-bench measures it, so both
// tools can be run side by side on the same GGUF file (packaging/tools/bench_vs_llamacpp.py does): random tokens,
// pp tests time one prompt of n_prompt tokens, tg tests time n_gen single-token decodes, each repeated -r times after
// one warm-up; -d N first fills the cache with N tokens (not timed), which with --policy/--budget is then compressed,
// so a compressed cache's decode speed can be compared with the full one's at the same context. Output: a markdown
// table, or --json / -o json rows with llama-bench's field names plus ours (policy, budget, kv_bytes, n_depth).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cli/args.hpp"
#include "cli/eval_metrics.hpp"
#include "cli/json.hpp"
#include "compress/policy.hpp"
#include "session/session.hpp"
#include "util/error.hpp"

namespace infokv {
namespace cli {

namespace {

struct BenchSpec {
  std::vector<std::string> models, kv_dtypes, policies;
  std::vector<double> budgets;
  std::vector<int64_t> n_prompt, n_gen, threads, depths;
  int64_t repetitions = 5;
  int64_t ubatch = 0;
  bool json = false;
};

struct Test {  // one row of output
  std::string model, kv_dtype, policy;
  double budget = 0;
  int64_t threads = 0, n_prompt = 0, n_gen = 0, depth = 0;
  std::vector<double> seconds;
  int64_t kv_bytes = 0;
};

// llama-bench's short options, turned into this CLI's long ones ("-p 512" -> "--n-prompt 512").
std::vector<std::string> long_options(int argc, char **argv) {
  static const std::vector<std::pair<std::string, std::string>> map = {
      {"-m", "--model"}, {"-p", "--n-prompt"}, {"-n", "--n-gen"}, {"-t", "--threads"}, {"-r", "--repetitions"},
      {"-d", "--n-depth"}, {"-ctk", "--kv-dtype"}, {"-ub", "--ubatch"}, {"-o", "--output"}};
  std::vector<std::string> out;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    for (const auto &kv : map)
      if (a == kv.first) a = kv.second;
    out.push_back(a);
  }
  return out;
}

std::vector<int64_t> int_list(const std::string &s, const char *what, int64_t lo) {
  std::vector<int64_t> out;
  for (const std::string &x : split_list(s)) {
    char *end = nullptr;
    const long long v = std::strtoll(x.c_str(), &end, 10);
    if (x.empty() || *end != '\0' || v < lo || v > (1 << 24))
      fail(Status::invalid_argument, std::string(what) + " takes whole numbers >= " + std::to_string(lo) + ", not '" + x + "'");
    out.push_back(v);
  }
  return out;
}

BenchSpec spec_from(const Args &a) {
  BenchSpec s;
  s.models = split_list(a.str("model", default_model_path()));
  for (std::string &m : s.models) m = resolve_model_path(m);
  s.n_prompt = int_list(a.str("n-prompt", "512"), "-p", 0);
  s.n_gen = int_list(a.str("n-gen", "128"), "-n", 0);
  s.threads = int_list(a.str("threads", "0"), "-t", 0);
  s.depths = int_list(a.str("n-depth", "0"), "-d", 0);
  s.repetitions = a.integer("repetitions", 5, 1, 1000);
  s.ubatch = a.integer("ubatch", 0, 0, 1 << 16);
  s.kv_dtypes = split_list(a.str("kv-dtype", "f16"));
  for (const std::string &d : s.kv_dtypes)
    if (KvDtype t; !kv_dtype_parse(d.c_str(), &t)) fail(Status::invalid_argument, std::string("-ctk takes ") + kKvDtypeNames);
  s.policies = split_list(a.str("policy", "none"));
  for (const std::string &p : s.policies) parse_policy(p);
  s.budgets = fraction_list(a.str("budget", "0.25"), "bench (of the depth, -d)");
  const std::string output = a.str("output", "md");
  if (output != "md" && output != "json") fail(Status::invalid_argument, "-o takes md or json");
  s.json = a.flag("json") || output == "json";
  return s;
}

KvDtype dtype_of(const std::string &d) {
  KvDtype t = KvDtype::f16;
  kv_dtype_parse(d.c_str(), &t);  // checked when the arguments were read
  return t;
}

// Runs one test `reps + 1` times (the first a warm-up) on a fresh sequence each time.
void run_test(Session &s, const BenchSpec &spec, Test &t, std::mt19937 &rng) {
  const int32_t n_vocab = s.model().hparams().n_vocab;
  std::uniform_int_distribution<int32_t> tok(0, n_vocab - 1);
  auto random_tokens = [&](int64_t n) {
    std::vector<int32_t> v(static_cast<size_t>(n));
    for (int32_t &x : v) x = tok(rng);
    return v;
  };
  for (int64_t r = 0; r <= spec.repetitions; ++r) {
    const int32_t seq = s.add_sequence();
    if (t.depth > 0) {
      s.prefill(seq, random_tokens(t.depth));
      if (t.policy != "none") s.compressor().compress(seq, budget_tokens(t.budget, t.depth));
    }
    t.kv_bytes = s.info(seq).bytes;
    const auto t0 = std::chrono::steady_clock::now();
    if (t.n_prompt > 0) {
      s.prefill(seq, random_tokens(t.n_prompt));
    } else {
      for (int64_t i = 0; i < t.n_gen; ++i) s.decode({{seq, tok(rng), false}});
    }
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) t.seconds.push_back(sec);
    s.remove_sequence(seq);
  }
}

void stats(const std::vector<double> &v, double *mean, double *sd) {
  double m = 0;
  for (double x : v) m += x;
  m /= static_cast<double>(v.size());
  double q = 0;
  for (double x : v) q += (x - m) * (x - m);
  *mean = m;
  *sd = v.size() > 1 ? std::sqrt(q / static_cast<double>(v.size() - 1)) : 0;
}

std::string test_name(const Test &t) {
  std::string n = t.n_prompt > 0 ? "pp" + std::to_string(t.n_prompt) : "tg" + std::to_string(t.n_gen);
  if (t.depth > 0) n += " @ d" + std::to_string(t.depth);
  return n;
}

void print_json(const std::vector<Test> &tests, const Model &m, const BenchSpec &spec) {
  std::string arr = "[";
  for (size_t i = 0; i < tests.size(); ++i) {
    const Test &t = tests[i];
    const int64_t n = t.n_prompt > 0 ? t.n_prompt : t.n_gen;
    std::vector<double> ts, ns;
    for (double s : t.seconds) {
      ts.push_back(static_cast<double>(n) / s);
      ns.push_back(s * 1e9);
    }
    double avg_ts = 0, sd_ts = 0, avg_ns = 0, sd_ns = 0;
    stats(ts, &avg_ts, &sd_ts);
    stats(ns, &avg_ns, &sd_ns);
    std::string samples_ts = "[", samples_ns = "[";
    for (size_t k = 0; k < ts.size(); ++k) {
      samples_ts += (k ? "," : "") + json_num(ts[k]);
      samples_ns += (k ? "," : "") + std::to_string(static_cast<int64_t>(ns[k]));
    }
    JsonObject o;
    o.str("model_filename", t.model).str("model_type", m.hparams().arch)
        .integer("model_size", static_cast<int64_t>(m.weight_bytes())).integer("model_n_params", static_cast<int64_t>(m.n_params()))
        .integer("n_batch", spec.ubatch).integer("n_ubatch", spec.ubatch).integer("n_threads", t.threads)
        .str("type_k", t.kv_dtype).str("type_v", t.kv_dtype).integer("n_prompt", t.n_prompt).integer("n_gen", t.n_gen)
        .integer("n_depth", t.depth).integer("avg_ns", static_cast<int64_t>(avg_ns)).integer("stddev_ns", static_cast<int64_t>(sd_ns))
        .num("avg_ts", avg_ts).num("stddev_ts", sd_ts).raw("samples_ns", samples_ns + "]").raw("samples_ts", samples_ts + "]")
        .str("backend", "CPU").str("policy", t.policy).num("budget", t.policy == "none" ? 1.0 : t.budget)
        .integer("kv_bytes", t.kv_bytes);
    arr += (i ? "," : "") + o.dump();
  }
  std::printf("%s]\n", arr.c_str());
}

void print_table(const std::vector<Test> &tests, const Model &m) {
  std::printf("| model | size | params | threads | type_k | policy | test | t/s |\n");
  std::printf("| --- | ---: | ---: | ---: | --- | --- | ---: | ---: |\n");
  for (const Test &t : tests) {
    const int64_t n = t.n_prompt > 0 ? t.n_prompt : t.n_gen;
    std::vector<double> ts;
    for (double s : t.seconds) ts.push_back(static_cast<double>(n) / s);
    double avg = 0, sd = 0;
    stats(ts, &avg, &sd);
    const std::string pol = t.policy == "none" || t.depth == 0 ? t.policy : t.policy + " " + json_num(t.budget);
    std::printf("| %s %.0fM | %.2f MiB | %.2f M | %lld | %s | %s | %s | %.2f ± %.2f |\n", m.hparams().arch.c_str(),
                static_cast<double>(m.n_params()) / 1e6, static_cast<double>(m.weight_bytes()) / (1 << 20),
                static_cast<double>(m.n_params()) / 1e6, static_cast<long long>(t.threads), t.kv_dtype.c_str(),
                pol.c_str(), test_name(t).c_str(), avg, sd);
  }
}

}  // namespace

int cmd_bench(int argc, char **argv) {
  for (int i = 2; i < argc; ++i)
    if (std::string(argv[i]) == "--trace") return cmd_bench_trace(argc, argv);
    else if (std::string(argv[i]) == "--prefix") return cmd_bench_prefix(argc, argv);
  std::vector<std::string> args = long_options(argc, argv);
  std::vector<char *> av;
  for (std::string &s : args) av.push_back(&s[0]);
  Args a(static_cast<int>(av.size()), av.data(), 2,
         {"model", "n-prompt", "n-gen", "threads", "repetitions", "n-depth", "kv-dtype", "ubatch", "output", "policy",
          "budget"},
         {"json"});
  const BenchSpec spec = spec_from(a);
  std::mt19937 rng(1234);
  for (const std::string &path : spec.models) {
    auto model = Model::load(path);
    std::vector<Test> tests;
    for (int64_t th : spec.threads)
      for (const std::string &dt : spec.kv_dtypes)
        for (const std::string &pol : spec.policies)
          for (double b : pol == "none" ? std::vector<double>{1.0} : spec.budgets) {
            SessionOptions so;
            so.n_threads = static_cast<int32_t>(th);
            so.kv_dtype = dtype_of(dt);
            if (spec.ubatch > 0) so.ubatch = static_cast<int32_t>(spec.ubatch);
            // compressed once per repetition, after the depth fill, to the test's budget
            Session s(model, compress_on_demand(so, parse_policy(pol)));
            const int64_t threads = th > 0 ? th : static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency()));
            for (int64_t d : spec.depths) {
              std::vector<Test> here;
              for (int64_t p : spec.n_prompt)
                if (p > 0) here.push_back({path, dt, pol, b, threads, p, 0, d, {}, 0});
              for (int64_t g : spec.n_gen)
                if (g > 0) here.push_back({path, dt, pol, b, threads, 0, g, d, {}, 0});
              for (Test &t : here) {
                run_test(s, spec, t, rng);
                tests.push_back(std::move(t));
              }
            }
          }
    if (spec.json) print_json(tests, *model, spec);
    else print_table(tests, *model);
  }
  return 0;
}

}  // namespace cli
}  // namespace infokv
