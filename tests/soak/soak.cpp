// infokv_soak: hours (or, in CI, seconds) of mixed work through the public C API on one shared model, checking that
// nothing accumulates. Several threads each own a few sessions and samplers and, round after round, pick at random
// among generate / fork / compress / save to a file / restore from a file or a buffer / remove a sequence / recreate
// the session. Between rounds (all threads joined) the process must hold no more file descriptors than before the
// first round, and its RSS must stay within a bound of its value after warm-up. Any violation, or any status other
// than the ones the API documents for these calls under load (OK, and KV full where the pool may be short), stops the
// run with exit status 1 and a message naming the thread, the call and the library's error text.
//
// usage: infokv_soak [--seconds N (60)] [--threads T (4)] [--sessions S per thread (3)] [--seed X (1)]
//                    [--rss-slack-mib M (64)] [--warmup-rounds W >= 1 (5)] [--model PATH] [--dir TMPDIR]
// The model defaults to $INFOKV_MODELS_DIR/stories260K/stories260K.gguf, else the build's models directory.
// For a long soak: `infokv_soak --seconds 14400 --threads 8` (see README.md, "Guarantees").
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "infokv/infokv.h"

#ifndef INFOKV_DEFAULT_MODELS_DIR
#define INFOKV_DEFAULT_MODELS_DIR "../shared/models"
#endif

namespace infokv {
namespace soak {
namespace {

struct Options {
  double seconds = 60;
  int threads = 4;
  int sessions = 3;
  uint64_t seed = 1;
  int64_t rss_slack_mib = 64;
  int warmup_rounds = 5;
  std::string model;
  std::string dir;
};

// Counters per thread, summed for the summary line.
struct Counts {
  int64_t generate = 0, fork = 0, compress = 0, save = 0, restore = 0, remove = 0, recreate = 0, kv_full = 0,
          tokens = 0;
  void add(const Counts &o) {
    generate += o.generate, fork += o.fork, compress += o.compress, save += o.save, restore += o.restore;
    remove += o.remove, recreate += o.recreate, kv_full += o.kv_full, tokens += o.tokens;
  }
};

// Limits that keep every session's work bounded, so a steady state exists for RSS to be measured against.
constexpr int kMaxSeqs = 6;
constexpr int64_t kMaxLength = 320;  // tokens; a longer sequence is removed
constexpr int kFilesPerThread = 4;   // saved snapshots kept on disk per thread (oldest deleted)
constexpr int kOpsPerSessionPerRound = 6;

int64_t rss_kib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.compare(0, 6, "VmRSS:") == 0) return std::strtoll(line.c_str() + 6, nullptr, 10);
  return -1;
}

int open_fds() {
  DIR *d = opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  int n = 0;
  while (struct dirent *e = readdir(d))
    if (e->d_name[0] != '.') ++n;
  closedir(d);
  return n - 1;  // the directory stream's own descriptor
}

std::vector<uint8_t> read_file(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

struct Seq {
  int32_t id;
};

struct SessionState {
  ikv_session *session = nullptr;
  ikv_sampler *sampler = nullptr;
  std::vector<Seq> seqs;
};

// One worker's sessions, files and random stream; lives across rounds (only the std::thread is per round).
class Worker {
 public:
  Worker(ikv_model *model, int index, const Options &opt) : model_(model), index_(index), opt_(opt) {
    rng_.seed(opt.seed * 7919u + static_cast<uint64_t>(index));
  }
  // The prompt a new sequence starts from; tokenised once, by the model every thread shares.
  bool init() {
    const char *text = "Once upon a time";
    size_t n = 0;
    prompt_.resize(16);
    if (!check(ikv_tokenize(prompt_.data(), prompt_.size(), &n, model_, text, std::strlen(text), 1), "ikv_tokenize"))
      return false;
    prompt_.resize(n);
    return true;
  }
  ~Worker() {
    for (auto &s : sessions_) free_session(s);
    for (auto &f : files_) std::remove(f.c_str());
  }
  Worker(const Worker &) = delete;
  Worker &operator=(const Worker &) = delete;

  // Runs one round; false with error() set on the first unexpected status.
  bool round() {
    if (sessions_.empty()) {
      if (!init()) return false;
      sessions_.resize(static_cast<size_t>(opt_.sessions));
      for (auto &s : sessions_)
        if (!make_session(s)) return false;
    }
    for (auto &s : sessions_)
      for (int k = 0; k < kOpsPerSessionPerRound; ++k)
        if (!step(s)) return false;
    return true;
  }
  const std::string &error() const { return error_; }
  const Counts &counts() const { return counts_; }

 private:
  // Expected statuses: OK always; KV full only where `kv_full_ok` (the pool is shared by up to kMaxSeqs sequences).
  bool check(int32_t st, const char *what, bool kv_full_ok = false) {
    if (st == IKV_OK) return true;
    if (st == IKV_ERR_KV_FULL && kv_full_ok) {
      ++counts_.kv_full;
      return true;
    }
    error_ = "thread " + std::to_string(index_) + ": " + what + " -> " + ikv_status_string(st) + " (" +
             std::to_string(st) + "): " + ikv_last_error_message();
    return false;
  }

  bool make_session(SessionState &s) {
    ikv_session_options so = IKV_SESSION_OPTIONS_INIT;
    so.n_threads = 1;  // parallelism comes from the soak's own threads
    so.policy = IKV_POLICY_INFOKV;
    so.budget_tokens = 48;
    so.interval = 64;
    so.block_size = 16;
    int64_t n_layer = 0;
    if (!check(ikv_model_get_int(&n_layer, model_, IKV_MODEL_N_LAYER), "ikv_model_get_int")) return false;
    // 30 blocks (480 tokens) per layer: six sequences of up to 320 tokens, compressed to 48 every 64, do not always
    // fit, so memory-pressure compression and KV full happen as well as the calls themselves.
    so.kv_pool_blocks = n_layer * 30;
    if (!check(ikv_session_create(&s.session, model_, &so), "ikv_session_create")) return false;
    ikv_sampler_options sp = IKV_SAMPLER_OPTIONS_INIT;
    sp.seed = rng_();
    if (!check(ikv_sampler_create(&s.sampler, &sp), "ikv_sampler_create")) return false;
    s.seqs = {{0}};
    return true;
  }

  static void free_session(SessionState &s) {
    ikv_sampler_free(s.sampler);
    ikv_session_free(s.session);
    s = SessionState{};
  }

  int pick(int n) { return static_cast<int>(rng_() % static_cast<uint64_t>(n)); }

  bool remove_at(SessionState &s, size_t i) {
    if (!check(ikv_seq_remove(s.session, s.seqs[i].id), "ikv_seq_remove")) return false;
    s.seqs.erase(s.seqs.begin() + static_cast<std::ptrdiff_t>(i));
    ++counts_.remove;
    return true;
  }

  bool ensure_a_sequence(SessionState &s) {
    if (!s.seqs.empty()) return true;
    int32_t id = -1;
    if (!check(ikv_seq_add(&id, s.session), "ikv_seq_add")) return false;
    s.seqs.push_back({id});
    return true;
  }

  // Whether the sequence can be sampled from (a new or emptied one needs a prompt first). Asked of the library
  // rather than tracked here: a whole-session snapshot may hold sequences that never decoded.
  bool has_logits(SessionState &s, int32_t id, bool *out) {
    size_t n = 0;
    const int32_t st = ikv_get_logits(nullptr, 0, &n, s.session, id);
    *out = st == IKV_ERR_BUFFER_TOO_SMALL;
    return st == IKV_ERR_BUFFER_TOO_SMALL || st == IKV_ERR_BAD_STATE || check(st, "ikv_get_logits");
  }

  bool generate(SessionState &s, Seq &q) {
    int64_t len = 0;
    if (!check(ikv_seq_length(&len, s.session, q.id), "ikv_seq_length")) return false;
    const int32_t max_tokens = 8 + pick(40);
    if (len + max_tokens + 5 > kMaxLength) return remove_at(s, static_cast<size_t>(&q - s.seqs.data()));
    std::vector<int32_t> out(static_cast<size_t>(max_tokens));
    size_t n = 0;
    bool ready = false;
    if (!has_logits(s, q.id, &ready)) return false;
    const bool prompt = !ready;
    const int32_t st = ikv_generate(out.data(), out.size(), &n, s.session, q.id, prompt ? prompt_.data() : nullptr,
                                    prompt ? prompt_.size() : 0, max_tokens, s.sampler, nullptr, nullptr);
    if (!check(st, "ikv_generate", true)) return false;
    counts_.tokens += static_cast<int64_t>(n);
    ++counts_.generate;
    // Under pressure, make room the way an app would: drop the longest other sequence.
    if (st == IKV_ERR_KV_FULL && s.seqs.size() > 1) {
      size_t victim = 0;
      int64_t longest = -1;
      for (size_t i = 0; i < s.seqs.size(); ++i) {
        if (s.seqs[i].id == q.id) continue;
        int64_t l = 0;
        if (!check(ikv_seq_length(&l, s.session, s.seqs[i].id), "ikv_seq_length")) return false;
        if (l > longest) longest = l, victim = i;
      }
      return remove_at(s, victim);
    }
    return true;
  }

  bool save(SessionState &s) {
    const bool all = pick(2) == 0;
    const Seq &q = s.seqs[static_cast<size_t>(pick(static_cast<int>(s.seqs.size())))];
    const std::string path = opt_.dir + "/t" + std::to_string(index_) + "-" + std::to_string(file_counter_++) + ".ikvs";
    if (!check(ikv_session_save_file(s.session, all ? -1 : q.id, s.sampler, path.c_str()), "ikv_session_save_file"))
      return false;
    files_.push_back(path);
    if (files_.size() > static_cast<size_t>(kFilesPerThread)) {
      if (std::remove(files_.front().c_str()) != 0) {
        error_ = "thread " + std::to_string(index_) + ": cannot remove " + files_.front();
        return false;
      }
      files_.erase(files_.begin());
    }
    ++counts_.save;
    return true;
  }

  bool restore(SessionState &s) {
    if (files_.empty()) return true;
    const std::string &path = files_[static_cast<size_t>(pick(static_cast<int>(files_.size())))];
    int32_t ids[64];
    size_t n = 0;
    int32_t st;
    if (pick(2) == 0) {
      st = ikv_session_restore_file(ids, 64, &n, s.session, s.sampler, path.c_str());
    } else {
      const std::vector<uint8_t> bytes = read_file(path);
      st = ikv_session_restore_buffer(ids, 64, &n, s.session, s.sampler, bytes.data(), bytes.size());
    }
    if (!check(st, "ikv_session_restore", true)) return false;
    ++counts_.restore;
    if (st == IKV_OK)
      for (size_t i = 0; i < n; ++i) s.seqs.push_back({ids[i]});
    // Keep the sequence count bounded: restoring a whole session may add several.
    while (s.seqs.size() > static_cast<size_t>(kMaxSeqs))
      if (!remove_at(s, static_cast<size_t>(pick(static_cast<int>(s.seqs.size()))))) return false;
    return true;
  }

  bool step(SessionState &s) {
    if (!ensure_a_sequence(s)) return false;
    Seq &q = s.seqs[static_cast<size_t>(pick(static_cast<int>(s.seqs.size())))];
    const int op = pick(100);
    if (op < 40) return generate(s, q);
    if (op < 52) {
      if (s.seqs.size() >= static_cast<size_t>(kMaxSeqs)) return true;
      int32_t id = -1;
      const int32_t st = ikv_seq_fork(&id, s.session, q.id);
      if (!check(st, "ikv_seq_fork", true)) return false;
      if (st == IKV_OK) s.seqs.push_back({id});
      ++counts_.fork;
      return true;
    }
    if (op < 62) {
      // KV full is expected when the sequence shares blocks with a fork and the pool has no room for their copies.
      if (!check(ikv_seq_compress(s.session, q.id, 8 + pick(40)), "ikv_seq_compress", true)) return false;
      ++counts_.compress;
      return true;
    }
    if (op < 74) return save(s);
    if (op < 86) return restore(s);
    if (op < 97) return remove_at(s, static_cast<size_t>(&q - s.seqs.data()));
    // Now and then the whole session and sampler go, and new ones come: creation and teardown must not leak.
    free_session(s);
    ++counts_.recreate;
    return make_session(s);
  }

  ikv_model *model_;
  int index_;
  const Options &opt_;
  std::mt19937_64 rng_;
  std::vector<SessionState> sessions_;
  std::vector<std::string> files_;
  std::vector<int32_t> prompt_;
  int64_t file_counter_ = 0;
  Counts counts_;
  std::string error_;
};

[[noreturn]] void usage(const char *why) {
  std::fprintf(stderr,
               "infokv_soak: %s\nusage: infokv_soak [--seconds N] [--threads T] [--sessions S] [--seed X] "
               "[--rss-slack-mib M] [--warmup-rounds W] [--model PATH] [--dir TMPDIR]\n",
               why);
  std::exit(2);
}

Options parse(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") usage("mixed generate/fork/compress/save/restore/remove with RSS and fd checks");
    if (i + 1 >= argc) usage(("missing value for " + a).c_str());
    const char *v = argv[++i];
    char *end = nullptr;
    auto number = [&](double lo, double hi) {
      const double x = std::strtod(v, &end);
      if (end == v || *end != '\0' || !(x >= lo && x <= hi)) usage(("bad value for " + a + ": " + v).c_str());
      return x;
    };
    if (a == "--seconds") o.seconds = number(0.1, 1e7);
    else if (a == "--threads") o.threads = static_cast<int>(number(1, 256));
    else if (a == "--sessions") o.sessions = static_cast<int>(number(1, 64));
    else if (a == "--seed") o.seed = static_cast<uint64_t>(number(0, 1e15));
    else if (a == "--rss-slack-mib") o.rss_slack_mib = static_cast<int64_t>(number(1, 1e6));
    else if (a == "--warmup-rounds") o.warmup_rounds = static_cast<int>(number(1, 1e6));
    else if (a == "--model") o.model = v;
    else if (a == "--dir") o.dir = v;
    else usage(("unknown option " + a).c_str());
  }
  if (o.model.empty()) {
    const char *env = std::getenv("INFOKV_MODELS_DIR");
    o.model = std::string(env != nullptr && *env != '\0' ? env : INFOKV_DEFAULT_MODELS_DIR) +
              "/stories260K/stories260K.gguf";
  }
  return o;
}

int run(int argc, char **argv) {
  Options opt = parse(argc, argv);
  std::string tmpl = (opt.dir.empty() ? std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") : opt.dir) +
                     "/infokv-soak-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) {
    std::fprintf(stderr, "infokv_soak: cannot create a directory like %s: %s\n", tmpl.c_str(), std::strerror(errno));
    return 2;
  }
  opt.dir = tmpl;
  ikv_model *model = nullptr;
  if (ikv_model_load(&model, opt.model.c_str()) != IKV_OK) {
    std::fprintf(stderr, "infokv_soak: cannot load %s: %s\n", opt.model.c_str(), ikv_last_error_message());
    rmdir(opt.dir.c_str());
    return 2;
  }
  // Descriptors must come back to this count after every round (the model is loaded; no session exists yet).
  const int fd_baseline = open_fds();
  std::vector<std::unique_ptr<Worker>> workers;
  for (int t = 0; t < opt.threads; ++t) workers.push_back(std::make_unique<Worker>(model, t, opt));

  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::duration<double>(opt.seconds);
  int64_t rounds = 0, rss_baseline = -1, rss_max = 0;
  std::string failure;
  while (failure.empty() && (rounds < opt.warmup_rounds + 1 || std::chrono::steady_clock::now() < deadline)) {
    std::vector<std::thread> threads;
    std::vector<char> ok(workers.size(), 0);
    for (size_t t = 0; t < workers.size(); ++t) threads.emplace_back([&, t] { ok[t] = workers[t]->round(); });
    for (auto &th : threads) th.join();
    ++rounds;
    for (size_t t = 0; t < workers.size() && failure.empty(); ++t)
      if (!ok[t]) failure = workers[t]->error();
    if (!failure.empty()) break;
    const int fds = open_fds();
    if (fds != fd_baseline) {
      failure = "round " + std::to_string(rounds) + ": " + std::to_string(fds) + " open file descriptors, " +
                std::to_string(fd_baseline) + " before the first round (a descriptor leaked)";
      break;
    }
    const int64_t rss = rss_kib();
    rss_max = std::max(rss_max, rss);
    if (rounds == opt.warmup_rounds) rss_baseline = rss;
    if (rss_baseline >= 0 && rss > rss_baseline + opt.rss_slack_mib * 1024)
      failure = "round " + std::to_string(rounds) + ": RSS " + std::to_string(rss / 1024) + " MiB, more than " +
                std::to_string(opt.rss_slack_mib) + " MiB above its " + std::to_string(rss_baseline / 1024) +
                " MiB after warm-up (memory grows with work done)";
  }
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  Counts total;
  for (auto &w : workers) total.add(w->counts());
  workers.clear();  // frees sessions, samplers and saved files
  ikv_model_free(model);
  if (rmdir(opt.dir.c_str()) != 0 && failure.empty())
    failure = "temporary directory " + opt.dir + " not empty at the end: " + std::strerror(errno);
  std::printf("infokv_soak: %s after %.1f s: %lld rounds, %d threads x %d sessions; generate %lld (%lld tokens), "
              "fork %lld, compress %lld, save %lld, restore %lld, remove %lld, recreate %lld, kv_full %lld; "
              "RSS %lld MiB after warm-up, max %lld MiB; fds %d\n",
              failure.empty() ? "OK" : "FAILED", elapsed, static_cast<long long>(rounds), opt.threads, opt.sessions,
              static_cast<long long>(total.generate), static_cast<long long>(total.tokens),
              static_cast<long long>(total.fork), static_cast<long long>(total.compress),
              static_cast<long long>(total.save), static_cast<long long>(total.restore),
              static_cast<long long>(total.remove), static_cast<long long>(total.recreate),
              static_cast<long long>(total.kv_full), static_cast<long long>(rss_baseline / 1024),
              static_cast<long long>(rss_max / 1024), fd_baseline);
  if (!failure.empty()) {
    std::fprintf(stderr, "infokv_soak: FAILED: %s\n", failure.c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace soak
}  // namespace infokv

int main(int argc, char **argv) { return infokv::soak::run(argc, argv); }
