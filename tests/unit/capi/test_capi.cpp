// The C ABI's status paths: NULL arguments, bad / freed / foreign / wrong-kind handles, the buffer-size protocol,
// out-of-range tokens and a full KV pool leaving state unchanged, status strings, the thread-local last message,
// options INIT macros against the init functions, versions, cancelling a stream, and threads sharing one model.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <set>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "infokv/infokv.h"
#include "util/version.hpp"
#include "test_util.hpp"

namespace {

// One model for the whole file, loaded through the C ABI (never freed: tests share it and it dies with the process).
ikv_model *model() {
  static ikv_model *m = nullptr;
  if (m == nullptr) {
    if (ikv_model_load(&m, infokv_test::stories_path().c_str()) != IKV_OK) m = nullptr;
  }
  return m;
}

#define REQUIRE_MODEL()                                                                                         \
  ikv_model *const m = model();                                                                                 \
  ASSERT_NE(m, nullptr) << "cannot load " << infokv_test::stories_path() << ": " << ikv_last_error_message()

// The first `size` bytes of `full` in a heap block of exactly that size (a read past it is out of bounds: ASan
// reports it), marked as revision `version`: what a caller built against an older header passes.
using HeapOptions = std::unique_ptr<ikv_session_options, void (*)(void *)>;
HeapOptions older_options(const ikv_session_options &full, size_t size, uint32_t version) {
  HeapOptions o(static_cast<ikv_session_options *>(std::malloc(size)), std::free);
  if (o != nullptr) {
    std::memcpy(o.get(), &full, size);
    o->struct_size = static_cast<uint32_t>(size);
    o->version = version;
  }
  return o;
}

// Creating a session from o is refused as an invalid argument whose message names `says`, and the out-parameter
// (garbage before the call) is NULL after it.
void expect_refused(ikv_model *m, const ikv_session_options *o, const std::string &says) {
  ikv_session *s = reinterpret_cast<ikv_session *>(0x1);
  EXPECT_EQ(ikv_session_create(&s, m, o), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(s, nullptr);
  EXPECT_NE(std::string(ikv_last_error_message()).find(says), std::string::npos) << ikv_last_error_message();
}

ikv_session_options f32_options() {
  ikv_session_options o = IKV_SESSION_OPTIONS_INIT;
  o.kv_dtype = IKV_KV_F32;
  o.n_threads = 1;
  return o;
}

struct SessionGuard {
  ikv_session *s = nullptr;
  ~SessionGuard() { ikv_session_free(s); }
};

int64_t layers_of(ikv_model *m) {
  int64_t n = 0;
  EXPECT_EQ(ikv_model_get_int(&n, m, IKV_MODEL_N_LAYER), IKV_OK);
  return n;
}

// A one-thread f32 session whose pool holds blocks_per_layer blocks of block_size tokens for each layer.
int32_t create_small_pool(ikv_session **s, ikv_model *m, int32_t block_size, int64_t blocks_per_layer) {
  ikv_session_options o = f32_options();
  o.block_size = block_size;
  o.kv_pool_blocks = layers_of(m) * blocks_per_layer;
  return ikv_session_create(s, m, &o);
}

std::vector<float> logits_of(ikv_session *s, int32_t seq) {
  std::vector<float> lg(512);
  size_t n = 0;
  EXPECT_EQ(ikv_get_logits(lg.data(), lg.size(), &n, s, seq), IKV_OK) << ikv_last_error_message();
  lg.resize(n);
  return lg;
}

int64_t length_of(ikv_session *s, int32_t seq) {
  int64_t n = -1;
  EXPECT_EQ(ikv_seq_length(&n, s, seq), IKV_OK);
  return n;
}

int64_t stat_of(ikv_session *s, int32_t stat) {
  int64_t v = -1;
  EXPECT_EQ(ikv_kv_stat(&v, s, stat), IKV_OK);
  return v;
}

const std::vector<int32_t> kGreedyOnce = {432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396,
                                          267, 337, 410, 408, 419, 292, 411, 322, 265, 282, 295, 433, 426, 385,
                                          328, 432, 358, 394, 261, 370, 432, 352, 266, 268, 388, 426};

std::vector<int32_t> greedy_once_upon(ikv_model *m, int32_t max_tokens, int32_t *status_out = nullptr) {
  ikv_session_options o = f32_options();
  SessionGuard g;
  if (ikv_session_create(&g.s, m, &o) != IKV_OK) return {};
  ikv_sampler_options so = IKV_SAMPLER_OPTIONS_INIT;
  so.temperature = 0;
  ikv_sampler *sm = nullptr;
  if (ikv_sampler_create(&sm, &so) != IKV_OK) return {};
  int32_t prompt[8];
  size_t np = 0;
  const char *text = "Once upon a time";
  ikv_tokenize(prompt, 8, &np, m, text, std::strlen(text), 1);
  std::vector<int32_t> out(static_cast<size_t>(max_tokens) + 1);
  size_t n = 0;
  int32_t st = ikv_generate(out.data(), out.size(), &n, g.s, 0, prompt, np, max_tokens, sm, nullptr, nullptr);
  if (status_out != nullptr) *status_out = st;
  ikv_sampler_free(sm);
  out.resize(n);
  return out;
}

}  // namespace

// ---- versions, statuses, messages, options ----

TEST(Capi, VersionMacrosMatchTheLibrary) {
  EXPECT_EQ(ikv_version_number(), IKV_VERSION_NUMBER);
  EXPECT_STREQ(ikv_version_string(), IKV_VERSION_STRING);
  const std::string composed = std::to_string(IKV_VERSION_MAJOR) + "." + std::to_string(IKV_VERSION_MINOR) + "." +
                               std::to_string(IKV_VERSION_PATCH);
  EXPECT_EQ(composed, IKV_VERSION_STRING);
  EXPECT_EQ(IKV_VERSION_NUMBER, IKV_VERSION_MAJOR * 10000 + IKV_VERSION_MINOR * 100 + IKV_VERSION_PATCH);
  // The core's version (generated from the CMake project's) is the C header's.
  EXPECT_STREQ(infokv::kVersionString, IKV_VERSION_STRING);
  EXPECT_EQ(infokv::kVersionNumber, IKV_VERSION_NUMBER);
}

TEST(Capi, EveryStatusHasItsOwnStaticString) {
  const int32_t codes[] = {IKV_OK, IKV_ERR_INVALID_ARGUMENT, IKV_ERR_IO, IKV_ERR_BAD_MODEL, IKV_ERR_UNSUPPORTED,
                           IKV_ERR_OUT_OF_MEMORY, IKV_ERR_KV_FULL, IKV_ERR_OUT_OF_RANGE, IKV_ERR_CANCELLED,
                           IKV_ERR_BAD_SNAPSHOT, IKV_ERR_WRONG_MODEL, IKV_ERR_VERSION, IKV_ERR_BAD_CONFIG,
                           IKV_ERR_NO_DEVICE, IKV_ERR_BUFFER_TOO_SMALL, IKV_ERR_NOT_FOUND, IKV_ERR_BAD_STATE,
                           IKV_ERR_BAD_HANDLE, IKV_ERR_BUSY, IKV_ERR_INTERNAL};
  // The values are part of the ABI: never renumbered.
  EXPECT_EQ(IKV_ERR_INVALID_ARGUMENT, -1);
  EXPECT_EQ(IKV_ERR_KV_FULL, -6);
  EXPECT_EQ(IKV_ERR_BAD_HANDLE, -17);
  EXPECT_EQ(IKV_ERR_BUSY, -18);
  EXPECT_EQ(IKV_ERR_INTERNAL, -100);
  std::set<std::string> seen;
  for (int32_t c : codes) {
    const char *s = ikv_status_string(c);
    ASSERT_NE(s, nullptr) << c;
    EXPECT_GT(std::strlen(s), 0u) << c;
    EXPECT_STRNE(s, "unknown status") << c;
    EXPECT_EQ(s, ikv_status_string(c)) << "static storage expected for " << c;
    seen.insert(s);
  }
  EXPECT_EQ(seen.size(), sizeof(codes) / sizeof(codes[0]));
  EXPECT_STREQ(ikv_status_string(IKV_ERR_KV_FULL), "KV full");
  for (int32_t c : {1, -19, -99, -101, INT32_MIN, INT32_MAX}) EXPECT_STREQ(ikv_status_string(c), "unknown status") << c;
}

TEST(CapiConcurrency, LastErrorMessageIsNeverNullAndThreadLocal) {
  std::string fresh = "unset";
  std::thread([&] { fresh = ikv_last_error_message() == nullptr ? "NULL" : ikv_last_error_message(); }).join();
  EXPECT_EQ(fresh, "");
  ikv_model *m = nullptr;
  EXPECT_EQ(ikv_model_load(&m, "/nonexistent/x.gguf"), IKV_ERR_IO);
  ASSERT_NE(ikv_last_error_message(), nullptr);
  EXPECT_NE(std::string(ikv_last_error_message()).find("/nonexistent/x.gguf"), std::string::npos);
  // Another thread's failure does not touch this thread's message.
  std::thread([] {
    ikv_model *mm = nullptr;
    ikv_model_load(&mm, nullptr);
  }).join();
  EXPECT_NE(std::string(ikv_last_error_message()).find("/nonexistent/x.gguf"), std::string::npos);
}

// ---- device choice (ikv_session_options version 2) ----

TEST(Capi, SessionDeviceCpuAutoAndDefaultRunOnTheCpu) {
  REQUIRE_MODEL();
  const char *const specs[] = {nullptr, "", "cpu", "auto"};
  for (const char *spec : specs) {
    ikv_session_options o = f32_options();
    o.device = spec;
    SessionGuard g;
    ASSERT_EQ(ikv_session_create(&g.s, m, &o), IKV_OK) << (spec ? spec : "NULL") << ": " << ikv_last_error_message();
    const int32_t tok = 1;
    EXPECT_EQ(ikv_decode(g.s, 0, &tok, 1), IKV_OK) << ikv_last_error_message();
  }
}

TEST(Capi, SessionDeviceCudaWithoutAGpuIsNoDevice) {
  REQUIRE_MODEL();
  int32_t n = -1;
  ASSERT_EQ(ikv_device_count(&n), IKV_OK);
  if (n > 0) GTEST_SKIP() << n << " CUDA device(s) here: the no-device path cannot be exercised";
  for (const char *spec : {"cuda", "cuda:0", "cuda:3"}) {
    ikv_session_options o = f32_options();
    o.device = spec;
    ikv_session *s = reinterpret_cast<ikv_session *>(0x1);
    EXPECT_EQ(ikv_session_create(&s, m, &o), IKV_ERR_NO_DEVICE) << spec;
    EXPECT_EQ(s, nullptr);
    const std::string msg = ikv_last_error_message();
    EXPECT_NE(msg.find(spec), std::string::npos) << msg;            // names the device asked for
    EXPECT_NE(msg.find("no CUDA device"), std::string::npos) << msg;  // and why there is none
  }
}

TEST(Capi, SessionDeviceMalformedIsInvalidArgument) {
  REQUIRE_MODEL();
  for (const char *spec : {"gpu", "CPU", "cuda:", "cuda:-1", "cuda:x", "cuda0", "cuda:1 ", " cpu", "cuda:99999"}) {
    ikv_session_options o = f32_options();
    o.device = spec;
    ikv_session *s = nullptr;
    EXPECT_EQ(ikv_session_create(&s, m, &o), IKV_ERR_INVALID_ARGUMENT) << spec;
    EXPECT_EQ(s, nullptr);
    EXPECT_NE(std::string(ikv_last_error_message()).find("bad device"), std::string::npos) << ikv_last_error_message();
  }
}

TEST(Capi, SessionDeviceStringIsNotKeptAfterCreate) {
  REQUIRE_MODEL();
  ikv_session_options o = f32_options();
  auto *spec = new char[4]{'c', 'p', 'u', '\0'};
  o.device = spec;
  SessionGuard g;
  ASSERT_EQ(ikv_session_create(&g.s, m, &o), IKV_OK) << ikv_last_error_message();
  delete[] spec;  // the caller's string is gone; the session must not need it (ASan would see a use)
  o.device = nullptr;
  const int32_t tok = 1;
  EXPECT_EQ(ikv_decode(g.s, 0, &tok, 1), IKV_OK) << ikv_last_error_message();
}

// A caller built against the version-1 header: its struct ends before `device` and says version 1. The library
// must not read past its struct_size, and the session takes the default device.
TEST(Capi, VersionOneSizedSessionOptionsAreAccepted) {
  REQUIRE_MODEL();
  const size_t v1_size = offsetof(ikv_session_options, device);
  const ikv_session_options full = f32_options();
  const HeapOptions v1 = older_options(full, v1_size, 1);  // a read of `device` would be out of bounds
  ASSERT_NE(v1, nullptr);
  SessionGuard g;
  EXPECT_EQ(ikv_session_create(&g.s, m, v1.get()), IKV_OK) << ikv_last_error_message();
  const int32_t tok = 1;
  EXPECT_EQ(ikv_decode(g.s, 0, &tok, 1), IKV_OK) << ikv_last_error_message();
  // the same size claiming version 2 lacks the field it promises
  v1->version = 2;
  expect_refused(m, v1.get(), "version 2");
  ikv_session *s = nullptr;
  // one byte short of version 1 is refused
  ikv_session_options short_v1 = f32_options();
  short_v1.struct_size = static_cast<uint32_t>(v1_size - 1);
  short_v1.version = 1;
  EXPECT_EQ(ikv_session_create(&s, m, &short_v1), IKV_ERR_INVALID_ARGUMENT);
  // a full-size struct that says version 1 has no device either: whatever the pointer holds is ignored
  ikv_session_options v1_full = f32_options();
  v1_full.version = 1;
  v1_full.device = "cuda:7";
  SessionGuard g2;
  EXPECT_EQ(ikv_session_create(&g2.s, m, &v1_full), IKV_OK) << ikv_last_error_message();
}

// ---- limits (ikv_session_options version 3, IKV_KV_HOST_BYTES) ----

TEST(Capi, MaxSequencesBoundsSeqAddAndForkChangingNothing) {
  REQUIRE_MODEL();
  ikv_session_options o = f32_options();
  o.max_sequences = 2;
  SessionGuard g;
  ASSERT_EQ(ikv_session_create(&g.s, m, &o), IKV_OK) << ikv_last_error_message();  // holds sequence 0
  int32_t id = -5;
  ASSERT_EQ(ikv_seq_add(&id, g.s), IKV_OK);
  const int64_t host = stat_of(g.s, IKV_KV_HOST_BYTES), used = stat_of(g.s, IKV_KV_BLOCKS_USED);
  EXPECT_EQ(ikv_seq_add(&id, g.s), IKV_ERR_OUT_OF_RANGE);
  EXPECT_EQ(id, -1);
  EXPECT_NE(std::string(ikv_last_error_message()).find("max_sequences (2)"), std::string::npos) << ikv_last_error_message();
  EXPECT_EQ(ikv_seq_fork(&id, g.s, 0), IKV_ERR_OUT_OF_RANGE);
  EXPECT_EQ(stat_of(g.s, IKV_KV_HOST_BYTES), host);
  EXPECT_EQ(stat_of(g.s, IKV_KV_BLOCKS_USED), used);
  EXPECT_EQ(ikv_seq_remove(g.s, 0), IKV_OK);
  EXPECT_EQ(ikv_seq_add(&id, g.s), IKV_OK);
  // Out of range values are refused; a version-2 struct (no max_sequences) gets the default.
  o.max_sequences = -1;
  ikv_session *s = nullptr;
  EXPECT_EQ(ikv_session_create(&s, m, &o), IKV_ERR_INVALID_ARGUMENT);
  o.max_sequences = (1 << 20) + 1;
  EXPECT_EQ(ikv_session_create(&s, m, &o), IKV_ERR_INVALID_ARGUMENT);
  const size_t v2_size = offsetof(ikv_session_options, device) + sizeof(const char *);
  void *mem = std::malloc(v2_size);  // exactly v2_size bytes: a read of max_sequences would be out of bounds
  ASSERT_NE(mem, nullptr);
  o.max_sequences = 1;
  std::memcpy(mem, &o, v2_size);
  auto *v2 = static_cast<ikv_session_options *>(mem);
  v2->struct_size = static_cast<uint32_t>(v2_size);
  v2->version = 2;
  SessionGuard g2;
  ASSERT_EQ(ikv_session_create(&g2.s, m, v2), IKV_OK) << ikv_last_error_message();
  EXPECT_EQ(ikv_seq_add(&id, g2.s), IKV_OK);  // 4096 allowed, not 1
  v2->version = 3;  // claims the field its size lacks
  EXPECT_EQ(ikv_session_create(&s, m, v2), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(ikv_last_error_message()).find("version 3"), std::string::npos) << ikv_last_error_message();
  std::free(mem);
}

// ---- auto's quality target (ikv_session_options version 4) ----

TEST(Capi, MaxLossNeedsPolicyAutoAndReplacesTheBudget) {
  REQUIRE_MODEL();
  ikv_session_options o = f32_options();
  o.policy = IKV_POLICY_AUTO;
  o.max_loss = 0.05;  // no budget: the target is enough
  SessionGuard g;
  ASSERT_EQ(ikv_session_create(&g.s, m, &o), IKV_OK) << ikv_last_error_message();
  struct Case { const char *what, *says; void (*edit)(ikv_session_options &); };
  const Case bad[] = {
      {"snapkv with a target", "max loss", [](ikv_session_options &x) { x.policy = IKV_POLICY_SNAPKV; x.budget_fraction = 0.5; }},
      {"none with a target", "max loss", [](ikv_session_options &x) { x.policy = IKV_POLICY_NONE; }},
      {"negative", "max loss", [](ikv_session_options &x) { x.max_loss = -0.01; }},
      {"NaN", "max loss", [](ikv_session_options &x) { x.max_loss = std::nan(""); }},
      {"infinite", "max loss", [](ikv_session_options &x) { x.max_loss = HUGE_VAL; }},
      {"auto without budget or target", "budget", [](ikv_session_options &x) { x.max_loss = 0; }},
  };
  for (const Case &c : bad) {
    ikv_session_options x = o;
    c.edit(x);
    SCOPED_TRACE(c.what);
    expect_refused(m, &x, c.says);
  }
}

// A caller built against the version-3 header: its struct ends before `max_loss`. The library must not read past
// it, and the session compresses to its budget.
TEST(Capi, VersionThreeSizedSessionOptionsAreAccepted) {
  REQUIRE_MODEL();
  const size_t v3_size = offsetof(ikv_session_options, max_sequences) + sizeof(int32_t);
  ikv_session_options full = f32_options();
  full.policy = IKV_POLICY_AUTO;
  full.budget_fraction = 0.5;
  const HeapOptions v3 = older_options(full, v3_size, 3);  // a read of max_loss would be out of bounds
  ASSERT_NE(v3, nullptr);
  SessionGuard g;
  EXPECT_EQ(ikv_session_create(&g.s, m, v3.get()), IKV_OK) << ikv_last_error_message();
  // the same size claiming version 4 lacks the field it promises
  v3->version = 4;
  expect_refused(m, v3.get(), "version 4");
  ikv_session *s = nullptr;
  // a full-size struct that says version 3 has no max_loss: whatever the field holds is ignored
  ikv_session_options v3_full = full;
  v3_full.version = 3;
  v3_full.max_loss = std::nan("");
  SessionGuard g2;
  EXPECT_EQ(ikv_session_create(&g2.s, m, &v3_full), IKV_OK) << ikv_last_error_message();
  // and without a budget, a version-3 auto session has no target to fall back on
  v3_full.budget_fraction = 0;
  v3_full.max_loss = 0.05;
  EXPECT_EQ(ikv_session_create(&s, m, &v3_full), IKV_ERR_INVALID_ARGUMENT);
}

TEST(Capi, HostBytesCountsWhatAForkCopies) {
  REQUIRE_MODEL();
  ikv_session_options o = f32_options();
  SessionGuard g;
  ASSERT_EQ(ikv_session_create(&g.s, m, &o), IKV_OK);
  const int32_t toks[] = {1, 5, 9, 13};
  ASSERT_EQ(ikv_decode(g.s, 0, toks, 4), IKV_OK);
  const int64_t before = stat_of(g.s, IKV_KV_HOST_BYTES);
  EXPECT_GT(before, 0);
  int32_t id = 0;
  ASSERT_EQ(ikv_seq_fork(&id, g.s, 0), IKV_OK);
  int64_t n_vocab = 0;
  ASSERT_EQ(ikv_model_get_int(&n_vocab, m, IKV_MODEL_N_VOCAB), IKV_OK);
  EXPECT_GE(stat_of(g.s, IKV_KV_HOST_BYTES) - before, n_vocab * 4);  // the fork's logits at least
  EXPECT_EQ(ikv_seq_remove(g.s, id), IKV_OK);
  EXPECT_EQ(stat_of(g.s, IKV_KV_HOST_BYTES), before);
}

// A caller built against a later header passes a larger ikv_sampler_options (its new fields after `seed`): accepted,
// with the revision-1 fields read. One smaller than revision 1 is refused.
TEST(Capi, SamplerOptionsFromALaterRevisionAreReadAndAShortOneIsRefused) {
  struct Later {
    ikv_sampler_options v1;
    uint64_t added;
  } later{};
  later.v1 = IKV_SAMPLER_OPTIONS_INIT;
  later.v1.struct_size = static_cast<uint32_t>(sizeof later);
  later.v1.version = IKV_SAMPLER_OPTIONS_VERSION + 1;
  later.added = 0xABABABABABABABABull;
  ikv_sampler *sm = nullptr;
  ASSERT_EQ(ikv_sampler_create(&sm, &later.v1), IKV_OK) << ikv_last_error_message();
  ikv_sampler_free(sm);
  ikv_sampler_options short_v1 = IKV_SAMPLER_OPTIONS_INIT;
  short_v1.struct_size = static_cast<uint32_t>(offsetof(ikv_sampler_options, seed) + sizeof(uint64_t) - 1);
  sm = reinterpret_cast<ikv_sampler *>(0x1);
  EXPECT_EQ(ikv_sampler_create(&sm, &short_v1), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(sm, nullptr);
}

// ---- NULL arguments and handles ----

TEST(Capi, NullArgumentsAreRejectedAndOutputsCleared) {
  REQUIRE_MODEL();
  ikv_model *mo = reinterpret_cast<ikv_model *>(0x1);
  EXPECT_EQ(ikv_model_load(nullptr, infokv_test::stories_path().c_str()), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ikv_model_load(&mo, nullptr), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(mo, nullptr);
  EXPECT_GT(std::strlen(ikv_last_error_message()), 0u);

  int64_t v = 77;
  EXPECT_EQ(ikv_model_get_int(nullptr, m, IKV_MODEL_N_VOCAB), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ikv_model_get_int(&v, nullptr, IKV_MODEL_N_VOCAB), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(v, 0);
  EXPECT_EQ(ikv_model_get_int(&v, m, 0), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ikv_model_get_int(&v, m, 999), IKV_ERR_INVALID_ARGUMENT);
  for (int32_t p = IKV_MODEL_N_VOCAB; p <= IKV_MODEL_WEIGHT_BYTES; ++p) EXPECT_EQ(ikv_model_get_int(&v, m, p), IKV_OK) << p;
  ASSERT_EQ(ikv_model_get_int(&v, m, IKV_MODEL_N_VOCAB), IKV_OK);
  EXPECT_EQ(v, 512);

  size_t len = 99;
  EXPECT_EQ(ikv_model_describe(nullptr, 10, &len, m), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ikv_model_describe(nullptr, 0, nullptr, m), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ikv_tokenize(nullptr, 0, nullptr, m, "a", 1, 1), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ikv_tokenize(nullptr, 0, &len, m, nullptr, 3, 1), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ikv_tokenize(nullptr, 5, &len, m, "a", 1, 1), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ikv_tokenize(nullptr, 0, &len, m, nullptr, 0, 0), IKV_OK);  // empty text, no BOS: zero tokens
  EXPECT_EQ(len, 0u);
  EXPECT_EQ(ikv_detokenize(nullptr, 0, &len, m, nullptr, 2), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ikv_detokenize(nullptr, 0, nullptr, m, nullptr, 0), IKV_ERR_INVALID_ARGUMENT);

  ikv_session *s = reinterpret_cast<ikv_session *>(0x1);
  EXPECT_EQ(ikv_session_create(nullptr, m, nullptr), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ikv_session_create(&s, nullptr, nullptr), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(s, nullptr);
  SessionGuard g;
  ASSERT_EQ(ikv_session_create(&g.s, m, nullptr), IKV_OK);  // NULL options: defaults
  int32_t seq = 5;
  EXPECT_EQ(ikv_seq_add(nullptr, g.s), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ikv_seq_fork(nullptr, g.s, 0), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ikv_seq_length(nullptr, g.s, 0), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ikv_seq_kept(nullptr, g.s, 0, 0), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ikv_seq_kv_bytes(nullptr, g.s, 0), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ikv_kv_stat(nullptr, g.s, IKV_KV_BLOCKS_TOTAL), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ikv_decode(g.s, 0, nullptr, 1), IKV_ERR_INVALID_ARGUMENT);
  const int32_t one = 1;
  EXPECT_EQ(ikv_decode(g.s, 0, &one, 0), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ikv_decode_batch(g.s, nullptr, &one, 1), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ikv_decode_batch(g.s, &seq, nullptr, 1), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ikv_get_logits(nullptr, 0, nullptr, g.s, 0), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ikv_get_logits(nullptr, 10, &len, g.s, 0), IKV_ERR_INVALID_ARGUMENT);

  ikv_sampler *sm = reinterpret_cast<ikv_sampler *>(0x1);
  EXPECT_EQ(ikv_sampler_create(nullptr, nullptr), IKV_ERR_INVALID_ARGUMENT);
  ikv_sampler_options bad = IKV_SAMPLER_OPTIONS_INIT;
  bad.struct_size = 4;
  EXPECT_EQ(ikv_sampler_create(&sm, &bad), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(sm, nullptr);
  ASSERT_EQ(ikv_sampler_create(&sm, nullptr), IKV_OK);
  int32_t tok = 9;
  EXPECT_EQ(ikv_sample(nullptr, sm, g.s, 0), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ikv_sample(&tok, nullptr, g.s, 0), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(tok, -1);
  EXPECT_EQ(ikv_generate(nullptr, 0, nullptr, g.s, 0, nullptr, 3, 4, sm, nullptr, nullptr), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ikv_generate(nullptr, 4, nullptr, g.s, 0, &one, 1, 4, sm, nullptr, nullptr), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ikv_generate(nullptr, 0, nullptr, g.s, 0, &one, 1, -1, sm, nullptr, nullptr), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ikv_generate(nullptr, 0, nullptr, g.s, 0, &one, 1, 4, nullptr, nullptr, nullptr), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(length_of(g.s, 0), 0);  // none of the failures decoded anything
  ikv_sampler_free(sm);

  // Destroy functions accept NULL.
  ikv_model_free(nullptr);
  ikv_session_free(nullptr);
  ikv_sampler_free(nullptr);
}

TEST(Capi, FreedForeignAndWrongKindHandlesAreRejected) {
  REQUIRE_MODEL();
  ikv_session *s = nullptr;
  ASSERT_EQ(ikv_session_create(&s, m, nullptr), IKV_OK);
  ikv_sampler *sm = nullptr;
  ASSERT_EQ(ikv_sampler_create(&sm, nullptr), IKV_OK);
  ikv_model *m2 = nullptr;
  ASSERT_EQ(ikv_model_load(&m2, infokv_test::stories_path().c_str()), IKV_OK);
  ikv_session_free(s);
  ikv_sampler_free(sm);
  ikv_model_free(m2);

  int64_t v = 0;
  size_t n = 0;
  int32_t tok = 0;
  const int32_t one = 1;
  // freed
  EXPECT_EQ(ikv_seq_length(&v, s, 0), IKV_ERR_BAD_HANDLE);
  EXPECT_NE(std::string(ikv_last_error_message()).find("not live"), std::string::npos) << ikv_last_error_message();
  EXPECT_EQ(ikv_decode(s, 0, &one, 1), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(ikv_get_logits(nullptr, 0, &n, s, 0), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(ikv_kv_stat(&v, s, IKV_KV_BLOCKS_TOTAL), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(ikv_model_get_int(&v, m2, IKV_MODEL_N_VOCAB), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(ikv_tokenize(nullptr, 0, &n, m2, "a", 1, 1), IKV_ERR_BAD_HANDLE);
  ikv_session *s2 = nullptr;
  EXPECT_EQ(ikv_session_create(&s2, m2, nullptr), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(s2, nullptr);
  // double free is ignored
  ikv_session_free(s);
  ikv_sampler_free(sm);
  ikv_model_free(m2);

  // foreign pointers (never made by infokv)
  alignas(64) unsigned char junk[256];
  std::memset(junk, 0x5A, sizeof junk);
  auto *fs = reinterpret_cast<ikv_session *>(junk);
  auto *fm = reinterpret_cast<ikv_model *>(junk);
  auto *fsm = reinterpret_cast<ikv_sampler *>(junk);
  EXPECT_EQ(ikv_seq_length(&v, fs, 0), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(ikv_model_get_int(&v, fm, IKV_MODEL_N_VOCAB), IKV_ERR_BAD_HANDLE);
  ikv_session_free(fs);  // ignored, not freed
  ikv_model_free(fm);
  ikv_sampler_free(fsm);

  // live handles of the wrong kind
  SessionGuard g;
  ASSERT_EQ(ikv_session_create(&g.s, m, nullptr), IKV_OK);
  ikv_sampler *live_sm = nullptr;
  ASSERT_EQ(ikv_sampler_create(&live_sm, nullptr), IKV_OK);
  EXPECT_EQ(ikv_seq_length(&v, reinterpret_cast<ikv_session *>(m), 0), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(ikv_model_get_int(&v, reinterpret_cast<ikv_model *>(g.s), IKV_MODEL_N_VOCAB), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(ikv_sample(&tok, reinterpret_cast<ikv_sampler *>(g.s), g.s, 0), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(ikv_decode(reinterpret_cast<ikv_session *>(live_sm), 0, &one, 1), IKV_ERR_BAD_HANDLE);
  ikv_session_free(reinterpret_cast<ikv_session *>(m));  // ignored: a model is not a session
  ikv_model_free(reinterpret_cast<ikv_model *>(live_sm));
  EXPECT_EQ(ikv_model_get_int(&v, m, IKV_MODEL_N_VOCAB), IKV_OK);  // both still alive
  EXPECT_EQ(ikv_decode(g.s, 0, &one, 1), IKV_OK);
  ikv_sampler_free(live_sm);
}

// ---- buffer protocol ----

TEST(Capi, BufferTooSmallReportsTheSizeThenFills) {
  REQUIRE_MODEL();
  size_t len = 0;
  ASSERT_EQ(ikv_model_describe(nullptr, 0, &len, m), IKV_ERR_BUFFER_TOO_SMALL);
  ASSERT_GT(len, 10u);
  std::vector<char> buf(len + 1, 'x');
  EXPECT_EQ(ikv_model_describe(buf.data(), len, &len, m), IKV_ERR_BUFFER_TOO_SMALL);  // no room for the NUL
  EXPECT_EQ(buf[0], '\0');
  ASSERT_EQ(ikv_model_describe(buf.data(), buf.size(), &len, m), IKV_OK);
  EXPECT_EQ(std::strlen(buf.data()), len);
  EXPECT_EQ(buf[0], '{');
  EXPECT_NE(std::string(buf.data()).find("llama"), std::string::npos);

  const char *text = "Once upon a time";
  size_t nt = 0;
  ASSERT_EQ(ikv_tokenize(nullptr, 0, &nt, m, text, std::strlen(text), 1), IKV_ERR_BUFFER_TOO_SMALL);
  EXPECT_EQ(nt, 5u);
  std::vector<int32_t> ids(nt);
  EXPECT_EQ(ikv_tokenize(ids.data(), nt - 1, &nt, m, text, std::strlen(text), 1), IKV_ERR_BUFFER_TOO_SMALL);
  EXPECT_EQ(nt, 5u);
  ASSERT_EQ(ikv_tokenize(ids.data(), ids.size(), &nt, m, text, std::strlen(text), 1), IKV_OK);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 403, 407, 261, 378}));

  size_t tl = 0;
  ASSERT_EQ(ikv_detokenize(nullptr, 0, &tl, m, ids.data() + 1, 4), IKV_ERR_BUFFER_TOO_SMALL);
  std::vector<char> tb(tl + 1);
  EXPECT_EQ(ikv_detokenize(tb.data(), tl, &tl, m, ids.data() + 1, 4), IKV_ERR_BUFFER_TOO_SMALL);
  ASSERT_EQ(ikv_detokenize(tb.data(), tb.size(), &tl, m, ids.data() + 1, 4), IKV_OK);
  EXPECT_STREQ(tb.data(), " Once upon a time");
  const int32_t bad_ids[] = {403, 512};
  EXPECT_EQ(ikv_detokenize(tb.data(), tb.size(), &tl, m, bad_ids, 2), IKV_ERR_OUT_OF_RANGE);

  SessionGuard g;
  ikv_session_options o = f32_options();
  ASSERT_EQ(ikv_session_create(&g.s, m, &o), IKV_OK);
  size_t nl = 0;
  EXPECT_EQ(ikv_get_logits(nullptr, 0, &nl, g.s, 0), IKV_ERR_BAD_STATE);  // before any decode
  ASSERT_EQ(ikv_decode(g.s, 0, ids.data(), ids.size()), IKV_OK);
  ASSERT_EQ(ikv_get_logits(nullptr, 0, &nl, g.s, 0), IKV_ERR_BUFFER_TOO_SMALL);
  EXPECT_EQ(nl, 512u);
  std::vector<float> lg(nl);
  EXPECT_EQ(ikv_get_logits(lg.data(), nl - 1, &nl, g.s, 0), IKV_ERR_BUFFER_TOO_SMALL);
  EXPECT_EQ(ikv_get_logits(lg.data(), nl, &nl, g.s, 0), IKV_OK);
  EXPECT_EQ(ikv_get_logits(lg.data(), nl, &nl, g.s, 7), IKV_ERR_NOT_FOUND);

  // generate: a buffer smaller than max_tokens is refused before anything is generated, like every buffer call;
  // *out_count says what to allocate, and the sequence and sampler are untouched
  ikv_sampler_options so = IKV_SAMPLER_OPTIONS_INIT;
  so.temperature = 0;
  ikv_sampler *sm = nullptr;
  ASSERT_EQ(ikv_sampler_create(&sm, &so), IKV_OK);
  int64_t len_before = 0, len_after = 0;
  ASSERT_EQ(ikv_seq_length(&len_before, g.s, 0), IKV_OK);
  int32_t two[2] = {-5, -5};
  size_t ng = 0;
  EXPECT_EQ(ikv_generate(two, 2, &ng, g.s, 0, nullptr, 0, 6, sm, nullptr, nullptr), IKV_ERR_BUFFER_TOO_SMALL);
  EXPECT_EQ(ng, 6u);
  EXPECT_EQ(two[0], -5);
  ASSERT_EQ(ikv_seq_length(&len_after, g.s, 0), IKV_OK);
  EXPECT_EQ(len_after, len_before);
  int32_t six[6] = {-5, -5, -5, -5, -5, -5};
  EXPECT_EQ(ikv_generate(six, 6, &ng, g.s, 0, nullptr, 0, 6, sm, nullptr, nullptr), IKV_OK);
  EXPECT_EQ(ng, 6u);
  EXPECT_EQ(six[0], kGreedyOnce[0]);
  EXPECT_EQ(six[1], kGreedyOnce[1]);
  // NULL out_tokens with capacity 0 only counts
  EXPECT_EQ(ikv_generate(nullptr, 0, &ng, g.s, 0, nullptr, 0, 2, sm, nullptr, nullptr), IKV_OK);
  EXPECT_EQ(ng, 2u);
  ikv_sampler_free(sm);
}

// ---- memory pressure's estimate ----

namespace {
// Everything a query must leave as it was: lengths, kept slots per layer, KV bytes, every pool statistic, logits.
struct SessionState {
  std::vector<int64_t> values;
  std::vector<float> logits;
  bool operator==(const SessionState &o) const { return values == o.values && logits == o.logits; }
};

SessionState state_of(ikv_model *m, ikv_session *s, const std::vector<int32_t> &seqs) {
  SessionState st;
  const int64_t n_layer = layers_of(m);
  for (int32_t seq : seqs) {
    st.values.push_back(length_of(s, seq));
    for (int32_t l = 0; l < n_layer; ++l) {
      int64_t k = -1;
      EXPECT_EQ(ikv_seq_kept(&k, s, seq, l), IKV_OK);
      st.values.push_back(k);
    }
    int64_t b = -1;
    EXPECT_EQ(ikv_seq_kv_bytes(&b, s, seq), IKV_OK);
    st.values.push_back(b);
    const std::vector<float> lg = logits_of(s, seq);
    st.logits.insert(st.logits.end(), lg.begin(), lg.end());
  }
  for (int32_t stat = IKV_KV_BLOCKS_TOTAL; stat <= IKV_KV_HOST_BYTES; ++stat) st.values.push_back(stat_of(s, stat));
  return st;
}
}  // namespace

TEST(Capi, CompressForStatesTheQuestionAndTheSequenceReportsWhatItServed) {
  REQUIRE_MODEL();
  ikv_session_options o = f32_options();
  o.policy = IKV_POLICY_SNAPKV;
  o.budget_fraction = 0.5;
  o.compress_after_prefill = 0;
  SessionGuard g;
  ASSERT_EQ(ikv_session_create(&g.s, m, &o), IKV_OK) << ikv_last_error_message();
  std::vector<int32_t> toks(200);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = 261 + static_cast<int32_t>((i * 11) % 200);
  ASSERT_EQ(ikv_decode(g.s, 0, toks.data(), toks.size()), IKV_OK) << ikv_last_error_message();
  int32_t q = -1;
  double secs = -1;
  ASSERT_EQ(ikv_seq_compression_question(&q, &secs, g.s, 0), IKV_OK);
  EXPECT_EQ(q, IKV_QUESTION_NEXT);  // before any compression
  EXPECT_EQ(secs, 0.0);
  const SessionState before = state_of(m, g.s, {0});
  for (int32_t bad : {-1, 3, 1 << 30}) EXPECT_EQ(ikv_seq_compress_for(g.s, 0, 0, bad), IKV_ERR_INVALID_ARGUMENT) << bad;
  EXPECT_EQ(ikv_seq_compress_for(g.s, 0, -1, IKV_QUESTION_NEXT), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ikv_seq_compress_for(g.s, 99, 0, IKV_QUESTION_NEXT), IKV_ERR_NOT_FOUND);
  EXPECT_EQ(ikv_seq_compress_for(nullptr, 0, 0, IKV_QUESTION_NEXT), IKV_ERR_BAD_HANDLE);
  EXPECT_TRUE(state_of(m, g.s, {0}) == before) << "a refused call changed the session";
  ASSERT_EQ(ikv_seq_compress_for(g.s, 0, 80, IKV_QUESTION_NEXT), IKV_OK) << ikv_last_error_message();
  ASSERT_EQ(ikv_seq_compression_question(&q, &secs, g.s, 0), IKV_OK);
  EXPECT_EQ(q, IKV_QUESTION_NEXT);
  EXPECT_EQ(secs, 0.0);
  ASSERT_EQ(ikv_seq_compress(g.s, 0, 60), IKV_OK);  // the default: a question asked later
  ASSERT_EQ(ikv_seq_compression_question(&q, &secs, g.s, 0), IKV_OK);
  EXPECT_EQ(q, IKV_QUESTION_LATER);
  EXPECT_GT(secs, 0.0);
  ASSERT_EQ(ikv_seq_compress_for(g.s, 0, 40, IKV_QUESTION_BOTH), IKV_OK);
  ASSERT_EQ(ikv_seq_compression_question(&q, &secs, g.s, 0), IKV_OK);
  EXPECT_EQ(q, IKV_QUESTION_BOTH);
  q = 5;
  EXPECT_EQ(ikv_seq_compression_question(&q, nullptr, g.s, 0), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(q, 0);
  EXPECT_EQ(ikv_seq_compression_question(&q, &secs, g.s, 42), IKV_ERR_NOT_FOUND);
}

TEST(Capi, PressureEstimateReportsWhatCompressingWouldFreeAndChangesNothing) {
  REQUIRE_MODEL();
  ikv_session_options o = f32_options();
  o.policy = IKV_POLICY_SNAPKV;
  o.budget_fraction = 0.25;
  o.compress_after_prefill = 0;  // sequence 0 stays over its budget (the interval, 1024 steps, is not reached)
  SessionGuard g;
  ASSERT_EQ(ikv_session_create(&g.s, m, &o), IKV_OK) << ikv_last_error_message();
  std::vector<int32_t> toks(200);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = 261 + static_cast<int32_t>((i * 7) % 200);
  ASSERT_EQ(ikv_decode(g.s, 0, toks.data(), toks.size()), IKV_OK) << ikv_last_error_message();
  int32_t small = -1;
  ASSERT_EQ(ikv_seq_add(&small, g.s), IKV_OK);
  ASSERT_EQ(ikv_decode(g.s, small, toks.data(), 1), IKV_OK);  // 1 token: at its budget (max(1, 0.25))
  const SessionState before = state_of(m, g.s, {0, small});

  int64_t blocks = -1;
  double cost = -1;
  ASSERT_EQ(ikv_seq_pressure_estimate(&blocks, &cost, g.s, 0), IKV_OK) << ikv_last_error_message();
  EXPECT_GT(blocks, 0);
  EXPECT_GT(cost, 0.0);
  EXPECT_LT(cost, 1.0);
  EXPECT_TRUE(state_of(m, g.s, {0, small}) == before) << "the estimate changed the session";
  int64_t blocks2 = -1;
  double cost2 = -1;
  ASSERT_EQ(ikv_seq_pressure_estimate(&blocks2, &cost2, g.s, 0), IKV_OK);
  EXPECT_EQ(blocks2, blocks);
  EXPECT_EQ(cost2, cost);

  // At its budget: nothing to free, no cost.
  ASSERT_EQ(ikv_seq_pressure_estimate(&blocks2, &cost2, g.s, small), IKV_OK);
  EXPECT_EQ(blocks2, 0);
  EXPECT_EQ(cost2, 0.0);

  // Unknown sequence, NULL outputs: refused with the outputs cleared, and still nothing changed.
  blocks2 = 7;
  cost2 = 7;
  EXPECT_EQ(ikv_seq_pressure_estimate(&blocks2, &cost2, g.s, 42), IKV_ERR_NOT_FOUND);
  EXPECT_EQ(blocks2, 0);
  EXPECT_EQ(cost2, 0.0);
  cost2 = 7;
  EXPECT_EQ(ikv_seq_pressure_estimate(nullptr, &cost2, g.s, 0), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(cost2, 0.0);
  blocks2 = 7;
  EXPECT_EQ(ikv_seq_pressure_estimate(&blocks2, nullptr, g.s, 0), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(blocks2, 0);
  EXPECT_TRUE(state_of(m, g.s, {0, small}) == before);

  // The estimate is what compressing frees (no block is shared), and afterwards the sequence is at its budget.
  const int64_t used = stat_of(g.s, IKV_KV_BLOCKS_USED);
  ASSERT_EQ(ikv_seq_compress(g.s, 0, 0), IKV_OK) << ikv_last_error_message();
  EXPECT_EQ(used - stat_of(g.s, IKV_KV_BLOCKS_USED), blocks);
  ASSERT_EQ(ikv_seq_pressure_estimate(&blocks2, &cost2, g.s, 0), IKV_OK);
  EXPECT_EQ(blocks2, 0);
  EXPECT_EQ(cost2, 0.0);

  // Without a policy: 0 and 0.
  ikv_session_options none = f32_options();
  SessionGuard g2;
  ASSERT_EQ(ikv_session_create(&g2.s, m, &none), IKV_OK);
  ASSERT_EQ(ikv_decode(g2.s, 0, toks.data(), toks.size()), IKV_OK);
  blocks2 = 7;
  cost2 = 7;
  ASSERT_EQ(ikv_seq_pressure_estimate(&blocks2, &cost2, g2.s, 0), IKV_OK);
  EXPECT_EQ(blocks2, 0);
  EXPECT_EQ(cost2, 0.0);
}

// ---- what IKV_POLICY_AUTO chose ----

namespace {
std::vector<int32_t> story_tokens(ikv_model *m, int copies) {
  std::string text;
  for (int i = 0; i < copies; ++i) text += "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. ";
  std::vector<int32_t> ids(text.size() + 2);
  size_t n = 0;
  EXPECT_EQ(ikv_tokenize(ids.data(), ids.size(), &n, m, text.data(), text.size(), 1), IKV_OK);
  ids.resize(n);
  return ids;
}

struct AutoReportOut {
  int32_t layers = -7;
  int64_t kept = -7, uniform = -7;
  double loss = -7, max_loss = -7;
};
int32_t auto_report_of(ikv_session *s, int32_t seq, AutoReportOut *r) {
  return ikv_seq_auto_report(&r->layers, &r->kept, &r->uniform, &r->loss, &r->max_loss, s, seq);
}
}  // namespace

TEST(Capi, EvidenceNamesAreStaticAndNeverNull) {
  const std::pair<int32_t, const char *> names[] = {
      {IKV_EVIDENCE_WINDOW_ATTENTION, "window_attention"}, {IKV_EVIDENCE_INFOKV, "infokv"},
      {IKV_EVIDENCE_ACCUMULATED_ATTENTION, "accumulated_attention"}, {IKV_EVIDENCE_LAST_QUERY, "last_query"},
      {IKV_EVIDENCE_RECENCY, "recency"}, {IKV_EVIDENCE_KEY_NORM, "key_norm"}};
  for (const auto &n : names) EXPECT_STREQ(ikv_evidence_name(n.first), n.second);
  for (int32_t v : {-1, IKV_EVIDENCE_KEY_NORM + 1, INT32_MAX, INT32_MIN}) EXPECT_STREQ(ikv_evidence_name(v), "unknown") << v;
}

TEST(Capi, AutoReportDescribesEachLayersChoice) {
  REQUIRE_MODEL();
  const int64_t n_layer = layers_of(m);
  ikv_session_options o = f32_options();
  o.policy = IKV_POLICY_AUTO;
  o.budget_fraction = 0.5;
  SessionGuard g;
  ASSERT_EQ(ikv_session_create(&g.s, m, &o), IKV_OK) << ikv_last_error_message();
  // Before any compression: no report, which is not an error; every layer is out of range.
  AutoReportOut r;
  ASSERT_EQ(auto_report_of(g.s, 0, &r), IKV_OK) << ikv_last_error_message();
  EXPECT_EQ(r.layers, 0);
  EXPECT_EQ(r.kept, 0);
  EXPECT_EQ(r.uniform, 0);
  EXPECT_EQ(r.loss, 0.0);
  EXPECT_EQ(r.max_loss, 0.0);
  int32_t ev = 7, budget = 7;
  double alpha = 7, loss = 7;
  EXPECT_EQ(ikv_seq_auto_layer(&ev, &budget, &alpha, &loss, g.s, 0, 0), IKV_ERR_OUT_OF_RANGE);
  EXPECT_EQ(ev, -1);
  EXPECT_EQ(budget, 0);
  EXPECT_NE(std::string(ikv_last_error_message()).find("no auto report"), std::string::npos) << ikv_last_error_message();

  const std::vector<int32_t> toks = story_tokens(m, 5);
  ASSERT_GE(toks.size(), 120u);
  ASSERT_EQ(ikv_decode(g.s, 0, toks.data(), toks.size()), IKV_OK) << ikv_last_error_message();  // compresses after it
  ASSERT_EQ(auto_report_of(g.s, 0, &r), IKV_OK) << ikv_last_error_message();
  ASSERT_EQ(r.layers, n_layer);
  EXPECT_EQ(r.max_loss, 0.0);  // a byte budget
  EXPECT_GT(r.uniform, 0);
  EXPECT_LT(r.uniform, n_layer * static_cast<int64_t>(toks.size()));
  EXPECT_TRUE(std::isfinite(r.loss) && r.loss >= 0.0) << r.loss;
  int64_t sum = 0;
  double mean = 0;
  for (int32_t l = 0; l < r.layers; ++l) {
    ASSERT_EQ(ikv_seq_auto_layer(&ev, &budget, &alpha, &loss, g.s, 0, l), IKV_OK) << ikv_last_error_message();
    EXPECT_GE(ev, IKV_EVIDENCE_WINDOW_ATTENTION);
    EXPECT_LE(ev, IKV_EVIDENCE_KEY_NORM);
    EXPECT_STRNE(ikv_evidence_name(ev), "unknown");
    EXPECT_FLOAT_EQ(static_cast<float>(alpha), ev == IKV_EVIDENCE_INFOKV ? o.alpha : 1.0f) << "layer " << l;
    EXPECT_TRUE(std::isfinite(loss) && loss >= 0.0) << loss;
    int64_t kept = -1;
    ASSERT_EQ(ikv_seq_kept(&kept, g.s, 0, l), IKV_OK);
    EXPECT_EQ(kept, budget) << "layer " << l;  // nothing was appended since the compression
    sum += budget;
    mean += loss / static_cast<double>(r.layers);
  }
  EXPECT_EQ(sum, r.kept);
  EXPECT_NEAR(mean, r.loss, 1e-6);
  EXPECT_LT(r.kept, n_layer * static_cast<int64_t>(toks.size()));

  // Bad layer, sequence, outputs: the documented status, outputs reset.
  for (int32_t bad : {-1, r.layers, INT32_MAX}) {
    ev = 7;
    budget = 7;
    EXPECT_EQ(ikv_seq_auto_layer(&ev, &budget, &alpha, &loss, g.s, 0, bad), IKV_ERR_OUT_OF_RANGE) << bad;
    EXPECT_EQ(ev, -1);
    EXPECT_EQ(budget, 0);
    EXPECT_EQ(alpha, 0.0);
    EXPECT_EQ(loss, 0.0);
  }
  AutoReportOut q;
  EXPECT_EQ(auto_report_of(g.s, 42, &q), IKV_ERR_NOT_FOUND);
  EXPECT_EQ(q.layers, 0);
  EXPECT_EQ(q.kept, 0);
  EXPECT_EQ(ikv_seq_auto_layer(&ev, &budget, &alpha, &loss, g.s, 42, 0), IKV_ERR_NOT_FOUND);
  EXPECT_EQ(ev, -1);
  q = AutoReportOut{};
  EXPECT_EQ(ikv_seq_auto_report(nullptr, &q.kept, &q.uniform, &q.loss, &q.max_loss, g.s, 0), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(q.kept, 0);
  EXPECT_EQ(q.max_loss, 0.0);
  EXPECT_EQ(ikv_seq_auto_report(&q.layers, &q.kept, &q.uniform, &q.loss, nullptr, g.s, 0), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(q.layers, 0);
  EXPECT_EQ(ikv_seq_auto_layer(&ev, &budget, nullptr, &loss, g.s, 0, 0), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ev, -1);
  EXPECT_EQ(ikv_seq_auto_layer(nullptr, &budget, &alpha, &loss, g.s, 0, 0), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ikv_seq_auto_report(&q.layers, &q.kept, &q.uniform, &q.loss, &q.max_loss, nullptr, 0), IKV_ERR_BAD_HANDLE);

  // A fork starts with its source's report; a new sequence has none.
  int32_t child = -1, fresh = -1;
  ASSERT_EQ(ikv_seq_fork(&child, g.s, 0), IKV_OK);
  ASSERT_EQ(auto_report_of(g.s, child, &q), IKV_OK);
  EXPECT_EQ(q.layers, r.layers);
  EXPECT_EQ(q.kept, r.kept);
  ASSERT_EQ(ikv_seq_add(&fresh, g.s), IKV_OK);
  ASSERT_EQ(auto_report_of(g.s, fresh, &q), IKV_OK);
  EXPECT_EQ(q.layers, 0);
}

TEST(Capi, AutoReportUnderAQualityTargetAndUnderAFixedPolicy) {
  REQUIRE_MODEL();
  const int64_t n_layer = layers_of(m);
  const std::vector<int32_t> toks = story_tokens(m, 5);
  ikv_session_options o = f32_options();
  o.policy = IKV_POLICY_AUTO;
  o.max_loss = 0.05;
  SessionGuard g;
  ASSERT_EQ(ikv_session_create(&g.s, m, &o), IKV_OK) << ikv_last_error_message();
  ASSERT_EQ(ikv_decode(g.s, 0, toks.data(), toks.size()), IKV_OK) << ikv_last_error_message();
  AutoReportOut r;
  ASSERT_EQ(auto_report_of(g.s, 0, &r), IKV_OK);
  EXPECT_EQ(r.layers, n_layer);
  EXPECT_EQ(r.max_loss, 0.05);
  EXPECT_EQ(r.uniform, 0);  // no budget to compare with
  EXPECT_LE(r.loss, 0.05 + 1e-6);
  EXPECT_GT(r.kept, 0);

  // Another policy compresses without a report.
  ikv_session_options f = f32_options();
  f.policy = IKV_POLICY_SNAPKV;
  f.budget_fraction = 0.5;
  SessionGuard g2;
  ASSERT_EQ(ikv_session_create(&g2.s, m, &f), IKV_OK);
  ASSERT_EQ(ikv_decode(g2.s, 0, toks.data(), toks.size()), IKV_OK);
  int64_t kept = 0;
  ASSERT_EQ(ikv_seq_kept(&kept, g2.s, 0, 0), IKV_OK);
  ASSERT_LT(kept, static_cast<int64_t>(toks.size()));  // it did compress
  r = AutoReportOut{};
  ASSERT_EQ(auto_report_of(g2.s, 0, &r), IKV_OK);
  EXPECT_EQ(r.layers, 0);
  int32_t ev = 0, budget = 0;
  double alpha = 0, loss = 0;
  EXPECT_EQ(ikv_seq_auto_layer(&ev, &budget, &alpha, &loss, g2.s, 0, 0), IKV_ERR_OUT_OF_RANGE);
}

// ---- state preserved by failures ----

TEST(Capi, OutOfRangeTokensLeaveStateUnchanged) {
  REQUIRE_MODEL();
  SessionGuard g;
  ikv_session_options o = f32_options();
  ASSERT_EQ(ikv_session_create(&g.s, m, &o), IKV_OK);
  const int32_t prompt[] = {1, 403, 407};
  ASSERT_EQ(ikv_decode(g.s, 0, prompt, 3), IKV_OK);
  const std::vector<float> before = logits_of(g.s, 0);
  const int64_t used_before = stat_of(g.s, IKV_KV_BLOCKS_USED);
  int64_t bytes_before = 0;
  ASSERT_EQ(ikv_seq_kv_bytes(&bytes_before, g.s, 0), IKV_OK);
  for (int32_t bad : {512, -1, INT32_MAX, INT32_MIN}) {
    const int32_t toks[] = {261, 378, bad};
    EXPECT_EQ(ikv_decode(g.s, 0, toks, 3), IKV_ERR_OUT_OF_RANGE) << bad;
    EXPECT_GT(std::strlen(ikv_last_error_message()), 0u);
    EXPECT_EQ(ikv_decode(g.s, 0, &bad, 1), IKV_ERR_OUT_OF_RANGE) << bad;
    const int32_t seqs[] = {0, 0};
    const int32_t bt[] = {261, bad};
    EXPECT_EQ(ikv_decode_batch(g.s, seqs, bt, 2), IKV_ERR_OUT_OF_RANGE) << bad;
    EXPECT_EQ(length_of(g.s, 0), 3);
    EXPECT_EQ(logits_of(g.s, 0), before);
    EXPECT_EQ(stat_of(g.s, IKV_KV_BLOCKS_USED), used_before);
    int64_t bytes = 0;
    ASSERT_EQ(ikv_seq_kv_bytes(&bytes, g.s, 0), IKV_OK);
    EXPECT_EQ(bytes, bytes_before);
  }
  // Unknown sequences, layers, lengths.
  const int32_t ok = 261;
  EXPECT_EQ(ikv_decode(g.s, 42, &ok, 1), IKV_ERR_NOT_FOUND);
  int64_t v = 0;
  EXPECT_EQ(ikv_seq_length(&v, g.s, 42), IKV_ERR_NOT_FOUND);
  EXPECT_EQ(ikv_seq_remove(g.s, 42), IKV_ERR_NOT_FOUND);
  EXPECT_EQ(ikv_seq_kept(&v, g.s, 0, 5), IKV_ERR_OUT_OF_RANGE);
  EXPECT_EQ(ikv_seq_kept(&v, g.s, 0, -1), IKV_ERR_OUT_OF_RANGE);
  ASSERT_EQ(ikv_seq_kept(&v, g.s, 0, 4), IKV_OK);
  EXPECT_EQ(v, 3);
  EXPECT_EQ(ikv_seq_truncate(g.s, 0, 4), IKV_ERR_OUT_OF_RANGE);
  EXPECT_EQ(ikv_seq_truncate(g.s, 0, -1), IKV_ERR_OUT_OF_RANGE);
  EXPECT_EQ(ikv_kv_stat(&v, g.s, 0), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ikv_kv_stat(&v, g.s, 99), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ikv_seq_compress(g.s, 0, 0), IKV_ERR_BAD_STATE);  // policy none
  EXPECT_EQ(ikv_seq_compress(g.s, 0, -3), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ikv_seq_protect(g.s, 0, 5, 2, 0), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(length_of(g.s, 0), 3);
  EXPECT_EQ(logits_of(g.s, 0), before);
  // Truncate clears the logits: sampling needs a new decode.
  ASSERT_EQ(ikv_seq_truncate(g.s, 0, 2), IKV_OK);
  ikv_sampler *sm = nullptr;
  ASSERT_EQ(ikv_sampler_create(&sm, nullptr), IKV_OK);
  int32_t t = 0;
  EXPECT_EQ(ikv_sample(&t, sm, g.s, 0), IKV_ERR_BAD_STATE);
  EXPECT_EQ(ikv_sample(&t, sm, g.s, 9), IKV_ERR_NOT_FOUND);
  ikv_sampler_free(sm);
}

TEST(Capi, KvFullWithATinyPoolLeavesLengthsUnchanged) {
  REQUIRE_MODEL();
  const int64_t n_layer = layers_of(m);
  SessionGuard g;
  ASSERT_EQ(create_small_pool(&g.s, m, 4, 2), IKV_OK);  // 8 tokens per layer
  EXPECT_EQ(stat_of(g.s, IKV_KV_BLOCKS_TOTAL), n_layer * 2);
  EXPECT_EQ(stat_of(g.s, IKV_KV_BLOCK_SIZE), 4);

  // Too much at once on an empty sequence: nothing appended, still no logits.
  std::vector<int32_t> nine(9, 261);
  nine[0] = 1;
  EXPECT_EQ(ikv_decode(g.s, 0, nine.data(), nine.size()), IKV_ERR_KV_FULL);
  EXPECT_GT(std::strlen(ikv_last_error_message()), 0u);
  EXPECT_EQ(length_of(g.s, 0), 0);
  EXPECT_EQ(stat_of(g.s, IKV_KV_BLOCKS_USED), 0);
  size_t nl = 0;
  EXPECT_EQ(ikv_get_logits(nullptr, 0, &nl, g.s, 0), IKV_ERR_BAD_STATE);

  ASSERT_EQ(ikv_decode(g.s, 0, nine.data(), 8), IKV_OK);
  EXPECT_EQ(stat_of(g.s, IKV_KV_BLOCKS_FREE), 0);
  const std::vector<float> before = logits_of(g.s, 0);
  const int32_t more = 261;
  EXPECT_EQ(ikv_decode(g.s, 0, &more, 1), IKV_ERR_KV_FULL);
  EXPECT_EQ(length_of(g.s, 0), 8);
  EXPECT_EQ(logits_of(g.s, 0), before);
  int64_t kept = 0;
  ASSERT_EQ(ikv_seq_kept(&kept, g.s, 0, 0), IKV_OK);
  EXPECT_EQ(kept, 8);

  // A second sequence cannot take a block either, and the failure leaves it empty.
  int32_t s1 = -1;
  ASSERT_EQ(ikv_seq_add(&s1, g.s), IKV_OK);
  EXPECT_EQ(ikv_decode(g.s, s1, &more, 1), IKV_ERR_KV_FULL);
  EXPECT_EQ(length_of(g.s, s1), 0);
  // Generating into a full sequence fails with KV full after the first sampled token cannot be decoded...
  // and freeing the first sequence makes room again.
  ASSERT_EQ(ikv_seq_remove(g.s, 0), IKV_OK);
  EXPECT_EQ(stat_of(g.s, IKV_KV_BLOCKS_USED), 0);
  EXPECT_EQ(ikv_decode(g.s, s1, &more, 1), IKV_OK);
  int64_t bytes = 0;
  ASSERT_EQ(ikv_seq_kv_bytes(&bytes, g.s, s1), IKV_OK);
  EXPECT_EQ(bytes, n_layer * stat_of(g.s, IKV_KV_BLOCK_BYTES));

  // Absurd pool sizes are refused up front rather than allocated.
  ikv_session *huge = nullptr;
  ikv_session_options h = f32_options();
  h.kv_pool_blocks = INT64_MAX;
  int32_t st = ikv_session_create(&huge, m, &h);
  EXPECT_TRUE(st == IKV_ERR_INVALID_ARGUMENT || st == IKV_ERR_OUT_OF_MEMORY) << st;
  EXPECT_EQ(huge, nullptr);
  h.kv_pool_blocks = -1;
  EXPECT_EQ(ikv_session_create(&huge, m, &h), IKV_ERR_INVALID_ARGUMENT);
}

TEST(Capi, BadSessionAndSamplerOptionsAreRejected) {
  REQUIRE_MODEL();
  struct Case { const char *what; void (*edit)(ikv_session_options &); };
  const Case cases[] = {
      {"struct_size", [](ikv_session_options &o) { o.struct_size = 8; }},
      {"version", [](ikv_session_options &o) { o.version = 0; }},
      {"n_threads", [](ikv_session_options &o) { o.n_threads = -2; }},
      {"kv_dtype 0", [](ikv_session_options &o) { o.kv_dtype = 0; }},
      {"kv_dtype 6", [](ikv_session_options &o) { o.kv_dtype = 6; }},
      {"block_size", [](ikv_session_options &o) { o.block_size = -16; }},
      {"policy", [](ikv_session_options &o) { o.policy = 8; }},
      {"shape", [](ikv_session_options &o) { o.shape = 2; }},
      {"pool bytes", [](ikv_session_options &o) { o.kv_pool_bytes = -1; }},
      {"device", [](ikv_session_options &o) { o.device = "tpu"; }},
  };
  for (const Case &c : cases) {
    ikv_session_options o = IKV_SESSION_OPTIONS_INIT;
    c.edit(o);
    ikv_session *s = nullptr;
    EXPECT_EQ(ikv_session_create(&s, m, &o), IKV_ERR_INVALID_ARGUMENT) << c.what;
    EXPECT_EQ(s, nullptr);
    EXPECT_GT(std::strlen(ikv_last_error_message()), 0u) << c.what;
  }
  // The quantised dtypes store blocks of 32 values: stories260K's heads of 8 cannot hold them.
  for (int32_t dt : {IKV_KV_Q8_0, IKV_KV_Q4_0}) {
    ikv_session_options o = IKV_SESSION_OPTIONS_INIT;
    o.kv_dtype = dt;
    ikv_session *s = nullptr;
    EXPECT_EQ(ikv_session_create(&s, m, &o), IKV_ERR_UNSUPPORTED) << dt;
    EXPECT_EQ(s, nullptr);
    EXPECT_NE(std::strstr(ikv_last_error_message(), "multiple of it"), nullptr) << ikv_last_error_message();
  }
  struct SCase { const char *what; void (*edit)(ikv_sampler_options &); };
  const SCase scases[] = {
      {"nan temperature", [](ikv_sampler_options &o) { o.temperature = std::nanf(""); }},
      {"top_p", [](ikv_sampler_options &o) { o.top_p = -0.5f; }},
      {"min_p", [](ikv_sampler_options &o) { o.min_p = 2.0f; }},
      {"repeat_penalty", [](ikv_sampler_options &o) { o.repeat_penalty = 0.0f; }},
      {"repeat_last_n", [](ikv_sampler_options &o) { o.repeat_last_n = -1; }},
  };
  for (const SCase &c : scases) {
    ikv_sampler_options o = IKV_SAMPLER_OPTIONS_INIT;
    c.edit(o);
    ikv_sampler *s = nullptr;
    EXPECT_EQ(ikv_sampler_create(&s, &o), IKV_ERR_INVALID_ARGUMENT) << c.what;
    EXPECT_EQ(s, nullptr);
  }
  // Documented non-errors: a negative temperature is greedy (like 0), infinite temperature is not
  ikv_sampler_options neg = IKV_SAMPLER_OPTIONS_INIT;
  neg.temperature = -1.0f;
  ikv_sampler *ns = nullptr;
  EXPECT_EQ(ikv_sampler_create(&ns, &neg), IKV_OK);
  ikv_sampler_free(ns);
  neg.temperature = std::numeric_limits<float>::infinity();
  EXPECT_EQ(ikv_sampler_create(&ns, &neg), IKV_ERR_INVALID_ARGUMENT);
}

TEST(Capi, ModelLoadFailuresReturnStatusAndNoHandle) {
  ikv_model *mm = reinterpret_cast<ikv_model *>(0x8);
  EXPECT_EQ(ikv_model_load(&mm, "/nonexistent/model.gguf"), IKV_ERR_IO);
  EXPECT_EQ(mm, nullptr);
  infokv_test::TempFile junk(std::vector<uint8_t>(1000, 0x42));
  EXPECT_EQ(ikv_model_load(&mm, junk.path().c_str()), IKV_ERR_BAD_MODEL);
  EXPECT_EQ(mm, nullptr);
  EXPECT_NE(std::string(ikv_last_error_message()).find("magic"), std::string::npos);
  std::vector<uint8_t> v4 = infokv_test::GgufBuilder().set_version(4).build();
  infokv_test::TempFile f4(v4);
  EXPECT_EQ(ikv_model_load(&mm, f4.path().c_str()), IKV_ERR_UNSUPPORTED);
  EXPECT_EQ(mm, nullptr);
}

// ---- generation ----

namespace {
struct StreamState {
  int calls = 0;
  int stop_after = 3;
  std::vector<int32_t> tokens;
  std::string text;
};
int32_t stream_cb(void *user_data, int32_t token, const char *text, size_t len) {
  auto *st = static_cast<StreamState *>(user_data);
  ++st->calls;
  if (token >= 0) st->tokens.push_back(token);
  st->text.append(text, len);
  return st->calls >= st->stop_after ? 1 : 0;
}
}  // namespace

TEST(Capi, StreamingCallbackCancelsAfterThreeTokens) {
  REQUIRE_MODEL();
  SessionGuard g;
  ikv_session_options o = f32_options();
  ASSERT_EQ(ikv_session_create(&g.s, m, &o), IKV_OK);
  ikv_sampler_options so = IKV_SAMPLER_OPTIONS_INIT;
  so.temperature = 0;
  ikv_sampler *sm = nullptr;
  ASSERT_EQ(ikv_sampler_create(&sm, &so), IKV_OK);
  const int32_t prompt[] = {1, 403, 407, 261, 378};
  StreamState st;
  std::vector<int32_t> out(16, -1);
  size_t n = 0;
  EXPECT_EQ(ikv_generate(out.data(), out.size(), &n, g.s, 0, prompt, 5, 16, sm, stream_cb, &st), IKV_ERR_CANCELLED);
  EXPECT_GT(std::strlen(ikv_last_error_message()), 0u);
  EXPECT_EQ(n, 3u);
  EXPECT_EQ(st.calls, 3);
  const std::vector<int32_t> first3(kGreedyOnce.begin(), kGreedyOnce.begin() + 3);
  EXPECT_EQ(st.tokens, first3);
  EXPECT_EQ(std::vector<int32_t>(out.begin(), out.begin() + 3), first3);
  EXPECT_EQ(out[3], -1);
  EXPECT_EQ(st.text, ", there was");
  // The prompt and every generated token stay in the sequence, decoded, the last one too.
  const int64_t len = length_of(g.s, 0);
  EXPECT_EQ(len, 5 + 3);
  // Generation continues from there when called again without a prompt.
  size_t n2 = 0;
  std::vector<int32_t> more(8);
  ASSERT_EQ(ikv_generate(more.data(), more.size(), &n2, g.s, 0, nullptr, 0, 3, sm, nullptr, nullptr), IKV_OK);
  EXPECT_EQ(n2, 3u);
  const size_t offset = static_cast<size_t>(len - 5);
  EXPECT_EQ(std::vector<int32_t>(more.begin(), more.begin() + 3),
            std::vector<int32_t>(kGreedyOnce.begin() + static_cast<std::ptrdiff_t>(offset),
                                 kGreedyOnce.begin() + static_cast<std::ptrdiff_t>(offset) + 3));
  ikv_sampler_free(sm);
}

TEST(Capi, GreedyGenerationMatchesTheReference) {
  REQUIRE_MODEL();
  int32_t st = 0;
  EXPECT_EQ(greedy_once_upon(m, 40, &st), kGreedyOnce);
  EXPECT_EQ(st, IKV_OK);
}

TEST(CapiConcurrency, ThreadsWithTheirOwnSessionsShareOneModel) {
  REQUIRE_MODEL();
  constexpr int kThreads = 4;
  std::vector<std::vector<int32_t>> outs(kThreads);
  std::vector<int32_t> statuses(kThreads, -999);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 3; ++rep) {
        outs[static_cast<size_t>(t)] = greedy_once_upon(m, 40, &statuses[static_cast<size_t>(t)]);
        if (outs[static_cast<size_t>(t)] != kGreedyOnce) break;
      }
    });
  for (auto &th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(statuses[static_cast<size_t>(t)], IKV_OK) << "thread " << t;
    EXPECT_EQ(outs[static_cast<size_t>(t)], kGreedyOnce) << "thread " << t;
  }
}

// Generating 400 tokens into a 160-token pool: ikv_generate returns KV full and reports the tokens it decoded
// (out_count was 0 while 60 tokens stayed in the sequence), and those tokens are exactly what the sequence gained.
TEST(Capi, GenerateIntoAFullPoolReportsWhatItDecoded) {
  REQUIRE_MODEL();
  SessionGuard g;
  ASSERT_EQ(create_small_pool(&g.s, m, 16, 10), IKV_OK);  // 160 tokens per layer
  ikv_sampler_options so = IKV_SAMPLER_OPTIONS_INIT;
  so.temperature = 0.0f;
  ikv_sampler *sm = nullptr;
  ASSERT_EQ(ikv_sampler_create(&sm, &so), IKV_OK);
  const int32_t prompt[] = {1, 403, 407, 261, 378};
  std::vector<int32_t> out(400, -1);
  size_t made = 0;
  const int32_t st = ikv_generate(out.data(), out.size(), &made, g.s, 0, prompt, 5, 400, sm, nullptr, nullptr);
  ikv_sampler_free(sm);
  if (st == IKV_OK) GTEST_SKIP() << "greedy story ended before the pool filled";
  ASSERT_EQ(st, IKV_ERR_KV_FULL) << ikv_last_error_message();
  EXPECT_GT(made, 0u);
  EXPECT_EQ(length_of(g.s, 0), static_cast<int64_t>(5 + made));
}
