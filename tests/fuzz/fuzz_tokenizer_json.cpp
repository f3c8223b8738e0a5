// libFuzzer target for Hugging Face tokenizer.json: the JSON reader, Tokenizer::from_hf (vocabulary, merges, added
// tokens, normalizer and pre-tokenizer descriptions) and, when it loads, encoding and decoding a fixed text with and
// without special-token parsing. Any infokv::Error is fine; a crash, a sanitizer report, an id outside the
// vocabulary, or a memory cost out of proportion to the input (libFuzzer's -rss_limit_mb / -malloc_limit_mb) is a
// bug.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.hpp"
#include "util/error.hpp"
#include "util/json_reader.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  try {
    const std::string_view text(reinterpret_cast<const char *>(data), size);
    const infokv::JsonValue j =
        infokv::JsonValue::parse(text, static_cast<int32_t>(infokv::Status::bad_model), "tokenizer.json");
    const infokv::Tokenizer t = infokv::Tokenizer::from_hf(j, nullptr, nullptr);
    const std::string sample = "Hello world, 42 <|im_start|>user caf\xC3\xA9 \xF0\x9F\x99\x82 <s>\n\n  x";
    for (const bool special : {false, true}) {
      const std::vector<int32_t> ids = t.encode(sample, true, special);
      for (int32_t id : ids)
        if (id < 0 || id >= t.n_vocab()) std::abort();
      (void)t.decode(ids);
    }
    (void)t.fingerprint();
  } catch (const infokv::Error &e) {
    if (e.status() == infokv::Status::internal) std::abort();
  }
  return 0;
}
