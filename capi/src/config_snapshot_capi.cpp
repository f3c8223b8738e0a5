// The C ABI of configs, snapshots and tuning profiles: argument checks and calls into src/config, src/snapshot and
// src/compress/profile.
#include <cstring>

#include "compress/profile.hpp"
#include "config/config.hpp"
#include "handles.hpp"
#include "snapshot/snapshot.hpp"
#include "util/path_confine.hpp"

using infokv::Status;
using infokv::fail;
using infokv::capi::guard;
using infokv::capi::require;

namespace {


int32_t new_config(ikv_config **out, infokv::Config &&c) {
  auto h = std::make_unique<ikv_config>();
  h->config = std::move(c);
  *out = infokv::capi::register_handle(std::move(h));
  return IKV_OK;
}

int32_t restore_from(int32_t *out_seqs, size_t capacity, size_t *out_count, ikv_session *session, ikv_sampler *sampler,
                     infokv::snapshot::ByteSource &src, infokv::snapshot::ByteSource &count_src) {
  const auto sess = infokv::capi::use(session, "session");
  const auto samp = infokv::capi::use_optional(sampler, "sampler");
  require(out_count != nullptr, "out_count must not be NULL");
  require(out_seqs != nullptr || capacity == 0, "out_seqs is NULL but capacity is not 0");
  if (out_seqs != nullptr) {
    // The id buffer must fit before anything is restored (a restore cannot be undone by the caller). The header's
    // count is enough: the restore refuses a file that holds another number of sequences.
    const auto n = static_cast<size_t>(infokv::snapshot::sequence_count(count_src));
    *out_count = n;
    if (capacity < n)
      return infokv::capi::fail_status(IKV_ERR_BUFFER_TOO_SMALL, "the snapshot holds " + std::to_string(n) +
                                                                     " sequences; the id buffer holds " + std::to_string(capacity));
  }
  // The file may have changed since it was counted: the restore checks the buffer again against the header it
  // restores from, and then restores nothing and leaves the sampler as it was.
  int64_t announced = -1;
  std::vector<int32_t> ids;
  try {
    ids = infokv::snapshot::restore(*sess->session, sampler != nullptr ? samp->sampler.get() : nullptr, src,
                                    out_seqs != nullptr ? capacity : SIZE_MAX, &announced);
  } catch (const infokv::Error &e) {
    if (e.status() == Status::buffer_too_small && announced >= 0) *out_count = static_cast<size_t>(announced);
    throw;
  }
  *out_count = ids.size();
  if (out_seqs != nullptr) std::copy(ids.begin(), ids.end(), out_seqs);
  return IKV_OK;
}

}  // namespace

extern "C" {

int32_t ikv_config_create(ikv_config **out) {
  if (out != nullptr) *out = nullptr;
  return guard([&] {
    require(out != nullptr, "out must not be NULL");
    return new_config(out, infokv::Config{});
  });
}

int32_t ikv_config_from_json(ikv_config **out, const char *text, size_t len) {
  if (out != nullptr) *out = nullptr;
  return guard([&] {
    require(out != nullptr && text != nullptr, "out and text must not be NULL");
    return new_config(out, infokv::config_from_json(std::string(text, len)));
  });
}

int32_t ikv_config_from_binary(ikv_config **out, const void *bytes, size_t len) {
  if (out != nullptr) *out = nullptr;
  return guard([&] {
    require(out != nullptr && bytes != nullptr, "out and bytes must not be NULL");
    return new_config(out, infokv::config_from_binary(bytes, len));
  });
}

int32_t ikv_config_to_json(char *out, size_t capacity, size_t *out_len, const ikv_config *config) {
  if (out_len != nullptr) *out_len = 0;
  return guard([&] {
    const auto cfg = infokv::capi::use(config, "config");
    return infokv::capi::copy_out_text(out, capacity, out_len, infokv::config_to_json(cfg->config));
  });
}

int32_t ikv_config_to_binary(void *out, size_t capacity, size_t *out_len, const ikv_config *config) {
  if (out_len != nullptr) *out_len = 0;
  return guard([&] {
    const auto cfg = infokv::capi::use(config, "config");
    require(out_len != nullptr, "out_len must not be NULL");
    require(out != nullptr || capacity == 0, "out is NULL but capacity is not 0");
    const std::vector<uint8_t> b = infokv::config_to_binary(cfg->config);
    return infokv::capi::copy_out(out, capacity, out_len, b.data(), b.size());
  });
}

void ikv_config_free(ikv_config *config) {
  infokv::capi::free_handle(config);  // NULL, stale and foreign handles are ignored
}

int32_t ikv_config_get_model_path(char *out, size_t capacity, size_t *out_len, const ikv_config *config) {
  if (out_len != nullptr) *out_len = 0;
  return guard([&] {
    const auto cfg = infokv::capi::use(config, "config");
    return infokv::capi::copy_out_text(out, capacity, out_len, cfg->config.model_path);
  });
}

int32_t ikv_model_load_with_config(ikv_model **out, const ikv_config *config) {
  if (out != nullptr) *out = nullptr;
  return guard([&] {
    const auto cfg = infokv::capi::use(config, "config");
    if (cfg->config.model_path.empty()) fail(Status::bad_config, "config: model_path is empty");
    return ikv_model_load(out, infokv::resolve_config_model_path(cfg->config.model_path).c_str());
  });
}

int32_t ikv_model_load_with_config_confined(ikv_model **out, const ikv_config *config, const char *allowed_dir) {
  if (out != nullptr) *out = nullptr;
  return guard([&] {
    require(out != nullptr, "out must not be NULL");
    const auto cfg = infokv::capi::use(config, "config");
    require(allowed_dir != nullptr, "allowed_dir must not be NULL");
    if (cfg->config.model_path.empty()) fail(Status::bad_config, "config: model_path is empty");
    const std::string path = infokv::confine_path(cfg->config.model_path, allowed_dir);
    return ikv_model_load(out, path.c_str());
  });
}

int32_t ikv_session_create_with_config(ikv_session **out, ikv_model *model, const ikv_config *config) {
  if (out != nullptr) *out = nullptr;
  return guard([&] {
    require(out != nullptr, "out must not be NULL");
    const auto mdl = infokv::capi::use(model, "model");
    const auto cfg = infokv::capi::use(config, "config");
    const infokv::Config &c = cfg->config;
    auto s = std::make_unique<ikv_session>();
    // "cuda" without a usable GPU fails here with IKV_ERR_NO_DEVICE; the protected prefix holds for every sequence
    // the session adds, sequence 0 included.
    s->session = std::make_unique<infokv::Session>(mdl->model, c.session);
    s->session->add_sequence();
    *out = infokv::capi::register_handle(std::move(s));
    return IKV_OK;
  });
}

int32_t ikv_sampler_create_with_config(ikv_sampler **out, const ikv_config *config) {
  if (out != nullptr) *out = nullptr;
  return guard([&] {
    require(out != nullptr, "out must not be NULL");
    const auto cfg = infokv::capi::use(config, "config");
    auto s = std::make_unique<ikv_sampler>();
    s->sampler = std::make_unique<infokv::Sampler>(cfg->config.sampler);
    *out = infokv::capi::register_handle(std::move(s));
    return IKV_OK;
  });
}

int32_t ikv_session_save_file(const ikv_session *session, int32_t seq, const ikv_sampler *sampler, const char *path) {
  return guard([&] {
    const auto sess = infokv::capi::use(session, "session");
    const auto samp = infokv::capi::use_optional(sampler, "sampler");
    require(path != nullptr, "path must not be NULL");
    require(seq >= -1, "seq must be a sequence id or -1 (every sequence)");
    infokv::snapshot::save_file(*sess->session, seq, sampler != nullptr ? samp->sampler.get() : nullptr, path);
    return IKV_OK;
  });
}

int32_t ikv_session_save_buffer(void *out, size_t capacity, size_t *out_len, const ikv_session *session, int32_t seq,
                                const ikv_sampler *sampler) {
  if (out_len != nullptr) *out_len = 0;
  return guard([&] {
    const auto sess = infokv::capi::use(session, "session");
    const auto samp = infokv::capi::use_optional(sampler, "sampler");
    require(out_len != nullptr, "out_len must not be NULL");
    require(out != nullptr || capacity == 0, "out is NULL but capacity is not 0");
    require(seq >= -1, "seq must be a sequence id or -1 (every sequence)");
    const infokv::Sampler *sp = sampler != nullptr ? samp->sampler.get() : nullptr;
    // Size first (a counting pass), so a small buffer is reported without a partial write.
    infokv::snapshot::CountingSink count;
    infokv::snapshot::save(*sess->session, seq, sp, count);
    *out_len = count.size();
    if (capacity < count.size())
      return infokv::capi::fail_status(IKV_ERR_BUFFER_TOO_SMALL, "snapshot buffer of " + std::to_string(capacity) +
                                                                     " bytes is too small; " + std::to_string(count.size()) + " needed");
    // The creation time may differ between the passes; both have the same size.
    infokv::snapshot::SpanSink sink(static_cast<uint8_t *>(out), capacity);
    infokv::snapshot::save(*sess->session, seq, sp, sink);
    *out_len = sink.size();
    return IKV_OK;
  });
}

int32_t ikv_session_restore_file(int32_t *out_seqs, size_t capacity, size_t *out_count, ikv_session *session,
                                 ikv_sampler *sampler, const char *path) {
  if (out_count != nullptr) *out_count = 0;
  return guard([&] {
    require(path != nullptr, "path must not be NULL");
    // Handles before the file: a stale handle is BAD_HANDLE whatever the path (restore_from takes them again; the
    // same thread may re-enter).
    const auto sess = infokv::capi::use(session, "session");
    const auto samp = infokv::capi::use_optional(sampler, "sampler");
    infokv::snapshot::FileSource src(path);
    if (out_seqs == nullptr) return restore_from(out_seqs, capacity, out_count, session, sampler, src, src);
    infokv::snapshot::FileSource count_src(path);
    return restore_from(out_seqs, capacity, out_count, session, sampler, src, count_src);
  });
}

int32_t ikv_session_restore_buffer(int32_t *out_seqs, size_t capacity, size_t *out_count, ikv_session *session,
                                   ikv_sampler *sampler, const void *bytes, size_t len) {
  if (out_count != nullptr) *out_count = 0;
  return guard([&] {
    if (len == 0) infokv::fail(infokv::Status::bad_snapshot, "the snapshot is empty (0 bytes)");
    require(bytes != nullptr, "bytes must not be NULL");
    infokv::snapshot::MemorySource src(bytes, len), count_src(bytes, len);
    return restore_from(out_seqs, capacity, out_count, session, sampler, src, count_src);
  });
}

int32_t ikv_snapshot_inspect(char *out, size_t capacity, size_t *out_len, const char *path) {
  if (out_len != nullptr) *out_len = 0;
  return guard([&] {
    require(path != nullptr, "path must not be NULL");
    infokv::snapshot::FileSource src(path);
    return infokv::capi::copy_out_text(out, capacity, out_len, infokv::snapshot::summary_json(infokv::snapshot::inspect(src)));
  });
}

int32_t ikv_session_load_profile(ikv_session *session, const char *path) {
  return guard([&] {
    const auto sess = infokv::capi::use(session, "session");
    require(path != nullptr, "path must not be NULL");
    // Read and checked in full before the session sees it: set_profile changes nothing when it throws.
    sess->session->compressor().set_profile(infokv::load_profile(path));
    return IKV_OK;
  });
}

int32_t ikv_session_save_profile(const ikv_session *session, const char *path) {
  return guard([&] {
    const auto sess = infokv::capi::use(session, "session");
    require(path != nullptr, "path must not be NULL");
    const infokv::TuningProfile *p = sess->session->compressor().profile();
    if (p == nullptr)
      fail(Status::bad_state, "the session has no tuning profile (none loaded and no auto compression under a byte budget yet)");
    infokv::save_profile(*p, path);
    return IKV_OK;
  });
}

int32_t ikv_session_profile_info(int64_t *out_compressions, int32_t *out_layers, int32_t *out_guides, const ikv_session *session) {
  if (out_compressions != nullptr) *out_compressions = 0;
  if (out_layers != nullptr) *out_layers = 0;
  if (out_guides != nullptr) *out_guides = 0;
  return guard([&] {
    const auto sess = infokv::capi::use(session, "session");
    require(out_compressions != nullptr && out_layers != nullptr && out_guides != nullptr,
            "ikv_session_profile_info: no output may be NULL");
    const infokv::TuningProfile *p = sess->session->compressor().profile();
    if (p == nullptr) return IKV_OK;
    *out_compressions = p->compressions;
    *out_layers = static_cast<int32_t>(p->layers.size());
    *out_guides = sess->session->compressor().profile_guides() ? 1 : 0;
    return IKV_OK;
  });
}

int32_t ikv_session_profile_tag(char *out, size_t capacity, size_t *out_len, const ikv_session *session) {
  if (out_len != nullptr) *out_len = 0;
  if (out != nullptr && capacity > 0) out[0] = '\0';
  return guard([&] {
    const auto sess = infokv::capi::use(session, "session");
    const infokv::TuningProfile *p = sess->session->compressor().profile();
    require(out_len != nullptr, "out_len must not be NULL");
    if (p == nullptr) fail(Status::bad_state, "the session has no tuning profile");
    return infokv::capi::copy_out_text(out, capacity, out_len, p->tag);
  });
}

}  // extern "C"
