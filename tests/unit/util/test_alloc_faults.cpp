// Allocation fault injection (libgit2/SQLite style: fail the Nth allocation, for every N over a scenario) through
// model load, session create, config parsing, snapshot save and restore, decode and compression.
//
// This file replaces the global operator new / new[] (every throwing, nothrow and aligned variant) and the matching
// deletes for the whole unit-test binary; they forward to malloc / posix_memalign / free. The library allocates
// through them: the static core linked into this binary directly, and libinfokv.so (the C API, which the binary
// also links) because the executable's definitions interpose on the shared library's references to operator new. A countdown makes the Nth allocation throw
// std::bad_alloc (nullptr for the nothrow forms), then the count stops: one injected failure per run, as
// util/fault_injection.hpp does for I/O. The countdown is thread_local and armed only by an AllocFault guard in a
// test, so only allocations of the arming thread while armed are counted: gtest, other tests and other threads
// never see a failure. The scenarios run with one thread (n_threads = 1: the thread pool then starts no workers and
// every loop runs on the caller), so every allocation of the call under test is counted.
//
// Under AddressSanitizer the replacement takes precedence over ASan's own operator new (allowed: ASan still checks
// the malloc'd blocks and LeakSanitizer still sees them; only new/delete mismatch reports are lost for this binary).
//
// Each run must end in a status (C API: IKV_ERR_OUT_OF_MEMORY, or IKV_OK when the code recovered) or an exception
// the C shim turns into one (C++ API: std::bad_alloc or infokv::Error), never a crash or abort; must leave no handle
// behind (*out stays NULL); and, where the headers promise all-or-nothing (save, restore), leave the session as it
// was. For decode and compression the README's Guarantees make host OOM the exception to all-or-nothing, so those
// runs check that the KV cache's invariants hold and the session decodes again once disarmed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <ostream>
#include <new>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "compress/policy_table.hpp"
#include "support/config_samples.hpp"
#include "infokv/infokv.h"  // includes config.h and snapshot.h
#include "session/session.hpp"
#include "support/snapshot.hpp"
#include "support/paths.hpp"
#include "util/error.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define ALLOC_FAULT_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ALLOC_FAULT_LSAN 1
#endif
#endif
#ifndef ALLOC_FAULT_LSAN
#define ALLOC_FAULT_LSAN 0
#endif
#if ALLOC_FAULT_LSAN
#include <sanitizer/lsan_interface.h>
#endif

// ---- the replacement ----
namespace {

// Allocations left before the one that fails; <= 0: disarmed. Trivially initialised thread_locals: reading them
// allocates nothing (no TLS init function), so operator new may use them.
thread_local int64_t t_countdown = 0;
thread_local int64_t t_seen = 0;
thread_local bool t_hit = false;

inline bool inject_failure() noexcept {
  if (t_countdown <= 0) return false;
  ++t_seen;
  if (--t_countdown == 0) {
    t_hit = true;
    return true;
  }
  return false;
}

void *alloc_plain(std::size_t n) {
  if (inject_failure()) throw std::bad_alloc();
  if (n == 0) n = 1;
  for (;;) {
    if (void *p = std::malloc(n)) return p;
    std::new_handler h = std::get_new_handler();
    if (h == nullptr) throw std::bad_alloc();
    h();
  }
}

void *alloc_aligned(std::size_t n, std::align_val_t al) {
  if (inject_failure()) throw std::bad_alloc();
  if (n == 0) n = 1;
  std::size_t a = static_cast<std::size_t>(al);
  if (a < sizeof(void *)) a = sizeof(void *);
  for (;;) {
    void *p = nullptr;
    if (::posix_memalign(&p, a, n) == 0 && p != nullptr) return p;
    std::new_handler h = std::get_new_handler();
    if (h == nullptr) throw std::bad_alloc();
    h();
  }
}

}  // namespace

void *operator new(std::size_t n) { return alloc_plain(n); }
void *operator new[](std::size_t n) { return alloc_plain(n); }
void *operator new(std::size_t n, const std::nothrow_t &) noexcept {
  try {
    return alloc_plain(n);
  } catch (...) {
    return nullptr;
  }
}
void *operator new[](std::size_t n, const std::nothrow_t &) noexcept {
  try {
    return alloc_plain(n);
  } catch (...) {
    return nullptr;
  }
}
void *operator new(std::size_t n, std::align_val_t al) { return alloc_aligned(n, al); }
void *operator new[](std::size_t n, std::align_val_t al) { return alloc_aligned(n, al); }
void *operator new(std::size_t n, std::align_val_t al, const std::nothrow_t &) noexcept {
  try {
    return alloc_aligned(n, al);
  } catch (...) {
    return nullptr;
  }
}
void *operator new[](std::size_t n, std::align_val_t al, const std::nothrow_t &) noexcept {
  try {
    return alloc_aligned(n, al);
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void *p) noexcept { std::free(p); }
void operator delete[](void *p) noexcept { std::free(p); }
void operator delete(void *p, std::size_t) noexcept { std::free(p); }
void operator delete[](void *p, std::size_t) noexcept { std::free(p); }
void operator delete(void *p, const std::nothrow_t &) noexcept { std::free(p); }
void operator delete[](void *p, const std::nothrow_t &) noexcept { std::free(p); }
void operator delete(void *p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void *p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void *p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void *p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void *p, std::align_val_t, const std::nothrow_t &) noexcept { std::free(p); }
void operator delete[](void *p, std::align_val_t, const std::nothrow_t &) noexcept { std::free(p); }

namespace {

// Arms the countdown for this thread: the nth allocation (1-based) from now fails. Disarms when it goes.
class AllocFault {
 public:
  explicit AllocFault(int64_t nth) noexcept {
    t_seen = 0;
    t_hit = false;
    t_countdown = nth;
  }
  ~AllocFault() { t_countdown = 0; }
  AllocFault(const AllocFault &) = delete;
  AllocFault &operator=(const AllocFault &) = delete;
  bool hit() const noexcept { return t_hit; }
  int64_t seen() const noexcept { return t_seen; }
};

// Runs `once(n)` for n = 1, 2, ... (every n up to 2,000, or every INFOKV_ALLOC_FAULT_STEP-th; then steps of n/8)
// until a run completes without reaching its nth allocation; once(n) returns whether the failure was injected. Returns how many runs had it injected.
template <typename F>
int64_t every_nth(const char *scenario, F &&once) {
  int64_t injected = 0;
  const bool verbose = std::getenv("INFOKV_ALLOC_FAULT_VERBOSE") != nullptr;  // names each run: which one crashes
  const char *from = std::getenv("INFOKV_ALLOC_FAULT_FROM");  // to start at the run that crashes, in a debugger
  // Every allocation by default; the sanitizer builds (tests/sanitize.sh) take every third, where each run costs
  // ten times as much and neighbouring allocations mostly share their error path.
  const char *step_env = std::getenv("INFOKV_ALLOC_FAULT_STEP");
  const int64_t step = step_env != nullptr ? std::max<int64_t>(1, std::atoll(step_env)) : 1;
  for (int64_t n = from != nullptr ? std::max<int64_t>(1, std::atoll(from)) : 1;; n += n < 2000 ? step : n / 8) {
    if (verbose) std::fprintf(stderr, "%s: allocation %lld\n", scenario, static_cast<long long>(n));
    bool hit = false;
    {
      SCOPED_TRACE(std::string(scenario) + ": allocation " + std::to_string(n));
      hit = once(n);
    }
    if (!hit) break;
    ++injected;
    if (::testing::Test::HasFailure()) break;  // one report, not thousands
    if (n > (int64_t{1} << 26)) {
      ADD_FAILURE() << scenario << ": runaway";
      break;
    }
  }
  EXPECT_GE(injected, 1) << scenario << ": no allocation was failed";
  std::printf("[ alloc    ] %s: %lld runs with an allocation failed\n", scenario, static_cast<long long>(injected));
  return injected;
}

std::string stories_path() { return infokv_test::models_dir() + "/stories260K/stories260K.gguf"; }

ikv_session_options c_opts(int32_t policy = IKV_POLICY_NONE) {
  ikv_session_options o = IKV_SESSION_OPTIONS_INIT;
  o.n_threads = 1;
  o.kv_pool_blocks = 512;
  o.policy = policy;
  if (policy != IKV_POLICY_NONE) {
    o.budget_fraction = 0.25;
    o.interval = 4;
  }
  return o;
}

// A model loaded once for the test (disarmed).
struct CModel {
  ikv_model *m = nullptr;
  CModel() { EXPECT_EQ(ikv_model_load(&m, stories_path().c_str()), IKV_OK) << ikv_last_error_message(); }
  ~CModel() { ikv_model_free(m); }
};

std::vector<int32_t> prompt(int n) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(1 + (i * 37) % 500);  // stories260K has 512 tokens
  return p;
}

ikv_session *c_session(ikv_model *m, int32_t policy, int n_prompt) {
  ikv_session *s = nullptr;
  const ikv_session_options o = c_opts(policy);
  EXPECT_EQ(ikv_session_create(&s, m, &o), IKV_OK) << ikv_last_error_message();
  if (s != nullptr && n_prompt > 0) {
    const std::vector<int32_t> p = prompt(n_prompt);
    EXPECT_EQ(ikv_decode(s, 0, p.data(), p.size()), IKV_OK) << ikv_last_error_message();
  }
  return s;
}

// Everything a caller can observe of a session's sequences (ids given) and pool.
struct Observed {
  std::vector<int64_t> values;
  std::vector<float> logits;
  bool operator==(const Observed &o) const {
    return values == o.values && logits.size() == o.logits.size() &&
           std::memcmp(logits.data(), o.logits.data(), logits.size() * sizeof(float)) == 0;
  }
};

// Lengths, kept counts, bytes and pool statistics, for the failure message.
std::ostream &operator<<(std::ostream &os, const Observed &o) {
  os << "{";
  for (int64_t v : o.values) os << " " << v;
  return os << " } and " << o.logits.size() << " logits";
}

Observed observe(const ikv_session *s, const std::vector<int32_t> &seqs) {
  Observed o;
  for (int32_t seq : seqs) {
    int64_t v = -1;
    EXPECT_EQ(ikv_seq_length(&v, s, seq), IKV_OK);
    o.values.push_back(v);
    for (int32_t l = 0;; ++l) {
      if (ikv_seq_kept(&v, s, seq, l) != IKV_OK) break;
      o.values.push_back(v);
    }
    EXPECT_EQ(ikv_seq_kv_bytes(&v, s, seq), IKV_OK);
    o.values.push_back(v);
    size_t cnt = 0;
    std::vector<float> lg(4096);
    EXPECT_EQ(ikv_get_logits(lg.data(), lg.size(), &cnt, s, seq), IKV_OK);
    lg.resize(cnt);
    o.logits.insert(o.logits.end(), lg.begin(), lg.end());
  }
  for (int32_t stat : {IKV_KV_BLOCKS_TOTAL, IKV_KV_BLOCKS_USED, IKV_KV_BLOCKS_FREE, IKV_KV_BYTES_USED, IKV_KV_HOST_BYTES}) {
    int64_t v = -1;
    EXPECT_EQ(ikv_kv_stat(&v, s, stat), IKV_OK);
    o.values.push_back(v);
  }
  return o;
}

// A snapshot's chunks but the header, which holds the creation time: equal for equal sessions and samplers.
std::vector<std::vector<uint8_t>> content(const std::vector<uint8_t> &snap) {
  std::vector<std::vector<uint8_t>> c = infokv_test::split_chunks(snap);
  if (!c.empty()) c.erase(c.begin());
  return c;
}

std::vector<uint8_t> save_all(const ikv_session *s, const ikv_sampler *sampler) {
  size_t len = 0;
  EXPECT_EQ(ikv_session_save_buffer(nullptr, 0, &len, s, -1, sampler), IKV_ERR_BUFFER_TOO_SMALL);
  std::vector<uint8_t> b(len);
  EXPECT_EQ(ikv_session_save_buffer(b.data(), b.size(), &len, s, -1, sampler), IKV_OK) << ikv_last_error_message();
  b.resize(len);
  return b;
}

// The whole session and sampler: a snapshot of every sequence with the sampler, less its creation time.
std::vector<std::vector<uint8_t>> fingerprint(const ikv_session *s, const ikv_sampler *sampler) {
  return content(save_all(s, sampler));
}

// The statuses a run with an injected allocation failure may end in: out of memory, or OK when the code recovered.
::testing::AssertionResult oom_or_ok(int32_t st) {
  if (st == IKV_ERR_OUT_OF_MEMORY || st == IKV_OK) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "status " << st << ": " << ikv_last_error_message();
}

// Runs a C call (returning its status) with the n-th allocation failing. The status must be ok or out-of-memory, and
// ok when no allocation was failed. Returns the status and whether the failure was injected.
template <typename F>
std::pair<int32_t, bool> c_call_armed(int64_t n, F &&call) {
  int32_t st = 0;
  bool hit = false;
  {
    AllocFault f(n);
    st = call();
    hit = f.hit();
  }
  EXPECT_TRUE(oom_or_ok(st));
  if (!hit) {
    EXPECT_EQ(st, IKV_OK) << ikv_last_error_message();
  }
  return {st, hit};
}

// Decodes one more token once disarmed and checks the logits are finite.
void decodes_again_c(ikv_session *s, int32_t seq) {
  const int32_t tok = 42;
  ASSERT_EQ(ikv_decode(s, seq, &tok, 1), IKV_OK) << ikv_last_error_message();
  std::vector<float> lg(4096);
  size_t cnt = 0;
  ASSERT_EQ(ikv_get_logits(lg.data(), lg.size(), &cnt, s, seq), IKV_OK);
  for (size_t i = 0; i < cnt; ++i) ASSERT_TRUE(std::isfinite(lg[i]));
}

// ---- C API ----

TEST(AllocFault, ModelLoad) {
  const std::string path = stories_path();
  every_nth("ikv_model_load", [&](int64_t n) {
    ikv_model *m = nullptr;
    int32_t st;
    bool hit;
    std::tie(st, hit) = c_call_armed(n, [&] { return ikv_model_load(&m, path.c_str()); });
    if (st != IKV_OK) {
      EXPECT_EQ(m, nullptr);
    } else {
      int64_t v = 0;
      EXPECT_EQ(ikv_model_get_int(&v, m, IKV_MODEL_N_VOCAB), IKV_OK);
      EXPECT_EQ(v, 512);
    }
    ikv_model_free(m);
    return hit;
  });
}

TEST(AllocFault, SessionCreate) {
  CModel cm;
  ASSERT_NE(cm.m, nullptr);
  for (int32_t policy : {IKV_POLICY_NONE, IKV_POLICY_SNAPKV}) {
    const ikv_session_options o = c_opts(policy);
    every_nth("ikv_session_create", [&](int64_t n) {
      ikv_session *s = nullptr;
      int32_t st;
      bool hit;
      std::tie(st, hit) = c_call_armed(n, [&] { return ikv_session_create(&s, cm.m, &o); });
      if (st != IKV_OK) {
        EXPECT_EQ(s, nullptr);
      }
      if (st == IKV_OK) decodes_again_c(s, 0);
      ikv_session_free(s);
      return hit;
    });
  }
}

// The system flatbuffers (2.0) parser leaks what it was building when an allocation fails inside it (e.g. a
// FieldDef in Parser::AddField), and config.cpp abandons such a parser rather than let its destructor corrupt the
// heap. Under LeakSanitizer those known leaks of the failed runs are not reported (allocations of this thread
// only, while the object lives); test_config.cpp covers config parsing without injected failures.
struct FlatbuffersOomLeaksAllowed {
  FlatbuffersOomLeaksAllowed() {
#if ALLOC_FAULT_LSAN
    __lsan_disable();
#endif
  }
  ~FlatbuffersOomLeaksAllowed() {
#if ALLOC_FAULT_LSAN
    __lsan_enable();
#endif
  }
};

TEST(AllocFault, ConfigFromJson) {
  const std::string json = infokv_test::kEveryGroupJson;
  every_nth("ikv_config_from_json", [&](int64_t n) {
    ikv_config *c = nullptr;
    int32_t st;
    bool hit;
    {
      FlatbuffersOomLeaksAllowed known;
      std::tie(st, hit) = c_call_armed(n, [&] { return ikv_config_from_json(&c, json.data(), json.size()); });
    }
    if (st != IKV_OK) {
      EXPECT_EQ(c, nullptr);
    } else {
      char path[64] = {0};
      size_t len = 0;
      EXPECT_EQ(ikv_config_get_model_path(path, sizeof path, &len, c), IKV_OK);
      EXPECT_STREQ(path, "m.gguf");
    }
    ikv_config_free(c);
    return hit;
  });
}

TEST(AllocFault, SaveBufferChangesNothing) {
  CModel cm;
  ASSERT_NE(cm.m, nullptr);
  ikv_session *s = c_session(cm.m, IKV_POLICY_NONE, 20);
  ASSERT_NE(s, nullptr);
  ikv_sampler *sampler = nullptr;
  ASSERT_EQ(ikv_sampler_create(&sampler, nullptr), IKV_OK);
  const std::vector<std::vector<uint8_t>> ref = fingerprint(s, sampler);
  const size_t size = save_all(s, sampler).size();
  const Observed before = observe(s, {0});
  std::vector<uint8_t> buf(size + 64);
  every_nth("ikv_session_save_buffer", [&](int64_t n) {
    size_t len = 0;
    int32_t st;
    bool hit;
    std::tie(st, hit) = c_call_armed(n, [&] { return ikv_session_save_buffer(buf.data(), buf.size(), &len, s, -1, sampler); });
    if (st == IKV_OK) {
      EXPECT_EQ(len, size);
      EXPECT_EQ(content(std::vector<uint8_t>(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(len))), ref);
    }
    EXPECT_EQ(observe(s, {0}), before);
    return hit;
  });
  EXPECT_EQ(fingerprint(s, sampler), ref);
  ikv_sampler_free(sampler);
  ikv_session_free(s);
}

TEST(AllocFault, RestoreBufferChangesNothingOnFailure) {
  CModel cm;
  ASSERT_NE(cm.m, nullptr);
  std::vector<uint8_t> snap;
  {  // the snapshot: two sequences and a sampler
    ikv_session *src = c_session(cm.m, IKV_POLICY_NONE, 20);
    ASSERT_NE(src, nullptr);
    int32_t s1 = 0;
    ASSERT_EQ(ikv_seq_fork(&s1, src, 0), IKV_OK);
    const int32_t t = 7;
    ASSERT_EQ(ikv_decode(src, s1, &t, 1), IKV_OK);
    ikv_sampler_options so;
    ASSERT_EQ(ikv_sampler_options_init(&so), IKV_OK);
    so.seed = 1234;
    ikv_sampler *ss = nullptr;
    ASSERT_EQ(ikv_sampler_create(&ss, &so), IKV_OK);
    int32_t tok = 0;
    ASSERT_EQ(ikv_sample(&tok, ss, src, 0), IKV_OK);
    snap = save_all(src, ss);
    ikv_sampler_free(ss);
    ikv_session_free(src);
  }
  ikv_session *s = c_session(cm.m, IKV_POLICY_NONE, 5);  // holds state of its own
  ASSERT_NE(s, nullptr);
  ikv_sampler *sampler = nullptr;
  ASSERT_EQ(ikv_sampler_create(&sampler, nullptr), IKV_OK);
  const std::vector<std::vector<uint8_t>> ref = fingerprint(s, sampler);
  const Observed before = observe(s, {0});
  bool restored = false;
  every_nth("ikv_session_restore_buffer", [&](int64_t n) {
    int32_t ids[4] = {-1, -1, -1, -1};
    size_t count = 0;
    int32_t st;
    bool hit;
    std::tie(st, hit) = c_call_armed(n, [&] { return ikv_session_restore_buffer(ids, 4, &count, s, sampler, snap.data(), snap.size()); });
    if (st != IKV_OK) {
      EXPECT_EQ(observe(s, {0}), before);
      EXPECT_EQ(fingerprint(s, sampler), ref);  // no sequence added, the sampler untouched
      int64_t len = 0;
      EXPECT_EQ(ikv_seq_length(&len, s, 1), IKV_ERR_NOT_FOUND);
    } else {
      restored = true;
      EXPECT_EQ(count, 2u);
      for (size_t i = 0; i < count; ++i) decodes_again_c(s, ids[i]);
      for (size_t i = 0; i < count; ++i) EXPECT_EQ(ikv_seq_remove(s, ids[i]), IKV_OK);
      EXPECT_EQ(observe(s, {0}), before);
    }
    return hit;
  });
  EXPECT_TRUE(restored);
  ikv_sampler_free(sampler);
  ikv_session_free(s);
}

TEST(AllocFault, DecodeWithPolicyReturnsAStatus) {
  CModel cm;
  ASSERT_NE(cm.m, nullptr);
  every_nth("ikv_decode", [&](int64_t n) {
    ikv_session *s = c_session(cm.m, IKV_POLICY_SNAPKV, 24);
    if (s == nullptr) return false;
    const std::vector<int32_t> more = prompt(40);
    int32_t st;
    bool hit;
    std::tie(st, hit) = c_call_armed(n, [&] {
      int32_t r = IKV_OK;
      for (int i = 24; i < 30 && r == IKV_OK; ++i) r = ikv_decode(s, 0, &more[static_cast<size_t>(i)], 1);
      return r;
    });
    decodes_again_c(s, 0);
    ikv_session_free(s);
    return hit;
  });
}

TEST(AllocFault, CompressReturnsAStatus) {
  CModel cm;
  ASSERT_NE(cm.m, nullptr);
  every_nth("ikv_seq_compress", [&](int64_t n) {
    ikv_session *s = c_session(cm.m, IKV_POLICY_SNAPKV, 40);
    if (s == nullptr) return false;
    int32_t st;
    bool hit;
    std::tie(st, hit) = c_call_armed(n, [&] { return ikv_seq_compress(s, 0, 8); });
    if (st == IKV_OK) {
      int64_t kept = 0;
      EXPECT_EQ(ikv_seq_kept(&kept, s, 0, 0), IKV_OK);
      EXPECT_LE(kept, 8);
    }
    decodes_again_c(s, 0);
    ikv_session_free(s);
    return hit;
  });
}

// ---- C++ core: the same decode and compression, with the KV cache's invariants checked after each failure ----

// Calls fn armed; an injected failure must surface as std::bad_alloc or infokv::Error (what the C shim maps to a
// status), nothing else. Returns whether the failure was injected.
template <typename F>
bool armed_call(int64_t n, F &&fn) {
  bool hit = false;
  std::string other;
  {
    AllocFault f(n);
    try {
      fn();
    } catch (const std::bad_alloc &) {
    } catch (const infokv::Error &e) {
      if (e.status() != infokv::Status::out_of_memory) other = e.what();
    } catch (const std::exception &e) {
      other = std::string("unexpected exception: ") + e.what();
    }
    hit = f.hit();
  }
  EXPECT_TRUE(other.empty()) << other;
  return hit;
}

void intact_and_decodes(infokv::Session &s, int32_t seq) {
  EXPECT_NO_THROW(s.kv().check_invariants());
  ASSERT_NO_THROW(s.decode({{seq, 42, false}}));
  for (float v : s.logits(seq)) ASSERT_TRUE(std::isfinite(v));
  EXPECT_NO_THROW(s.kv().check_invariants());
}

std::unique_ptr<infokv::Session> cpp_session(int n_prompt, int32_t interval) {
  auto s = std::make_unique<infokv::Session>(infokv_test::stories_model(),
                                             infokv_test::session_opts(infokv::PolicyKind::snapkv, 0.25, interval));
  const int32_t seq = s->add_sequence();
  infokv_test::prefill(*s, seq, nullptr, prompt(n_prompt));
  return s;
}

TEST(AllocFaultCore, DecodeWithPolicyKeepsTheCacheConsistent) {
  ASSERT_NE(infokv_test::stories_model(), nullptr);
  const std::vector<int32_t> more = prompt(40);
  every_nth("Session::decode", [&](int64_t n) {
    auto s = cpp_session(24, 4);
    const bool hit = armed_call(n, [&] {
      for (int i = 24; i < 30; ++i) s->decode({{0, more[static_cast<size_t>(i)], false}});
    });
    intact_and_decodes(*s, 0);
    return hit;
  });
}

TEST(AllocFaultCore, BatchedDecodeOfTwoSequencesKeepsTheCacheConsistent) {
  ASSERT_NE(infokv_test::stories_model(), nullptr);
  every_nth("Session::decode (batch)", [&](int64_t n) {
    auto s = cpp_session(24, 4);
    const int32_t b = s->fork_sequence(0);
    const bool hit = armed_call(n, [&] {
      for (int i = 0; i < 4; ++i) s->decode({{0, 10 + i, false}, {b, 20 + i, false}, {b, 30 + i, true}});
    });
    intact_and_decodes(*s, 0);
    intact_and_decodes(*s, b);
    return hit;
  });
}

TEST(AllocFaultCore, CompressKeepsTheCacheConsistent) {
  ASSERT_NE(infokv_test::stories_model(), nullptr);
  every_nth("Session::compress", [&](int64_t n) {
    auto s = cpp_session(40, 1024);
    const int32_t b = s->fork_sequence(0);  // shared blocks: compression copies on write
    const bool hit = armed_call(n, [&] { s->compressor().compress(0, 8); });
    intact_and_decodes(*s, 0);
    intact_and_decodes(*s, b);
    return hit;
  });
}

}  // namespace
