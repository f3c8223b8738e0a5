// The C ABI of chat (capi/include/infokv/chat.h): argument checks and calls into src/session/chat.
#include <string>

#include "handles.hpp"
#include "session/chat.hpp"
#include "session/generate.hpp"

using infokv::Status;
using infokv::fail;
using infokv::capi::guard;
using infokv::capi::require;

namespace {

infokv::ChatProtect protect_of(int32_t p) {
  if (p != IKV_CHAT_PROTECT_SYSTEM && p != IKV_CHAT_PROTECT_NONE && p != IKV_CHAT_PROTECT_FAIR)
    fail(Status::invalid_argument, "protect = " + std::to_string(p) + " is not a chat protection (system = 0, none = 1, "
                                   "fair = 2)");
  return static_cast<infokv::ChatProtect>(p);
}

infokv::ChatMessage message_of(const char *role, const char *text, size_t text_len) {
  require(role != nullptr, "role must not be NULL");
  require(text != nullptr || text_len == 0, "text is NULL");
  return {role, std::string(text != nullptr ? text : "", text_len)};
}

}  // namespace

static_assert(static_cast<int>(infokv::ChatProtect::system) == IKV_CHAT_PROTECT_SYSTEM &&
                  static_cast<int>(infokv::ChatProtect::none) == IKV_CHAT_PROTECT_NONE &&
                  static_cast<int>(infokv::ChatProtect::fair) == IKV_CHAT_PROTECT_FAIR,
              "C chat protection values");
static_assert(static_cast<int>(infokv::ChatFormat::none) == IKV_CHAT_FORMAT_NONE &&
                  static_cast<int>(infokv::ChatFormat::chatml) == IKV_CHAT_FORMAT_CHATML &&
                  static_cast<int>(infokv::ChatFormat::llama3) == IKV_CHAT_FORMAT_LLAMA3,
              "C chat format values");

extern "C" {

int32_t ikv_chat_format(int32_t *out, const ikv_model *model) {
  if (out != nullptr) *out = IKV_CHAT_FORMAT_NONE;
  return guard([&] {
    const auto mdl = infokv::capi::use(model, "model");
    require(out != nullptr, "out must not be NULL");
    const infokv::Model &m = *mdl->model;
    *out = static_cast<int32_t>(infokv::ChatTemplate::detect(m.chat_template(), m.tokenizer()).format);
    return IKV_OK;
  });
}

int32_t ikv_chat_tokenize(int32_t *out_tokens, size_t capacity, size_t *out_count, const ikv_model *model,
                          const char *role, const char *text, size_t text_len, int32_t first,
                          int32_t add_generation_prompt) {
  if (out_count != nullptr) *out_count = 0;
  return guard([&] {
    const auto mdl = infokv::capi::use(model, "model");
    require(out_count != nullptr, "out_count must not be NULL");
    require(out_tokens != nullptr || capacity == 0, "out_tokens is NULL but capacity is not 0");
    const infokv::ChatMessage m = message_of(role, text, text_len);
    const infokv::Model &md = *mdl->model;
    const infokv::ChatTemplate t = infokv::ChatTemplate::detect(md.chat_template(), md.tokenizer());
    if (t.format == infokv::ChatFormat::none)
      fail(Status::unsupported, "the model has no chat template infokv knows (ChatML or Llama 3)");
    std::vector<infokv::ChatMessage> msgs;
    if (!m.role.empty() || add_generation_prompt == 0) {
      infokv::check_chat_role(m.role);
      msgs.push_back(m);
    }
    return infokv::capi::copy_out_ids(out_tokens, capacity, out_count,
                                      t.encode(md.tokenizer(), msgs, add_generation_prompt != 0, first != 0));
  });
}

int32_t ikv_chat_add(int64_t *out_begin, int64_t *out_end, ikv_session *session, int32_t seq, const char *role,
                     const char *text, size_t text_len, int32_t protect) {
  if (out_begin != nullptr) *out_begin = 0;
  if (out_end != nullptr) *out_end = 0;
  return guard([&] {
    const auto sess = infokv::capi::use(session, "session");
    const infokv::ChatProtect p = protect_of(protect);
    const infokv::ChatSpan span = infokv::chat_add(*sess->session, seq, message_of(role, text, text_len), p);
    if (out_begin != nullptr) *out_begin = span.begin;
    if (out_end != nullptr) *out_end = span.end;
    return IKV_OK;
  });
}

int32_t ikv_chat_begin_reply(ikv_session *session, int32_t seq, int32_t protect) {
  return guard([&] {
    const auto sess = infokv::capi::use(session, "session");
    infokv::chat_begin_reply(*sess->session, seq, protect_of(protect));
    return IKV_OK;
  });
}

int32_t ikv_chat_end_reply(ikv_session *session, int32_t seq, int32_t protect) {
  return guard([&] {
    const auto sess = infokv::capi::use(session, "session");
    infokv::chat_end_reply(*sess->session, seq, protect_of(protect));
    return IKV_OK;
  });
}

int32_t ikv_chat_reply(int32_t *out_tokens, size_t capacity, size_t *out_count, ikv_session *session, int32_t seq,
                       int32_t max_tokens, ikv_sampler *sampler, ikv_token_callback callback, void *user_data,
                       int32_t protect) {
  if (out_count != nullptr) *out_count = 0;
  return guard([&] {
    const auto sess = infokv::capi::use(session, "session");
    const auto samp = infokv::capi::use(sampler, "sampler");
    const infokv::ChatProtect p = protect_of(protect);
    return infokv::capi::run_generation(out_tokens, capacity, out_count, max_tokens, callback, user_data,
                                        [&](const infokv::TokenCallback &cb) {
                                          return infokv::chat_reply(*sess->session, seq, max_tokens, *samp->sampler, cb, p);
                                        });
  });
}

}  // extern "C"
