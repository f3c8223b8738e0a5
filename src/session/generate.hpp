// The generation loop shared by the C ABI and the CLI: prefill, sample, stream text, stop on EOS or cancel.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "sampling/sampler.hpp"
#include "util/error.hpp"
#include "session/session.hpp"

namespace infokv {

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated ids (EOS not included)
  std::string text;
  bool stopped_by_eos = false;  // stopped at an end-of-generation token (EOS, <|im_end|>, ...; Tokenizer::is_eog)
  bool cancelled = false;
  double prefill_seconds = 0;
  double decode_seconds = 0;
  int64_t prefill_tokens = 0;
  // A decode that failed after the prompt (e.g. KV full): generation stopped there, `tokens` holds what was decoded
  // before it, and the sampler has accepted exactly those (its RNG is as before the failed draw).
  Status error = Status::ok;
  std::string error_message;
};

// Called with each generated token and the text it completed (valid UTF-8, possibly empty).
// Return false to stop generation (the result is then marked cancelled).
using TokenCallback = std::function<bool(int32_t token, const std::string &text)>;

// Decodes `prompt` (may be empty when the sequence already has logits) into `seq`, then samples up to
// max_tokens tokens, decoding each into the sequence before reporting it. Stops at an end-of-generation token, which
// is not appended to the sequence. A failed prompt decode throws (nothing changed); a failed decode of a generated
// token ends the run with `error` set, keeping every token reported so far (they are in the sequence and accepted by
// the sampler; the one that failed is in neither).
GenerateResult generate(Session &session, int32_t seq, const std::vector<int32_t> &prompt, int32_t max_tokens,
                        Sampler &sampler, const TokenCallback &on_token);

// Several sequences generated in one batch per step (each with its own sampler); returns one result each. A failed
// step ends every sequence's run with `error` set; what each reported before it was decoded and accepted.
std::vector<GenerateResult> generate_batch(Session &session, const std::vector<int32_t> &seqs, int32_t max_tokens,
                                           std::vector<Sampler> &samplers);

}  // namespace infokv
