// The C ABI: argument checks, calls into the core, and exceptions turned into statuses. Nothing here throws.
#include <cmath>
#include <cstddef>
#include <cstring>
#include <new>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>

#include "compress/policy_table.hpp"
#include "handles.hpp"
#include "kernels/ggml_types.hpp"
#include "model/describe.hpp"
#include "session/generate.hpp"
#include "util/version.hpp"

using infokv::Error;
using infokv::Status;
using infokv::fail;
using infokv::capi::guard;
using infokv::capi::require;

// Every IKV_* status against infokv::Status (kernels/status.hpp): a change on either side fails to compile.
static_assert(IKV_OK == static_cast<int32_t>(Status::ok), "status values must agree");
static_assert(IKV_ERR_INVALID_ARGUMENT == static_cast<int32_t>(Status::invalid_argument), "status values must agree");
static_assert(IKV_ERR_IO == static_cast<int32_t>(Status::io), "status values must agree");
static_assert(IKV_ERR_BAD_MODEL == static_cast<int32_t>(Status::bad_model), "status values must agree");
static_assert(IKV_ERR_UNSUPPORTED == static_cast<int32_t>(Status::unsupported), "status values must agree");
static_assert(IKV_ERR_OUT_OF_MEMORY == static_cast<int32_t>(Status::out_of_memory), "status values must agree");
static_assert(IKV_ERR_KV_FULL == static_cast<int32_t>(Status::kv_full), "status values must agree");
static_assert(IKV_ERR_OUT_OF_RANGE == static_cast<int32_t>(Status::out_of_range), "status values must agree");
static_assert(IKV_ERR_CANCELLED == static_cast<int32_t>(Status::cancelled), "status values must agree");
static_assert(IKV_ERR_BAD_SNAPSHOT == static_cast<int32_t>(Status::bad_snapshot), "status values must agree");
static_assert(IKV_ERR_WRONG_MODEL == static_cast<int32_t>(Status::wrong_model), "status values must agree");
static_assert(IKV_ERR_VERSION == static_cast<int32_t>(Status::version), "status values must agree");
static_assert(IKV_ERR_BAD_CONFIG == static_cast<int32_t>(Status::bad_config), "status values must agree");
static_assert(IKV_ERR_NO_DEVICE == static_cast<int32_t>(Status::no_device), "status values must agree");
static_assert(IKV_ERR_BUFFER_TOO_SMALL == static_cast<int32_t>(Status::buffer_too_small), "status values must agree");
static_assert(IKV_ERR_NOT_FOUND == static_cast<int32_t>(Status::not_found), "status values must agree");
static_assert(IKV_ERR_BAD_STATE == static_cast<int32_t>(Status::bad_state), "status values must agree");
static_assert(IKV_ERR_BAD_HANDLE == static_cast<int32_t>(Status::bad_handle), "status values must agree");
static_assert(IKV_ERR_BUSY == static_cast<int32_t>(Status::busy), "status values must agree");
static_assert(IKV_ERR_INTERNAL == static_cast<int32_t>(Status::internal), "status values must agree");
// Each IKV_POLICY_* constant is checked against its row of the policy table (the one converter) by
// ConfigPolicy.TableColumnsMatchTheSchemasAndTheCConstants, which reads this header.
static_assert(IKV_KV_BF16 == static_cast<int32_t>(infokv::KvDtype::bf16), "dtype values must agree");
static_assert(IKV_KV_Q8_0 == static_cast<int32_t>(infokv::KvDtype::q8_0), "dtype values must agree");
static_assert(IKV_KV_Q4_0 == static_cast<int32_t>(infokv::KvDtype::q4_0), "dtype values must agree");
static_assert(IKV_QUESTION_BOTH == static_cast<int32_t>(infokv::Question::both), "question values must agree");
static_assert(IKV_QUESTION_NEXT == static_cast<int32_t>(infokv::Question::next), "question values must agree");
static_assert(IKV_QUESTION_LATER == static_cast<int32_t>(infokv::Question::later), "question values must agree");
// Each IKV_EVIDENCE_* constant against the core's (stable) Evidence values.
static_assert(IKV_EVIDENCE_WINDOW_ATTENTION == static_cast<int32_t>(infokv::Evidence::window_attention), "evidence values must agree");
static_assert(IKV_EVIDENCE_INFOKV == static_cast<int32_t>(infokv::Evidence::infokv), "evidence values must agree");
static_assert(IKV_EVIDENCE_ACCUMULATED_ATTENTION == static_cast<int32_t>(infokv::Evidence::accumulated_attention), "evidence values must agree");
static_assert(IKV_EVIDENCE_LAST_QUERY == static_cast<int32_t>(infokv::Evidence::last_query), "evidence values must agree");
static_assert(IKV_EVIDENCE_RECENCY == static_cast<int32_t>(infokv::Evidence::recency), "evidence values must agree");
static_assert(IKV_EVIDENCE_KEY_NORM == static_cast<int32_t>(infokv::Evidence::key_norm), "evidence values must agree");
static_assert(IKV_EVIDENCE_REPLAY == static_cast<int32_t>(infokv::Evidence::replay), "evidence values must agree");
static_assert(infokv::kEvidenceKinds == 7, "a new kind of evidence needs its IKV_EVIDENCE_* constant checked here");

namespace {

// An options struct covers revision `rev` (> 1) when its version says so, and its struct_size must then reach that
// revision's end; revision 1 (and version >= 1) is required of every caller.
bool has_revision(const char *name, const char *init, uint32_t struct_size, uint32_t version, uint32_t rev,
                  size_t rev_size) {
  const std::string n(name), how = " (initialise with " + std::string(init) + ")";
  if (rev == 1) {
    require(struct_size >= rev_size, (n + ".struct_size is too small" + how).c_str());
    require(version >= 1, (n + ".version must be >= 1").c_str());
    return true;
  }
  if (version < rev) return false;
  require(struct_size >= rev_size, (n + ".struct_size is too small for version " + std::to_string(rev) + how).c_str());
  return true;
}

// Sizes of the ikv_session_options revisions: a caller built against an older header passes its own (smaller)
// struct_size and version, and the fields it lacks keep their defaults. Each revision ends where the next one's
// first field begins (not at sizeof: trailing padding may differ by platform).
constexpr size_t kSessionOptionsV1Size = offsetof(ikv_session_options, device);
constexpr size_t kSessionOptionsV2Size = offsetof(ikv_session_options, device) + sizeof(const char *);
constexpr size_t kSessionOptionsV3Size = offsetof(ikv_session_options, max_sequences) + sizeof(int32_t);
constexpr size_t kSessionOptionsV4Size = offsetof(ikv_session_options, max_loss) + sizeof(double);
constexpr size_t kSessionOptionsV5Size = offsetof(ikv_session_options, layer_precision) + sizeof(int32_t);
static_assert(IKV_SESSION_OPTIONS_VERSION == 5, "a new ikv_session_options revision needs its size and reader here");

// The versioned initialisers: the defaults of revision `version`, written no further than that revision's fields
// (sizes[version - 1] bytes), into a struct the caller says is `struct_size` bytes. Nothing is written on failure.
template <typename Options, size_t N>
int32_t init_options(Options *opts, const Options *defaults, size_t struct_size, uint32_t version,
                     const size_t (&sizes)[N], const char *name, uint32_t current) {
  const std::string n(name);
  if (opts == nullptr) return infokv::capi::fail_status(IKV_ERR_INVALID_ARGUMENT, "opts must not be NULL");
  if (version == 0) return infokv::capi::fail_status(IKV_ERR_INVALID_ARGUMENT, (n + ": version must be >= 1").c_str());
  if (version > current)
    return infokv::capi::fail_status(IKV_ERR_VERSION, (n + " version " + std::to_string(version) +
                                                       " is newer than this library's " + std::to_string(current) +
                                                       ": link the library your header came with")
                                                          .c_str());
  const size_t need = sizes[version - 1];
  if (struct_size < need || static_cast<uint64_t>(struct_size) > UINT32_MAX)
    return infokv::capi::fail_status(IKV_ERR_INVALID_ARGUMENT,
                                     (n + ": struct_size " + std::to_string(struct_size) + " cannot hold version " +
                                      std::to_string(version) + " (" + std::to_string(need) + " bytes)")
                                         .c_str());
  std::memcpy(static_cast<void *>(opts), static_cast<const void *>(defaults), need);
  opts->struct_size = static_cast<uint32_t>(struct_size);
  opts->version = version;
  return IKV_OK;
}

infokv::SessionOptions to_session_options(const ikv_session_options *o) {
  infokv::SessionOptions so;
  if (o == nullptr) return so;
  has_revision("ikv_session_options", "IKV_SESSION_OPTIONS_INIT", o->struct_size, o->version, 1, kSessionOptionsV1Size);
  // The version, not struct_size alone, says whether `device` is there: on some ABIs (32-bit ARM) a version-1
  // struct's trailing padding covers where the pointer now sits.
  const bool has_v2 = has_revision("ikv_session_options", "IKV_SESSION_OPTIONS_INIT", o->struct_size, o->version, 2, kSessionOptionsV2Size);
  const bool has_v3 = has_revision("ikv_session_options", "IKV_SESSION_OPTIONS_INIT", o->struct_size, o->version, 3, kSessionOptionsV3Size);
  const bool has_v4 = has_revision("ikv_session_options", "IKV_SESSION_OPTIONS_INIT", o->struct_size, o->version, 4, kSessionOptionsV4Size);
  const bool has_v5 = has_revision("ikv_session_options", "IKV_SESSION_OPTIONS_INIT", o->struct_size, o->version, 5, kSessionOptionsV5Size);
  require(o->n_threads >= 0, "n_threads must be >= 0");
  // Messages name values as every language spells them (the bindings have their own constant names).
  if (!infokv::kv_dtype_valid(o->kv_dtype))
    fail(Status::invalid_argument, "kv_dtype = " + std::to_string(o->kv_dtype) +
                                       " is not a KV dtype (f32 = 1, f16 = 2, bf16 = 3, q8_0 = 4, q4_0 = 5)");
  require(o->block_size >= 0, "block_size must be >= 0");
  require(o->ubatch >= 0, "ubatch must be >= 0");
  const infokv::PolicyInfo *policy = infokv::policy_by_c_value(o->policy);
  if (policy == nullptr)
    fail(Status::invalid_argument, "policy = " + std::to_string(o->policy) + " is not a policy value (" +
                                       infokv::policy_names_list() + ", numbered from 0)");
  if (o->shape != 0 && o->shape != 1)
    fail(Status::invalid_argument,
         "shape = " + std::to_string(o->shape) + " is not a budget shape (uniform = 0, pyramid = 1)");
  so.n_threads = o->n_threads;
  so.kv_dtype = static_cast<infokv::KvDtype>(o->kv_dtype);
  so.block_size = o->block_size > 0 ? o->block_size : infokv::defaults::block_size;
  so.ubatch = o->ubatch > 0 ? o->ubatch : infokv::defaults::ubatch;
  so.kv_pool_blocks = o->kv_pool_blocks;
  so.kv_pool_bytes = o->kv_pool_bytes;
  infokv::CompressionConfig &c = so.compression;
  c.policy = policy->kind;
  c.budget_tokens = o->budget_tokens;
  c.budget_fraction = o->budget_fraction;
  c.window = o->window;
  c.interval = o->interval;
  c.alpha = o->alpha;
  c.tau = o->tau;
  c.entropy_top_k = o->entropy_top_k;
  c.pool_kernel_prefill = o->pool_kernel_prefill;
  c.pool_kernel_decode = o->pool_kernel_decode;
  c.shape = static_cast<infokv::BudgetShape>(o->shape);
  c.beta = o->beta;
  c.sink = o->sink;
  c.compress_after_prefill = o->compress_after_prefill != 0;
  // 0 is a byte budget; > 0 is auto's quality target (validate() refuses it with another policy, and a NaN).
  if (has_v4) c.max_loss = o->max_loss;
  if (has_v5) {
    if (o->layer_precision != IKV_LAYER_PRECISION_AUTO && o->layer_precision != IKV_LAYER_PRECISION_OFF)
      fail(Status::invalid_argument, "layer_precision = " + std::to_string(o->layer_precision) +
                                         " is neither IKV_LAYER_PRECISION_AUTO (0) nor IKV_LAYER_PRECISION_OFF (1)");
    c.layer_precision = o->layer_precision == IKV_LAYER_PRECISION_AUTO;
  }
  c.validate();
  // NULL and "" mean the default ("auto"); the Session constructor judges the rest (select_device): a malformed
  // string is invalid_argument, a CUDA device that is not there is no_device. Copied: the caller's string may go.
  if (has_v2 && o->device != nullptr) so.device = o->device;
  if (so.device.empty()) so.device = infokv::defaults::device;
  if (has_v3) {
    require(o->max_sequences >= 0 && o->max_sequences <= (1 << 20), "max_sequences must be in [0, 2^20] (0: 4096)");
    if (o->max_sequences > 0) so.max_sequences = o->max_sequences;
  }
  return so;
}

// Size of revision 1 of ikv_sampler_options: a caller built against a later header passes a larger struct_size,
// and one built against this or an earlier revision at least this. Fields a later revision adds are read only when
// the caller's struct_size and version cover them.
constexpr size_t kSamplerOptionsV1Size = offsetof(ikv_sampler_options, seed) + sizeof(uint64_t);
static_assert(IKV_SAMPLER_OPTIONS_VERSION == 1, "a new ikv_sampler_options revision needs its size and reader here");

infokv::SamplerParams to_sampler_params(const ikv_sampler_options *o) {
  infokv::SamplerParams p;
  if (o == nullptr) return p;
  has_revision("ikv_sampler_options", "IKV_SAMPLER_OPTIONS_INIT", o->struct_size, o->version, 1, kSamplerOptionsV1Size);
  p.temperature = o->temperature;
  p.top_k = o->top_k;
  p.top_p = o->top_p;
  p.min_p = o->min_p;
  p.repeat_penalty = o->repeat_penalty;
  p.repeat_last_n = o->repeat_last_n;
  p.seed = o->seed;
  return p;
}

// One int64 fact of a sequence's SeqInfo into *out (0 on any failure).
template <typename F>
int32_t seq_value(int64_t *out, const ikv_session *session, int32_t seq, F &&get) {
  if (out != nullptr) *out = 0;
  return guard([&] {
    const auto sess = infokv::capi::use(session, "session");
    require(out != nullptr, "out must not be NULL");
    *out = get(sess->session->info(seq));
    return IKV_OK;
  });
}

// Two facts of a sequence into *out_a and *out_b (both 0 on any failure); `get` returns them as a pair.
template <typename A, typename B, typename F>
int32_t seq_pair(A *out_a, B *out_b, const char *names, const ikv_session *session, F &&get) {
  if (out_a != nullptr) *out_a = 0;
  if (out_b != nullptr) *out_b = 0;
  return guard([&] {
    const auto sess = infokv::capi::use(session, "session");
    if (out_a == nullptr || out_b == nullptr) fail(Status::invalid_argument, std::string(names) + " must not be NULL");
    std::tie(*out_a, *out_b) = get(*sess->session);
    return IKV_OK;
  });
}

}  // namespace

infokv::SessionOptions infokv::capi::session_options_from_c(const ikv_session_options *o) { return to_session_options(o); }
infokv::SamplerParams infokv::capi::sampler_params_from_c(const ikv_sampler_options *o) { return to_sampler_params(o); }

extern "C" {

// The C header's version is the project's (CMakeLists.txt), which the core's generated header carries.
static_assert(IKV_VERSION_NUMBER == infokv::kVersionNumber, "IKV_VERSION_* in infokv.h must match project(VERSION) in CMakeLists.txt");

const char *ikv_version_string(void) { return IKV_VERSION_STRING; }
int32_t ikv_version_number(void) { return IKV_VERSION_NUMBER; }

const char *ikv_status_string(int32_t status) {
  switch (status) {
    case IKV_OK: return "ok";
    case IKV_ERR_INVALID_ARGUMENT: return "invalid argument";
    case IKV_ERR_IO: return "I/O error";
    case IKV_ERR_BAD_MODEL: return "bad model file";
    case IKV_ERR_UNSUPPORTED: return "unsupported";
    case IKV_ERR_OUT_OF_MEMORY: return "out of memory";
    case IKV_ERR_KV_FULL: return "KV full";
    case IKV_ERR_OUT_OF_RANGE: return "out of range";
    case IKV_ERR_CANCELLED: return "cancelled";
    case IKV_ERR_BAD_SNAPSHOT: return "bad snapshot";
    case IKV_ERR_WRONG_MODEL: return "wrong model";
    case IKV_ERR_VERSION: return "unsupported version";
    case IKV_ERR_BAD_CONFIG: return "bad config";
    case IKV_ERR_NO_DEVICE: return "no device";
    case IKV_ERR_BUFFER_TOO_SMALL: return "buffer too small";
    case IKV_ERR_NOT_FOUND: return "not found";
    case IKV_ERR_BAD_STATE: return "bad state";
    case IKV_ERR_BAD_HANDLE: return "bad handle";
    case IKV_ERR_BUSY: return "busy";
    case IKV_ERR_INTERNAL: return "internal error";
    default: return "unknown status";
  }
}

int32_t ikv_model_load(ikv_model **out, const char *path) {
  if (out != nullptr) *out = nullptr;
  return guard([&] {
    require(out != nullptr && path != nullptr, "ikv_model_load: out and path must not be NULL");
    auto m = std::make_unique<ikv_model>();
    m->model = infokv::Model::load(path);
    *out = infokv::capi::register_handle(std::move(m));
    return IKV_OK;
  });
}

void ikv_model_free(ikv_model *model) {
  infokv::capi::free_handle(model);  // NULL, stale and foreign handles are ignored
}

int32_t ikv_model_get_int(int64_t *out, const ikv_model *model, int32_t property) {
  if (out != nullptr) *out = 0;
  return guard([&] {
    const auto mdl = infokv::capi::use(model, "model");
    require(out != nullptr, "out must not be NULL");
    const infokv::Model &m = *mdl->model;
    const infokv::HParams &hp = m.hparams();
    switch (property) {
      case IKV_MODEL_N_VOCAB: *out = hp.n_vocab; break;
      case IKV_MODEL_N_EMBD: *out = hp.n_embd; break;
      case IKV_MODEL_N_LAYER: *out = hp.n_layer; break;
      case IKV_MODEL_N_HEAD: *out = hp.n_head; break;
      case IKV_MODEL_N_HEAD_KV: *out = hp.n_head_kv; break;
      case IKV_MODEL_HEAD_DIM: *out = hp.head_dim; break;
      case IKV_MODEL_N_FF: *out = hp.n_ff; break;
      case IKV_MODEL_N_CTX_TRAIN: *out = hp.n_ctx_train; break;
      case IKV_MODEL_BOS: *out = m.tokenizer().bos(); break;
      case IKV_MODEL_EOS: *out = m.tokenizer().eos(); break;
      case IKV_MODEL_N_PARAMS: *out = static_cast<int64_t>(m.n_params()); break;
      case IKV_MODEL_WEIGHT_BYTES: *out = static_cast<int64_t>(m.weight_bytes()); break;
      default: fail(Status::invalid_argument, "unknown model property " + std::to_string(property));
    }
    return IKV_OK;
  });
}

int32_t ikv_model_describe(char *out, size_t capacity, size_t *out_len, const ikv_model *model) {
  if (out_len != nullptr) *out_len = 0;
  return guard([&] {
    const auto mdl = infokv::capi::use(model, "model");
    require(out_len != nullptr, "out_len must not be NULL");
    require(out != nullptr || capacity == 0, "out is NULL but capacity is not 0");
    return infokv::capi::copy_out_text(out, capacity, out_len, infokv::describe_json(*mdl->model));
  });
}

int32_t ikv_tokenize_ex(int32_t *out_tokens, size_t capacity, size_t *out_count, const ikv_model *model,
                        const char *text, size_t text_len, uint32_t flags) {
  if (out_count != nullptr) *out_count = 0;
  return guard([&] {
    const auto mdl = infokv::capi::use(model, "model");
    require(out_count != nullptr, "out_count must not be NULL");
    require(text != nullptr || text_len == 0, "text is NULL");
    require(out_tokens != nullptr || capacity == 0, "out_tokens is NULL but capacity is not 0");
    constexpr uint32_t known = IKV_TOKENIZE_ADD_BOS | IKV_TOKENIZE_PARSE_SPECIAL;
    require((flags & ~known) == 0, ("unknown tokenize flags " + std::to_string(flags & ~known) +
                                    " (known: IKV_TOKENIZE_ADD_BOS 1, IKV_TOKENIZE_PARSE_SPECIAL 2)").c_str());
    const std::vector<int32_t> ids = mdl->model->tokenizer().encode(std::string_view(text ? text : "", text_len),
                                                                    (flags & IKV_TOKENIZE_ADD_BOS) != 0,
                                                                    (flags & IKV_TOKENIZE_PARSE_SPECIAL) != 0);
    return infokv::capi::copy_out_ids(out_tokens, capacity, out_count, ids);
  });
}

int32_t ikv_tokenize(int32_t *out_tokens, size_t capacity, size_t *out_count, const ikv_model *model, const char *text,
                     size_t text_len, int32_t add_bos) {
  return ikv_tokenize_ex(out_tokens, capacity, out_count, model, text, text_len, add_bos != 0 ? IKV_TOKENIZE_ADD_BOS : 0u);
}

int32_t ikv_detokenize(char *out, size_t capacity, size_t *out_len, const ikv_model *model, const int32_t *tokens,
                       size_t n_tokens) {
  if (out_len != nullptr) *out_len = 0;
  return guard([&] {
    const auto mdl = infokv::capi::use(model, "model");
    require(out_len != nullptr, "out_len must not be NULL");
    require(tokens != nullptr || n_tokens == 0, "tokens is NULL");
    require(out != nullptr || capacity == 0, "out is NULL but capacity is not 0");
    std::vector<int32_t> ids(tokens, tokens + n_tokens);
    return infokv::capi::copy_out_text(out, capacity, out_len, mdl->model->tokenizer().decode(ids));
  });
}

int32_t ikv_session_options_init_version(ikv_session_options *opts, size_t struct_size, uint32_t version) {
  static constexpr size_t sizes[] = {kSessionOptionsV1Size, kSessionOptionsV2Size, kSessionOptionsV3Size,
                                     kSessionOptionsV4Size, kSessionOptionsV5Size};
  static_assert(sizeof(sizes) / sizeof(sizes[0]) == IKV_SESSION_OPTIONS_VERSION, "one size per revision");
  const ikv_session_options defaults = IKV_SESSION_OPTIONS_INIT;
  return init_options(opts, &defaults, struct_size, version, sizes, "ikv_session_options", IKV_SESSION_OPTIONS_VERSION);
}

// The exported symbol that programs built before the versioned initialiser call: it writes revision 4, the one the
// released 0.1 header had (packaging/abi/libinfokv.abi), frozen here so that no later revision is ever written into
// their structs. (Revision 1 would silently drop the device, max_sequences and max_loss every such program sets.)
constexpr uint32_t kLegacySessionOptionsRevision = 4;
#undef ikv_session_options_init
int32_t ikv_session_options_init(ikv_session_options *opts) {
  return ikv_session_options_init_version(opts, kSessionOptionsV4Size, kLegacySessionOptionsRevision);
}

int32_t ikv_session_create(ikv_session **out, ikv_model *model, const ikv_session_options *opts) {
  if (out != nullptr) *out = nullptr;
  return guard([&] {
    require(out != nullptr, "out must not be NULL");
    const auto mdl = infokv::capi::use(model, "model");
    auto s = std::make_unique<ikv_session>();
    s->session = std::make_unique<infokv::Session>(mdl->model, to_session_options(opts));
    s->session->add_sequence();
    *out = infokv::capi::register_handle(std::move(s));
    return IKV_OK;
  });
}

void ikv_session_free(ikv_session *session) {
  infokv::capi::free_handle(session);  // NULL, stale and foreign handles are ignored
}

int32_t ikv_seq_add(int32_t *out_seq, ikv_session *session) {
  if (out_seq != nullptr) *out_seq = -1;
  return guard([&] {
    const auto sess = infokv::capi::use(session, "session");
    require(out_seq != nullptr, "out_seq must not be NULL");
    *out_seq = sess->session->add_sequence();
    return IKV_OK;
  });
}

int32_t ikv_seq_remove(ikv_session *session, int32_t seq) {
  return guard([&] {
    const auto sess = infokv::capi::use(session, "session");
    sess->session->remove_sequence(seq);
    return IKV_OK;
  });
}

int32_t ikv_seq_fork(int32_t *out_seq, ikv_session *session, int32_t src) {
  if (out_seq != nullptr) *out_seq = -1;
  return guard([&] {
    const auto sess = infokv::capi::use(session, "session");
    require(out_seq != nullptr, "out_seq must not be NULL");
    *out_seq = sess->session->fork_sequence(src);
    return IKV_OK;
  });
}

int32_t ikv_seq_truncate(ikv_session *session, int32_t seq, int64_t length) {
  return guard([&] {
    const auto sess = infokv::capi::use(session, "session");
    sess->session->truncate(seq, length);
    return IKV_OK;
  });
}

int32_t ikv_seq_remove_range(ikv_session *session, int32_t seq, int64_t begin, int64_t end) {
  return guard([&] {
    const auto sess = infokv::capi::use(session, "session");
    sess->session->remove_range(seq, begin, end);
    return IKV_OK;
  });
}

int32_t ikv_seq_length(int64_t *out, const ikv_session *session, int32_t seq) {
  return seq_value(out, session, seq, [](const infokv::SeqInfo &i) { return i.length; });
}

int32_t ikv_seq_kept(int64_t *out, const ikv_session *session, int32_t seq, int32_t layer) {
  return seq_value(out, session, seq, [layer](const infokv::SeqInfo &i) {
    if (layer < 0 || static_cast<size_t>(layer) >= i.kept_per_layer.size())
      fail(Status::out_of_range, "layer " + std::to_string(layer) + " out of range");
    return static_cast<int64_t>(i.kept_per_layer[static_cast<size_t>(layer)]);
  });
}

int32_t ikv_seq_kv_bytes(int64_t *out, const ikv_session *session, int32_t seq) {
  return seq_value(out, session, seq, [](const infokv::SeqInfo &i) { return i.bytes; });
}

int32_t ikv_seq_kv_bytes_uncompressed(int64_t *out, const ikv_session *session, int32_t seq) {
  return seq_value(out, session, seq, [](const infokv::SeqInfo &i) { return i.uncompressed_bytes; });
}

int32_t ikv_seq_budget(int64_t *out_budget_tokens, int64_t *out_slack_tokens, const ikv_session *session, int32_t seq) {
  return seq_pair(out_budget_tokens, out_slack_tokens, "out_budget_tokens and out_slack_tokens", session,
                  [seq](const infokv::Session &s) {
                    const infokv::Compressor::Bound b = s.compressor().bound(seq);
                    return std::make_pair(b.budget, b.slack);
                  });
}

int32_t ikv_seq_protection(int64_t *out_protected_tokens, int64_t *out_released_tokens, const ikv_session *session,
                           int32_t seq) {
  return seq_pair(out_protected_tokens, out_released_tokens, "out_protected_tokens and out_released_tokens", session,
                  [seq](const infokv::Session &s) {
                    return std::make_pair(s.compressor().protected_tokens(seq), s.compressor().state(seq).protected_released);
                  });
}

int32_t ikv_decode(ikv_session *session, int32_t seq, const int32_t *tokens, size_t n_tokens) {
  return guard([&] {
    const auto sess = infokv::capi::use(session, "session");
    require(tokens != nullptr && n_tokens > 0, "tokens must not be NULL or empty");
    std::vector<infokv::BatchToken> batch(n_tokens);
    for (size_t i = 0; i < n_tokens; ++i) batch[i] = {seq, tokens[i], false};
    sess->session->decode(batch);
    return IKV_OK;
  });
}

int32_t ikv_decode_batch(ikv_session *session, const int32_t *seq_ids, const int32_t *tokens, size_t n_items) {
  return guard([&] {
    const auto sess = infokv::capi::use(session, "session");
    require(seq_ids != nullptr && tokens != nullptr && n_items > 0, "seq_ids and tokens must not be NULL or empty");
    std::vector<infokv::BatchToken> batch(n_items);
    for (size_t i = 0; i < n_items; ++i) batch[i] = {seq_ids[i], tokens[i], false};
    sess->session->decode(batch);
    return IKV_OK;
  });
}

int32_t ikv_get_logits(float *out, size_t capacity, size_t *out_count, const ikv_session *session, int32_t seq) {
  if (out_count != nullptr) *out_count = 0;
  return guard([&] {
    const auto sess = infokv::capi::use(session, "session");
    require(out_count != nullptr, "out_count must not be NULL");
    require(out != nullptr || capacity == 0, "out is NULL but capacity is not 0");
    const std::vector<float> &lg = sess->session->logits(seq);
    *out_count = lg.size();
    if (capacity < lg.size())
      return infokv::capi::fail_status(IKV_ERR_BUFFER_TOO_SMALL, "logits buffer holds " + std::to_string(capacity) +
                                                                     ", " + std::to_string(lg.size()) + " needed");
    std::copy(lg.begin(), lg.end(), out);
    return IKV_OK;
  });
}

int32_t ikv_kv_stat(int64_t *out, const ikv_session *session, int32_t stat) {
  if (out != nullptr) *out = 0;
  return guard([&] {
    const auto sess = infokv::capi::use(session, "session");
    require(out != nullptr, "out must not be NULL");
    const infokv::KvStats s = sess->session->kv_stats();
    switch (stat) {
      case IKV_KV_STAT_BLOCKS_TOTAL: *out = s.blocks_total; break;
      case IKV_KV_STAT_BLOCKS_USED: *out = s.blocks_used; break;
      case IKV_KV_STAT_BLOCKS_FREE: *out = s.blocks_free; break;
      case IKV_KV_STAT_BLOCK_BYTES: *out = s.block_bytes; break;
      case IKV_KV_STAT_BYTES_USED: *out = s.bytes_used; break;
      case IKV_KV_STAT_BLOCK_SIZE: *out = sess->session->kv().config().block_size; break;
      case IKV_KV_STAT_HOST_BYTES: *out = s.host_bytes; break;
      default: fail(Status::invalid_argument, "unknown KV statistic " + std::to_string(stat));
    }
    return IKV_OK;
  });
}

int32_t ikv_seq_pressure_estimate(int64_t *out_blocks, double *out_cost_per_block, const ikv_session *session,
                                  int32_t seq) {
  return seq_pair(out_blocks, out_cost_per_block, "out_blocks and out_cost_per_block", session,
                  [seq](infokv::Session &s) {
                    const infokv::PressureCandidate c = s.compressor().pressure_estimate(seq);
                    return std::make_pair(c.blocks, c.cost_per_block);
                  });
}

const char *ikv_evidence_name(int32_t evidence) {
  if (evidence < 0 || evidence >= infokv::kEvidenceKinds) return "unknown";
  return infokv::evidence_name(static_cast<infokv::Evidence>(evidence));
}

int32_t ikv_seq_auto_report(int32_t *out_layers, int64_t *out_kept_tokens, int64_t *out_uniform_tokens, double *out_loss,
                            double *out_max_loss, const ikv_session *session, int32_t seq) {
  if (out_layers != nullptr) *out_layers = 0;
  if (out_kept_tokens != nullptr) *out_kept_tokens = 0;
  if (out_uniform_tokens != nullptr) *out_uniform_tokens = 0;
  if (out_loss != nullptr) *out_loss = 0;
  if (out_max_loss != nullptr) *out_max_loss = 0;
  return guard([&] {
    const auto sess = infokv::capi::use(session, "session");
    require(out_layers != nullptr && out_kept_tokens != nullptr && out_uniform_tokens != nullptr && out_loss != nullptr &&
                out_max_loss != nullptr,
            "ikv_seq_auto_report: no output may be NULL");
    const infokv::AutoReport &r = sess->session->compressor().state(seq).auto_report;
    if (r.empty()) return IKV_OK;  // not compressed under auto (yet): every output stays 0
    *out_layers = static_cast<int32_t>(r.layers.size());
    *out_kept_tokens = r.tokens;
    *out_uniform_tokens = r.uniform_tokens;
    *out_loss = r.loss;
    *out_max_loss = r.max_loss;
    return IKV_OK;
  });
}

int32_t ikv_seq_auto_layer(int32_t *out_evidence, int32_t *out_budget, double *out_alpha, double *out_loss,
                           const ikv_session *session, int32_t seq, int32_t layer) {
  if (out_evidence != nullptr) *out_evidence = -1;
  if (out_budget != nullptr) *out_budget = 0;
  if (out_alpha != nullptr) *out_alpha = 0;
  if (out_loss != nullptr) *out_loss = 0;
  return guard([&] {
    const auto sess = infokv::capi::use(session, "session");
    require(out_evidence != nullptr && out_budget != nullptr && out_alpha != nullptr && out_loss != nullptr,
            "ikv_seq_auto_layer: no output may be NULL");
    const infokv::AutoReport &r = sess->session->compressor().state(seq).auto_report;
    if (r.empty())
      fail(Status::out_of_range, "sequence " + std::to_string(seq) + " has no auto report (it has not been compressed under policy auto)");
    if (layer < 0 || static_cast<size_t>(layer) >= r.layers.size())
      fail(Status::out_of_range, "layer " + std::to_string(layer) + " is outside the auto report's " +
                                     std::to_string(r.layers.size()) + " layers");
    const infokv::AutoLayerChoice &ch = r.layers[static_cast<size_t>(layer)];
    *out_evidence = static_cast<int32_t>(ch.evidence);
    *out_budget = ch.budget;
    *out_alpha = ch.alpha;
    *out_loss = ch.loss;
    return IKV_OK;
  });
}

int32_t ikv_seq_layer_dtype(int32_t *out_value, const ikv_session *session, int32_t seq, int32_t layer) {
  if (out_value != nullptr) *out_value = 0;
  return guard([&] {
    const auto sess = infokv::capi::use(session, "session");
    require(out_value != nullptr, "ikv_seq_layer_dtype: out_value must not be NULL");
    const infokv::SeqCache &c = sess->session->kv().seq(seq);
    if (layer < 0 || static_cast<size_t>(layer) >= c.layers.size())
      fail(Status::out_of_range, "layer " + std::to_string(layer) + " is outside the model's " + std::to_string(c.layers.size()) +
                                     " layers");
    *out_value = static_cast<int32_t>(c.layers[static_cast<size_t>(layer)].dtype);
    return IKV_OK;
  });
}

int32_t ikv_seq_protect(ikv_session *session, int32_t seq, int64_t begin, int64_t end, int32_t fair) {
  return guard([&] {
    const auto sess = infokv::capi::use(session, "session");
    sess->session->compressor().protect(seq, infokv::ProtectedSpan{begin, end, fair != 0});
    return IKV_OK;
  });
}

int32_t ikv_seq_compress(ikv_session *session, int32_t seq, int32_t budget_tokens) {
  return guard([&] {
    const auto sess = infokv::capi::use(session, "session");
    require(budget_tokens >= 0, "budget_tokens must be >= 0");
    sess->session->compressor().compress(seq, budget_tokens);
    return IKV_OK;
  });
}

int32_t ikv_seq_compress_for(ikv_session *session, int32_t seq, int32_t budget_tokens, int32_t question) {
  return guard([&] {
    const auto sess = infokv::capi::use(session, "session");
    require(budget_tokens >= 0, "budget_tokens must be >= 0");
    require(question >= IKV_QUESTION_BOTH && question <= IKV_QUESTION_LATER,
            "question must be IKV_QUESTION_BOTH, IKV_QUESTION_NEXT or IKV_QUESTION_LATER");
    sess->session->compressor().compress(seq, budget_tokens, static_cast<infokv::Question>(question));
    return IKV_OK;
  });
}

int32_t ikv_seq_compression_question(int32_t *out_question, double *out_probe_seconds, const ikv_session *session,
                                     int32_t seq) {
  if (out_question != nullptr) *out_question = 0;
  if (out_probe_seconds != nullptr) *out_probe_seconds = 0;
  return guard([&] {
    require(out_question != nullptr && out_probe_seconds != nullptr, "out_question and out_probe_seconds must not be NULL");
    const auto sess = infokv::capi::use(session, "session");
    const infokv::SeqCompression &st = sess->session->compressor().state(seq);
    *out_question = static_cast<int32_t>(st.question);
    *out_probe_seconds = st.probe_seconds;
    return IKV_OK;
  });
}

int32_t ikv_sampler_options_init_version(ikv_sampler_options *opts, size_t struct_size, uint32_t version) {
  static constexpr size_t sizes[] = {kSamplerOptionsV1Size};
  static_assert(sizeof(sizes) / sizeof(sizes[0]) == IKV_SAMPLER_OPTIONS_VERSION, "one size per revision");
  const ikv_sampler_options defaults = IKV_SAMPLER_OPTIONS_INIT;
  return init_options(opts, &defaults, struct_size, version, sizes, "ikv_sampler_options", IKV_SAMPLER_OPTIONS_VERSION);
}

// As above: revision 1 is the released one, frozen.
#undef ikv_sampler_options_init
int32_t ikv_sampler_options_init(ikv_sampler_options *opts) {
  return ikv_sampler_options_init_version(opts, kSamplerOptionsV1Size, 1);
}

int32_t ikv_sampler_create(ikv_sampler **out, const ikv_sampler_options *opts) {
  if (out != nullptr) *out = nullptr;
  return guard([&] {
    require(out != nullptr, "out must not be NULL");
    auto s = std::make_unique<ikv_sampler>();
    s->sampler = std::make_unique<infokv::Sampler>(to_sampler_params(opts));
    *out = infokv::capi::register_handle(std::move(s));
    return IKV_OK;
  });
}

void ikv_sampler_free(ikv_sampler *sampler) {
  infokv::capi::free_handle(sampler);  // NULL, stale and foreign handles are ignored
}

int32_t ikv_sample(int32_t *out_token, ikv_sampler *sampler, const ikv_session *session, int32_t seq) {
  if (out_token != nullptr) *out_token = -1;
  return guard([&] {
    const auto samp = infokv::capi::use(sampler, "sampler");
    const auto sess = infokv::capi::use(session, "session");
    require(out_token != nullptr, "out_token must not be NULL");
    const std::vector<float> &lg = sess->session->logits(seq);
    const int32_t t = samp->sampler->sample(lg.data(), static_cast<int32_t>(lg.size()));
    samp->sampler->accept(t);
    *out_token = t;
    return IKV_OK;
  });
}

int32_t ikv_generate(int32_t *out_tokens, size_t capacity, size_t *out_count, ikv_session *session, int32_t seq,
                     const int32_t *prompt, size_t n_prompt, int32_t max_tokens, ikv_sampler *sampler,
                     ikv_token_callback callback, void *user_data) {
  if (out_count != nullptr) *out_count = 0;
  return guard([&] {
    const auto sess = infokv::capi::use(session, "session");
    const auto samp = infokv::capi::use(sampler, "sampler");
    require(prompt != nullptr || n_prompt == 0, "prompt is NULL");
    const std::vector<int32_t> p(prompt, prompt + n_prompt);
    return infokv::capi::run_generation(out_tokens, capacity, out_count, max_tokens, callback, user_data,
                                        [&](const infokv::TokenCallback &cb) {
                                          return infokv::generate(*sess->session, seq, p, max_tokens, *samp->sampler, cb);
                                        });
  });
}

}  // extern "C"
