// infokv synth writes GGUF files that infokv loads and runs, at the preset's real shapes, deterministically.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <unistd.h>

#include "model/model.hpp"
#include "session/session.hpp"

#ifndef INFOKV_CLI_PATH
#define INFOKV_CLI_PATH "infokv"
#endif

using namespace infokv;

namespace {

std::string tmp_path(const std::string &name) {
  const char *d = std::getenv("TMPDIR");
  return std::string(d && *d ? d : "/tmp") + "/infokv_test_" + std::to_string(::getpid()) + "_" + name;
}

int run(const std::string &args) { return std::system((std::string(INFOKV_CLI_PATH) + " " + args + " >/dev/null 2>&1").c_str()); }

std::string slurp(const std::string &p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

}  // namespace

TEST(Synth, Stories260kPresetLoadsWithItsShapesAndRuns) {
  for (const char *dt : {"f16", "bf16", "f32"}) {
    const std::string out = tmp_path(std::string("s260_") + dt + ".gguf");
    ASSERT_EQ(run("synth --preset stories260k --dtype " + std::string(dt) + " --seed 3 --out " + out), 0) << dt;
    auto m = Model::load(out);
    const HParams &hp = m->hparams();
    EXPECT_EQ(hp.n_embd, 64);
    EXPECT_EQ(hp.n_layer, 5);
    EXPECT_EQ(hp.n_head, 8);
    EXPECT_EQ(hp.n_head_kv, 4);
    EXPECT_EQ(hp.n_ff, 172);
    EXPECT_EQ(hp.n_vocab, 512);
    EXPECT_EQ(m->tokenizer().n_vocab(), 512);
    EXPECT_EQ(m->n_params(), 292800u);  // the real stories260K's count
    SessionOptions so;
    so.n_threads = 1;
    Session s(m, so);
    std::vector<int32_t> ids = m->tokenizer().encode("hello world", true);
    ASSERT_FALSE(ids.empty());
    std::remove(out.c_str());
  }
}

TEST(Synth, SameSeedSameBytesOtherSeedOtherBytes) {
  const std::string a = tmp_path("a.gguf"), b = tmp_path("b.gguf"), c = tmp_path("c.gguf");
  ASSERT_EQ(run("synth --preset stories260k --seed 5 --out " + a), 0);
  ASSERT_EQ(run("synth --preset stories260k --seed 5 --out " + b), 0);
  ASSERT_EQ(run("synth --preset stories260k --seed 6 --out " + c), 0);
  EXPECT_EQ(slurp(a), slurp(b));
  EXPECT_NE(slurp(a), slurp(c));
  for (const auto &p : {a, b, c}) std::remove(p.c_str());
}

TEST(Synth, RejectsUnknownPresetAndDtype) {
  EXPECT_NE(run("synth --preset llama-9000 --out " + tmp_path("x.gguf")), 0);
  EXPECT_NE(run("synth --preset stories260k --dtype q4 --out " + tmp_path("x.gguf")), 0);
  EXPECT_NE(run("synth --preset stories260k"), 0);  // --out is required
}
