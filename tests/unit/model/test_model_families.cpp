// The Llama family people run (Llama 3.x with its RoPE scaling, Qwen2 with attention biases, TinyLlama, Mistral)
// against Hugging Face transformers: tests/data/transformers_refs.json holds transformers' logits for checkpoints that
// `infokv synth` rebuilds here bit for bit (packaging/tools/transformers_refs.py made them). Each case loads the
// checkpoint as safetensors and, where synth can write the same model as a GGUF (the real presets), as GGUF too:
// the qwen2 GGUF keeps q/k rows in rotate-half order and the Llama 3.2 GGUF carries its scaling as rope_freqs.weight,
// as llama.cpp's converter writes them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <unistd.h>
#include <vector>

#include "gguf/gguf.hpp"
#include "support/gguf_builder.hpp"
#include "support/json_mini.hpp"
#include "model/model.hpp"
#include "model/rope.hpp"
#include "session/session.hpp"
#include "util/error.hpp"
#include "support/paths.hpp"
#include "support/util.hpp"

namespace fs = std::filesystem;
namespace json = infokv_test::json;
using infokv_test::GgufBuilder;

namespace {

const json::Value &refs() {
  static const json::Value v = json::parse(infokv_test::read_text(infokv_test::test_data_dir() + "/transformers_refs.json"));
  return v;
}

const json::Value &ref_case(const std::string &name) {
  for (const json::Value &c : refs()["cases"].arr)
    if (c["name"].str == name) return c;
  throw std::runtime_error("no reference case " + name);
}

std::string synth(const json::Value &c, const std::string &format, const fs::path &out) {
  const std::string cmd = std::string(INFOKV_CLI_PATH) + " synth --quiet --preset " + c["preset"].str + " --layers " +
                          std::to_string(static_cast<int>(c["layers"].num)) + " --dtype " + c["dtype"].str + " --seed " +
                          std::to_string(static_cast<long long>(c["seed"].num)) + " --format " + format + " --out " + out.string();
  const infokv_test::CommandOutput r = infokv_test::run_command(cmd);
  EXPECT_EQ(r.status, 0) << cmd << "\n" << r.out;
  if (format == "safetensors" && c["config_json"].kind == json::Value::Kind::string)
    std::ofstream(out / "config.json") << c["config_json"].str;
  return out.string();
}

// infokv's logits at the probed positions, compared with transformers': every top-16 and fixed-id logit within
// 2e-3 of the logits' spread (f32 arithmetic on both sides over the same 16-bit or f32 weights; what is left is
// summation order), and the same argmax.
void expect_matches_transformers(const std::string &path, const json::Value &c) {
  auto model = infokv::Model::load(path);
  std::vector<int32_t> ids;
  for (const json::Value &v : c["ids"].arr) ids.push_back(static_cast<int32_t>(v.num));
  infokv::SessionOptions o;
  o.kv_dtype = infokv::KvDtype::f32;
  o.n_threads = 2;
  o.kv_pool_bytes = int64_t{256} << 20;  // the patched configs declare a 128-token context; the pool is sized from it
  // One forward chunk, as transformers' one forward call: dynamic NTK scaling takes its frequencies from the longest
  // position of the chunk.
  o.ubatch = static_cast<int32_t>(ids.size());
  infokv::Session s(model, o);
  const int32_t seq = s.add_sequence();
  std::vector<infokv::BatchToken> batch;
  for (int32_t t : ids) batch.push_back({seq, t, true});
  s.decode(batch);
  const std::vector<float> &all = s.batch_logits();
  const size_t V = static_cast<size_t>(model->hparams().n_vocab);
  for (const json::Value &p : c["probes"].arr) {
    const size_t pos = static_cast<size_t>(p["position"].num);
    const float *row = all.data() + pos * V;
    const double tol = 2e-3 * p["std"].num;
    double worst = 0;
    auto check = [&](const json::Value &idv, const json::Value &want) {
      const size_t id = static_cast<size_t>(idv.num);
      worst = std::max(worst, std::fabs(static_cast<double>(row[id]) - want.num));
    };
    for (size_t i = 0; i < p["top_ids"].arr.size(); ++i) check(p["top_ids"][i], p["top_logits"][i]);
    for (size_t i = 0; i < c["fixed_ids"].arr.size(); ++i) check(c["fixed_ids"][i], p["fixed_logits"][i]);
    EXPECT_LE(worst, tol) << path << " position " << pos << " (" << c["name"].str << ")";
    const size_t argmax = static_cast<size_t>(std::max_element(row, row + V) - row);
    EXPECT_EQ(argmax, static_cast<size_t>(p["top_ids"][0].num)) << path << " position " << pos;
  }
}

class Families : public ::testing::TestWithParam<const char *> {
 protected:
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  // One directory per test, removed whole: a parameterised test's name holds a '/' ("Name/case"), which as a path
  // would make a parent directory that removing the leaf leaves behind.
  static fs::path temp_dir() {
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '_');
    return fs::temp_directory_path() / ("infokv_families_" + std::to_string(::getpid()) + "_" + name);
  }
  fs::path dir_ = temp_dir();
};

TEST_P(Families, LogitsMatchTransformersAsSafetensorsAndAsGguf) {
  const json::Value &c = ref_case(GetParam());
  if (c.obj.count("real_model") != 0) {
    // Real published weights (packaging/fetch_models.sh --model ...): the GGUF against transformers on its
    // dequantised F32 checkpoint, and infokv's tokenisation of the text against the ids transformers ran.
    const std::string path = infokv_test::qwen25_coder_path();
    ASSERT_TRUE(fs::exists(path)) << "model file " << path << " is missing: run packaging/fetch_models.sh --model "
                                  << c["real_model"].str << " (or set INFOKV_QWEN25_CODER)";
    auto m = infokv::Model::load(path);
    std::vector<int32_t> want;
    for (const json::Value &v : c["ids"].arr) want.push_back(static_cast<int32_t>(v.num));
    EXPECT_EQ(m->tokenizer().encode(c["text"].str, false), want);
    expect_matches_transformers(path, c);
    return;
  }
  if (c.obj.count("dir") != 0) {
    // Saved by transformers itself (tests/data/tf_made): its config.json form, no tokenizer.json.
    const std::string dir = infokv_test::test_data_dir() + "/" + c["dir"].str;
    auto m = infokv::Model::load(dir);
    EXPECT_EQ(m->tokenizer().kind(), infokv::TokenizerKind::none);
    EXPECT_THROW(m->tokenizer().encode("text", false), infokv::Error);
    expect_matches_transformers(dir, c);
    return;
  }
  fs::create_directories(dir_);
  expect_matches_transformers(synth(c, "safetensors", dir_ / "hf"), c);
  if (c["config_json"].kind != json::Value::Kind::string) expect_matches_transformers(synth(c, "gguf", dir_ / "m.gguf"), c);
  // GGUFs written from the same checkpoints by llama.cpp's convert_hf_to_gguf.py (not in CI: it needs torch and
  // llama.cpp's sources; packaging/tools/convert_with_llamacpp.py makes them as <dir>/<case>.gguf).
  if (const char *conv = std::getenv("INFOKV_CONVERTED_GGUF_DIR"); conv != nullptr) {
    const fs::path p = fs::path(conv) / (std::string(GetParam()) + ".gguf");
    if (fs::exists(p)) expect_matches_transformers(p.string(), c);
  }
}

INSTANTIATE_TEST_SUITE_P(Transformers, Families,
                         ::testing::Values("llama-3.2-1b", "llama-3.2-3b", "qwen2.5-0.5b", "tinyllama-1.1b", "mistral-7b",
                                           "rope-llama3-long", "rope-linear-long", "rope-dynamic-long", "rope-theta-long",
                                           "tf-llama3", "tf-qwen2", "real-qwen2.5-coder-0.5b"),
                         [](const ::testing::TestParamInfo<const char *> &i) {
                           std::string n = i.param;
                           for (char &ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

}  // namespace

namespace {

// stories260K (head size 8) re-written with extra metadata and tensors, saved as a file Model::load can open.
class GgufRope : public ::testing::Test {
 protected:
  void SetUp() override { REQUIRE_STORIES_BYTES(); }
  void TearDown() override {
    std::error_code ec;
    for (const std::string &p : written_) fs::remove(p, ec);
  }
  // `add` writes keys and tensors; a key it writes that the file has is dropped from the copy first.
  std::string variant(const std::string &name, const std::function<void(GgufBuilder &)> &add, const std::string &replaces = "") {
    const std::vector<uint8_t> &bytes = infokv_test::stories_bytes();
    infokv::GgufFile f(bytes.data(), bytes.size());
    GgufBuilder b = infokv_test::rewrite_gguf(f, nullptr, [&](const std::string &k) { return k != replaces; });
    add(b);
    const std::vector<uint8_t> out = b.build();
    const std::string path = (fs::temp_directory_path() / ("infokv_rope_" + std::to_string(::getpid()) + "_" + name + ".gguf")).string();
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char *>(out.data()), static_cast<std::streamsize>(out.size()));
    written_.push_back(path);
    return path;
  }
  static std::vector<float> last_logits(const std::string &path) {
    auto m = infokv::Model::load(path);
    const std::vector<int32_t> ids = {1, 300, 41, 77, 260, 501, 13, 99, 7, 400, 210, 33};
    return infokv_test::logits_per_position(m, ids).back();
  }
  static void expect_refused(const std::string &path, infokv::Status st, const std::string &needle) {
    try {
      infokv::Model::load(path);
      ADD_FAILURE() << "loaded " << path;
    } catch (const infokv::Error &e) {
      EXPECT_EQ(e.status(), st) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
  std::vector<std::string> written_;
};

TEST_F(GgufRope, PerPairFactorsAndLinearScalingAgreeAndChangeTheLogits) {
  const std::vector<float> plain = last_logits(variant("plain", [](GgufBuilder &) {}));
  const std::string twos = variant("factors", [](GgufBuilder &b) { b.add_tensor_f32("rope_freqs.weight", {4}, {2, 2, 2, 2}); });
  const std::string linear = variant("linear", [](GgufBuilder &b) {
    b.add_string("llama.rope.scaling.type", "linear").add_f32("llama.rope.scaling.factor", 2.0f);
  });
  EXPECT_EQ(infokv::Model::load(twos)->hparams().rope.type, infokv::RopeScalingType::factors);
  EXPECT_EQ(infokv::Model::load(linear)->hparams().rope.type, infokv::RopeScalingType::linear);
  const std::vector<float> a = last_logits(twos), b = last_logits(linear);
  double same = 0, moved = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    same = std::max(same, std::fabs(static_cast<double>(a[i]) - b[i]));
    moved = std::max(moved, std::fabs(static_cast<double>(a[i]) - plain[i]));
  }
  EXPECT_LT(same, 1e-5);  // dividing every frequency by 2 is linear scaling by 2
  EXPECT_GT(moved, 1e-2);  // and it does change the model
  // A factor of 1 is no scaling at all.
  const std::vector<float> one = last_logits(variant("one", [](GgufBuilder &b) {
    b.add_string("llama.rope.scaling.type", "linear").add_f32("llama.rope.scaling.factor", 1.0f);
  }));
  EXPECT_EQ(one, plain);
}

TEST_F(GgufRope, UnimplementedOrBrokenScalingIsRefusedByName) {
  expect_refused(variant("yarn", [](GgufBuilder &b) {
                   b.add_string("llama.rope.scaling.type", "yarn").add_f32("llama.rope.scaling.factor", 4.0f);
                 }),
                 infokv::Status::unsupported, "RoPE scaling 'yarn'");
  expect_refused(variant("longrope", [](GgufBuilder &b) { b.add_string("llama.rope.scaling.type", "longrope"); }),
                 infokv::Status::unsupported, "RoPE scaling 'longrope'");
  expect_refused(variant("partial", [](GgufBuilder &b) { b.add_u32("llama.rope.dimension_count", 4); }, "llama.rope.dimension_count"),
                 infokv::Status::unsupported, "partial rotary");
  expect_refused(variant("short", [](GgufBuilder &b) { b.add_tensor_f32("rope_freqs.weight", {3}, {1, 1, 1}); }),
                 infokv::Status::bad_model, "rope_freqs.weight");
  expect_refused(variant("zero", [](GgufBuilder &b) { b.add_tensor_f32("rope_freqs.weight", {4}, {1, 0, 1, 1}); }),
                 infokv::Status::bad_model, "not positive");
  expect_refused(variant("negative", [](GgufBuilder &b) {
                   b.add_string("llama.rope.scaling.type", "linear").add_f32("llama.rope.scaling.factor", -3.0f);
                 }),
                 infokv::Status::bad_model, "factor");
}

TEST_F(GgufRope, Qwen2ArchitectureNeedsItsOwnKeysAndOtherArchitecturesAreRefused) {
  // The same file claiming another architecture: keys are read under its prefix, so a relabelled llama is refused
  // for its missing qwen2.* keys rather than run with defaults.
  expect_refused(variant("relabel", [](GgufBuilder &b) { b.add_string("general.architecture", "qwen2"); }, "general.architecture"),
                 infokv::Status::bad_model, "qwen2.");
  expect_refused(variant("phi", [](GgufBuilder &b) { b.add_string("general.architecture", "phi3"); }, "general.architecture"),
                 infokv::Status::unsupported, "'phi3'");
}

}  // namespace
