// infokv synth writes GGUF files, and Hugging Face checkpoint directories (--format safetensors), that infokv loads
// and runs, at the preset's real shapes, deterministically; both formats of one seed are the same model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <unistd.h>

#include "model/model.hpp"
#include "model/safetensors.hpp"
#include "session/session.hpp"
#include "util/error.hpp"
#include "util/json_reader.hpp"
#include "support/util.hpp"

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

// What the CLI prints on stdout ("" when it fails).
std::string output_of(const std::string &args) {
  const infokv_test::CommandOutput r = infokv_test::run_command(std::string(INFOKV_CLI_PATH) + " " + args + " 2>/dev/null");
  return r.status == 0 ? r.out : "";
}

std::string slurp(const std::string &p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::vector<float> logits_of(const std::shared_ptr<const Model> &m, const std::vector<int32_t> &ids) {
  return infokv_test::prefill_f32(m, ids).logits();
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

// The same (preset, dtype, seed) written both ways holds the same numbers, so the logits of the same token ids agree
// exactly: only the q/k row order and the norms' storage type differ between the files, and the loader undoes both.
TEST(Synth, SafetensorsCheckpointGivesTheSameLogitsAsTheGgufOfTheSameSeed) {
  struct Case {
    const char *preset, *dtype;
  };
  // stories260k has an lm_head; smollm2-135m ties it to the embedding.
  for (const Case c : {Case{"stories260k", "f16"}, Case{"stories260k", "bf16"}, Case{"stories260k", "f32"}, Case{"smollm2-135m", "f16"}}) {
    SCOPED_TRACE(std::string(c.preset) + " " + c.dtype);
    const std::string gguf = tmp_path(std::string("same_") + c.preset + c.dtype + ".gguf"), dir = tmp_path(std::string("same_") + c.preset + c.dtype);
    const std::string common = std::string(" --preset ") + c.preset + " --dtype " + c.dtype + " --seed 9 --quiet --out ";
    ASSERT_EQ(run("synth" + common + gguf), 0);
    ASSERT_EQ(run("synth --format safetensors" + common + dir), 0);
    auto g = Model::load(gguf);
    auto h = Model::load(dir);
    EXPECT_EQ(g->format(), "gguf");
    EXPECT_EQ(h->format(), "safetensors");
    const HParams &a = g->hparams(), &b = h->hparams();
    EXPECT_EQ(b.n_embd, a.n_embd);
    EXPECT_EQ(b.n_layer, a.n_layer);
    EXPECT_EQ(b.n_head, a.n_head);
    EXPECT_EQ(b.n_head_kv, a.n_head_kv);
    EXPECT_EQ(b.head_dim, a.head_dim);
    EXPECT_EQ(b.n_ff, a.n_ff);
    EXPECT_EQ(b.n_vocab, a.n_vocab);
    EXPECT_EQ(b.n_ctx_train, a.n_ctx_train);
    EXPECT_EQ(b.rope_theta, a.rope_theta);
    EXPECT_EQ(b.rms_eps, a.rms_eps);
    EXPECT_EQ(h->tied_output(), g->tied_output());
    EXPECT_EQ(h->n_params(), g->n_params());
    EXPECT_EQ(h->name(), g->name());
    EXPECT_EQ(h->tokenizer().n_vocab(), a.n_vocab);
    EXPECT_EQ(h->tokenizer().bos(), 1);
    EXPECT_EQ(h->tokenizer().eos(), 2);
    EXPECT_TRUE(h->tokenizer().add_bos());
    // `infokv tokenize` reads the tokenizer of either form (the directory's without touching its weights). The two
    // tokenizers differ by design (the GGUF keeps stories260K's SentencePiece vocabulary, the directory gets a
    // byte-level BPE tokenizer.json), so each is compared with its own model's.
    const std::string text = "Once upon a time, <s> a cat!";
    for (const auto &[path, model] : {std::pair<std::string, const Model *>{gguf, g.get()}, {dir, h.get()}}) {
      std::string want = "{\"n_tokens\":";
      const std::vector<int32_t> t = model->tokenizer().encode(text, true, false);  // text is text by default
      want += std::to_string(t.size()) + ",\"ids\":[";
      for (size_t k = 0; k < t.size(); ++k) want += (k ? "," : "") + std::to_string(t[k]);
      want += "]}\n";
      EXPECT_EQ(output_of("tokenize --bos --json --model " + path + " --text '" + text + "'"), want) << path;
    }
    const std::vector<int32_t> ids = {1, 300, 301, 455, 460, 7, 511, 42, 259};
    const std::vector<float> x = logits_of(g, ids), y = logits_of(h, ids);
    ASSERT_EQ(x.size(), y.size());
    float spread = 0;
    for (size_t k = 0; k < x.size(); ++k) {
      ASSERT_EQ(x[k], y[k]) << k;
      spread = std::max(spread, std::fabs(x[k] - x[0]));
    }
    EXPECT_GT(spread, 1e-3f);  // not degenerate logits that would agree whatever the weights
    std::remove(gguf.c_str());
    std::filesystem::remove_all(dir);
  }
}

TEST(Synth, SafetensorsCheckpointHasHfNamesLayoutAndConfig) {
  const std::string dir = tmp_path("hf_layout");
  ASSERT_EQ(run("synth --preset stories260k --format safetensors --dtype bf16 --seed 2 --out " + dir), 0);
  const std::string st = dir + "/model.safetensors";
  const std::string bytes = slurp(st);
  ASSERT_GT(bytes.size(), 8u);
  uint64_t hlen = 0;
  for (int k = 7; k >= 0; --k) hlen = (hlen << 8) | static_cast<uint8_t>(bytes[static_cast<size_t>(k)]);
  EXPECT_EQ(hlen % 8, 0u);  // the data starts 8-byte aligned
  EXPECT_EQ(bytes[8], '{');
  SafetensorsFile f(st);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.tensors().size(), 3u + 5u * 9u);  // embed, norm, lm_head; 9 per layer
  uint64_t data = 0;
  for (const StTensor &t : f.tensors()) {
    EXPECT_EQ(t.dtype, StDtype::BF16) << t.name;
    data += t.n_bytes;
  }
  EXPECT_EQ(8 + hlen + data, bytes.size());  // no holes, nothing after the last tensor
  auto shape = [&](const std::string &n) {
    const StTensor *t = f.find(n);
    return t != nullptr ? t->shape : std::vector<uint64_t>{};
  };
  EXPECT_EQ(shape("model.embed_tokens.weight"), (std::vector<uint64_t>{512, 64}));
  EXPECT_EQ(shape("lm_head.weight"), (std::vector<uint64_t>{512, 64}));
  EXPECT_EQ(shape("model.norm.weight"), (std::vector<uint64_t>{64}));
  EXPECT_EQ(shape("model.layers.4.self_attn.q_proj.weight"), (std::vector<uint64_t>{64, 64}));
  EXPECT_EQ(shape("model.layers.4.self_attn.k_proj.weight"), (std::vector<uint64_t>{32, 64}));
  EXPECT_EQ(shape("model.layers.4.self_attn.o_proj.weight"), (std::vector<uint64_t>{64, 64}));
  EXPECT_EQ(shape("model.layers.0.mlp.gate_proj.weight"), (std::vector<uint64_t>{172, 64}));
  EXPECT_EQ(shape("model.layers.0.mlp.down_proj.weight"), (std::vector<uint64_t>{64, 172}));
  EXPECT_EQ(shape("model.layers.0.post_attention_layernorm.weight"), (std::vector<uint64_t>{64}));

  const JsonValue cfg = JsonValue::parse(slurp(dir + "/config.json"), static_cast<int32_t>(Status::bad_model), "config.json");
  auto num = [&](const char *k) {
    const JsonValue *v = cfg.find(k);
    return v != nullptr && v->is_number() ? v->as_number() : -1.0;
  };
  auto text = [&](const char *k) {
    const JsonValue *v = cfg.find(k);
    return v != nullptr && v->is_string() ? v->as_string() : std::string("?");
  };
  EXPECT_EQ(text("model_type"), "llama");
  EXPECT_EQ(text("torch_dtype"), "bfloat16");
  ASSERT_NE(cfg.find("architectures"), nullptr);
  ASSERT_EQ(cfg.find("architectures")->items().size(), 1u);
  EXPECT_EQ(cfg.find("architectures")->items()[0].as_string(), "LlamaForCausalLM");
  EXPECT_EQ(num("hidden_size"), 64);
  EXPECT_EQ(num("intermediate_size"), 172);
  EXPECT_EQ(num("num_attention_heads"), 8);
  EXPECT_EQ(num("num_key_value_heads"), 4);
  EXPECT_EQ(num("num_hidden_layers"), 5);
  EXPECT_EQ(num("vocab_size"), 512);
  EXPECT_EQ(num("max_position_embeddings"), 2048);
  EXPECT_EQ(num("rms_norm_eps"), 1e-5);
  EXPECT_EQ(num("rope_theta"), 10000);
  EXPECT_EQ(num("bos_token_id"), 1);
  EXPECT_EQ(num("eos_token_id"), 2);
  ASSERT_NE(cfg.find("tie_word_embeddings"), nullptr);
  EXPECT_FALSE(cfg.find("tie_word_embeddings")->as_bool());

  // The byte-level BPE vocabulary round-trips any text, and starts with BOS.
  auto m = Model::load(dir);
  const std::string s = "hello world, \xC3\xA9t\xC3\xA9 42!\n\tzz";
  const std::vector<int32_t> ids = m->tokenizer().encode(s, true);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], 1);
  EXPECT_LT(ids.size(), s.size());  // merges apply
  EXPECT_EQ(m->tokenizer().decode(std::vector<int32_t>(ids.begin() + 1, ids.end())), s);
  std::filesystem::remove_all(dir);
}

TEST(Synth, SafetensorsSameSeedSameFilesOtherSeedOtherWeights) {
  const std::string a = tmp_path("st_a"), b = tmp_path("st_b"), c = tmp_path("st_c");
  ASSERT_EQ(run("synth --preset stories260k --format safetensors --seed 5 --out " + a), 0);
  ASSERT_EQ(run("synth --preset stories260k --format safetensors --seed 5 --out " + b), 0);
  ASSERT_EQ(run("synth --preset stories260k --format safetensors --seed 6 --out " + c), 0);
  for (const char *f : {"model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json"}) {
    EXPECT_FALSE(slurp(a + "/" + f).empty()) << f;
    EXPECT_EQ(slurp(a + "/" + f), slurp(b + "/" + f)) << f;
  }
  EXPECT_NE(slurp(a + "/model.safetensors"), slurp(c + "/model.safetensors"));
  // Rewriting into a directory synth wrote is allowed.
  EXPECT_EQ(run("synth --preset stories260k --format safetensors --seed 6 --out " + a), 0);
  EXPECT_EQ(slurp(a + "/model.safetensors"), slurp(c + "/model.safetensors"));
  for (const auto &p : {a, b, c}) std::filesystem::remove_all(p);
}

TEST(Synth, SafetensorsRejectsBadFormatAndForeignDirectories) {
  const std::string dir = tmp_path("st_bad");
  EXPECT_NE(run("synth --preset stories260k --format onnx --out " + dir), 0);
  EXPECT_NE(run("synth --preset stories260k --format safetensors --out " + dir + ".gguf"), 0);
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/model.safetensors.index.json") << "{}";  // another checkpoint: never mixed with
  EXPECT_NE(run("synth --preset stories260k --format safetensors --out " + dir), 0);
  EXPECT_FALSE(std::filesystem::exists(dir + "/model.safetensors"));
  std::filesystem::remove_all(dir);
  std::ofstream(dir) << "a file";
  EXPECT_NE(run("synth --preset stories260k --format safetensors --out " + dir), 0);
  std::remove(dir.c_str());
}

// A truncated or overwritten model.safetensors from synth is refused with a status, never read past its end.
TEST(Synth, DamagedSafetensorsOutputIsRefusedCleanly) {
  const std::string dir = tmp_path("st_damaged");
  ASSERT_EQ(run("synth --preset stories260k --format safetensors --out " + dir), 0);
  const std::string st = dir + "/model.safetensors", good = slurp(st);
  auto expect_refused = [&](const std::string &bytes, const char *what) {
    std::ofstream(st, std::ios::binary | std::ios::trunc) << bytes;
    try {
      Model::load(dir);
      ADD_FAILURE() << "loaded a damaged checkpoint: " << what;
    } catch (const Error &e) {
      EXPECT_EQ(e.status(), Status::bad_model) << what << ": " << e.what();
    }
  };
  expect_refused(good.substr(0, good.size() - 1), "one byte short");
  expect_refused(good.substr(0, good.size() / 2), "half");
  expect_refused(good.substr(0, 100), "inside the header");
  expect_refused(good.substr(0, 5), "inside the length");
  std::string big_len = good;
  big_len[6] = '\x7f';
  expect_refused(big_len, "header length past the end");
  std::filesystem::remove_all(dir);
}
