// Threads through the C ABI as infokv.h allows them: one model shared by many threads, each with its own session and
// sampler, doing the whole life of a sequence (generate, fork, compress, save to a buffer, restore, remove); and the
// last error message kept per thread while other threads fail at the same time.
// Suites named *Concurrency are the ones tests/tsan.sh runs under ThreadSanitizer (ctest label "concurrency").
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "infokv/infokv.h"
#include "support/util.hpp"

namespace {

ikv_model *shared_model() {
  // Loaded once (a function-local static is initialised once even when threads race to it), never freed.
  static ikv_model *const m = [] {
    ikv_model *p = nullptr;
    return ikv_model_load(&p, infokv_test::stories_path().c_str()) == IKV_OK ? p : nullptr;
  }();
  return m;
}

// Start gate: threads do their setup, then all begin at once so their calls overlap.
class Gate {
 public:
  explicit Gate(int n) : waiting_(n) {}
  void arrive_and_wait() {
    waiting_.fetch_sub(1);
    while (waiting_.load() > 0) std::this_thread::yield();
  }

 private:
  std::atomic<int> waiting_;
};

// What one thread's scenario produced: every token and length it saw, in order, and the first failure.
struct Trace {
  std::vector<int64_t> values;
  std::string failure;
};

#define TRACE_CALL(call)                                                                                        \
  do {                                                                                                          \
    const int32_t st_ = (call);                                                                                 \
    if (st_ != IKV_OK) {                                                                                        \
      tr.failure = std::string(#call) + " -> " + ikv_status_string(st_) + ": " + ikv_last_error_message();      \
      return tr;                                                                                                \
    }                                                                                                           \
  } while (0)

// The scenario every thread runs. Deterministic for a given (seed, n_threads): a seeded sampler, no shared state but
// the model, so each thread's trace must equal the one computed alone on the main thread.
Trace session_life(ikv_model *m, uint64_t seed, int32_t n_threads, Gate *gate) {
  Trace tr;
  struct Owned {
    ikv_session *s = nullptr;
    ikv_sampler *sm = nullptr;
    ~Owned() {
      ikv_sampler_free(sm);
      ikv_session_free(s);
    }
  } o;
  ikv_session_options so = IKV_SESSION_OPTIONS_INIT;
  so.kv_dtype = IKV_KV_F32;
  so.n_threads = n_threads;  // 2: the session's own thread pool runs inside each of these threads too
  so.policy = IKV_POLICY_INFOKV;
  so.budget_tokens = 24;
  so.interval = 16;  // periodic compression during generate as well as the explicit one below
  ikv_sampler_options sp = IKV_SAMPLER_OPTIONS_INIT;
  sp.seed = seed;
  if (gate != nullptr) gate->arrive_and_wait();
  TRACE_CALL(ikv_session_create(&o.s, m, &so));
  TRACE_CALL(ikv_sampler_create(&o.sm, &sp));
  const char *text = "Once upon a time";
  int32_t prompt[16];
  size_t np = 0;
  TRACE_CALL(ikv_tokenize(prompt, 16, &np, m, text, std::strlen(text), 1));
  std::vector<int32_t> out(64);
  size_t n = 0;
  TRACE_CALL(ikv_generate(out.data(), out.size(), &n, o.s, 0, prompt, np, 40, o.sm, nullptr, nullptr));
  tr.values.insert(tr.values.end(), out.begin(), out.begin() + static_cast<std::ptrdiff_t>(n));
  int32_t fork = -1;
  TRACE_CALL(ikv_seq_fork(&fork, o.s, 0));
  TRACE_CALL(ikv_generate(out.data(), out.size(), &n, o.s, fork, nullptr, 0, 20, o.sm, nullptr, nullptr));
  tr.values.insert(tr.values.end(), out.begin(), out.begin() + static_cast<std::ptrdiff_t>(n));
  TRACE_CALL(ikv_seq_compress(o.s, fork, 12));
  int64_t kept = -1;
  TRACE_CALL(ikv_seq_kept(&kept, o.s, fork, 0));
  tr.values.push_back(kept);
  // Save everything with the sampler, drop the fork, restore both sequences next to the original.
  size_t len = 0;
  if (ikv_session_save_buffer(nullptr, 0, &len, o.s, -1, o.sm) != IKV_ERR_BUFFER_TOO_SMALL) {
    tr.failure = "save size query did not report BUFFER_TOO_SMALL";
    return tr;
  }
  std::vector<uint8_t> bytes(len);
  TRACE_CALL(ikv_session_save_buffer(bytes.data(), bytes.size(), &len, o.s, -1, o.sm));
  TRACE_CALL(ikv_seq_remove(o.s, fork));
  int32_t restored[4] = {-1, -1, -1, -1};
  size_t n_restored = 0;
  TRACE_CALL(ikv_session_restore_buffer(restored, 4, &n_restored, o.s, o.sm, bytes.data(), len));
  tr.values.push_back(static_cast<int64_t>(n_restored));
  for (size_t i = 0; i < n_restored; ++i) {
    int64_t l = -1;
    TRACE_CALL(ikv_seq_length(&l, o.s, restored[i]));
    tr.values.push_back(l);
  }
  // The restored fork continues as the saved one would have (the sampler's state came back with it).
  TRACE_CALL(ikv_generate(out.data(), out.size(), &n, o.s, restored[n_restored - 1], nullptr, 0, 12, o.sm, nullptr,
                          nullptr));
  tr.values.insert(tr.values.end(), out.begin(), out.begin() + static_cast<std::ptrdiff_t>(n));
  for (size_t i = 0; i < n_restored; ++i) TRACE_CALL(ikv_seq_remove(o.s, restored[i]));
  int64_t used = -1;
  TRACE_CALL(ikv_kv_stat(&used, o.s, IKV_KV_BLOCKS_USED));
  tr.values.push_back(used);
  return tr;
}

}  // namespace

TEST(CapiConcurrency, SharedModelManySessionsGenerateForkCompressSaveRestore) {
  ikv_model *const m = shared_model();
  ASSERT_NE(m, nullptr) << ikv_last_error_message();
  constexpr int kThreads = 4;
  constexpr int kRounds = 2;
  auto seed_of = [](int t) { return static_cast<uint64_t>(1000 + t % 2); };  // two threads per seed
  auto pool_of = [](int t) { return 1 + (t / 2) % 2; };                      // and per pool size
  // References computed alone, before any thread starts.
  std::vector<Trace> expected(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    expected[static_cast<size_t>(t)] = session_life(m, seed_of(t), pool_of(t), nullptr);
    ASSERT_EQ(expected[static_cast<size_t>(t)].failure, "") << "reference " << t;
  }
  std::vector<std::vector<Trace>> got(kThreads, std::vector<Trace>(kRounds));
  Gate gate(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r)
        got[static_cast<size_t>(t)][static_cast<size_t>(r)] =
            session_life(m, seed_of(t), pool_of(t), r == 0 ? &gate : nullptr);
    });
  for (auto &th : threads) th.join();
  for (int t = 0; t < kThreads; ++t)
    for (int r = 0; r < kRounds; ++r) {
      const Trace &g = got[static_cast<size_t>(t)][static_cast<size_t>(r)];
      EXPECT_EQ(g.failure, "") << "thread " << t << " round " << r;
      EXPECT_EQ(g.values, expected[static_cast<size_t>(t)].values) << "thread " << t << " round " << r;
    }
}

// Each thread fails with its own path while the others do the same; its message always names its own path, and a
// sampler made and freed just before (registry traffic from every thread) does not disturb it.
TEST(CapiConcurrency, LastErrorMessageIsPerThreadUnderContention) {
  constexpr int kThreads = 4;
  constexpr int kIters = 200;
  std::vector<std::string> failures(kThreads);
  Gate gate(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      gate.arrive_and_wait();
      for (int i = 0; i < kIters && failures[static_cast<size_t>(t)].empty(); ++i) {
        const std::string path = "/nonexistent/thread-" + std::to_string(t) + "-" + std::to_string(i) + ".gguf";
        ikv_sampler *sm = nullptr;
        if (ikv_sampler_create(&sm, nullptr) == IKV_OK) ikv_sampler_free(sm);
        ikv_model *mm = nullptr;
        const int32_t st = ikv_model_load(&mm, path.c_str());
        std::this_thread::yield();  // let the other threads fail in between
        const std::string msg = ikv_last_error_message();
        if (st != IKV_ERR_IO || msg.find(path) == std::string::npos)
          failures[static_cast<size_t>(t)] = "iteration " + std::to_string(i) + ": status " + std::to_string(st) +
                                             ", message \"" + msg + "\"";
      }
    });
  for (auto &th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[static_cast<size_t>(t)], "") << "thread " << t;
}
