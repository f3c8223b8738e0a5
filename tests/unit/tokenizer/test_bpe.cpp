// Byte-level BPE: exact ids against the Hugging Face tokenizers library (tests/reference/make_refs.py) with the
// SmolLM2 vocabulary under its own pre-tokeniser and under Llama 3's, round trips of arbitrary bytes, special-token
// handling, and rejection of broken BPE metadata.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <random>

#include "gguf/gguf.hpp"
#include "support/gguf_builder.hpp"
#include "support/util.hpp"
#include "support/tokenizer.hpp"
#include "support/paths.hpp"
#include "tokenizer/tokenizer.hpp"
#include "util/error.hpp"

using infokv::BpePre;
using infokv::Error;
using infokv::GgufFile;
using infokv::Status;
using infokv::Tokenizer;
using infokv_test::GgufBuilder;
using infokv_test::expect_refs;
using infokv_test::expect_tokenizer_status;
using infokv_test::load_tokenizer;
using infokv_test::RefCase;
using infokv_test::read_refs;
using infokv_test::smollm2_file;

TEST(BpeSmolLM2, ReadsVocabularyAndPreTokenizer) {
  REQUIRE_SMOLLM2(f);
  Tokenizer tok = Tokenizer::from_gguf(*f);
  EXPECT_EQ(tok.kind(), infokv::TokenizerKind::bpe);
  EXPECT_EQ(tok.bpe_pre(), BpePre::smollm);
  EXPECT_EQ(tok.n_vocab(), 49152);
  EXPECT_EQ(tok.bos(), 1);
  EXPECT_EQ(tok.eos(), 2);
  EXPECT_FALSE(tok.add_bos());
}

TEST(BpeSmolLM2, MatchesHuggingFaceTokenizersExactly) {
  REQUIRE_SMOLLM2(f);
  expect_refs(Tokenizer::from_gguf(*f), "bpe_smollm2_refs.txt");
}

TEST(BpeSmolLM2, Llama3PreTokenizerMatchesHuggingFaceExactly) {
  REQUIRE_SMOLLM2(f);
  Tokenizer tok = Tokenizer::from_gguf(*f, "llama-bpe");
  EXPECT_EQ(tok.bpe_pre(), BpePre::llama3);
  expect_refs(tok, "bpe_llama3pre_refs.txt");
}

// tokenizer.ggml.pre = "qwen2" (tests/reference/make_tok_refs.py). No NFC here: a GGUF does not say the model wants
// it, and llama.cpp does not apply it.
TEST(BpeSmolLM2, Qwen2PreTokenizerMatchesHuggingFaceExactly) {
  REQUIRE_SMOLLM2(f);
  Tokenizer tok = Tokenizer::from_gguf(*f, "qwen2");
  EXPECT_EQ(tok.bpe_pre(), BpePre::qwen2);
  EXPECT_FALSE(tok.normalizes_nfc());
  expect_refs(tok, "bpe_qwen2pre_refs.txt");
}

TEST(BpeSmolLM2, Qwen2SplitsEveryDigitWhereLlama3KeepsThree) {
  REQUIRE_SMOLLM2(f);
  const Tokenizer q = Tokenizer::from_gguf(*f, "qwen2"), l = Tokenizer::from_gguf(*f, "llama-bpe");
  EXPECT_EQ(q.pre_tokenize("x 12345 I'LL\n\n"), (std::vector<std::string>{"x", " ", "1", "2", "3", "4", "5", " I", "'LL", "\n\n"}));
  EXPECT_EQ(l.pre_tokenize("x 12345 I'LL\n\n"), (std::vector<std::string>{"x", " ", "123", "45", " I", "'LL", "\n\n"}));
}

TEST(BpeSmolLM2, RoundTripsReferenceTextsAndArbitraryBytes) {
  REQUIRE_SMOLLM2(f);
  for (const char *pre : {"smollm", "llama-bpe", "gpt2", "qwen2"}) {
    Tokenizer tok = Tokenizer::from_gguf(*f, pre);
    for (const RefCase &c : read_refs("bpe_smollm2_refs.txt")) {
      if (c.text.find("<|") != std::string::npos) continue;  // special tokens decode to nothing
      EXPECT_EQ(tok.decode(tok.encode(c.text, false)), c.text) << pre;
    }
    // The bytes the vocabulary has a token for (SmolLM2 lacks 21, e.g. 0xC0, 0xF5..0xFF); any string of them,
    // valid UTF-8 or not, must come back unchanged.
    std::vector<char> bytes;
    for (int b = 0; b < 256; ++b) {
      const std::string s(1, static_cast<char>(b));
      if (tok.decode(tok.encode(s, false)) == s) bytes.push_back(static_cast<char>(b));
    }
    EXPECT_EQ(bytes.size(), 235u) << pre;
    std::mt19937_64 rng(7);
    for (int k = 0; k < 300; ++k) {
      std::string s(static_cast<size_t>(rng() % 40), '\0');
      for (char &ch : s) ch = bytes[rng() % bytes.size()];
      if (s.find("<|") != std::string::npos) continue;
      EXPECT_EQ(tok.decode(tok.encode(s, false)), s) << pre;
    }
  }
}

TEST(BpeSmolLM2, InvalidUtf8BytesAreKeptAsBytes) {
  REQUIRE_SMOLLM2(f);
  Tokenizer tok = Tokenizer::from_gguf(*f);
  for (const std::string &s : {std::string("\x80"), std::string("a\xc3"), std::string("\xe2\x82 x"),
                              std::string("\xed\xa0\x80 surrogate"), std::string("\xe0\x80\xaf overlong"),
                              std::string("ok \xf4\x90\x80\x80 big")}) {
    const std::vector<int32_t> ids = tok.encode(s, false);
    EXPECT_FALSE(ids.empty());
    EXPECT_EQ(tok.decode(ids), s);
  }
}

TEST(BpeSmolLM2, BytesWithoutATokenAreDroppedNotReplaced) {
  REQUIRE_SMOLLM2(f);
  Tokenizer tok = Tokenizer::from_gguf(*f);
  const std::vector<int32_t> ids = tok.encode("a\xff\xc0" "b", false);
  for (int32_t id : ids) EXPECT_NE(id, 0) << "no <|endoftext|> for a missing byte";
  EXPECT_EQ(tok.decode(ids), "ab");
}

TEST(BpeSmolLM2, SpecialTokenTextIsPlainWithoutParseSpecial) {
  REQUIRE_SMOLLM2(f);
  Tokenizer tok = Tokenizer::from_gguf(*f);
  const std::string s = "<|im_start|>user";
  const std::vector<int32_t> with = tok.encode(s, false, true);
  ASSERT_FALSE(with.empty());
  EXPECT_EQ(with[0], 1);
  const std::vector<int32_t> without = tok.encode(s, false, false);
  for (int32_t id : without) EXPECT_NE(id, 1);
  EXPECT_EQ(tok.decode(without), s);
  EXPECT_EQ(tok.decode(with), "user");  // control tokens carry no text
}

TEST(BpeSmolLM2, FingerprintDependsOnPreTokenizer) {
  REQUIRE_SMOLLM2(f);
  EXPECT_EQ(Tokenizer::from_gguf(*f).fingerprint(), Tokenizer::from_gguf(*f, "smollm").fingerprint());
  EXPECT_NE(Tokenizer::from_gguf(*f).fingerprint(), Tokenizer::from_gguf(*f, "llama-bpe").fingerprint());
  EXPECT_NE(Tokenizer::from_gguf(*f, "qwen2").fingerprint(), Tokenizer::from_gguf(*f, "llama-bpe").fingerprint());
}

// ---- synthetic vocabularies ----

namespace {

// Byte-level characters: 'a','b','c' stand for themselves, "Ġ" (U+0120) for the space byte.
GgufBuilder tiny_bpe(const std::vector<std::string> &merges, const std::string &pre = "gpt2") {
  GgufBuilder b;
  b.add_string("tokenizer.ggml.model", "gpt2")
      .add_string("tokenizer.ggml.pre", pre)
      .add_string_array("tokenizer.ggml.tokens", {"<|end|>", "a", "b", "c", "\xC4\xA0", "ab", "abc", "\xC4\xA0" "a", "bc"})
      .add_i32_array("tokenizer.ggml.token_type", {3, 1, 1, 1, 1, 1, 1, 1, 1})
      .add_string_array("tokenizer.ggml.merges", merges)
      .add_u32("tokenizer.ggml.eos_token_id", 0);
  return b;
}

}  // namespace

TEST(BpeSynthetic, LowerRankMergesFirst) {
  // "abc": with a+b ranked before b+c the word becomes ab,c -> abc; with b+c first it stays a,bc.
  Tokenizer t1 = load_tokenizer(tiny_bpe({"a b", "b c", "ab c"}));
  EXPECT_EQ(t1.encode("abc", false), (std::vector<int32_t>{6}));
  Tokenizer t2 = load_tokenizer(tiny_bpe({"b c", "a b", "ab c"}));
  EXPECT_EQ(t2.encode("abc", false), (std::vector<int32_t>{1, 8}));
  EXPECT_EQ(t2.encode(" a<|end|>b", false), (std::vector<int32_t>{4, 1, 0, 2}));  // no merge "Ġ a" listed
  Tokenizer t3 = load_tokenizer(tiny_bpe({"\xC4\xA0 a"}));
  EXPECT_EQ(t3.encode(" a", false), (std::vector<int32_t>{7}));
}

TEST(BpeSynthetic, RejectsBrokenMetadataWithoutCrashing) {
  expect_tokenizer_status(tiny_bpe({"a b", "ab"}), Status::bad_model, "merges entry 1");
  expect_tokenizer_status(tiny_bpe({"a "}), Status::bad_model, "merges entry 0");
  expect_tokenizer_status(tiny_bpe({""}), Status::bad_model, "merges entry 0");
  expect_tokenizer_status(tiny_bpe({"a b"}, "deepseek-llm"), Status::unsupported, "'deepseek-llm'");
  GgufBuilder no_merges;
  no_merges.add_string("tokenizer.ggml.model", "gpt2").add_string_array("tokenizer.ggml.tokens", {"a"});
  expect_tokenizer_status(no_merges, Status::bad_model, "tokenizer.ggml.merges");
  GgufBuilder wrong_type;
  wrong_type.add_string("tokenizer.ggml.model", "gpt2")
      .add_string_array("tokenizer.ggml.tokens", {"a"})
      .add_i32_array("tokenizer.ggml.merges", {1, 2});
  expect_tokenizer_status(wrong_type, Status::bad_model, "tokenizer.ggml.merges");
}

#ifdef INFOKV_CLI_PATH
TEST(TokenizeCli, PrintsTheIdsOfATextAndOfAFile) {
  ASSERT_TRUE(std::filesystem::exists(infokv_test::smollm2_path()))
      << "SmolLM2 GGUF missing: run packaging/fetch_models.sh (or set INFOKV_SMOLLM2)";
  auto run = [](const std::string &args) {
    const std::string cmd = std::string(INFOKV_CLI_PATH) + " tokenize --model '" + infokv_test::smollm2_path() + "' " + args;
    const infokv_test::CommandOutput r = infokv_test::run_command(cmd);
    EXPECT_EQ(r.status, 0) << cmd;
    return r.out;
  };
  EXPECT_EQ(run("--text 'Hello world, 42'"), "19556 905 28 216 36 34\n");
  EXPECT_EQ(run("--text '<|im_start|>x' --json --special"), "{\"n_tokens\":2,\"ids\":[1,104]}\n");
  EXPECT_EQ(run("--text '<|im_start|>x' --json"), "{\"n_tokens\":8,\"ids\":[44,108,306,79,3738,108,46,104]}\n");
  const std::string path = (std::filesystem::temp_directory_path() / "infokv_tokenize_test.txt").string();
  std::ofstream(path) << "Hello world, 42";
  EXPECT_EQ(run("--file '" + path + "'"), "19556 905 28 216 36 34\n");
  std::filesystem::remove(path);
}
#endif
