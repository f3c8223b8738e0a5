// Shared helpers of the C ABI tests (tests/unit/capi/): one stories260K model loaded through the C ABI, session
// options of older revisions, small pools, and reads of logits, lengths and statistics.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "infokv/infokv.h"
#include "support/util.hpp"

namespace infokv_capi_test {

// One model for the whole file, loaded through the C ABI (never freed: tests share it and it dies with the process).
inline ikv_model *model() {
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
inline HeapOptions older_options(const ikv_session_options &full, size_t size, uint32_t version) {
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
inline void expect_refused(ikv_model *m, const ikv_session_options *o, const std::string &says) {
  ikv_session *s = reinterpret_cast<ikv_session *>(0x1);
  EXPECT_EQ(ikv_session_create(&s, m, o), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(s, nullptr);
  EXPECT_NE(std::string(ikv_last_error_message()).find(says), std::string::npos) << ikv_last_error_message();
}

inline ikv_session_options f32_options() {
  ikv_session_options o = IKV_SESSION_OPTIONS_INIT;
  o.kv_dtype = IKV_KV_F32;
  o.n_threads = 1;
  return o;
}

struct SessionGuard {
  ikv_session *s = nullptr;
  ~SessionGuard() { ikv_session_free(s); }
};

inline int64_t layers_of(ikv_model *m) {
  int64_t n = 0;
  EXPECT_EQ(ikv_model_get_int(&n, m, IKV_MODEL_N_LAYER), IKV_OK);
  return n;
}

// A one-thread f32 session whose pool holds blocks_per_layer blocks of block_size tokens for each layer.
inline int32_t create_small_pool(ikv_session **s, ikv_model *m, int32_t block_size, int64_t blocks_per_layer) {
  ikv_session_options o = f32_options();
  o.block_size = block_size;
  o.kv_pool_blocks = layers_of(m) * blocks_per_layer;
  return ikv_session_create(s, m, &o);
}

inline std::vector<float> logits_of(ikv_session *s, int32_t seq) {
  std::vector<float> lg(512);
  size_t n = 0;
  EXPECT_EQ(ikv_get_logits(lg.data(), lg.size(), &n, s, seq), IKV_OK) << ikv_last_error_message();
  lg.resize(n);
  return lg;
}

inline int64_t length_of(ikv_session *s, int32_t seq) {
  int64_t n = -1;
  EXPECT_EQ(ikv_seq_length(&n, s, seq), IKV_OK);
  return n;
}

inline int64_t stat_of(ikv_session *s, int32_t stat) {
  int64_t v = -1;
  EXPECT_EQ(ikv_kv_stat(&v, s, stat), IKV_OK);
  return v;
}

inline const std::vector<int32_t> kGreedyOnce = {432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396,
                                          267, 337, 410, 408, 419, 292, 411, 322, 265, 282, 295, 433, 426, 385,
                                          328, 432, 358, 394, 261, 370, 432, 352, 266, 268, 388, 426};

inline std::vector<int32_t> greedy_once_upon(ikv_model *m, int32_t max_tokens, int32_t *status_out = nullptr) {
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

}  // namespace infokv_capi_test
