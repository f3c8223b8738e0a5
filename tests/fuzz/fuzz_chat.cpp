// libFuzzer target for the chat templates' inputs: the input is split at NUL bytes into a template text followed by
// role/content pairs, rendered with the ChatML and Llama 3 formats over a tokenizer with ChatML markers (the
// hf_qwen2_tiny fixture; $INFOKV_FUZZ_TOKENIZER names another tokenizer.json). Any infokv::Error is fine (unknown
// roles, no format); a crash or a sanitizer report is a bug, and so is a control token inside a message's content:
// user text must never become markup (no injected turns).
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/chat.hpp"
#include "tokenizer/tokenizer.hpp"
#include "util/error.hpp"
#include "util/json_reader.hpp"

#ifndef INFOKV_TEST_DATA_DIR
#define INFOKV_TEST_DATA_DIR "tests/data"
#endif

namespace {

const infokv::Tokenizer &fuzz_tokenizer() {
  static const std::unique_ptr<infokv::Tokenizer> t = [] {
    const char *env = std::getenv("INFOKV_FUZZ_TOKENIZER");
    const std::string path = env != nullptr && *env != '\0' ? env : INFOKV_TEST_DATA_DIR "/hf_qwen2_tiny/tokenizer.json";
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const infokv::JsonValue j =
        infokv::JsonValue::parse(ss.str(), static_cast<int32_t>(infokv::Status::bad_model), path);
    return std::make_unique<infokv::Tokenizer>(infokv::Tokenizer::from_hf(j, nullptr, nullptr));
  }();
  return *t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const infokv::Tokenizer &tok = fuzz_tokenizer();  // a missing fixture throws here: the run fails loudly
  std::vector<std::string> parts(1);
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0) parts.emplace_back();
    else parts.back().push_back(static_cast<char>(data[i]));
  }
  std::vector<infokv::ChatMessage> msgs;
  for (size_t i = 1; i < parts.size(); i += 2)
    msgs.push_back({parts[i], i + 1 < parts.size() ? parts[i + 1] : std::string()});
  const bool gen = size > 0 && (data[0] & 1) != 0;
  std::vector<infokv::ChatTemplate> tmpls;
  try {
    tmpls.push_back(infokv::ChatTemplate::detect(parts[0], tok));
  } catch (const infokv::Error &e) {
    if (e.status() == infokv::Status::internal) std::abort();
  }
  for (infokv::ChatFormat f : {infokv::ChatFormat::chatml, infokv::ChatFormat::llama3}) {
    infokv::ChatTemplate t;
    t.format = f;
    t.default_system = parts[0].size() < 64 ? parts[0] : std::string();
    tmpls.push_back(t);
  }
  for (const infokv::ChatTemplate &t : tmpls) {
    for (const bool first : {true, false}) {
      try {
        (void)t.render(msgs, gen);
        const std::vector<infokv::ChatPiece> pieces = t.encode_pieces(tok, msgs, gen, first);
        for (const infokv::ChatPiece &p : pieces)
          for (int32_t id : p.ids) {
            if (id < 0 || id >= tok.n_vocab()) std::abort();
            if (!p.markup && tok.type(id) == infokv::TokenType::control) std::abort();  // injected markup
          }
        (void)t.turn_end(tok);
      } catch (const infokv::Error &e) {
        if (e.status() == infokv::Status::internal) std::abort();
      }
    }
  }
  return 0;
}
