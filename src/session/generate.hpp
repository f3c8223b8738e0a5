// The generation loop shared by the C ABI and the CLI: prefill, sample, stream text, stop on EOS or cancel.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "sampling/sampler.hpp"
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
};

// Called with each generated token and the text it completed (valid UTF-8, possibly empty).
// Return false to stop generation (the result is then marked cancelled).
using TokenCallback = std::function<bool(int32_t token, const std::string &text)>;

// Decodes `prompt` (may be empty when the sequence already has logits) into `seq`, then samples up to
// max_tokens tokens. Stops at an end-of-generation token, which is not appended to the sequence. The last token
// of a run that reaches max_tokens is not decoded either: a caller that continues the sequence decodes it first.
GenerateResult generate(Session &session, int32_t seq, const std::vector<int32_t> &prompt, int32_t max_tokens,
                        Sampler &sampler, const TokenCallback &on_token);

// Several sequences generated in one batch per step (each with its own sampler); returns one result each.
std::vector<GenerateResult> generate_batch(Session &session, const std::vector<int32_t> &seqs, int32_t max_tokens,
                                           std::vector<Sampler> &samplers);

}  // namespace infokv
