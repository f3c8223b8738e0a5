#include "eval/chat_checks.hpp"

#include <algorithm>
#include <cctype>
#include <sstream>
#include <vector>

#include "util/error.hpp"
#include "util/json_reader.hpp"

namespace infokv {

namespace {

std::string lower_ascii(std::string s) {
  for (char &c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string strip(const std::string &s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

std::vector<std::string> words(const std::string &s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  std::string w;
  while (in >> w) out.push_back(w);
  return out;
}

// Upper-case letters: ASCII A-Z, Latin-1 À-Þ (U+00C0..U+00DE but ×), and the Latin Extended-A capitals (even code
// points U+0100..U+017F are mostly capitals).
bool has_upper(const std::string &s) {
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 'A' && c <= 'Z') return true;
    if (c == 0xC3 && i + 1 < s.size()) {  // U+00C0..U+00FF
      const auto d = static_cast<unsigned char>(s[i + 1]);
      if (d >= 0x80 && d <= 0x9E && d != 0x97) return true;
    }
    if ((c == 0xC4 || c == 0xC5) && i + 1 < s.size()) {  // U+0100..U+017F
      const unsigned cp = ((c & 0x1Fu) << 6) | (static_cast<unsigned char>(s[i + 1]) & 0x3Fu);
      if (cp >= 0x100 && cp <= 0x137 && cp % 2 == 0) return true;
    }
  }
  return false;
}

// Words as lower-case runs of letters and digits (punctuation splits), for ROUGE-L.
std::vector<std::string> tokens_for_rouge(const std::string &s) {
  std::vector<std::string> out;
  std::string cur;
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (std::isalnum(c) || c >= 0x80) {
      cur.push_back(static_cast<char>(std::tolower(c)));
    } else if (!cur.empty()) {
      out.push_back(cur);
      cur.clear();
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

}  // namespace

bool known_check(const std::string &kind) {
  static const char *const kinds[] = {"lowercase", "no_commas", "keyword", "max_words", "starts_with", "ends_with",
                                      "json"};
  return std::find_if(std::begin(kinds), std::end(kinds), [&](const char *k) { return kind == k; }) != std::end(kinds);
}

bool check_answer(const std::string &kind, const std::string &value, const std::string &answer) {
  if (kind == "lowercase") return !has_upper(answer);
  if (kind == "no_commas") return answer.find(',') == std::string::npos && answer.find("\xEF\xBC\x8C") == std::string::npos;
  if (kind == "keyword") {
    if (value.empty()) fail(Status::invalid_argument, "check keyword needs a value");
    return lower_ascii(answer).find(lower_ascii(value)) != std::string::npos;
  }
  if (kind == "max_words") {
    size_t used = 0;
    long long n = 0;
    try {
      n = std::stoll(value, &used);
    } catch (const std::exception &) {
      used = 0;
    }
    if (used != value.size() || n <= 0) fail(Status::invalid_argument, "check max_words needs a positive integer value");
    return static_cast<long long>(words(answer).size()) <= n;
  }
  if (kind == "starts_with") {
    if (value.empty()) fail(Status::invalid_argument, "check starts_with needs a value");
    const std::string a = strip(answer);
    return a.compare(0, value.size(), value) == 0;
  }
  if (kind == "ends_with") {
    if (value.empty()) fail(Status::invalid_argument, "check ends_with needs a value");
    const std::string a = strip(answer);
    return a.size() >= value.size() && a.compare(a.size() - value.size(), value.size(), value) == 0;
  }
  if (kind == "json") {
    const std::string a = strip(answer);
    if (a.empty()) return false;
    try {
      JsonValue::parse(a, static_cast<int32_t>(Status::invalid_argument), "answer", 32);
      return true;
    } catch (const Error &) {
      return false;
    }
  }
  fail(Status::invalid_argument, "unknown check kind '" + kind +
                                     "' (lowercase, no_commas, keyword, max_words, starts_with, ends_with, json)");
}

double rouge_l_recall(const std::string &reference, const std::string &candidate) {
  const std::vector<std::string> r = tokens_for_rouge(reference), c = tokens_for_rouge(candidate);
  if (r.empty()) return 0.0;
  std::vector<size_t> prev(c.size() + 1, 0), cur(c.size() + 1, 0);
  for (size_t i = 1; i <= r.size(); ++i) {
    for (size_t j = 1; j <= c.size(); ++j)
      cur[j] = r[i - 1] == c[j - 1] ? prev[j - 1] + 1 : std::max(prev[j], cur[j - 1]);
    std::swap(prev, cur);
  }
  return static_cast<double>(prev[c.size()]) / static_cast<double>(r.size());
}

}  // namespace infokv
