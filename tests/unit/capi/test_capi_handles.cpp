// Handles and threads at the C ABI: a freed handle is refused for good by every call, even after its object's
// address is reused (a double free is harmless), and a second thread entering a call on a session or sampler that
// another thread is inside gets IKV_ERR_BUSY instead of racing it.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "infokv/infokv.h"
#include "support/util.hpp"

namespace {

ikv_model *shared_model() {
  static ikv_model *m = nullptr;
  if (m == nullptr && ikv_model_load(&m, infokv_test::stories_path().c_str()) != IKV_OK) m = nullptr;
  return m;
}

#define REQUIRE_MODEL()                                                                                         \
  ikv_model *const m = shared_model();                                                                          \
  ASSERT_NE(m, nullptr) << "cannot load " << infokv_test::stories_path() << ": " << ikv_last_error_message()

ikv_session *new_session(ikv_model *m) {
  ikv_session_options o = IKV_SESSION_OPTIONS_INIT;
  o.kv_dtype = IKV_KV_F32;
  o.n_threads = 1;
  ikv_session *s = nullptr;
  EXPECT_EQ(ikv_session_create(&s, m, &o), IKV_OK) << ikv_last_error_message();
  return s;
}

ikv_sampler *new_greedy_sampler() {
  ikv_sampler_options so = IKV_SAMPLER_OPTIONS_INIT;
  so.temperature = 0;
  ikv_sampler *sm = nullptr;
  EXPECT_EQ(ikv_sampler_create(&sm, &so), IKV_OK);
  return sm;
}

ikv_config *new_config() {
  ikv_config *c = nullptr;
  const std::string j = R"({"model_path": ")" + infokv_test::stories_path() + R"(", "device": "cpu", "threads": 1})";
  EXPECT_EQ(ikv_config_from_json(&c, j.data(), j.size()), IKV_OK) << ikv_last_error_message();
  return c;
}

// Every call that takes a session, with a stale session handle.
void expect_session_refused(ikv_session *stale, ikv_sampler *live_sampler) {
  int32_t seq = 7;
  int64_t v = 7;
  size_t n = 7;
  const int32_t tok = 1, seq0 = 0;
  float buf[8];
  int32_t toks[4];
  uint8_t bytes[64] = {0};
  EXPECT_EQ(ikv_seq_add(&seq, stale), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(ikv_seq_remove(stale, 0), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(ikv_seq_fork(&seq, stale, 0), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(ikv_seq_truncate(stale, 0, 0), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(ikv_seq_remove_range(stale, 0, 0, 1), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(ikv_seq_length(&v, stale, 0), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(ikv_seq_kept(&v, stale, 0, 0), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(ikv_seq_kv_bytes(&v, stale, 0), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(ikv_decode(stale, 0, &tok, 1), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(ikv_decode_batch(stale, &seq0, &tok, 1), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(ikv_get_logits(buf, 8, &n, stale, 0), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(ikv_kv_stat(&v, stale, IKV_KV_BLOCKS_TOTAL), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(ikv_seq_protect(stale, 0, 0, 1, 0), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(ikv_seq_compress(stale, 0, 0), IKV_ERR_BAD_HANDLE);
  double cost = 7;
  EXPECT_EQ(ikv_seq_pressure_estimate(&v, &cost, stale, 0), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(v, 0);
  EXPECT_EQ(cost, 0);
  int32_t layers = 7, evidence = 7, budget = 7;
  int64_t uniform = 7;
  double loss = 7, max_loss = 7, alpha = 7;
  EXPECT_EQ(ikv_seq_auto_report(&layers, &v, &uniform, &loss, &max_loss, stale, 0), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(layers, 0);
  EXPECT_EQ(loss, 0);
  EXPECT_EQ(ikv_seq_auto_layer(&evidence, &budget, &alpha, &loss, stale, 0, 0), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(evidence, -1);
  EXPECT_EQ(budget, 0);
  EXPECT_EQ(ikv_sample(&seq, live_sampler, stale, 0), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(ikv_generate(toks, 4, &n, stale, 0, &tok, 1, 2, live_sampler, nullptr, nullptr), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(ikv_session_save_file(stale, 0, nullptr, "/nonexistent/never-written.ikvs"), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(ikv_session_save_buffer(bytes, sizeof bytes, &n, stale, 0, nullptr), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(ikv_session_restore_buffer(toks, 4, &n, stale, nullptr, bytes, sizeof bytes), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(ikv_session_restore_file(toks, 4, &n, stale, nullptr, "/nonexistent/x.ikvs"), IKV_ERR_BAD_HANDLE);
}

void expect_sampler_refused(ikv_sampler *stale, ikv_session *live_session) {
  int32_t t = 7;
  int32_t toks[4];
  size_t n = 7;
  const int32_t tok = 1;
  uint8_t bytes[64] = {0};
  EXPECT_EQ(ikv_sample(&t, stale, live_session, 0), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(ikv_generate(toks, 4, &n, live_session, 0, &tok, 1, 2, stale, nullptr, nullptr), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(ikv_session_save_buffer(bytes, sizeof bytes, &n, live_session, 0, stale), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(ikv_session_restore_buffer(toks, 4, &n, live_session, stale, bytes, sizeof bytes), IKV_ERR_BAD_HANDLE);
}

void expect_config_refused(ikv_config *stale, ikv_model *live_model) {
  char buf[16];
  size_t n = 7;
  ikv_model *mo = nullptr;
  ikv_session *so = nullptr;
  ikv_sampler *sa = nullptr;
  EXPECT_EQ(ikv_config_to_json(buf, sizeof buf, &n, stale), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(ikv_config_to_binary(buf, sizeof buf, &n, stale), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(ikv_config_get_model_path(buf, sizeof buf, &n, stale), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(ikv_model_load_with_config(&mo, stale), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(ikv_session_create_with_config(&so, live_model, stale), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(ikv_sampler_create_with_config(&sa, stale), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(mo, nullptr);
  EXPECT_EQ(so, nullptr);
  EXPECT_EQ(sa, nullptr);
}

void expect_model_refused(ikv_model *stale) {
  int64_t v = 7;
  size_t n = 7;
  char buf[16];
  int32_t toks[4];
  const int32_t tok = 1;
  ikv_session *s = nullptr;
  EXPECT_EQ(ikv_model_get_int(&v, stale, IKV_MODEL_N_VOCAB), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(ikv_model_describe(buf, sizeof buf, &n, stale), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(ikv_tokenize(toks, 4, &n, stale, "a", 1, 0), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(ikv_detokenize(buf, sizeof buf, &n, stale, &tok, 1), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(ikv_session_create(&s, stale, nullptr), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(s, nullptr);
}

TEST(CapiHandles, FreedHandlesAreRefusedForeverEvenWhenTheAddressIsReused) {
  REQUIRE_MODEL();
  std::vector<ikv_session *> old_sessions;
  std::vector<ikv_sampler *> old_samplers;
  std::vector<ikv_config *> old_configs;
  std::vector<ikv_model *> old_models;
  // Same-size objects made and freed in turn: the allocator hands the freed memory straight back, which is what
  // let a stale handle pass a registry of addresses.
  for (int i = 0; i < 40; ++i) {
    ikv_session *s = new_session(m);
    ikv_sampler *sm = new_greedy_sampler();
    ikv_config *c = new_config();
    ASSERT_NE(s, nullptr);
    old_sessions.push_back(s);
    old_samplers.push_back(sm);
    old_configs.push_back(c);
    ikv_session_free(s);
    ikv_sampler_free(sm);
    ikv_config_free(c);
    if (i < 4) {
      ikv_model *mo = nullptr;
      ASSERT_EQ(ikv_model_load(&mo, infokv_test::stories_path().c_str()), IKV_OK);
      old_models.push_back(mo);
      ikv_model_free(mo);
    }
  }
  // The live objects made after all of that.
  ikv_session *s = new_session(m);
  ikv_sampler *sm = new_greedy_sampler();
  ikv_config *c = new_config();
  ikv_model *m2 = nullptr;
  ASSERT_EQ(ikv_model_load(&m2, infokv_test::stories_path().c_str()), IKV_OK);
  for (ikv_session *o : old_sessions) EXPECT_NE(o, s);
  for (ikv_sampler *o : old_samplers) EXPECT_NE(o, sm);
  for (ikv_config *o : old_configs) EXPECT_NE(o, c);
  for (ikv_model *o : old_models) EXPECT_NE(o, m2);

  for (ikv_session *o : old_sessions) expect_session_refused(o, sm);
  for (ikv_sampler *o : old_samplers) expect_sampler_refused(o, s);
  for (ikv_config *o : old_configs) expect_config_refused(o, m);
  for (ikv_model *o : old_models) expect_model_refused(o);

  // Double frees do nothing (free functions return void: they must simply leave the live objects alone).
  for (ikv_session *o : old_sessions) ikv_session_free(o);
  for (ikv_sampler *o : old_samplers) ikv_sampler_free(o);
  for (ikv_config *o : old_configs) ikv_config_free(o);
  for (ikv_model *o : old_models) ikv_model_free(o);
  // A handle of another kind is not freed by the wrong free function either.
  ikv_session_free(reinterpret_cast<ikv_session *>(sm));
  ikv_sampler_free(reinterpret_cast<ikv_sampler *>(c));
  ikv_config_free(reinterpret_cast<ikv_config *>(m2));
  ikv_model_free(reinterpret_cast<ikv_model *>(s));

  // The new objects still work.
  const int32_t prompt[3] = {1, 2, 3};
  ASSERT_EQ(ikv_decode(s, 0, prompt, 3), IKV_OK) << ikv_last_error_message();
  int32_t t = -1;
  EXPECT_EQ(ikv_sample(&t, sm, s, 0), IKV_OK) << ikv_last_error_message();
  EXPECT_GE(t, 0);
  int64_t len = 0;
  EXPECT_EQ(ikv_seq_length(&len, s, 0), IKV_OK);
  EXPECT_EQ(len, 3);
  size_t n = 0;
  EXPECT_EQ(ikv_config_to_json(nullptr, 0, &n, c), IKV_ERR_BUFFER_TOO_SMALL);
  EXPECT_GT(n, 0u);
  int64_t vocab = 0;
  EXPECT_EQ(ikv_model_get_int(&vocab, m2, IKV_MODEL_N_VOCAB), IKV_OK);
  EXPECT_GT(vocab, 0);

  ikv_session_free(s);
  ikv_sampler_free(sm);
  ikv_config_free(c);
  ikv_model_free(m2);
  // ... and after their free, they are refused as well, and freeing again is harmless.
  EXPECT_EQ(ikv_seq_length(&len, s, 0), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(ikv_model_get_int(&vocab, m2, IKV_MODEL_N_VOCAB), IKV_ERR_BAD_HANDLE);
  ikv_session_free(s);
  ikv_model_free(m2);
}

TEST(CapiHandles, HandleValuesAreNeverHandedOutTwice) {
  REQUIRE_MODEL();
  std::set<void *> seen;
  for (int i = 0; i < 200; ++i) {
    ikv_sampler *sm = new_greedy_sampler();
    EXPECT_TRUE(seen.insert(sm).second) << "handle value reused at iteration " << i;
    ikv_sampler_free(sm);
  }
}

TEST(CapiBusy, StatusHasItsOwnValueAndText) {
  EXPECT_EQ(IKV_ERR_BUSY, -18);
  EXPECT_STREQ(ikv_status_string(IKV_ERR_BUSY), "busy");
}

struct CallbackRendezvous {
  ikv_session *session = nullptr;
  ikv_sampler *sampler = nullptr;
  int32_t other_decode = 1, other_sample = 1, other_length = 1, own_length = 1;
  bool done = false;
};

int32_t probe_from_another_thread(void *user, int32_t, const char *, size_t) {
  auto *r = static_cast<CallbackRendezvous *>(user);
  if (r->done) return 0;
  r->done = true;
  // This thread is inside ikv_generate: another thread must be turned away, without waiting.
  std::thread other([r] {
    const int32_t tok = 5;
    int32_t t = -1;
    int64_t len = 0;
    r->other_decode = ikv_decode(r->session, 0, &tok, 1);
    r->other_sample = ikv_sample(&t, r->sampler, r->session, 0);
    r->other_length = ikv_seq_length(&len, r->session, 0);
  });
  other.join();
  // The thread inside the call may read the session it is streaming from.
  int64_t len = 0;
  r->own_length = ikv_seq_length(&len, r->session, 0);
  return 0;
}

TEST(CapiBusy, ASecondThreadInsideACallOnTheSameSessionGetsBusy) {
  REQUIRE_MODEL();
  ikv_session *s = new_session(m);
  ikv_sampler *sm = new_greedy_sampler();
  CallbackRendezvous r;
  r.session = s;
  r.sampler = sm;
  const int32_t prompt[3] = {1, 2, 3};
  int32_t out[4];
  size_t n = 0;
  ASSERT_EQ(ikv_generate(out, 4, &n, s, 0, prompt, 3, 4, sm, probe_from_another_thread, &r), IKV_OK)
      << ikv_last_error_message();
  EXPECT_TRUE(r.done);
  EXPECT_EQ(r.other_decode, IKV_ERR_BUSY);
  EXPECT_EQ(r.other_sample, IKV_ERR_BUSY);
  EXPECT_EQ(r.other_length, IKV_ERR_BUSY);
  EXPECT_EQ(r.own_length, IKV_OK);
  // Nothing was changed by the refused calls: the sequence holds the prompt and what was generated.
  int64_t len = 0;
  ASSERT_EQ(ikv_seq_length(&len, s, 0), IKV_OK);
  EXPECT_EQ(len, 3 + static_cast<int64_t>(n));  // generate decodes every token it samples
  // Once the call has returned, any thread may use the session again.
  int32_t st = 1;
  std::thread([&] {
    const int32_t tok = 5;
    st = ikv_decode(s, 0, &tok, 1);
  }).join();
  EXPECT_EQ(st, IKV_OK) << ikv_last_error_message();
  ikv_sampler_free(sm);
  ikv_session_free(s);
}

TEST(CapiBusy, TwoThreadsHammeringOneSessionGetOkOrBusyNeverACrash) {
  REQUIRE_MODEL();
  ikv_session *s = new_session(m);
  ikv_sampler *sm = new_greedy_sampler();
  const int32_t prompt[2] = {1, 2};
  ASSERT_EQ(ikv_decode(s, 0, prompt, 2), IKV_OK);
  std::atomic<int> bad{0}, busy{0}, ok{0};
  auto tally = [&](int32_t st, const char *what) {
    if (st == IKV_OK) ++ok;
    else if (st == IKV_ERR_BUSY) ++busy;
    else {
      ++bad;
      ADD_FAILURE() << what << " returned " << st << ": " << ikv_last_error_message();
    }
  };
  std::thread a([&] {
    for (int i = 0; i < 300; ++i) {
      const int32_t tok = 3 + i % 50;
      const int32_t st = ikv_decode(s, 0, &tok, 1);
      tally(st, "decode");
      if (st == IKV_OK) {
        int32_t t = -1;
        tally(ikv_sample(&t, sm, s, 0), "sample");
      }
      int64_t len = 0;
      const int32_t lst = ikv_seq_length(&len, s, 0);
      tally(lst, "length");
      if (lst == IKV_OK && len > 96) tally(ikv_seq_truncate(s, 0, 16), "truncate");
    }
  });
  std::thread b([&] {
    for (int i = 0; i < 150; ++i) {
      const int32_t tok = 7 + i % 40;
      int32_t out[2];
      size_t n = 0;
      tally(ikv_generate(out, 2, &n, s, 0, &tok, 1, 2, sm, nullptr, nullptr), "generate");
      int64_t v = 0;
      tally(ikv_kv_stat(&v, s, IKV_KV_BLOCKS_USED), "kv_stat");
      int32_t seq = -1;
      const int32_t ast = ikv_seq_fork(&seq, s, 0);
      tally(ast, "fork");
      if (ast == IKV_OK) {
        int32_t rst;
        while ((rst = ikv_seq_remove(s, seq)) == IKV_ERR_BUSY) std::this_thread::yield();
        tally(rst, "remove");
      }
    }
  });
  a.join();
  b.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_GT(ok.load(), 0);
  // Not asserted (timing): how often the threads met.
  std::printf("ok %d, busy %d\n", ok.load(), busy.load());
  ikv_sampler_free(sm);
  ikv_session_free(s);
}

}  // namespace
