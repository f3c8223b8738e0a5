// The C ABI's session calls (infokv/session.h): devices, option revisions, sequence limits, compression (question,
// quality target, pressure estimate, auto's report), and out-of-range tokens and a full KV pool leaving state
// unchanged.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "infokv/infokv.h"
#include "support/capi.hpp"
#include "support/util.hpp"
#include "util/version.hpp"

using namespace infokv_capi_test;  // NOLINT: the shared C ABI test helpers

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
      {IKV_EVIDENCE_RECENCY, "recency"}, {IKV_EVIDENCE_KEY_NORM, "key_norm"}, {IKV_EVIDENCE_REPLAY, "replay"}};
  for (const auto &n : names) EXPECT_STREQ(ikv_evidence_name(n.first), n.second);
  for (int32_t v : {-1, IKV_EVIDENCE_REPLAY + 1, INT32_MAX, INT32_MIN}) EXPECT_STREQ(ikv_evidence_name(v), "unknown") << v;
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
