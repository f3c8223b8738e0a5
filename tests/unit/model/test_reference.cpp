// stories260K against reference.json (an independent float64 forward pass): the 512 logits after BOS, the top-5 at
// the first 8 greedy positions, the exact 40-token greedy continuation of "Once upon a time" and the sample-story
// perplexity — through the C++ core and through the C ABI, with an exact (f32) KV cache and within stated
// tolerances for f16 and bf16 KV caches.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "infokv/infokv.h"
#include "support/json_mini.hpp"
#include "model/model.hpp"
#include "sampling/sampler.hpp"
#include "session/generate.hpp"
#include "session/session.hpp"
#include "support/util.hpp"
#include "support/stories_model.hpp"

using infokv::KvDtype;
using infokv_test::json::Value;

namespace {

// The reference rounds logits to 6 decimals (5 in top5_first8) and mean_nll to 5, ppl to 3: each bound below is the
// issue's float32 tolerance plus that rounding.
constexpr double kLogitTol = 1e-4;
constexpr double kTop5Tol = 1e-4 + 5e-6;
constexpr double kNllTol = 1e-4 + 5e-6;
constexpr double kPplTol = 5e-4 + 1e-4;

const Value *reference() {
  static std::unique_ptr<Value> ref;
  if (!ref) {
    const std::string text = infokv_test::read_text(infokv_test::reference_json_path());
    if (text.empty()) return nullptr;
    ref = std::make_unique<Value>(infokv_test::json::parse(text));
  }
  return ref.get();
}

using infokv_test::stories_model;

#define REQUIRE_REFERENCE()                                                                                        \
  ASSERT_NE(reference(), nullptr) << infokv_test::reference_json_path()                                           \
                                  << " is missing (set INFOKV_MODELS_DIR to the folder holding stories260K/)";   \
  const Value &ref = *reference()

std::string sample_story() {
  const std::string t = infokv_test::read_text(infokv_test::corpora_dir() + "/sample_story.txt");
  if (t.empty()) throw std::runtime_error("sample_story.txt is missing under " + infokv_test::corpora_dir());
  return t;
}

// Indices of the 5 largest logits, largest first (ties: lower id first).
std::vector<int32_t> top5(const std::vector<float> &lg) {
  std::vector<int32_t> idx(lg.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + 5, idx.end(), [&](int32_t a, int32_t b) {
    return lg[static_cast<size_t>(a)] > lg[static_cast<size_t>(b)] || (lg[static_cast<size_t>(a)] == lg[static_cast<size_t>(b)] && a < b);
  });
  idx.resize(5);
  return idx;
}

double nll(const std::vector<float> &lg, int32_t target) {
  double mx = *std::max_element(lg.begin(), lg.end());
  double sum = 0;
  for (float x : lg) sum += std::exp(static_cast<double>(x) - mx);
  return mx + std::log(sum) - static_cast<double>(lg[static_cast<size_t>(target)]);
}

// How far one configuration is from the reference.
struct Deviation {
  double bos_logits = 0;        // max |logit - ref| over the 512 logits after BOS
  double top5_values = 0;       // max |value - ref| over the 8 x 5 top logits
  bool top5_ids_match = true;   // ids and order of the top-5 at each of the 8 positions
  bool greedy_path_match = true;
  std::vector<int32_t> generated;  // greedy continuation of BOS + "Once upon a time" (40 tokens)
  int64_t ppl_tokens = 0;
  double mean_nll = 0;
  double ppl = 0;
};

void compare_top5(const Value &ref, size_t pos, const std::vector<float> &lg, Deviation &d) {
  const std::vector<int32_t> ids = top5(lg);
  for (size_t k = 0; k < 5; ++k) {
    const int32_t want = static_cast<int32_t>(ref["top5_first8"][pos][k][0].integer());
    const double val = ref["top5_first8"][pos][k][1].number();
    if (ids[k] != want) d.top5_ids_match = false;
    d.top5_values = std::max(d.top5_values, std::fabs(static_cast<double>(lg[static_cast<size_t>(want)]) - val));
  }
}

// One step of the greedy walk from BOS: the logits after BOS (pos 0) and the top-5 against the reference; returns
// the greedy next token and records whether it stays on the reference's path.
int32_t greedy_step(const Value &ref, size_t pos, const std::vector<float> &lg, Deviation &d) {
  if (pos == 0) {
    const std::vector<double> want = ref["logits_pos0_after_bos"].numbers();
    for (size_t v = 0; v < want.size(); ++v) d.bos_logits = std::max(d.bos_logits, std::fabs(lg[v] - want[v]));
  }
  compare_top5(ref, pos, lg, d);
  const auto next = static_cast<int32_t>(std::max_element(lg.begin(), lg.end()) - lg.begin());
  if (next != ref["top5_first8"][pos][0][0].integer()) d.greedy_path_match = false;
  return next;
}

// ---- through the C++ core ----
Deviation run_core(const Value &ref, KvDtype dtype) {
  Deviation d;
  auto model = stories_model();
  const infokv::Tokenizer &tok = model->tokenizer();
  infokv::SessionOptions o;
  o.kv_dtype = dtype;
  o.n_threads = 2;
  {
    // Greedy from BOS, one token per decode (the decode path): logits after BOS and the top-5 at 8 positions.
    infokv::Session s(model, o);
    const int32_t seq = s.add_sequence();
    int32_t next = tok.bos();
    for (size_t pos = 0; pos < 8; ++pos) {
      s.decode({{seq, next, false}});
      next = greedy_step(ref, pos, s.logits(seq), d);
    }
  }
  {
    // The greedy continuation: the prompt as one batch (the prefill path), then the generation loop.
    infokv::Session s(model, o);
    const int32_t seq = s.add_sequence();
    infokv::SamplerParams sp;
    sp.temperature = 0;
    infokv::Sampler sampler(sp);
    const std::vector<int32_t> prompt = tok.encode("Once upon a time", true);
    infokv::GenerateResult r = infokv::generate(s, seq, prompt, 40, sampler, nullptr);
    d.generated = r.tokens;
  }
  {
    const std::vector<int32_t> body = tok.encode(sample_story(), false);
    std::vector<int32_t> seq = {tok.bos()};
    seq.insert(seq.end(), body.begin(), body.end());
    auto lg = infokv_test::logits_per_position(model, seq, dtype);
    double sum = 0;
    for (size_t i = 0; i + 1 < seq.size(); ++i) sum += nll(lg[i], seq[i + 1]);
    d.ppl_tokens = static_cast<int64_t>(body.size());
    d.mean_nll = sum / static_cast<double>(body.size());
    d.ppl = std::exp(d.mean_nll);
  }
  return d;
}

// ---- through the C ABI ----
#define IKV_OK_OR_THROW(call)                                                                                  \
  do {                                                                                                         \
    int32_t st_ = (call);                                                                                      \
    if (st_ != IKV_OK)                                                                                         \
      throw std::runtime_error(std::string(#call) + ": " + ikv_status_string(st_) + ": " + ikv_last_error_message()); \
  } while (0)

struct CModel {
  ikv_model *m = nullptr;
  CModel() { IKV_OK_OR_THROW(ikv_model_load(&m, infokv_test::stories_path().c_str())); }
  ~CModel() { ikv_model_free(m); }
};
struct CSession {
  ikv_session *s = nullptr;
  CSession(ikv_model *m, int32_t kv_dtype) {
    ikv_session_options o = IKV_SESSION_OPTIONS_INIT;
    o.kv_dtype = kv_dtype;
    o.n_threads = 2;
    IKV_OK_OR_THROW(ikv_session_create(&s, m, &o));
  }
  ~CSession() { ikv_session_free(s); }
};

std::vector<float> c_logits(ikv_session *s, int32_t seq) {
  size_t n = 0;
  int32_t st = ikv_get_logits(nullptr, 0, &n, s, seq);
  if (st != IKV_ERR_BUFFER_TOO_SMALL || n == 0) throw std::runtime_error("logits size query failed");
  std::vector<float> lg(n);
  IKV_OK_OR_THROW(ikv_get_logits(lg.data(), lg.size(), &n, s, seq));
  return lg;
}

std::vector<int32_t> c_tokenize(ikv_model *m, const std::string &text, int32_t add_bos) {
  size_t n = 0;
  int32_t st = ikv_tokenize(nullptr, 0, &n, m, text.data(), text.size(), add_bos);
  if (st != IKV_OK && st != IKV_ERR_BUFFER_TOO_SMALL) throw std::runtime_error("tokenize size query failed");
  std::vector<int32_t> ids(n);
  IKV_OK_OR_THROW(ikv_tokenize(ids.data(), ids.size(), &n, m, text.data(), text.size(), add_bos));
  return ids;
}

Deviation run_capi(const Value &ref, int32_t kv_dtype) {
  Deviation d;
  CModel cm;
  int64_t bos = -1;
  IKV_OK_OR_THROW(ikv_model_get_int(&bos, cm.m, IKV_MODEL_BOS));
  {
    CSession cs(cm.m, kv_dtype);
    int32_t next = static_cast<int32_t>(bos);
    for (size_t pos = 0; pos < 8; ++pos) {
      IKV_OK_OR_THROW(ikv_decode(cs.s, 0, &next, 1));
      next = greedy_step(ref, pos, c_logits(cs.s, 0), d);
    }
  }
  {
    CSession cs(cm.m, kv_dtype);
    ikv_sampler_options so = IKV_SAMPLER_OPTIONS_INIT;
    so.temperature = 0;
    ikv_sampler *sampler = nullptr;
    IKV_OK_OR_THROW(ikv_sampler_create(&sampler, &so));
    const std::vector<int32_t> prompt = c_tokenize(cm.m, "Once upon a time", 1);
    std::vector<int32_t> out(64);
    size_t n = 0;
    int32_t st = ikv_generate(out.data(), out.size(), &n, cs.s, 0, prompt.data(), prompt.size(), 40, sampler, nullptr, nullptr);
    ikv_sampler_free(sampler);
    IKV_OK_OR_THROW(st);
    d.generated.assign(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(std::min(n, out.size())));
  }
  {
    CSession cs(cm.m, kv_dtype);
    const std::vector<int32_t> body = c_tokenize(cm.m, sample_story(), 0);
    int32_t prev = static_cast<int32_t>(bos);
    double sum = 0;
    for (int32_t t : body) {
      IKV_OK_OR_THROW(ikv_decode(cs.s, 0, &prev, 1));
      sum += nll(c_logits(cs.s, 0), t);
      prev = t;
    }
    d.ppl_tokens = static_cast<int64_t>(body.size());
    d.mean_nll = sum / static_cast<double>(body.size());
    d.ppl = std::exp(d.mean_nll);
  }
  return d;
}

void print(const char *what, const Deviation &d, const Value &ref) {
  std::printf("%-12s bos logits %.2e, top5 values %.2e, mean_nll %.6f (ref %.5f, diff %.2e), ppl %.5f\n", what,
              d.bos_logits, d.top5_values, d.mean_nll, ref["ppl_sample_story"]["mean_nll"].number(),
              std::fabs(d.mean_nll - ref["ppl_sample_story"]["mean_nll"].number()), d.ppl);
}

void expect_exact(const Deviation &d, const Value &ref) {
  EXPECT_LE(d.bos_logits, kLogitTol);
  EXPECT_LE(d.top5_values, kTop5Tol);
  EXPECT_TRUE(d.top5_ids_match);
  EXPECT_TRUE(d.greedy_path_match);
  EXPECT_EQ(d.generated, ref["prompt_once_upon_a_time"]["generated_ids_after_prompt"].ints());
  EXPECT_EQ(d.ppl_tokens, ref["ppl_sample_story"]["n_tokens"].integer());
  EXPECT_NEAR(d.mean_nll, ref["ppl_sample_story"]["mean_nll"].number(), kNllTol);
  EXPECT_NEAR(d.ppl, ref["ppl_sample_story"]["ppl"].number(), kPplTol);
}

// Tolerances for a 16-bit KV cache. K and V are rounded once when cached (relative error up to 2^-11 for f16,
// 2^-8 for bf16). Measured on this model (core and C ABI agree to the digits shown; the one-token decode path and
// the batched prefill path round at different points, so mean_nll differs slightly between them):
//   f16  KV: logits after BOS 1.3e-3, top-5 values 3.7e-3, mean_nll 2.3e-5
//   bf16 KV: logits after BOS 8.5e-3, top-5 values 4.4e-2, mean_nll 6.6e-4
// The bounds are about 3x those (4x for f16's mean_nll, which is near the reference's own rounding); greedy choices
// must not change (the top-2 margins on these paths are above 1).
struct KvTol { double logits, top5, nll; };
constexpr KvTol kF16Kv{5e-3, 1.5e-2, 1e-4};
constexpr KvTol kBf16Kv{3e-2, 1.5e-1, 2e-3};

void expect_within(const Deviation &d, const Value &ref, const KvTol &t) {
  EXPECT_LE(d.bos_logits, t.logits);
  EXPECT_LE(d.top5_values, t.top5);
  EXPECT_TRUE(d.top5_ids_match);
  EXPECT_TRUE(d.greedy_path_match);
  EXPECT_EQ(d.generated, ref["prompt_once_upon_a_time"]["generated_ids_after_prompt"].ints());
  EXPECT_EQ(d.ppl_tokens, ref["ppl_sample_story"]["n_tokens"].integer());
  EXPECT_NEAR(d.mean_nll, ref["ppl_sample_story"]["mean_nll"].number(), t.nll);
}

}  // namespace

TEST(Reference, JsonReaderReadsTheFixture) {
  REQUIRE_REFERENCE();
  EXPECT_EQ(ref["logits_pos0_after_bos"].size(), 512u);
  EXPECT_EQ(ref["top5_first8"].size(), 8u);
  EXPECT_EQ(ref["prompt_once_upon_a_time"]["generated_ids_after_prompt"].size(), 40u);
  const Value v = infokv_test::json::parse(R"({"a":[1,-2.5e3,true,null,"\u00e9\ud83d\ude00\n"],"b":{}})");
  EXPECT_EQ(v["a"][1].number(), -2500.0);
  EXPECT_EQ(v["a"][4].string(), "\xC3\xA9\xF0\x9F\x98\x80\n");
  EXPECT_THROW(infokv_test::json::parse("[1,"), std::runtime_error);
  EXPECT_THROW(infokv_test::json::parse("{} x"), std::runtime_error);
}

TEST(Reference, PromptTokenisationAndText) {
  REQUIRE_REFERENCE();
  const infokv::Tokenizer &tok = stories_model()->tokenizer();
  const Value &p = ref["prompt_once_upon_a_time"];
  std::vector<int32_t> want = {1};
  for (int32_t id : p["prompt_token_ids_without_bos"].ints()) want.push_back(id);
  EXPECT_EQ(tok.encode("Once upon a time", true), want);
  std::vector<int32_t> all(want.begin() + 1, want.end());
  for (int32_t id : p["generated_ids_after_prompt"].ints()) all.push_back(id);
  std::string text = tok.decode(all);
  if (!text.empty() && text[0] == ' ') text.erase(0, 1);  // the SentencePiece space prefix
  EXPECT_EQ(text, p["full_text"].string());
}

TEST(Reference, CoreWithF32KvMatchesExactly) {
  REQUIRE_REFERENCE();
  Deviation d = run_core(ref, KvDtype::f32);
  print("core f32", d, ref);
  expect_exact(d, ref);
}

TEST(Reference, CapiWithF32KvMatchesExactly) {
  REQUIRE_REFERENCE();
  Deviation d = run_capi(ref, IKV_KV_F32);
  print("capi f32", d, ref);
  expect_exact(d, ref);
}

TEST(Reference, PrefillBatchAndOneByOneDecodeAgree) {
  REQUIRE_REFERENCE();
  auto model = stories_model();
  std::vector<int32_t> seq = {1};
  for (int32_t id : ref["prompt_once_upon_a_time"]["generated_ids_after_prompt"].ints()) seq.push_back(id);
  auto batch = infokv_test::logits_per_position(model, seq, KvDtype::f32);
  infokv::SessionOptions o;
  o.kv_dtype = KvDtype::f32;
  infokv::Session s(model, o);
  const int32_t q = s.add_sequence();
  double worst = 0;
  for (size_t i = 0; i < seq.size(); ++i) {
    s.decode({{q, seq[i], false}});
    const std::vector<float> &lg = s.logits(q);
    for (size_t v = 0; v < lg.size(); ++v) worst = std::max(worst, std::fabs(static_cast<double>(lg[v]) - batch[i][v]));
  }
  EXPECT_LE(worst, 1e-4);
}

TEST(Reference, CoreWithF16KvStaysWithinTolerance) {
  REQUIRE_REFERENCE();
  Deviation d = run_core(ref, KvDtype::f16);
  print("core f16", d, ref);
  expect_within(d, ref, kF16Kv);
}

TEST(Reference, CoreWithBf16KvStaysWithinTolerance) {
  REQUIRE_REFERENCE();
  Deviation d = run_core(ref, KvDtype::bf16);
  print("core bf16", d, ref);
  expect_within(d, ref, kBf16Kv);
}

TEST(Reference, CapiWithF16AndBf16KvStaysWithinTolerance) {
  REQUIRE_REFERENCE();
  Deviation d = run_capi(ref, IKV_KV_F16);
  print("capi f16", d, ref);
  expect_within(d, ref, kF16Kv);
  d = run_capi(ref, IKV_KV_BF16);
  print("capi bf16", d, ref);
  expect_within(d, ref, kBf16Kv);
}
