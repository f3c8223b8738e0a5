// Tokenizer and streaming detokenizer: the reference tokenisation of stories260K, round trips on real and random
// text, byte fallback, UTF-8 repair in the stream, and rejection of broken tokenizer metadata.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>

#include "gguf/gguf.hpp"
#include "support/gguf_builder.hpp"
#include "support/tokenizer.hpp"
#include "support/paths.hpp"
#include "tokenizer/tokenizer.hpp"
#include "util/error.hpp"
#include "support/random_inputs.hpp"

using infokv::Error;
using infokv::GgufFile;
using infokv::Status;
using infokv::StreamingDetokenizer;
using infokv::Tokenizer;
using infokv::TokenType;
using infokv_test::GgufBuilder;
using infokv_test::expect_tokenizer_status;
using infokv_test::load_tokenizer;

namespace {

const std::string kFffd = "\xEF\xBF\xBD";

std::string model_path() { return infokv_test::models_dir() + "/stories260K/stories260K.gguf"; }

std::string read_file(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Loaded once: every test below uses the same vocabulary, and a missing model must fail loudly, not skip.
const Tokenizer *stories_tokenizer() {
  static std::unique_ptr<Tokenizer> tok;
  if (!tok && std::filesystem::exists(model_path())) tok = std::make_unique<Tokenizer>(Tokenizer::from_gguf(GgufFile(model_path())));
  return tok.get();
}

#define REQUIRE_STORIES(tok)                                                                                          \
  const Tokenizer *tok##_ptr = stories_tokenizer();                                                                  \
  ASSERT_NE(tok##_ptr, nullptr) << "model file " << model_path()                                                      \
                                << " is missing (set INFOKV_MODELS_DIR to the folder holding stories260K/)";         \
  const Tokenizer &tok = *tok##_ptr

// Strict UTF-8 check written independently of the detokenizer (Unicode Table 3-7).
bool valid_utf8(const std::string &s) {
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<uint8_t>(s[i]);
    size_t len;
    uint32_t cp;
    if (c < 0x80) { len = 1; cp = c; }
    else if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; }
    else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; }
    else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; }
    else return false;
    if (i + len > s.size()) return false;
    for (size_t j = 1; j < len; ++j) {
      auto b = static_cast<uint8_t>(s[i + j]);
      if ((b & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (b & 0x3F);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

void append_utf8(std::string &s, uint32_t cp) {
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Random text mixing in-vocabulary ASCII words with accents, CJK, emoji and other characters the 512-token
// vocabulary lacks. U+2581 is left out: SentencePiece cannot tell a literal '▁' from an escaped space.
std::string random_utf8(std::mt19937_64 &rng, size_t max_chars) {
  std::uniform_int_distribution<size_t> len_d(0, max_chars);
  std::uniform_int_distribution<int> kind_d(0, 9);
  std::string s;
  size_t n = len_d(rng);
  for (size_t k = 0; k < n; ++k) {
    uint32_t cp;
    switch (kind_d(rng)) {
      case 0: case 1: case 2: case 3: cp = std::uniform_int_distribution<uint32_t>(0x20, 0x7E)(rng); break;
      case 4: cp = ' '; break;
      case 5: cp = std::uniform_int_distribution<uint32_t>(0xA0, 0x7FF)(rng); break;
      case 6: cp = std::uniform_int_distribution<uint32_t>(0x4E00, 0x9FFF)(rng); break;
      case 7: cp = std::uniform_int_distribution<uint32_t>(0x1F300, 0x1FAFF)(rng); break;
      case 8: cp = std::uniform_int_distribution<uint32_t>(0x10000, 0x10FFFF)(rng); break;
      default: cp = std::uniform_int_distribution<uint32_t>(1, 0x1F)(rng); break;  // control characters, \n, \t
    }
    if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;
    if (cp == 0x2581) cp = 'x';
    append_utf8(s, cp);
  }
  return s;
}

int32_t byte_token(const Tokenizer &tok, uint8_t b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "<0x%02X>", b);
  for (int32_t id = 0; id < tok.n_vocab(); ++id)
    if (tok.piece(id) == buf) return id;
  return -1;
}

// Minimal extraction from reference.json: the array or string that follows "key":.
std::vector<int32_t> json_int_array(const std::string &json, const std::string &key) {
  size_t at = json.find("\"" + key + "\"");
  std::vector<int32_t> out;
  if (at == std::string::npos) return out;
  size_t open = json.find('[', at), close = json.find(']', open);
  std::stringstream ss(json.substr(open + 1, close - open - 1));
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::stoi(item));
  return out;
}

std::string json_string(const std::string &json, const std::string &key) {
  size_t at = json.find("\"" + key + "\"");
  if (at == std::string::npos) return "";
  size_t q = json.find('"', json.find(':', at) + 1);
  std::string out;
  for (size_t i = q + 1; i < json.size() && json[i] != '"'; ++i) {
    if (json[i] == '\\') ++i;
    out += json[i];
  }
  return out;
}

std::string stream_all(const Tokenizer &tok, const std::vector<int32_t> &ids, bool *partial_seen) {
  StreamingDetokenizer st(tok);
  std::string out;
  for (int32_t id : ids) {
    std::string chunk = st.push(id);
    if (!valid_utf8(chunk)) *partial_seen = true;
    out += chunk;
  }
  out += st.flush();
  return out;
}

}  // namespace

// ---- the real vocabulary ----

TEST(TokenizerStories, ReadsVocabularyMetadata) {
  REQUIRE_STORIES(tok);
  EXPECT_EQ(tok.kind(), infokv::TokenizerKind::spm);
  EXPECT_EQ(tok.model_name(), "llama");
  EXPECT_EQ(tok.n_vocab(), 512);
  EXPECT_EQ(tok.bos(), 1);
  EXPECT_EQ(tok.eos(), 2);
  EXPECT_TRUE(tok.add_bos());
  EXPECT_EQ(tok.type(0), TokenType::unknown);
  EXPECT_EQ(tok.type(1), TokenType::control);
  EXPECT_EQ(tok.piece(403), "\xE2\x96\x81Once");
}

TEST(TokenizerStories, EncodesReferencePromptLikeLlamaCpp) {
  REQUIRE_STORIES(tok);
  const std::string ref_path = infokv_test::models_dir() + "/stories260K/reference.json";
  ASSERT_TRUE(std::filesystem::exists(ref_path)) << ref_path << " is missing";
  const std::string json = read_file(ref_path);
  std::vector<int32_t> expected = json_int_array(json, "prompt_token_ids_without_bos");
  ASSERT_EQ(expected, (std::vector<int32_t>{403, 407, 261, 378})) << "reference.json changed";
  expected.insert(expected.begin(), 1);
  EXPECT_EQ(tok.encode("Once upon a time", true), expected);
  EXPECT_EQ(tok.token_bytes(403), " Once");
  EXPECT_EQ(tok.token_bytes(378), " time");
}

TEST(TokenizerStories, DecodesReferenceGenerationToFullText) {
  REQUIRE_STORIES(tok);
  const std::string json = read_file(infokv_test::models_dir() + "/stories260K/reference.json");
  std::vector<int32_t> ids = {1};
  for (int32_t id : json_int_array(json, "prompt_token_ids_without_bos")) ids.push_back(id);
  for (int32_t id : json_int_array(json, "generated_ids_after_prompt")) ids.push_back(id);
  ASSERT_GT(ids.size(), 40u);
  // BOS decodes to nothing; the first piece carries SentencePiece's leading space.
  EXPECT_EQ(tok.decode(ids), " " + json_string(json, "full_text"));
}

TEST(TokenizerStories, EmptyTextIsOnlyBos) {
  REQUIRE_STORIES(tok);
  EXPECT_EQ(tok.encode("", true), (std::vector<int32_t>{1}));
  EXPECT_TRUE(tok.encode("", false).empty());
}

TEST(TokenizerStories, ControlAndUnknownTokensDecodeToNothing) {
  REQUIRE_STORIES(tok);
  EXPECT_EQ(tok.token_bytes(0), "");
  EXPECT_EQ(tok.token_bytes(1), "");
  EXPECT_EQ(tok.token_bytes(2), "");
  EXPECT_EQ(tok.token_bytes(byte_token(tok, 0x41)), "A");
  EXPECT_EQ(tok.token_bytes(byte_token(tok, 0x00)), std::string(1, '\0'));
}

TEST(TokenizerStories, OutOfRangeIdsThrowOutOfRange) {
  REQUIRE_STORIES(tok);
  for (int32_t bad : {-1, 512, 1 << 30}) {
    try {
      tok.token_bytes(bad);
      ADD_FAILURE() << "token_bytes(" << bad << ") did not throw";
    } catch (const Error &e) {
      EXPECT_EQ(e.status(), Status::out_of_range) << e.what();
    }
  }
  EXPECT_THROW(tok.decode({403, 512}), Error);
  StreamingDetokenizer st(tok);
  EXPECT_EQ(st.push(byte_token(tok, 0xE2)), "");
  EXPECT_THROW(st.push(-5), Error);
  // The failed push left the held byte alone: the character still completes.
  EXPECT_EQ(st.push(byte_token(tok, 0x82)), "");
  EXPECT_EQ(st.push(byte_token(tok, 0xAC)), "\xE2\x82\xAC");
}

TEST(TokenizerStories, RoundTripsEveryCorpusLine) {
  REQUIRE_STORIES(tok);
  const std::string dir = infokv_test::corpora_dir();
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << "corpora folder " << dir << " is missing (set INFOKV_CORPORA_DIR)";
  size_t files = 0, lines = 0, failures = 0;
  for (const auto &entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".txt") continue;
    ++files;
    std::ifstream in(entry.path());
    std::string line;
    while (std::getline(in, line)) {
      ++lines;
      std::vector<int32_t> ids = tok.encode(line, false);
      // The space prefix is the only change, and only for non-empty text.
      std::string expect = line.empty() ? "" : " " + line;
      if (tok.decode(ids) != expect && failures++ < 5)
        ADD_FAILURE() << entry.path().filename() << ": round trip of \"" << line << "\" gave \"" << tok.decode(ids) << "\"";
    }
  }
  EXPECT_GE(files, 3u);
  EXPECT_GT(lines, 1000u);
  EXPECT_EQ(failures, 0u);
}

TEST(TokenizerStories, RoundTripsWholeTextWithNewlines) {
  REQUIRE_STORIES(tok);
  const std::string path = infokv_test::corpora_dir() + "/pp_excerpt.txt";
  ASSERT_TRUE(std::filesystem::exists(path)) << path << " is missing";
  const std::string text = read_file(path);
  std::vector<int32_t> ids = tok.encode(text, true);
  ASSERT_EQ(ids.front(), 1);
  EXPECT_EQ(tok.decode(ids), " " + text);
  bool partial = false;
  EXPECT_EQ(stream_all(tok, ids, &partial), " " + text);
  EXPECT_FALSE(partial);
}

TEST(TokenizerStories, UnknownCharactersFallBackToByteTokens) {
  REQUIRE_STORIES(tok);
  const std::string emoji = "\xF0\x9F\x98\x80";  // U+1F600, not in the vocabulary
  std::vector<int32_t> ids = tok.encode(emoji, false);
  ASSERT_EQ(ids.size(), 5u);
  EXPECT_EQ(tok.piece(ids[0]), "\xE2\x96\x81");
  for (size_t k = 1; k < 5; ++k) {
    EXPECT_EQ(tok.type(ids[k]), TokenType::byte);
    EXPECT_EQ(ids[k], byte_token(tok, static_cast<uint8_t>(emoji[k - 1])));
  }
  EXPECT_EQ(tok.decode(ids), " " + emoji);
}

TEST(TokenizerStories, RoundTripsRandomUtf8AndStreamsWholeCharacters) {
  REQUIRE_STORIES(tok);
  std::mt19937_64 rng(infokv_test::test_seed());
  for (int iter = 0; iter < 2000; ++iter) {
    const std::string text = random_utf8(rng, 40);
    SCOPED_TRACE("iteration " + std::to_string(iter));
    std::vector<int32_t> ids = tok.encode(text, iter % 2 == 0);
    for (int32_t id : ids) ASSERT_TRUE(tok.valid(id));
    const std::string expect = text.empty() ? "" : " " + text;
    ASSERT_EQ(tok.decode(ids), expect);
    bool partial = false;
    ASSERT_EQ(stream_all(tok, ids, &partial), expect);
    ASSERT_FALSE(partial) << "a chunk ended inside a character";
  }
}

TEST(TokenizerStories, RoundTripsArbitraryBytes) {
  REQUIRE_STORIES(tok);
  std::mt19937_64 rng(infokv_test::test_seed());
  for (int iter = 0; iter < 2000; ++iter) {
    std::string bytes(std::uniform_int_distribution<size_t>(0, 24)(rng), '\0');
    for (char &c : bytes) c = static_cast<char>(rng() & 0xFF);
    if (bytes.find("\xE2\x96\x81") != std::string::npos) continue;
    std::vector<int32_t> ids = tok.encode(bytes, false);  // never throws, whatever the bytes
    ASSERT_EQ(tok.decode(ids), bytes.empty() ? "" : " " + bytes);
    // The stream always produces valid UTF-8, whatever came in.
    bool partial = false;
    std::string streamed = stream_all(tok, ids, &partial);
    ASSERT_FALSE(partial);
    ASSERT_TRUE(valid_utf8(streamed));
  }
}

TEST(TokenizerStories, FingerprintIsStable) {
  REQUIRE_STORIES(tok);
  Tokenizer again = Tokenizer::from_gguf(GgufFile(model_path()));
  EXPECT_EQ(tok.fingerprint(), again.fingerprint());
  EXPECT_NE(tok.fingerprint(), 0u);
}

// ---- streaming detokenizer on hand-made byte sequences ----

namespace {

// Streams the bytes one byte token at a time; returns the chunks.
std::vector<std::string> stream_bytes(const Tokenizer &tok, const std::string &bytes, bool flush = true) {
  StreamingDetokenizer st(tok);
  std::vector<std::string> chunks;
  for (char c : bytes) chunks.push_back(st.push(byte_token(tok, static_cast<uint8_t>(c))));
  if (flush) chunks.push_back(st.flush());
  return chunks;
}

std::string joined(const std::vector<std::string> &chunks) {
  std::string s;
  for (const auto &c : chunks) s += c;
  return s;
}

}  // namespace

TEST(StreamingDetokenizer, HoldsMultiByteCharacterUntilComplete) {
  REQUIRE_STORIES(tok);
  auto chunks = stream_bytes(tok, "a\xE2\x82\xAC\xF0\x9F\x98\x80");
  ASSERT_EQ(chunks.size(), 9u);
  EXPECT_EQ(chunks[0], "a");
  EXPECT_EQ(chunks[1], "");
  EXPECT_EQ(chunks[2], "");
  EXPECT_EQ(chunks[3], "\xE2\x82\xAC");
  EXPECT_EQ(chunks[4] + chunks[5] + chunks[6], "");
  EXPECT_EQ(chunks[7], "\xF0\x9F\x98\x80");
  EXPECT_EQ(chunks[8], "");
}

TEST(StreamingDetokenizer, ReplacesEachMaximalInvalidSubpartOnce) {
  REQUIRE_STORIES(tok);
  struct Case {
    std::string in, out;
  };
  const std::string F = kFffd;
  const std::vector<Case> cases = {
      {"\xFF", F},
      {"\x80", F},
      {"\xC0\xAF", F + F},                      // overlong lead
      {"\xC1\xBF", F + F},
      {"\xE0\x80\xAF", F + F + F},              // overlong 3-byte
      {"\xED\xA0\x80", F + F + F},              // surrogate U+D800
      {"\xF4\x90\x80\x80", F + F + F + F},      // above U+10FFFF
      {"\xF5\x80", F + F},
      {"\xE2\x82" "A", F + "A"},                // truncated 3-byte: one U+FFFD for the two bytes
      {"\xF0\x9F\x98" "b\xC3\xA9", F + "b\xC3\xA9"},
      {"\xE2\x82\xE2\x82\xAC", F + "\xE2\x82\xAC"},
      {"ok\xF0\x9F", "ok" + F},                 // flushed while incomplete
      {"\xC3", F},
  };
  for (const Case &c : cases) {
    auto chunks = stream_bytes(tok, c.in);
    EXPECT_EQ(joined(chunks), c.out) << "input of " << c.in.size() << " bytes";
    for (const auto &chunk : chunks) EXPECT_TRUE(valid_utf8(chunk));
  }
}

TEST(StreamingDetokenizer, InvalidPrefixDoesNotBlockLaterText) {
  REQUIRE_STORIES(tok);
  StreamingDetokenizer st(tok);
  EXPECT_EQ(st.push(byte_token(tok, 0xE2)), "");
  EXPECT_EQ(st.push(byte_token(tok, 0x82)), "");
  // A piece that cannot continue the character settles it at once.
  EXPECT_EQ(st.push(403), kFffd + " Once");
  EXPECT_EQ(st.flush(), "");
  // flush resets: nothing is carried into the next stream.
  EXPECT_EQ(st.push(byte_token(tok, 0xF0)), "");
  EXPECT_EQ(st.flush(), kFffd);
  EXPECT_EQ(st.push(407), " upon");
}

// ---- synthetic vocabularies ----

namespace {

// A tiny SPM vocabulary: <unk>, <s>, </s>, then `pieces` with `scores`.
GgufBuilder tiny_vocab(const std::vector<std::string> &pieces, const std::vector<float> &scores) {
  std::vector<std::string> toks = {"<unk>", "<s>", "</s>"};
  std::vector<float> sc = {0, 0, 0};
  std::vector<int32_t> types = {2, 3, 3};
  for (size_t k = 0; k < pieces.size(); ++k) {
    toks.push_back(pieces[k]);
    sc.push_back(scores[k]);
    types.push_back(pieces[k].size() == 6 && pieces[k].compare(0, 3, "<0x") == 0 ? 6 : 1);
  }
  GgufBuilder b;
  b.add_string("general.architecture", "llama")
      .add_string("tokenizer.ggml.model", "llama")
      .add_string_array("tokenizer.ggml.tokens", toks)
      .add_f32_array("tokenizer.ggml.scores", sc)
      .add_i32_array("tokenizer.ggml.token_type", types)
      .add_u32("tokenizer.ggml.bos_token_id", 1)
      .add_u32("tokenizer.ggml.eos_token_id", 2)
      .add_u32("tokenizer.ggml.unknown_token_id", 0);
  return b;
}

}  // namespace

TEST(TokenizerSynthetic, MergesHighestScoreFirstAndLeftmostOnTies) {
  const std::vector<std::string> pieces = {"a", "b", "ab", "bb"};
  {
    GgufBuilder b = tiny_vocab(pieces, {-1, -1, -5, -5});
    b.add_bool("tokenizer.ggml.add_space_prefix", false);
    Tokenizer t = load_tokenizer(b);
    EXPECT_EQ(t.encode("abb", false), (std::vector<int32_t>{5, 4}));  // tie: "ab" is leftmost
  }
  {
    GgufBuilder b = tiny_vocab(pieces, {-1, -1, -5, -4});
    b.add_bool("tokenizer.ggml.add_space_prefix", false);
    Tokenizer t = load_tokenizer(b);
    EXPECT_EQ(t.encode("abb", false), (std::vector<int32_t>{3, 6}));  // "bb" scores higher
  }
}

TEST(TokenizerSynthetic, MissingByteTokensFallBackToUnknown) {
  GgufBuilder b = tiny_vocab({"\xE2\x96\x81", "a", "<0x7A>"}, {-1, -1, 0});
  Tokenizer t = load_tokenizer(b);
  // 'z' has a byte token; 'q' has neither piece nor byte token and becomes <unk>, which decodes to nothing.
  EXPECT_EQ(t.encode("azq", true), (std::vector<int32_t>{1, 3, 4, 5, 0}));
  EXPECT_EQ(t.decode(t.encode("azq", true)), " az");
}

TEST(TokenizerSynthetic, HonoursAddBosAndSpacePrefixFlags) {
  GgufBuilder b = tiny_vocab({"\xE2\x96\x81", "a"}, {-1, -1});
  b.add_bool("tokenizer.ggml.add_bos_token", false).add_bool("tokenizer.ggml.add_space_prefix", false);
  Tokenizer t = load_tokenizer(b);
  EXPECT_FALSE(t.add_bos());
  EXPECT_EQ(t.encode("a a", false), (std::vector<int32_t>{4, 3, 4}));
}

TEST(TokenizerSynthetic, OptionalArraysDefaultAndNoneIdsMeanAbsent) {
  GgufBuilder b;
  b.add_string("tokenizer.ggml.model", "llama")
      .add_string_array("tokenizer.ggml.tokens", {"<unk>", "\xE2\x96\x81", "x"})
      .add_u32("tokenizer.ggml.bos_token_id", 0xFFFFFFFFu)
      .add_i32("tokenizer.ggml.eos_token_id", -1);
  Tokenizer t = load_tokenizer(b);
  EXPECT_EQ(t.bos(), -1);
  EXPECT_EQ(t.eos(), -1);
  EXPECT_EQ(t.type(2), TokenType::normal);
  EXPECT_EQ(t.score(2), 0.0f);
  EXPECT_EQ(t.encode("x", true), (std::vector<int32_t>{1, 2}));  // no BOS to add
}

TEST(TokenizerSynthetic, FingerprintChangesWithScoresAndSpecialIds) {
  const std::vector<std::string> pieces = {"a", "b", "ab"};
  uint64_t base = load_tokenizer(tiny_vocab(pieces, {-1, -1, -2})).fingerprint();
  EXPECT_EQ(base, load_tokenizer(tiny_vocab(pieces, {-1, -1, -2})).fingerprint());
  EXPECT_NE(base, load_tokenizer(tiny_vocab(pieces, {-1, -1, -3})).fingerprint());
  EXPECT_NE(base, load_tokenizer(tiny_vocab({"a", "b", "ba"}, {-1, -1, -2})).fingerprint());
  GgufBuilder other_eos = tiny_vocab(pieces, {-1, -1, -2});
  other_eos.add_u32("tokenizer.ggml.padding_token_id", 3);  // not part of the fingerprint
  EXPECT_EQ(base, load_tokenizer(other_eos).fingerprint());
}

TEST(TokenizerSynthetic, RejectsBrokenMetadata) {
  {
    GgufBuilder b;
    b.add_string("general.architecture", "llama");
    expect_tokenizer_status(b, Status::bad_model, "tokenizer.ggml.model");
  }
  {
    GgufBuilder b;
    b.add_string("tokenizer.ggml.model", "llama");
    expect_tokenizer_status(b, Status::bad_model, "tokenizer.ggml.tokens");
  }
  {
    GgufBuilder b;
    b.add_string("tokenizer.ggml.model", "llama").add_i32_array("tokenizer.ggml.tokens", {1, 2});
    expect_tokenizer_status(b, Status::bad_model, "tokenizer.ggml.tokens");
  }
  {
    GgufBuilder b;
    b.add_string("tokenizer.ggml.model", "llama")
        .add_string_array("tokenizer.ggml.tokens", {"<unk>", "a"})
        .add_f32_array("tokenizer.ggml.scores", {0});
    expect_tokenizer_status(b, Status::bad_model, "tokenizer.ggml.scores");
  }
  {
    GgufBuilder b;
    b.add_string("tokenizer.ggml.model", "llama")
        .add_string_array("tokenizer.ggml.tokens", {"<unk>", "a"})
        .add_i32_array("tokenizer.ggml.token_type", {2, 1, 1});
    expect_tokenizer_status(b, Status::bad_model, "tokenizer.ggml.token_type");
  }
  {
    GgufBuilder b;
    b.add_string("tokenizer.ggml.model", "llama")
        .add_string_array("tokenizer.ggml.tokens", {"<unk>", "a"})
        .add_i32_array("tokenizer.ggml.token_type", {2, 9});
    expect_tokenizer_status(b, Status::bad_model, "token type 9");
  }
  {
    GgufBuilder b;
    b.add_string("tokenizer.ggml.model", "llama")
        .add_string_array("tokenizer.ggml.tokens", {"<unk>", "a"})
        .add_i32_array("tokenizer.ggml.token_type", {2, 6});
    expect_tokenizer_status(b, Status::bad_model, "<0xXX>");
  }
  {
    GgufBuilder b;
    b.add_string("tokenizer.ggml.model", "llama").add_string_array("tokenizer.ggml.tokens", {});
    expect_tokenizer_status(b, Status::bad_model, "empty");
  }
  for (const char *key : {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id"}) {
    GgufBuilder b;
    b.add_string("tokenizer.ggml.model", "llama").add_string_array("tokenizer.ggml.tokens", {"<unk>", "a"}).add_u32(key, 2);
    expect_tokenizer_status(b, Status::bad_model, key);
  }
  {
    GgufBuilder b;
    b.add_string("tokenizer.ggml.model", "llama").add_string_array("tokenizer.ggml.tokens", {"<unk>"}).add_i32(
        "tokenizer.ggml.bos_token_id", -7);
    expect_tokenizer_status(b, Status::bad_model, "bos_token_id");
  }
  {
    GgufBuilder b;
    b.add_string("tokenizer.ggml.model", "llama")
        .add_string_array("tokenizer.ggml.tokens", {"<unk>"})
        .add_u32("tokenizer.ggml.add_bos_token", 1);
    expect_tokenizer_status(b, Status::bad_model, "add_bos_token");
  }
}

TEST(TokenizerSynthetic, RejectsUnsupportedModelNamingIt) {
  GgufBuilder b;
  b.add_string("tokenizer.ggml.model", "t5").add_string_array("tokenizer.ggml.tokens", {"a"});
  expect_tokenizer_status(b, Status::unsupported, "'t5'");
}
