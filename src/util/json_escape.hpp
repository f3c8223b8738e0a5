// JSON string escaping shared by everything that writes JSON (CLI output, model and device descriptions).
#pragma once
#include <string>

namespace infokv {

// The contents of a JSON string literal for `s` (no surrounding quotes): quotes, backslashes and control
// characters escaped; bytes that are not valid UTF-8 become U+FFFD, so the output is always valid JSON.
std::string json_escape(const std::string &s);

}  // namespace infokv
