// Writes small GGUF files built with tests/unit/support/gguf_builder.hpp into a folder: seeds for the fuzzer's corpus that
// reach the reader's branches quickly (every value type, arrays, nested arrays, tensors of several types, a tiny
// llama model that loads). usage: make_seeds OUT_DIR
#include <cstdio>
#include <string>
#include <vector>

#include "support/gguf_builder.hpp"

using infokv_test::GgufBuilder;

namespace {

void write(const std::string &dir, const std::string &name, const std::vector<uint8_t> &b) {
  const std::string path = dir + "/" + name + ".gguf";
  FILE *f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return;
  std::fwrite(b.data(), 1, b.size(), f);
  std::fclose(f);
}

std::vector<float> ramp(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(static_cast<int>(i % 13) - 6) / 16.0f;
  return v;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  write(dir, "empty_v3", GgufBuilder().build());
  write(dir, "empty_v2", GgufBuilder().set_version(2).build());
  write(dir, "scalars", GgufBuilder()
                            .add_u8("u8", 1).add_i8("i8", -1).add_u16("u16", 2).add_i16("i16", -2).add_u32("u32", 3)
                            .add_i32("i32", -3).add_u64("u64", 4).add_i64("i64", -4).add_f32("f32", 0.5f)
                            .add_f64("f64", 0.25).add_bool("b", true).add_string("s", "text")
                            .build());
  write(dir, "arrays", GgufBuilder()
                           .add_string_array("sa", {"a", "bc", ""}).add_f32_array("fa", {1, 2})
                           .add_i32_array("ia", {1, -1}).add_u32_array("ua", {7}).add_i64_array("la", {1, 2, 3})
                           .add_u32("general.alignment", 64)
                           .build());
  {
    infokv_test::ByteWriter w;  // array of two arrays of uint8
    w.le<uint32_t>(9);
    w.le<uint64_t>(2);
    for (int k = 0; k < 2; ++k) {
      w.le<uint32_t>(0);
      w.le<uint64_t>(2);
      w.le<uint8_t>(1);
      w.le<uint8_t>(2);
    }
    write(dir, "nested", GgufBuilder().add_raw("nested", 9, w.bytes).build());
  }
  {
    std::vector<uint8_t> half(64, 0x3c);
    std::vector<uint8_t> q8(34, 0);
    write(dir, "tensors", GgufBuilder()
                              .add_tensor_f32("f32", {4, 2}, ramp(8))
                              .add_tensor("f16", 1, {8, 2}, half.data(), 32)
                              .add_tensor("bf16", 30, {4, 1, 2, 2}, half.data(), 32)
                              .add_tensor("q8_0", 8, {32}, q8.data(), q8.size())
                              .build());
  }
  {
    // A tiny llama model that Model::load accepts: 1 layer, n_embd 8, 2 heads, 1 KV head, n_ff 16, 6 tokens.
    const uint64_t d = 8, kv = 4, ff = 16, V = 6;
    GgufBuilder b;
    b.add_string("general.architecture", "llama")
        .add_u32("llama.embedding_length", 8).add_u32("llama.block_count", 1)
        .add_u32("llama.attention.head_count", 2).add_u32("llama.attention.head_count_kv", 1)
        .add_u32("llama.feed_forward_length", 16).add_u32("llama.context_length", 32)
        .add_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f).add_f32("llama.rope.freq_base", 10000.0f)
        .add_string("tokenizer.ggml.model", "llama")
        .add_string_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "\xE2\x96\x81" "a", "b", "<0x0A>"})
        .add_f32_array("tokenizer.ggml.scores", {0, 0, 0, -1, -2, 0})
        .add_i32_array("tokenizer.ggml.token_type", {2, 3, 3, 1, 1, 6})
        .add_u32("tokenizer.ggml.bos_token_id", 1).add_u32("tokenizer.ggml.eos_token_id", 2);
    b.add_tensor_f32("token_embd.weight", {d, V}, ramp(d * V));
    b.add_tensor_f32("output_norm.weight", {d}, ramp(d));
    b.add_tensor_f32("blk.0.attn_norm.weight", {d}, ramp(d));
    b.add_tensor_f32("blk.0.attn_q.weight", {d, d}, ramp(d * d));
    b.add_tensor_f32("blk.0.attn_k.weight", {d, kv}, ramp(d * kv));
    b.add_tensor_f32("blk.0.attn_v.weight", {d, kv}, ramp(d * kv));
    b.add_tensor_f32("blk.0.attn_output.weight", {d, d}, ramp(d * d));
    b.add_tensor_f32("blk.0.ffn_norm.weight", {d}, ramp(d));
    b.add_tensor_f32("blk.0.ffn_gate.weight", {d, ff}, ramp(d * ff));
    b.add_tensor_f32("blk.0.ffn_up.weight", {d, ff}, ramp(d * ff));
    b.add_tensor_f32("blk.0.ffn_down.weight", {ff, d}, ramp(d * ff));
    write(dir, "tiny_llama", b.build());
  }
  return 0;
}
