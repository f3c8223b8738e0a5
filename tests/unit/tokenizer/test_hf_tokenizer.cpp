// tokenizer.json files made with the Hugging Face `tokenizers` library (tests/reference/make_tok_refs.py, fixtures
// under tests/data/hf_*), read through Model::load_tokenizer and compared id for id with that library: Qwen2's layout
// (NFC normaliser, Qwen2's Split regex + ByteLevel) and Llama 2's SentencePiece-style BPE with byte fallback in both
// of its layouts (Prepend + Replace normaliser; Metaspace pre-tokeniser). Also BOS, decoding, and refusal of
// layouts infokv does not implement.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "model/model.hpp"
#include "support/paths.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tokenizer/unicode.hpp"
#include "support/tokenizer.hpp"
#include "util/error.hpp"
#include "util/json_reader.hpp"

using infokv::JsonValue;
using infokv::SpmPrefix;
using infokv::Status;
using infokv::Tokenizer;
using infokv::TokenizerKind;
using infokv_test::expect_refs;
using infokv_test::RefCase;
using infokv_test::read_refs;

namespace {

std::string fixture(const std::string &name) { return infokv_test::test_data_dir() + "/" + name; }

Tokenizer load(const std::string &name) { return infokv::Model::load_tokenizer(fixture(name)); }

std::string read_text(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// `name`/tokenizer.json with the first `from` replaced by `to`, loaded without a tokenizer_config.json.
void expect_refused(const std::string &name, const std::string &from, const std::string &to, Status status,
                    const std::string &needle) {
  std::string text = read_text(fixture(name) + "/tokenizer.json");
  const size_t at = text.find(from);
  ASSERT_NE(at, std::string::npos) << "fixture " << name << " has no " << from;
  text.replace(at, from.size(), to);
  try {
    const JsonValue j = JsonValue::parse(text, static_cast<int32_t>(Status::bad_model), "tokenizer.json");
    Tokenizer::from_hf(j, nullptr, nullptr);
    ADD_FAILURE() << "loaded " << name << " with " << to << "; expected " << needle;
  } catch (const infokv::Error &e) {
    EXPECT_EQ(e.status(), status) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

bool has_added_text(const std::string &s) {
  for (const char *t : {"<s>", "</s>", "<unk>", "<|endoftext|>", "<|im_start|>", "<|im_end|>"})
    if (s.find(t) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST(HfTokenizerQwen2, LoadsAsByteLevelBpeWithNfc) {
  const Tokenizer tok = load("hf_qwen2_tiny");
  EXPECT_EQ(tok.kind(), TokenizerKind::bpe);
  EXPECT_EQ(tok.bpe_pre(), infokv::BpePre::qwen2);
  EXPECT_TRUE(tok.normalizes_nfc());
  EXPECT_EQ(tok.n_vocab(), 1203);
  EXPECT_FALSE(tok.add_bos());
  EXPECT_EQ(tok.bos(), -1);
  EXPECT_EQ(tok.eos(), tok.find_piece("<|im_end|>"));
  EXPECT_TRUE(tok.is_eog(tok.find_piece("<|endoftext|>")));
}

TEST(HfTokenizerQwen2, MatchesHuggingFaceTokenizersExactly) { expect_refs(load("hf_qwen2_tiny"), "hf_qwen2_tiny_refs.txt"); }

TEST(HfTokenizerQwen2, NormalisesToNfcBeforeSplitting) {
  const Tokenizer tok = load("hf_qwen2_tiny");
  // "e" + COMBINING ACUTE is "é"; ANGSTROM SIGN is "Å"; Hangul jamo compose into one syllable.
  EXPECT_EQ(tok.encode("cafe\xCC\x81", false), tok.encode("caf\xC3\xA9", false));
  EXPECT_EQ(tok.decode(tok.encode("\xE2\x84\xAB", false)), "\xC3\x85");
  EXPECT_EQ(tok.decode(tok.encode("\xE1\x84\x80\xE1\x85\xA1", false)), "\xEA\xB0\x80");
  // Added tokens are not normalised, and invalid bytes survive next to text that is.
  EXPECT_EQ(tok.decode(tok.encode("\xFF" "e\xCC\x81<|im_end|>", false)), "\xFF\xC3\xA9");
  for (const RefCase &c : read_refs("hf_qwen2_tiny_refs.txt")) {
    if (has_added_text(c.text)) continue;  // special tokens decode to nothing
    std::string expect = c.text;
    infokv::unicode::nfc(c.text, &expect);
    EXPECT_EQ(tok.decode(tok.encode(c.text, false)), expect);
  }
}

TEST(HfTokenizerLlama2, PrependLayoutMatchesHuggingFaceTokenizersExactly) {
  const Tokenizer tok = load("hf_llama2_tiny");
  EXPECT_EQ(tok.kind(), TokenizerKind::spm);
  EXPECT_EQ(tok.model_name(), "llama");
  EXPECT_EQ(tok.spm_prefix(), SpmPrefix::prepend);
  expect_refs(tok, "hf_llama2_tiny_refs.txt");
}

TEST(HfTokenizerLlama2, MetaspaceLayoutMatchesHuggingFaceTokenizersExactly) {
  const Tokenizer tok = load("hf_llama2meta_tiny");
  EXPECT_EQ(tok.kind(), TokenizerKind::spm);
  EXPECT_EQ(tok.spm_prefix(), SpmPrefix::first);
  expect_refs(tok, "hf_llama2meta_tiny_refs.txt");
}

TEST(HfTokenizerLlama2, SpecialIdsBosAndByteTokens) {
  for (const char *name : {"hf_llama2_tiny", "hf_llama2meta_tiny"}) {
    const Tokenizer tok = load(name);
    EXPECT_EQ(tok.n_vocab(), 1259) << name;
    EXPECT_EQ(tok.bos(), 1) << name;
    EXPECT_EQ(tok.eos(), 2) << name;
    EXPECT_TRUE(tok.add_bos()) << name;
    EXPECT_EQ(tok.type(0), infokv::TokenType::unknown) << name;
    EXPECT_EQ(tok.type(3 + 0xE2), infokv::TokenType::byte) << name;
    EXPECT_EQ(tok.token_bytes(3 + 0xE2), "\xE2") << name;
    const std::vector<int32_t> ids = tok.encode("Hello", true);
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids[0], 1) << name;
    EXPECT_EQ(tok.encode("Hello", false), std::vector<int32_t>(ids.begin() + 1, ids.end())) << name;
    // Without parse_special "<s>" is text: '<', 's', '>' pieces, never BOS.
    for (int32_t id : tok.encode("<s>", false, false)) EXPECT_NE(id, 1) << name;
  }
}

// Decoding keeps the "▁" the encoder put in front as a space (as the GGUF "llama" path and llama.cpp do; the Hugging
// Face decoder strips it): the Prepend layout always adds one, the Metaspace one only where the text did not start
// with a space. Everything else, emoji and invalid UTF-8 through byte fallback included, comes back unchanged.
TEST(HfTokenizerLlama2, DecodesBackToTheText) {
  const Tokenizer pre = load("hf_llama2_tiny"), meta = load("hf_llama2meta_tiny");
  for (const RefCase &c : read_refs("hf_llama2_tiny_refs.txt")) {
    if (has_added_text(c.text) || c.text.empty()) continue;
    EXPECT_EQ(pre.decode(pre.encode(c.text, true)), " " + c.text);
    EXPECT_EQ(meta.decode(meta.encode(c.text, true)), c.text[0] == ' ' ? c.text : " " + c.text);
  }
  const std::string odd = "a\xFF\xC0 \xF0\x9F\x98\x80";
  EXPECT_EQ(pre.decode(pre.encode(odd, false)), " " + odd);
}

TEST(HfTokenizerLlama2, LayoutsHaveDifferentFingerprints) {
  EXPECT_NE(load("hf_llama2_tiny").fingerprint(), load("hf_llama2meta_tiny").fingerprint());
  EXPECT_EQ(load("hf_llama2_tiny").fingerprint(), load("hf_llama2_tiny").fingerprint());
}

TEST(HfTokenizer, RefusesLayoutsItDoesNotImplement) {
  const Status U = Status::unsupported, B = Status::bad_model;
  expect_refused("hf_qwen2_tiny", "\\\\p{N}|", "\\\\p{N}{1,2}|", U, "regex infokv does not know");
  expect_refused("hf_qwen2_tiny", "\"Isolated\"", "\"Removed\"", U, "behavior Isolated");
  expect_refused("hf_qwen2_tiny", "\"NFC\"", "\"NFKC\"", U, "normalizer 'NFKC'");
  expect_refused("hf_qwen2_tiny", "\"dropout\": null", "\"dropout\": 0.1", U, "dropout");
  expect_refused("hf_qwen2_tiny", "\"continuing_subword_prefix\": null", "\"continuing_subword_prefix\": \"##\"", U,
                 "continuing_subword_prefix");
  expect_refused("hf_llama2meta_tiny", "\"split\": false", "\"split\": true", U, "split");
  expect_refused("hf_llama2meta_tiny", "\"prepend_scheme\": \"first\"", "\"prepend_scheme\": \"sometimes\"", U,
                 "prepend_scheme 'sometimes'");
  expect_refused("hf_llama2_tiny", "\"content\": \"\xE2\x96\x81\"", "\"content\": \"_\"", U, "Prepend");
  expect_refused("hf_llama2_tiny", "\"unk_token\": \"<unk>\"", "\"unk_token\": \"<nope>\"", B, "unk_token '<nope>'");
  expect_refused("hf_llama2_tiny", "\"merges\": [", "\"merges\": [[\"\xE2\x96\x81\", \"zz-no\"],", B, "not in the vocabulary");
  expect_refused("hf_llama2_tiny", "\"merges\": [", "\"merges\": [\"nospace\",", B, "merge 0");
  expect_refused("hf_llama2_tiny", "\"type\": \"BPE\"", "\"type\": \"WordPiece\"", U, "'WordPiece'");
}

// Issue 38, weakness 3: a small hostile tokenizer.json must not cost memory out of proportion to its content.
// Sparse ids (one token at 2^24 - 1 once cost ~660 MB), repeated merges (2M once cost 475 MB) and merges of pieces
// the vocabulary lacks are refused with a message naming what is wrong.
TEST(HfTokenizer, RefusesSparseIdsRepeatedMergesAndMergesOutsideTheVocabulary) {
  const Status B = Status::bad_model;
  expect_refused("hf_qwen2_tiny", "\"!\": 0,", "\"!\": 16777215,", B, "token ids are sparse: the highest is 16777215");
  // a few holes are accepted (kept as unused ids), many are not
  expect_refused("hf_qwen2_tiny", "\"!\": 0,", "\"!\": 2000,", B, "token ids are sparse");
  expect_refused("hf_qwen2_tiny", "\"merges\": [", "\"merges\": [[\"\xC4\xA0\", \"t\"],", B,
                 "merge 1 '\xC4\xA0 t' repeats merge 0");
  expect_refused("hf_qwen2_tiny", "\"merges\": [", "\"merges\": [\"\xC4\xA0t \xC4\xA0t\",", B,
                 "merge 0: '\xC4\xA0t\xC4\xA0t' is not in the vocabulary");
  expect_refused("hf_qwen2_tiny", "\"merges\": [", "\"merges\": [[\"zz-not-a-token\", \"t\"],", B,
                 "merge 0: 'zz-not-a-token' is not in the vocabulary");
  // a hole near the top is fine: the id is named nowhere else, and the table grows by one
  std::string text = read_text(fixture("hf_qwen2_tiny") + "/tokenizer.json");
  const size_t at = text.find("\"!\": 0,");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 7, "\"!\": 1300,");
  const JsonValue j = JsonValue::parse(text, static_cast<int32_t>(Status::bad_model), "tokenizer.json");
  const Tokenizer t = Tokenizer::from_hf(j, nullptr, nullptr);
  EXPECT_EQ(t.find_piece("!"), 1300);
  EXPECT_GE(t.n_vocab(), 1301);
}
