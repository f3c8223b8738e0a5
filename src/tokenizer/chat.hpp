// Chat templates: the two formats infokv knows (ChatML, as SmolLM2 and Qwen use, and Llama 3's header format),
// detected from the model's tokenizer.chat_template metadata (or its vocabulary), rendered to token ids.
//
// infokv does not run Jinja: it recognises the format and builds the same text the template would. Message
// contents are tokenised with special-token parsing off, so a user who types "<|im_end|>" cannot end their turn or
// forge a system message; only the template's own markup becomes control tokens.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace infokv {

class GgufFile;
class Tokenizer;

enum class ChatFormat { none, chatml, llama3 };

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

// One run of a rendered conversation: the template's markup (special tokens parsed) or a message's text.
struct ChatPiece {
  std::vector<int32_t> ids;
  bool markup = false;     // the template's own markup (control tokens): "<|im_start|>", "<|eot_id|>", headers
  int32_t message = -1;    // index of the message this piece belongs to; -1: the template's default system turn
                           // (markup) or the generation prompt
  bool system = false;     // part of a system turn (the caller's or the template's default one)
};

struct ChatTemplate {
  ChatFormat format = ChatFormat::none;
  // ChatML templates that insert a system turn when the conversation has none (SmolLM2's does) give its text here.
  std::string default_system;

  // Detects the format from tokenizer.chat_template, falling back to the vocabulary's marker tokens.
  // format == none when neither names a format infokv knows.
  static ChatTemplate detect(const GgufFile &file, const Tokenizer &tok);
  // The same from the template text itself (empty: none given).
  static ChatTemplate detect(const std::string &tmpl, const Tokenizer &tok);

  // The conversation as the template renders it (markup included), for display and tests.
  std::string render(const std::vector<ChatMessage> &messages, bool add_generation_prompt) const;
  // The conversation as token ids: markup with special tokens parsed, contents without. `first` says whether
  // these messages open the conversation (then BOS, when the tokenizer adds one, and the default system turn
  // are included); later turns of an ongoing chat pass first = false and are appended to the same sequence.
  // Throws Error(unsupported) when format == none.
  std::vector<int32_t> encode(const Tokenizer &tok, const std::vector<ChatMessage> &messages, bool add_generation_prompt,
                              bool first = true) const;
  // encode() as pieces, in order (their ids concatenated are encode()'s), so a caller can tell markup, system text
  // and each message's span apart. BOS, when added, is a markup piece of its own.
  std::vector<ChatPiece> encode_pieces(const Tokenizer &tok, const std::vector<ChatMessage> &messages,
                                       bool add_generation_prompt, bool first = true) const;
  // The ids that close an assistant turn whose generation stopped at an end-of-generation token (which
  // generation does not append to the cache): ChatML "<|im_end|>\n", Llama 3 "<|eot_id|>".
  std::vector<int32_t> turn_end(const Tokenizer &tok) const;
};

const char *chat_format_name(ChatFormat f);

}  // namespace infokv
