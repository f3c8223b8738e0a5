#include "tokenizer/chat.hpp"

#include "gguf/gguf.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tokenizer/unicode.hpp"
#include "util/error.hpp"

namespace infokv {

namespace {

// Jinja's |trim (Python's str.strip()): white space removed at both ends.
std::string trim(const std::string &s) {
  std::vector<uint32_t> cps;
  std::vector<size_t> offs;
  unicode::decode_utf8(s, &cps, &offs);
  size_t b = 0, e = cps.size();
  auto ws = [](uint32_t c) { return unicode::is_whitespace(c) || (c >= 0x1C && c <= 0x1F); };
  while (b < e && ws(cps[b])) ++b;
  while (e > b && ws(cps[e - 1])) --e;
  return s.substr(offs[b], offs[e] - offs[b]);
}

struct Piece {
  std::string text;
  bool markup;  // parse special tokens in it
  int32_t message = -1;
  bool system = false;
};

// The turns as (markup, content) pieces, the way the format's template writes them.
std::vector<Piece> pieces(const ChatTemplate &t, const std::vector<ChatMessage> &messages, bool add_generation_prompt,
                          bool first) {
  std::vector<Piece> out;
  if (t.format == ChatFormat::chatml) {
    if (first && !t.default_system.empty() && (messages.empty() || messages[0].role != "system"))
      out.push_back({"<|im_start|>system\n" + t.default_system + "<|im_end|>\n", true, -1, true});
    for (size_t i = 0; i < messages.size(); ++i) {
      const ChatMessage &m = messages[i];
      const int32_t k = static_cast<int32_t>(i);
      const bool sys = m.role == "system";
      out.push_back({"<|im_start|>", true, k, sys});
      out.push_back({m.role + "\n" + m.content, false, k, sys});
      out.push_back({"<|im_end|>\n", true, k, sys});
    }
    if (add_generation_prompt) out.push_back({"<|im_start|>assistant\n", true});
  } else if (t.format == ChatFormat::llama3) {
    for (size_t i = 0; i < messages.size(); ++i) {
      const ChatMessage &m = messages[i];
      const int32_t k = static_cast<int32_t>(i);
      const bool sys = m.role == "system";
      out.push_back({"<|start_header_id|>", true, k, sys});
      out.push_back({m.role, false, k, sys});
      out.push_back({"<|end_header_id|>", true, k, sys});
      out.push_back({"\n\n" + trim(m.content), false, k, sys});  // Llama 3's template trims contents
      out.push_back({"<|eot_id|>", true, k, sys});
    }
    if (add_generation_prompt) out.push_back({"<|start_header_id|>assistant<|end_header_id|>\n\n", true});
  }
  return out;
}

// The literal system text a ChatML template inserts by itself: "{{ '<|im_start|>system\nTEXT<|im_end|>\n' }}"
// (the \n written as the two characters backslash-n inside the Jinja string, or as a real newline). Every place
// that opens a system turn is looked at: Qwen2.5's template opens one first in its tools branch
// ("{{- '<|im_start|>system\n' }}", its text written apart) and once with the app's own system message
// ("'<|im_start|>system\n' + messages[0]['content'] + ..."), before the literal default of its plain branch.
std::string default_system_of(const std::string &tmpl) {
  for (const std::string &open : {std::string("'<|im_start|>system\\n"), std::string("'<|im_start|>system\n")}) {
    for (size_t a = tmpl.find(open); a != std::string::npos; a = tmpl.find(open, a + 1)) {
      const size_t b = tmpl.find("<|im_end|>", a + open.size());
      if (b == std::string::npos) break;
      std::string s = tmpl.substr(a + open.size(), b - a - open.size());
      if (s.find('\'') != std::string::npos || s.find("{{") != std::string::npos || s.find("{%") != std::string::npos ||
          s.find('+') != std::string::npos)
        continue;  // not a literal
      return s;
    }
  }
  return std::string();
}

}  // namespace

const char *chat_format_name(ChatFormat f) {
  switch (f) {
    case ChatFormat::chatml: return "chatml";
    case ChatFormat::llama3: return "llama3";
    case ChatFormat::none: break;
  }
  return "none";
}

ChatTemplate ChatTemplate::detect(const GgufFile &file, const Tokenizer &tok) {
  return detect(file.get_string("tokenizer.chat_template", ""), tok);
}

ChatTemplate ChatTemplate::detect(const std::string &tmpl, const Tokenizer &tok) {
  ChatTemplate t;
  if (tmpl.find("<|im_start|>") != std::string::npos) {
    t.format = ChatFormat::chatml;
    t.default_system = default_system_of(tmpl);
  } else if (tmpl.find("<|start_header_id|>") != std::string::npos) {
    t.format = ChatFormat::llama3;
  } else if (tmpl.empty() && tok.find_piece("<|im_start|>") >= 0 && tok.find_piece("<|im_end|>") >= 0) {
    t.format = ChatFormat::chatml;
  } else if (tmpl.empty() && tok.find_piece("<|start_header_id|>") >= 0 && tok.find_piece("<|eot_id|>") >= 0) {
    t.format = ChatFormat::llama3;
  }
  return t;
}

std::string ChatTemplate::render(const std::vector<ChatMessage> &messages, bool add_generation_prompt) const {
  std::string s;
  for (const Piece &p : pieces(*this, messages, add_generation_prompt, true)) s += p.text;
  return s;
}

std::vector<ChatPiece> ChatTemplate::encode_pieces(const Tokenizer &tok, const std::vector<ChatMessage> &messages,
                                                   bool add_generation_prompt, bool first) const {
  if (format == ChatFormat::none)
    fail(Status::unsupported, "the model has no chat template infokv knows (ChatML or Llama 3)");
  std::vector<ChatPiece> out;
  if (first && tok.add_bos() && tok.bos() >= 0) out.push_back({{tok.bos()}, true, -1, false});
  for (const Piece &p : pieces(*this, messages, add_generation_prompt, first))
    out.push_back({tok.encode(p.text, false, p.markup), p.markup, p.message, p.system});
  return out;
}

std::vector<int32_t> ChatTemplate::encode(const Tokenizer &tok, const std::vector<ChatMessage> &messages,
                                          bool add_generation_prompt, bool first) const {
  std::vector<int32_t> ids;
  for (const ChatPiece &p : encode_pieces(tok, messages, add_generation_prompt, first))
    ids.insert(ids.end(), p.ids.begin(), p.ids.end());
  return ids;
}

std::vector<int32_t> ChatTemplate::turn_end(const Tokenizer &tok) const {
  switch (format) {
    case ChatFormat::chatml: return tok.encode("<|im_end|>\n", false, true);
    case ChatFormat::llama3: return tok.encode("<|eot_id|>", false, true);
    case ChatFormat::none: break;
  }
  return {};
}

}  // namespace infokv
