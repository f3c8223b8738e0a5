// infokv synth --format safetensors: the synthetic model as a Hugging Face checkpoint directory
// (model.safetensors, config.json, tokenizer.json, tokenizer_config.json), which Model::load_hf reads back as the
// same model as the GGUF of the same (preset, dtype, seed).
#include <cstdio>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "cli/json.hpp"
#include "cli/synth.hpp"
#include "model/safetensors_writer.hpp"
#include "tokenizer/unicode.hpp"
#include "util/error.hpp"
#include "util/file_io.hpp"

namespace infokv {
namespace cli {
namespace synth {

namespace {

namespace fs = std::filesystem;

const char *const kFiles[] = {"model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json"};

// The shortest decimal form that reads back as the same float (json_num would print the float's double value).
std::string json_f32(float v) {
  char b[32];
  for (int prec = 6; prec <= 9; ++prec) {
    std::snprintf(b, sizeof b, "%.*g", prec, static_cast<double>(v));
    if (std::strtof(b, nullptr) == v) break;
  }
  std::string s = b;
  if (s.find_first_of(".en") == std::string::npos) s += ".0";  // a float, as transformers writes it
  return s;
}

// A byte-level BPE vocabulary of n tokens under GPT-2's pre-tokeniser: <unk> <s> </s> as special added tokens at the
// ids the GGUF's vocabulary gives them, the 256 byte characters, then "Ġ" + each printable ASCII character, then the
// letter strings of length 2, 3, ... each also with "Ġ" (the word-start space) in front. Every token after the
// bytes is the merge of its prefix and its last character, ranked in vocabulary order.
std::string tokenizer_json(int32_t n) {
  if (n < 3 + 256) fail(Status::invalid_argument, "a byte-level vocabulary needs at least 259 tokens");
  std::vector<std::string> byte(256);
  for (int b = 0; b < 256; ++b) unicode::append_utf8(&byte[static_cast<size_t>(b)], unicode::byte_level_codepoint(static_cast<uint8_t>(b)));
  const std::string sp = byte[' '];
  std::string vocab, merges;
  int32_t id = 3;
  auto add = [&](const std::string &tok, const std::string &left, const std::string &right) {
    if (id >= n) return;
    vocab += (vocab.empty() ? "" : ",") + json_str(tok) + ":" + std::to_string(id++);
    if (!left.empty()) merges += (merges.empty() ? "" : ",") + json_str(left + " " + right);
  };
  for (int b = 0; b < 256; ++b) add(byte[static_cast<size_t>(b)], "", "");
  for (int c = 33; c < 127; ++c) add(sp + byte[static_cast<size_t>(c)], sp, byte[static_cast<size_t>(c)]);
  for (int len = 2; id < n; ++len) {
    std::vector<int> digits(static_cast<size_t>(len), 0);
    while (id < n) {
      std::string prefix;
      for (size_t k = 0; k + 1 < digits.size(); ++k) prefix += static_cast<char>('a' + digits[k]);
      const std::string last(1, static_cast<char>('a' + digits.back()));
      add(prefix + last, prefix, last);
      add(sp + prefix + last, sp + prefix, last);
      int k = len - 1;
      while (k >= 0 && ++digits[static_cast<size_t>(k)] == 26) digits[static_cast<size_t>(k--)] = 0;
      if (k < 0) break;
    }
  }
  std::string added;
  const char *specials[] = {"<unk>", "<s>", "</s>"};
  for (int k = 0; k < 3; ++k)
    added += std::string(k ? "," : "") + "{\"id\":" + std::to_string(k) + ",\"content\":" + json_str(specials[k]) +
             ",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true}";
  return "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":[" + added +
         "],\"normalizer\":null,"
         "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true},"
         "\"post_processor\":{\"type\":\"TemplateProcessing\","
         "\"single\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],"
         "\"pair\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}},"
         "{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":1}},{\"Sequence\":{\"id\":\"B\",\"type_id\":1}}],"
         "\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[1],\"tokens\":[\"<s>\"]}}},"
         "\"decoder\":{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":true,\"use_regex\":true},"
         "\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":null,\"continuing_subword_prefix\":null,"
         "\"end_of_word_suffix\":null,\"fuse_unk\":false,\"byte_fallback\":false,\"ignore_merges\":false,\"vocab\":{" +
         vocab + "},\"merges\":[" + merges + "]}}\n";
}

std::string config_json(const Preset &p, StDtype dtype) {
  const char *torch_dtype = dtype == StDtype::F32 ? "float32" : dtype == StDtype::F16 ? "float16" : "bfloat16";
  const std::string arch = p.arch, type = p.model_type;
  JsonObject c;
  c.raw("architectures", std::string("[\"") + p.hf_class + "\"]")
      .str("model_type", type)
      .str("_name_or_path", std::string("synthetic ") + p.name)
      .integer("vocab_size", p.n_vocab)
      .integer("hidden_size", p.n_embd)
      .integer("intermediate_size", p.n_ff)
      .integer("num_hidden_layers", p.n_layer)
      .integer("num_attention_heads", p.n_head)
      .integer("num_key_value_heads", p.n_head_kv)
      .integer("head_dim", p.n_embd / p.n_head)
      .str("hidden_act", "silu")
      .integer("max_position_embeddings", p.n_ctx)
      .raw("rms_norm_eps", json_f32(p.rms_eps))
      .raw("rope_theta", json_f32(p.rope_theta));
  if (p.rope_factor > 0) {
    c.raw("rope_scaling", JsonObject()
                              .raw("factor", json_f32(p.rope_factor))
                              .raw("low_freq_factor", json_f32(p.rope_low_freq))
                              .raw("high_freq_factor", json_f32(p.rope_high_freq))
                              .integer("original_max_position_embeddings", p.rope_original_ctx)
                              .str("rope_type", "llama3")
                              .dump());
  } else {
    c.raw("rope_scaling", "null");
  }
  if (type == "llama") c.boolean("attention_bias", false).boolean("mlp_bias", false).integer("pretraining_tp", 1);
  // The published Qwen2.5 and Mistral v0.3 configs: no sliding window in use.
  if (type == "qwen2") c.boolean("use_sliding_window", false).integer("sliding_window", p.n_ctx).integer("max_window_layers", p.n_layer);
  if (type == "mistral") c.raw("sliding_window", "null");
  return c.raw("attention_dropout", "0.0")
             .raw("initializer_range", "0.02")
             .boolean("tie_word_embeddings", p.tied)
             .str("torch_dtype", torch_dtype)
             .boolean("use_cache", true)
             .integer("bos_token_id", 1)
             .integer("eos_token_id", 2)
             .dump() +
         "\n";
}

std::string tokenizer_config_json(const Preset &p) {
  return JsonObject()
             .str("tokenizer_class", "PreTrainedTokenizerFast")
             .str("bos_token", "<s>")
             .str("eos_token", "</s>")
             .str("unk_token", "<unk>")
             .boolean("add_bos_token", true)
             .boolean("add_eos_token", false)
             .integer("model_max_length", p.n_ctx)
             .boolean("clean_up_tokenization_spaces", false)
             .dump() +
         "\n";
}

// Through the same atomic writer as the weights: a killed run never leaves a truncated config.json.
void write_text(const fs::path &path, const std::string &text) {
  AtomicFile f(path.string());
  f.write(text.data(), text.size());
  f.commit();
}

// `dir` created if needed; refused when it holds anything synth would not write there, so a real checkpoint (or a
// sharded index that the loader would prefer to model.safetensors) is never overwritten or mixed in.
void prepare_dir(const fs::path &dir) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    fail(Status::invalid_argument, "--out '" + dir.string() + "' exists and is not a directory");
  fs::create_directories(dir, ec);
  if (ec) fail(Status::io, "cannot create the directory '" + dir.string() + "': " + ec.message());
  const std::set<std::string> ours(std::begin(kFiles), std::end(kFiles));
  // Temporaries left by a run that was killed are ours too (the name older versions used, and AtomicFile's).
  auto is_ours = [&](const std::string &name) {
    if (ours.count(name) != 0 || name == "model.safetensors.tmp") return true;
    for (const char *f : kFiles)
      if (AtomicFile::is_temp_of(name, f)) return true;
    return false;
  };
  for (const fs::directory_entry &e : fs::directory_iterator(dir, ec))
    if (!is_ours(e.path().filename().string()))
      fail(Status::invalid_argument, "--out '" + dir.string() + "' holds '" + e.path().filename().string() +
                                         "'; synth writes a checkpoint into a new or empty directory (or one it wrote before)");
  if (ec) fail(Status::io, "cannot list the directory '" + dir.string() + "': " + ec.message());
}

}  // namespace

uint64_t write_hf_checkpoint(const std::string &dir_str, const Preset &p, StDtype dtype, uint64_t seed,
                             const std::function<void(uint64_t, uint64_t)> &progress) {
  const fs::path dir(dir_str);
  prepare_dir(dir);
  const std::vector<Tensor> ts = tensors(p);
  std::vector<size_t> written;  // indices into ts of the tensors a checkpoint holds, in file order
  for (size_t i = 0; i < ts.size(); ++i)
    if (!ts[i].hf_name.empty()) written.push_back(i);
  SafetensorsWriter w;
  w.add_metadata("format", "pt");
  // Norm weights in the model's dtype, as transformers saves them (their value, 1, is exact in every dtype).
  for (size_t i : written) {
    const Tensor &t = ts[i];
    w.add_tensor(t.hf_name, dtype, t.cols == 0 ? std::vector<uint64_t>{t.rows} : std::vector<uint64_t>{t.rows, t.cols});
  }
  write_text(dir / "config.json", config_json(p, dtype));
  write_text(dir / "tokenizer.json", tokenizer_json(p.n_vocab));
  write_text(dir / "tokenizer_config.json", tokenizer_config_json(p));
  const size_t es = st_dtype_size(dtype);
  w.write(
      (dir / "model.safetensors").string(),
      [&](size_t k, uint64_t first, uint64_t cnt, uint8_t *buf) {
        // Hugging Face keeps each q/k head's rows in rotate-half order (the inverse of what Model::load_hf undoes).
        for (uint64_t j = 0; j < cnt; ++j) store(element(ts, written[k], seed, first + j, true), dtype, buf + es * j);
      },
      progress);
  return w.data_bytes();
}

}  // namespace synth
}  // namespace cli
}  // namespace infokv
