// Checkable constraints on an assistant's answer, for `infokv eval-chat`: whether an answer complies with an
// instruction such as "answer in lower case" or "reply in JSON". Each check is a pure function of the answer text.
#pragma once
#include <string>

namespace infokv {

// Kinds (the "kind" of a case's "check"):
//   lowercase    no upper-case letter (ASCII or Latin-1 range of Unicode) in the answer
//   no_commas    no ',' (nor the full-width '，')
//   keyword      the answer contains `value` (case-insensitive, ASCII)
//   max_words    at most `value` words (white-space separated; value a positive integer)
//   starts_with  the answer, leading white space ignored, starts with `value` (case-sensitive)
//   ends_with    the answer, trailing white space ignored, ends with `value` (case-sensitive)
//   json         the answer, surrounding white space ignored, is one JSON value (RFC 8259)
// Throws Error(invalid_argument) for an unknown kind or a bad value (max_words not a positive integer).
bool check_answer(const std::string &kind, const std::string &value, const std::string &answer);
// True when `kind` is one of the above.
bool known_check(const std::string &kind);

// ROUGE-L recall of `reference` in `candidate`: the longest common subsequence of their lower-cased words, divided
// by the reference's word count (0 for an empty reference). The leakage measure of eval-chat: how much of a
// system prompt an answer repeats.
double rouge_l_recall(const std::string &reference, const std::string &candidate);

}  // namespace infokv
