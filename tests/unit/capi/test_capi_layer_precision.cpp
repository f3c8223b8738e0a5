// Per-layer precision through the C ABI: ikv_session_options.layer_precision (revision 5) and ikv_seq_layer_dtype.
#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <vector>

#include "infokv/infokv.h"
#include "support/capi.hpp"
#include "support/paths.hpp"
#include "support/util.hpp"

using namespace infokv_capi_test;

namespace {

int32_t layer_dtype(ikv_session *s, int32_t seq, int32_t layer) {
  int32_t dt = -7;
  EXPECT_EQ(ikv_seq_layer_dtype(&dt, s, seq, layer), IKV_OK) << ikv_last_error_message();
  return dt;
}

}  // namespace

TEST(CapiLayerPrecision, LayerDtypeIsTheSessionsAndBadArgumentsAreRefused) {
  REQUIRE_MODEL();
  ikv_session_options o = f32_options();
  SessionGuard g;
  ASSERT_EQ(ikv_session_create(&g.s, m, &o), IKV_OK) << ikv_last_error_message();
  const int32_t toks[] = {1, 5, 9, 13};
  ASSERT_EQ(ikv_decode(g.s, 0, toks, 4), IKV_OK);
  const auto n_layer = static_cast<int32_t>(layers_of(m));
  for (int32_t l = 0; l < n_layer; ++l) EXPECT_EQ(layer_dtype(g.s, 0, l), IKV_KV_F32);
  int32_t dt = 7;
  for (int32_t bad : {-1, n_layer, 1 << 30}) {
    EXPECT_EQ(ikv_seq_layer_dtype(&dt, g.s, 0, bad), IKV_ERR_OUT_OF_RANGE) << bad;
    EXPECT_EQ(dt, 0);
    dt = 7;
  }
  EXPECT_EQ(ikv_seq_layer_dtype(&dt, g.s, 99, 0), IKV_ERR_NOT_FOUND);
  EXPECT_EQ(dt, 0);
  EXPECT_EQ(ikv_seq_layer_dtype(nullptr, g.s, 0, 0), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ikv_seq_layer_dtype(&dt, nullptr, 0, 0), IKV_ERR_BAD_HANDLE);
  // The option: AUTO or OFF, nothing else.
  for (int32_t bad : {-1, 2, 1 << 20}) {
    ikv_session_options x = f32_options();
    x.layer_precision = bad;
    SCOPED_TRACE(bad);
    expect_refused(m, &x, "layer_precision");
  }
  ikv_session_options off = f32_options();
  off.layer_precision = IKV_LAYER_PRECISION_OFF;
  SessionGuard g2;
  EXPECT_EQ(ikv_session_create(&g2.s, m, &off), IKV_OK) << ikv_last_error_message();
}

// A caller built against the version-4 header: its struct ends before layer_precision, which takes its default; the
// same size claiming version 5 is refused.
TEST(CapiLayerPrecision, VersionFourSizedSessionOptionsAreAccepted) {
  REQUIRE_MODEL();
  const size_t v4_size = offsetof(ikv_session_options, max_loss) + sizeof(double);
  ikv_session_options full = f32_options();
  const HeapOptions v4 = older_options(full, v4_size, 4);  // a read of layer_precision would be out of bounds
  ASSERT_NE(v4, nullptr);
  SessionGuard g;
  EXPECT_EQ(ikv_session_create(&g.s, m, v4.get()), IKV_OK) << ikv_last_error_message();
  v4->version = 5;
  expect_refused(m, v4.get(), "version 5");
  // a full-size struct that says version 4: whatever layer_precision holds is ignored
  ikv_session_options v4_full = full;
  v4_full.version = 4;
  v4_full.layer_precision = 99;
  SessionGuard g2;
  EXPECT_EQ(ikv_session_create(&g2.s, m, &v4_full), IKV_OK) << ikv_last_error_message();
}

// SmolLM2 (heads of 64): auto under a byte budget, asked for the next tokens, holds some layers at q8_0 by default
// and none with IKV_LAYER_PRECISION_OFF; the rest stay f16.
TEST(CapiLayerPrecision, AutoHoldsSomeLayersAtQ8AndOffHoldsNone) {
  ikv_model *sm = nullptr;
  ASSERT_EQ(ikv_model_load(&sm, infokv_test::smollm2_path().c_str()), IKV_OK)
      << "SmolLM2 GGUF " << infokv_test::smollm2_path() << ": " << ikv_last_error_message()
      << " (run packaging/fetch_models.sh or set INFOKV_SMOLLM2)";
  const std::string text = infokv_test::read_text(infokv_test::corpora_dir() + "/emma.txt").substr(300000, 4000);
  std::vector<int32_t> toks(4096);
  size_t n = 0;
  ASSERT_EQ(ikv_tokenize(toks.data(), toks.size(), &n, sm, text.data(), text.size(), 1), IKV_OK);
  ASSERT_GE(n, 480u);
  toks.resize(480);
  const auto n_layer = static_cast<int32_t>(layers_of(sm));
  for (int32_t mode : {IKV_LAYER_PRECISION_AUTO, IKV_LAYER_PRECISION_OFF}) {
    SCOPED_TRACE(mode);
    ikv_session_options o = IKV_SESSION_OPTIONS_INIT;
    o.n_threads = 1;
    o.policy = IKV_POLICY_AUTO;
    o.budget_fraction = 1.0;
    o.compress_after_prefill = 0;
    o.layer_precision = mode;
    SessionGuard g;
    ASSERT_EQ(ikv_session_create(&g.s, sm, &o), IKV_OK) << ikv_last_error_message();
    ASSERT_EQ(ikv_decode(g.s, 0, toks.data(), toks.size()), IKV_OK) << ikv_last_error_message();
    ASSERT_EQ(ikv_seq_compress_for(g.s, 0, 60, IKV_QUESTION_NEXT), IKV_OK) << ikv_last_error_message();
    int q8 = 0;
    for (int32_t l = 0; l < n_layer; ++l) {
      const int32_t dt = layer_dtype(g.s, 0, l);
      EXPECT_TRUE(dt == IKV_KV_F16 || dt == IKV_KV_Q8_0) << dt;
      q8 += dt == IKV_KV_Q8_0 ? 1 : 0;
    }
    if (mode == IKV_LAYER_PRECISION_AUTO) EXPECT_GT(q8, 0);
    else EXPECT_EQ(q8, 0);
  }
  ikv_model_free(sm);
}
