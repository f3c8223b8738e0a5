// Whole-model parity of the CUDA forward path (Session with device "cuda") with the CPU path: logits of a prompt
// and of greedy decode steps on stories260K and on a synthetic model at Llama-3.2-1B shape, plus a mixed batch of
// two sequences. Greedy tokens must agree wherever the CPU's top-1 margin is clear of the tolerance. Skips with
// the probe's reason where no CUDA device is usable.
#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

#include "compress/policy_table.hpp"
#include "backend/device.hpp"
#include "cuda_test.hpp"
#include "model/model.hpp"
#include "session/session.hpp"
#include "util/byte_io.hpp"
#include "snapshot/snapshot.hpp"
#include "util/error.hpp"

#ifndef INFOKV_CLI_PATH
#define INFOKV_CLI_PATH "infokv"
#endif
#ifndef INFOKV_DEFAULT_MODELS_DIR
#define INFOKV_DEFAULT_MODELS_DIR "/work/shared/models"
#endif

using namespace infokv;

namespace {

std::string models_dir() {
  const char *e = std::getenv("INFOKV_MODELS_DIR");
  return e && *e ? e : INFOKV_DEFAULT_MODELS_DIR;
}

struct Diff {
  double rel = 0;     // max |a - b| / std(b)
  int top_a = 0, top_b = 0;
  double margin = 0;  // b's top-1 minus top-2, over std(b)
};

Diff compare(const std::vector<float> &a, const std::vector<float> &b) {
  Diff d;
  double mean = 0, var = 0;
  for (float v : b) mean += v;
  mean /= static_cast<double>(b.size());
  for (float v : b) var += (v - mean) * (v - mean);
  const double sd = std::sqrt(var / static_cast<double>(b.size())) + 1e-12;
  double mx = 0;
  for (size_t i = 0; i < a.size(); ++i) mx = std::max(mx, std::fabs(static_cast<double>(a[i]) - b[i]));
  d.rel = mx / sd;
  d.top_a = static_cast<int>(std::max_element(a.begin(), a.end()) - a.begin());
  d.top_b = static_cast<int>(std::max_element(b.begin(), b.end()) - b.begin());
  std::vector<float> s = b;
  std::partial_sort(s.begin(), s.begin() + 2, s.end(), std::greater<float>());
  d.margin = (s[0] - s[1]) / sd;
  return d;
}

class GpuForward : public infokv_test::CudaTest {
 protected:
  // Prompt + greedy steps on both devices; CPU tokens drive both.
  void run_parity(const std::string &path, int n_prompt, int n_steps, double tol) {
    auto m = Model::load(path);
    SessionOptions co, go;
    co.kv_dtype = go.kv_dtype = KvDtype::f16;
    go.device = "cuda";
    Session cpu_s(m, co), gpu_s(m, go);
    ASSERT_EQ(gpu_s.device_name(), "cuda:0");
    const int32_t seq_c = cpu_s.add_sequence(), seq_g = gpu_s.add_sequence();
    std::mt19937 g(42);
    std::vector<BatchToken> bc, bg;
    for (int i = 0; i < n_prompt; ++i) {
      const int32_t tok = i == 0 ? 1 : static_cast<int32_t>(3 + g() % static_cast<uint32_t>(m->hparams().n_vocab - 3));
      bc.push_back({seq_c, tok, false});
      bg.push_back({seq_g, tok, false});
    }
    cpu_s.decode(bc);
    gpu_s.decode(bg);
    for (int step = 0; step <= n_steps; ++step) {
      const Diff d = compare(gpu_s.logits(seq_g), cpu_s.logits(seq_c));
      std::printf("%s step %d: max|diff|/std %.3e, top-1 gpu %d cpu %d, margin %.3f\n", path.c_str(), step, d.rel, d.top_a,
                  d.top_b, d.margin);
      EXPECT_LT(d.rel, tol) << "step " << step;
      if (d.margin > 4 * tol) {
        EXPECT_EQ(d.top_a, d.top_b) << "step " << step << " (margin " << d.margin << ")";
      }
      if (step == n_steps) break;
      cpu_s.decode({{seq_c, d.top_b, false}});
      gpu_s.decode({{seq_g, d.top_b, false}});
    }
  }
};

}  // namespace

TEST_F(GpuForward, Stories260kMatchesCpu) {
  const std::string p = models_dir() + "/stories260K/stories260K.gguf";
  if (access(p.c_str(), R_OK) != 0) GTEST_SKIP() << "missing " << p;
  run_parity(p, 24, 16, 3e-2);  // f32 checkpoint: the GPU holds it in f16
}

TEST_F(GpuForward, SyntheticLlama32_1bMatchesCpu) {
  const char *td = std::getenv("TMPDIR");
  const std::string out = std::string(td && *td ? td : "/tmp") + "/infokv_gpu_synth_1b_" + std::to_string(getpid()) + ".gguf";
  const std::string cmd = std::string(INFOKV_CLI_PATH) + " synth --preset llama-3.2-1b --dtype f16 --seed 5 --quiet --out " + out;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  run_parity(out, 8, 4, 3e-2);
  std::remove(out.c_str());
}

TEST_F(GpuForward, MixedBatchOfTwoSequencesMatchesCpu) {
  const std::string p = models_dir() + "/stories260K/stories260K.gguf";
  if (access(p.c_str(), R_OK) != 0) GTEST_SKIP() << "missing " << p;
  auto m = Model::load(p);
  SessionOptions co, go;
  go.device = "cuda";
  Session cs(m, co), gs(m, go);
  const int32_t a = cs.add_sequence(), b = cs.add_sequence();
  ASSERT_EQ(gs.add_sequence(), a);
  ASSERT_EQ(gs.add_sequence(), b);
  // interleaved items of two sequences (the scattered-item path) and a flagged middle row
  std::vector<BatchToken> batch = {{a, 1, false}, {b, 1, false}, {a, 50, true}, {b, 60, false}, {a, 70, false}, {b, 80, false}};
  cs.decode(batch);
  gs.decode(batch);
  for (int32_t s : {a, b}) EXPECT_LT(compare(gs.logits(s), cs.logits(s)).rel, 3e-2) << "seq " << s;
  EXPECT_LT(compare(gs.batch_logits(), cs.batch_logits()).rel, 3e-2);
}

// Compression on the device (slot channels, window scoring, slot moves), forks (copy-on-write on the device) and
// snapshots between devices, against the same steps on the CPU. Scores computed in f16 on the GPU may break near
// ties differently, so kept sets must overlap (Jaccard >= 0.9 per layer), and logits must agree where they are equal.
class GpuCompression : public GpuForward, public ::testing::WithParamInterface<PolicyKind> {};

TEST_P(GpuCompression, CompressForkAndSnapshotMatchTheCpu) {
  const std::string p = models_dir() + "/stories260K/stories260K.gguf";
  if (access(p.c_str(), R_OK) != 0) GTEST_SKIP() << "missing " << p;
  auto m = Model::load(p);
  SessionOptions co;
  co.kv_dtype = KvDtype::f16;
  co.compression.policy = GetParam();
  co.compression.budget_fraction = 0.25;
  co.compression.interval = 16;
  SessionOptions go = co;
  go.device = "cuda";
  Session cs(m, co), gs(m, go);
  const int32_t s = cs.add_sequence();
  ASSERT_EQ(gs.add_sequence(), s);
  std::mt19937 g(7);
  std::vector<BatchToken> prompt;
  for (int i = 0; i < 200; ++i) prompt.push_back({s, i == 0 ? 1 : static_cast<int32_t>(3 + g() % 500), false});
  cs.decode(prompt);
  gs.decode(prompt);
  auto check = [&](int32_t seq, const char *what) {
    const SeqCache &a = cs.kv().seq(seq), &b = gs.kv().seq(seq);
    bool same = true;
    for (size_t l = 0; l < a.layers.size(); ++l) {
      const auto &pa = a.layers[l].pos, &pb = b.layers[l].pos;
      std::vector<int32_t> inter;
      std::set_intersection(pa.begin(), pa.end(), pb.begin(), pb.end(), std::back_inserter(inter));
      const double j = static_cast<double>(inter.size()) / static_cast<double>(pa.size() + pb.size() - inter.size());
      EXPECT_GE(j, 0.9) << what << " layer " << l;
      same = same && pa == pb;
    }
    const Diff d = compare(gs.logits(seq), cs.logits(seq));
    std::printf("%s %s: kept sets %s, max|diff|/std %.3e\n", policy_name(GetParam()), what, same ? "equal" : "differ", d.rel);
    if (same) {
      EXPECT_LT(d.rel, 3e-2) << what;
    }
    gs.kv().check_invariants();
  };
  check(s, "after prefill");
  for (int i = 0; i < 40; ++i) {
    const int32_t tok = static_cast<int32_t>(3 + g() % 500);
    cs.decode({{s, tok, false}});
    gs.decode({{s, tok, false}});
  }
  check(s, "after 40 steps");
  const int32_t f = cs.fork_sequence(s);
  ASSERT_EQ(gs.fork_sequence(s), f);
  for (int i = 0; i < 20; ++i) {
    const int32_t x = static_cast<int32_t>(3 + g() % 500), y = static_cast<int32_t>(3 + g() % 500);
    cs.decode({{s, x, false}, {f, y, false}});
    gs.decode({{s, x, false}, {f, y, false}});
  }
  check(s, "original after fork");
  check(f, "fork");
  // GPU snapshot restored on the CPU continues like the GPU session.
  snapshot::VectorSink sink;
  snapshot::save(gs, f, nullptr, sink);
  Session back(m, co);
  snapshot::MemorySource src(sink.bytes().data(), sink.bytes().size());
  const int32_t r = snapshot::restore(back, nullptr, src).at(0);
  EXPECT_LT(compare(back.logits(r), gs.logits(f)).rel, 1e-6) << "restored logits are the saved ones";
  back.decode({{r, 42, false}});
  gs.decode({{f, 42, false}});
  EXPECT_LT(compare(gs.logits(f), back.logits(r)).rel, 3e-2) << "GPU-saved snapshot continues on the CPU";
}

INSTANTIATE_TEST_SUITE_P(Policies, GpuCompression,
                         ::testing::Values(PolicyKind::infokv, PolicyKind::snapkv, PolicyKind::h2o, PolicyKind::streaming,
                                           PolicyKind::tova, PolicyKind::pyramidkv),
                         [](const ::testing::TestParamInfo<PolicyKind> &i) { return std::string(policy_name(i.param)); });
