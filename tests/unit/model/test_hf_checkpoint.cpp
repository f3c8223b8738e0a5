// Hugging Face checkpoint directories: a tiny LlamaForCausalLM written here as config.json + safetensors (sharded
// or not) + tokenizer.json gives the same tokens and logits as the same model written as GGUF with the converter's
// q/k row order; broken directories are refused with a status naming the problem.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <unistd.h>

#include "support/gguf_builder.hpp"
#include "model/model.hpp"
#include "session/session.hpp"
#include "util/error.hpp"
#include "support/util.hpp"

namespace fs = std::filesystem;
using infokv_test::GgufBuilder;

namespace {

constexpr int kD = 64, kHeads = 4, kKv = 2, kHd = kD / kHeads, kFf = 96, kLayers = 2;

std::string utf8(uint32_t cp) {
  std::string o;
  if (cp < 0x80) o += static_cast<char>(cp);
  else { o += static_cast<char>(0xC0 | (cp >> 6)); o += static_cast<char>(0x80 | (cp & 0x3F)); }
  return o;
}

// GPT-2's byte -> character table.
std::vector<std::string> byte_chars() {
  std::vector<std::string> out(256);
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    out[static_cast<size_t>(b)] = utf8(printable ? static_cast<uint32_t>(b) : next++);
  }
  return out;
}

std::string json_str(const std::string &s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') { o += '\\'; o += static_cast<char>(c); }
    else if (c < 0x20) { char buf[8]; std::snprintf(buf, sizeof buf, "\\u%04x", c); o += buf; }
    else o += static_cast<char>(c);
  }
  return o + "\"";
}

struct Tiny {
  std::vector<std::string> tokens;  // 256 bytes, merged tokens, then 2 specials
  std::vector<std::string> merges;
  std::map<std::string, std::vector<float>> w;  // HF names, HF layout [rows, cols]
  std::map<std::string, std::vector<uint64_t>> shape;
};

Tiny make_tiny(uint64_t seed) {
  Tiny t;
  t.tokens = byte_chars();
  const std::string G = t.tokens[' '];
  t.merges = {G + " t", "h e", G + "t he", "i n", G + " a"};
  for (const char *tok : {"\xC4\xA0t", "he", "\xC4\xA0the", "in", "\xC4\xA0" "a"}) t.tokens.push_back(tok);
  t.tokens.push_back("<|im_start|>");
  t.tokens.push_back("<|im_end|>");
  const uint64_t V = t.tokens.size();
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.2f);
  auto add = [&](const std::string &name, std::vector<uint64_t> shape, float scale = 1.0f) {
    uint64_t n = 1;
    for (uint64_t s : shape) n *= s;
    std::vector<float> v(n);
    for (float &x : v) x = nd(rng) * scale;
    t.w[name] = v;
    t.shape[name] = shape;
  };
  add("model.embed_tokens.weight", {V, kD});
  add("model.norm.weight", {kD}, 0.0f);
  for (float &x : t.w["model.norm.weight"]) x = 1.0f + 0.1f * nd(rng);
  for (int l = 0; l < kLayers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {kD});
    add(p + "post_attention_layernorm.weight", {kD});
    add(p + "self_attn.q_proj.weight", {kHeads * kHd, kD});
    add(p + "self_attn.k_proj.weight", {kKv * kHd, kD});
    add(p + "self_attn.v_proj.weight", {kKv * kHd, kD});
    add(p + "self_attn.o_proj.weight", {kD, kHeads * kHd});
    add(p + "mlp.gate_proj.weight", {kFf, kD});
    add(p + "mlp.up_proj.weight", {kFf, kD});
    add(p + "mlp.down_proj.weight", {kD, kFf});
  }
  return t;
}

void write_safetensors(const fs::path &path, const Tiny &t, const std::vector<std::string> &names) {
  std::string header = "{";
  uint64_t off = 0;
  for (const std::string &n : names) {
    const auto &v = t.w.at(n);
    std::string shape;
    for (uint64_t s : t.shape.at(n)) shape += (shape.empty() ? "" : ",") + std::to_string(s);
    header += (header.size() > 1 ? "," : "") + json_str(n) + ":{\"dtype\":\"F32\",\"shape\":[" + shape +
              "],\"data_offsets\":[" + std::to_string(off) + "," + std::to_string(off + v.size() * 4) + "]}";
    off += v.size() * 4;
  }
  header += "}";
  std::ofstream f(path, std::ios::binary);
  const uint64_t n = header.size();
  f.write(reinterpret_cast<const char *>(&n), 8);
  f << header;
  for (const std::string &name : names) f.write(reinterpret_cast<const char *>(t.w.at(name).data()), static_cast<std::streamsize>(t.w.at(name).size() * 4));
}

fs::path write_hf(const Tiny &t, const fs::path &dir, int shards, const std::string &config_extra = "") {
  fs::create_directories(dir);
  std::vector<std::string> names;
  for (const auto &kv : t.w) names.push_back(kv.first);
  if (shards == 1) {
    write_safetensors(dir / "model.safetensors", t, names);
  } else {
    std::string wm;
    const size_t per = (names.size() + 1) / 2;
    for (int s = 0; s < 2; ++s) {
      const std::string fn = "model-0000" + std::to_string(s + 1) + "-of-00002.safetensors";
      std::vector<std::string> part(names.begin() + static_cast<std::ptrdiff_t>(s * per),
                                    names.begin() + static_cast<std::ptrdiff_t>(std::min(names.size(), (s + 1) * per)));
      write_safetensors(dir / fn, t, part);
      for (const std::string &n : part) wm += (wm.empty() ? "" : ",") + json_str(n) + ":" + json_str(fn);
    }
    std::ofstream(dir / "model.safetensors.index.json") << "{\"metadata\":{},\"weight_map\":{" << wm << "}}";
  }
  std::ofstream(dir / "config.json") << "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":" << kD
                                     << ",\"num_hidden_layers\":" << kLayers << ",\"num_attention_heads\":" << kHeads
                                     << ",\"num_key_value_heads\":" << kKv << ",\"intermediate_size\":" << kFf
                                     << ",\"rms_norm_eps\":1e-05,\"rope_theta\":50000.0,\"max_position_embeddings\":256,"
                                     << "\"tie_word_embeddings\":true" << config_extra << "}";
  std::string vocab, merges, added;
  for (size_t k = 0; k + 2 < t.tokens.size(); ++k) vocab += (vocab.empty() ? "" : ",") + json_str(t.tokens[k]) + ":" + std::to_string(k);
  for (const std::string &m : t.merges) merges += (merges.empty() ? "" : ",") + json_str(m);
  for (size_t k = t.tokens.size() - 2; k < t.tokens.size(); ++k)
    added += (added.empty() ? "" : ",") + std::string("{\"id\":") + std::to_string(k) + ",\"content\":" + json_str(t.tokens[k]) +
             ",\"special\":true}";
  std::ofstream(dir / "tokenizer.json")
      << "{\"version\":\"1.0\",\"added_tokens\":[" << added << "],\"pre_tokenizer\":{\"type\":\"ByteLevel\","
      << "\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true},\"model\":{\"type\":\"BPE\",\"vocab\":{"
      << vocab << "},\"merges\":[" << merges << "]}}";
  std::ofstream(dir / "tokenizer_config.json")
      << "{\"bos_token\":\"<|im_start|>\",\"eos_token\":\"<|im_end|>\",\"add_bos_token\":false,"
      << "\"chat_template\":\"{% for m in messages %}{{'<|im_start|>' + m['role'] + '\\\\n' + m['content'] + '<|im_end|>\\\\n'}}{% endfor %}\"}";
  return dir;
}

// The same model as GGUF: q/k rows in the converter's order (llama.cpp's permute).
fs::path write_gguf(const Tiny &t, const fs::path &path) {
  GgufBuilder b;
  std::vector<int32_t> types(t.tokens.size(), 1);
  types[types.size() - 1] = types[types.size() - 2] = 3;
  b.add_string("general.architecture", "llama")
      .add_u32("llama.embedding_length", kD)
      .add_u32("llama.block_count", kLayers)
      .add_u32("llama.attention.head_count", kHeads)
      .add_u32("llama.attention.head_count_kv", kKv)
      .add_u32("llama.feed_forward_length", kFf)
      .add_u32("llama.context_length", 256)
      .add_f32("llama.rope.freq_base", 50000.0f)
      .add_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f)
      .add_string("tokenizer.ggml.model", "gpt2")
      .add_string("tokenizer.ggml.pre", "gpt2")
      .add_string_array("tokenizer.ggml.tokens", t.tokens)
      .add_i32_array("tokenizer.ggml.token_type", types)
      .add_string_array("tokenizer.ggml.merges", t.merges)
      .add_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(t.tokens.size() - 2))
      .add_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(t.tokens.size() - 1))
      .add_bool("tokenizer.ggml.add_bos_token", false);
  auto permuted = [](const std::vector<float> &w, int n_head) {
    // w.reshape(n_head, 2, hd/2, cols).swapaxes(1, 2)
    std::vector<float> o(w.size());
    for (int h = 0; h < n_head; ++h)
      for (int j = 0; j < 2; ++j)
        for (int i = 0; i < kHd / 2; ++i)
          std::copy_n(w.begin() + ((h * 2 + j) * (kHd / 2) + i) * kD, kD, o.begin() + ((h * (kHd / 2) + i) * 2 + j) * kD);
    return o;
  };
  auto put = [&](const std::string &gname, const std::string &hname, const std::vector<float> *override = nullptr) {
    const auto &shape = t.shape.at(hname);
    std::vector<uint64_t> ne(shape.rbegin(), shape.rend());
    b.add_tensor_f32(gname, ne, override != nullptr ? *override : t.w.at(hname));
  };
  put("token_embd.weight", "model.embed_tokens.weight");
  put("output_norm.weight", "model.norm.weight");
  for (int l = 0; l < kLayers; ++l) {
    const std::string g = "blk." + std::to_string(l) + ".", h = "model.layers." + std::to_string(l) + ".";
    put(g + "attn_norm.weight", h + "input_layernorm.weight");
    put(g + "ffn_norm.weight", h + "post_attention_layernorm.weight");
    const std::vector<float> q = permuted(t.w.at(h + "self_attn.q_proj.weight"), kHeads);
    const std::vector<float> k = permuted(t.w.at(h + "self_attn.k_proj.weight"), kKv);
    put(g + "attn_q.weight", h + "self_attn.q_proj.weight", &q);
    put(g + "attn_k.weight", h + "self_attn.k_proj.weight", &k);
    put(g + "attn_v.weight", h + "self_attn.v_proj.weight");
    put(g + "attn_output.weight", h + "self_attn.o_proj.weight");
    put(g + "ffn_gate.weight", h + "mlp.gate_proj.weight");
    put(g + "ffn_up.weight", h + "mlp.up_proj.weight");
    put(g + "ffn_down.weight", h + "mlp.down_proj.weight");
  }
  const std::vector<uint8_t> bytes = b.build();
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char *>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return path;
}

std::vector<float> logits_of(const std::string &path, const std::string &text) {
  auto m = infokv::Model::load(path);
  return infokv_test::prefill_f32(m, m->tokenizer().encode(text, false)).logits();
}

fs::path tmp_dir(const std::string &name) {
  return fs::temp_directory_path() / ("infokv_hf_" + std::to_string(::getpid()) + "_" + name);
}

void expect_load_error(const fs::path &dir, infokv::Status st, const std::string &needle) {
  try {
    infokv::Model::load(dir.string());
    ADD_FAILURE() << "loaded " << dir;
  } catch (const infokv::Error &e) {
    EXPECT_EQ(e.status(), st) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(HfCheckpoint, SameTokensAndLogitsAsTheGgufOfTheSameModel) {
  const Tiny t = make_tiny(17);
  const fs::path gg = write_gguf(t, tmp_dir("model.gguf"));
  for (int shards : {1, 2}) {
    const fs::path dir = write_hf(t, tmp_dir("dir" + std::to_string(shards)), shards);
    auto hf = infokv::Model::load(dir.string());
    auto gm = infokv::Model::load(gg.string());
    EXPECT_EQ(hf->format(), "safetensors");
    EXPECT_TRUE(hf->tied_output());
    EXPECT_FLOAT_EQ(hf->hparams().rope_theta, 50000.0f);
    EXPECT_EQ(hf->tokenizer().n_vocab(), gm->tokenizer().n_vocab());
    EXPECT_NE(hf->chat_template().find("<|im_start|>"), std::string::npos);
    for (const char *s : {"in the heat", " the  a\n<|im_start|>x<|im_end|>", "\xC3\xA9t\xC3\xA9 42!"})
      EXPECT_EQ(hf->tokenizer().encode(s, false), gm->tokenizer().encode(s, false)) << s;
    EXPECT_EQ(hf->tokenizer().encode(" the", false), (std::vector<int32_t>{258}));
    const std::vector<float> a = logits_of(dir.string(), "in the heat of the day"), b = logits_of(gg.string(), "in the heat of the day");
    ASSERT_EQ(a.size(), b.size());
    for (size_t k = 0; k < a.size(); ++k) ASSERT_NEAR(a[k], b[k], 1e-5f) << k;
    fs::remove_all(dir);
  }
  fs::remove(gg);
}

// Model::load_tokenizer (what `infokv tokenize` uses) reads only the tokenizer: from a GGUF file, from a whole
// checkpoint directory, and from a directory that holds nothing but tokenizer.json + tokenizer_config.json.
TEST(HfCheckpoint, LoadTokenizerNeedsNoWeights) {
  const Tiny t = make_tiny(23);
  const fs::path gg = write_gguf(t, tmp_dir("tok.gguf"));
  const fs::path dir = write_hf(t, tmp_dir("tokdir"), 1);
  const fs::path only = tmp_dir("tokonly");
  fs::create_directories(only);
  fs::copy_file(dir / "tokenizer.json", only / "tokenizer.json");
  fs::copy_file(dir / "tokenizer_config.json", only / "tokenizer_config.json");
  auto full = infokv::Model::load(dir.string());
  for (const fs::path &p : {gg, dir, only}) {
    const infokv::Tokenizer tok = infokv::Model::load_tokenizer(p.string());
    EXPECT_EQ(tok.n_vocab(), full->tokenizer().n_vocab()) << p;
    for (const char *s : {"in the heat", " the  a\n<|im_start|>x<|im_end|>", "\xC3\xA9t\xC3\xA9 42!"})
      for (bool bos : {false, true})
        EXPECT_EQ(tok.encode(s, bos), full->tokenizer().encode(s, bos)) << p << ": " << s;
  }
  fs::remove(only / "tokenizer.json");
  try {
    infokv::Model::load_tokenizer(only.string());
    ADD_FAILURE() << "loaded a tokenizer from a directory without tokenizer.json";
  } catch (const infokv::Error &e) {
    EXPECT_EQ(e.status(), infokv::Status::io) << e.what();
    EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos) << e.what();
  }
  fs::remove_all(only);
  fs::remove_all(dir);
  fs::remove(gg);
}

TEST(HfCheckpoint, RejectsBrokenDirectories) {
  const Tiny t = make_tiny(3);
  const fs::path base = tmp_dir("bad");
  {
    const fs::path d = write_hf(t, base / "noconfig", 1);
    fs::remove(d / "config.json");
    expect_load_error(d, infokv::Status::io, "config.json");
  }
  expect_load_error(write_hf(t, base / "yarn", 1, ",\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4.0}"),
                    infokv::Status::unsupported, "RoPE scaling 'yarn'");
  expect_load_error(write_hf(t, base / "longrope", 1, ",\"rope_scaling\":{\"type\":\"longrope\",\"factor\":4.0}"),
                    infokv::Status::unsupported, "RoPE scaling 'longrope'");
  expect_load_error(write_hf(t, base / "scaling", 1, ",\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0}"),
                    infokv::Status::bad_model, "has no 'low_freq_factor'");
  expect_load_error(write_hf(t, base / "factor", 1, ",\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":-2}"),
                    infokv::Status::bad_model, "factor must be in [1, 1e6]");
  // One file of a good checkpoint replaced: {directory, shards, file, its new text, status, message}.
  struct Replaced {
    const char *dir;
    int shards;
    const char *file, *text;
    infokv::Status status;
    const char *message;
  };
  const Replaced replaced[] = {
      {"arch", 1, "config.json", "{\"architectures\":[\"GPT2LMHeadModel\"]}", infokv::Status::unsupported,
       "GPT2LMHeadModel; infokv runs LlamaForCausalLM, MistralForCausalLM and Qwen2ForCausalLM"},
      {"escape", 2, "model.safetensors.index.json", "{\"weight_map\":{\"model.norm.weight\":\"../model.safetensors\"}}",
       infokv::Status::bad_model, "not a file name"},
      {"badjson", 1, "tokenizer.json", "{\"model\":{\"type\":\"BPE\",", infokv::Status::bad_model, "tokenizer.json"},
      {"unigram", 1, "tokenizer.json", "{\"model\":{\"type\":\"Unigram\"},\"pre_tokenizer\":{\"type\":\"Metaspace\"}}",
       infokv::Status::unsupported, "not supported"},
  };
  for (const Replaced &r : replaced) {
    const fs::path d = write_hf(t, base / r.dir, r.shards);
    std::ofstream(d / r.file) << r.text;
    expect_load_error(d, r.status, r.message);
  }
  {
    Tiny t2 = t;
    t2.w.erase("model.layers.1.mlp.up_proj.weight");
    t2.shape.erase("model.layers.1.mlp.up_proj.weight");
    expect_load_error(write_hf(t2, base / "missing", 1), infokv::Status::bad_model, "model.layers.1.mlp.up_proj.weight");
  }
  {
    Tiny t2 = t;
    t2.shape["model.layers.0.mlp.up_proj.weight"] = {kD, kFf};  // transposed
    expect_load_error(write_hf(t2, base / "shape", 1), infokv::Status::bad_model, "has shape");
  }
  {  // non-finite weights would make every logit NaN: refused at load, naming the tensor (and the row)
    Tiny t2 = t;
    t2.w["model.layers.1.input_layernorm.weight"][5] = std::nanf("");
    expect_load_error(write_hf(t2, base / "nan_norm", 1), infokv::Status::bad_model,
                      "tensor 'model.layers.1.input_layernorm.weight' holds a non-finite value (NaN) at element 5");
    Tiny t3 = t;
    t3.w["model.embed_tokens.weight"][static_cast<size_t>(9 * kD + 3)] = -INFINITY;
    expect_load_error(write_hf(t3, base / "inf_embd", 1), infokv::Status::bad_model,
                      "tensor 'model.embed_tokens.weight' holds a non-finite value (-Inf) in row 9 (column 3)");
  }
  fs::remove_all(base);
}
