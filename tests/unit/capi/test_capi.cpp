// The C ABI's common paths (infokv/infokv.h): versions, status strings and the thread-local last message, NULL
// arguments, bad / freed / foreign / wrong-kind handles, and the buffer-size protocol.
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
