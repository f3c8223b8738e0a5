#include "config/config.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <cstdio>
#include <cstring>
#include <new>
#include <utility>
#include <vector>

#include <flatbuffers/idl.h>

#if defined(__SANITIZE_ADDRESS__)
#define INFOKV_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define INFOKV_LSAN 1
#endif
#endif
#ifndef INFOKV_LSAN
#define INFOKV_LSAN 0
#endif
#if INFOKV_LSAN
#include <sanitizer/lsan_interface.h>
#endif

#include "compress/policy_table.hpp"
#include "infokv_fb/config_generated.h"
#include "util/error.hpp"
#include "util/file_io.hpp"
#include "util/json_reader.hpp"
#include "util/limits.hpp"

namespace infokv {

namespace fbc = ::infokv::config;

// The schema's Policy values against the policy table (the JSON names are checked by a test: they are not constexpr).
static_assert(static_cast<int>(fbc::Policy::MAX) == kPolicyTable.back().schema_value, "a schema policy is missing from the table");

namespace {

[[noreturn]] void bad(const std::string &m) { fail(Status::bad_config, "config: " + m); }

void parser_with_schema(flatbuffers::Parser &p) {
  if (!p.Parse(schema_text_config())) fail(Status::internal, "embedded config schema does not parse: " + p.error_);
}

flatbuffers::IDLOptions json_options() {
  flatbuffers::IDLOptions o;
  o.strict_json = true;                      // plain JSON: quoted keys, no trailing commas
  o.skip_unexpected_fields_in_json = false;  // an unknown field is an error naming it
  o.output_default_scalars_in_json = true;
  o.indent_step = 2;
  return o;
}

// The system flatbuffers (2.0) parser is not exception-safe: a std::bad_alloc inside Parser::Parse (e.g. in
// EnumValBuilder::AcceptEnumerator while it reads the schema) can leave a symbol owned twice or a dangling
// pointer, and ~Parser then frees garbage (tests/unit/util/test_alloc_faults.cpp found it). A parser that an allocation
// failure went through is therefore abandoned, not destroyed: memory is short already, and a leak of one parser on
// that path beats corrupting the heap. Any other exception comes from our own checks and destroys it as usual.
template <typename F>
auto with_schema_parser(F &&use) -> decltype(use(std::declval<flatbuffers::Parser &>())) {
  flatbuffers::Parser *p = new flatbuffers::Parser(json_options());
  try {
    parser_with_schema(*p);
    auto r = use(*p);
    delete p;
    return r;
  } catch (const std::bad_alloc &) {
#if INFOKV_LSAN
    __lsan_ignore_object(p);  // on purpose, see above
#endif
    throw;
  } catch (...) {
    delete p;
    throw;
  }
}

template <typename T>
void in_range(const char *field, T v, T lo, T hi) {
  if (!(v >= lo && v <= hi))  // also refuses NaN
    bad(std::string(field) + " = " + std::to_string(v) + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

// The parser's messages start "LINE: COL: error: ..." but do not always name the field (an integer that does not
// fit, for one); the key written last before that point is the one at fault.
std::string field_near_error(const std::string &text, const std::string &err) {
  long line = 0, col = 0;
  if (std::sscanf(err.c_str(), "%ld: %ld:", &line, &col) != 2 || line < 1 || col < 0) return "";
  size_t off = 0;
  for (long l = 1; l < line && off != std::string::npos; ++l) {
    off = text.find('\n', off);
    if (off != std::string::npos) ++off;
  }
  if (off == std::string::npos) return "";
  off = std::min(text.size(), off + static_cast<size_t>(col));
  const size_t colon = text.rfind(':', off == 0 ? 0 : off - 1);
  if (colon == std::string::npos) return "";
  const size_t q2 = text.rfind('"', colon);
  if (q2 == std::string::npos || q2 == 0) return "";
  const size_t q1 = text.rfind('"', q2 - 1);
  if (q1 == std::string::npos) return "";
  return text.substr(q1 + 1, q2 - q1 - 1);
}

// Configs are strict JSON (RFC 8259), checked field by field against the schema before the FlatBuffers parser sees
// them: that parser alone also takes comments, single quotes, unquoted keys, trailing commas, hex and "4" for a
// number, and ORs space-separated enum names ("infokv h2o" became tova).
void check_table(const JsonValue &obj, const flatbuffers::StructDef &sd, const std::string &prefix);

void check_field(const JsonValue &v, const flatbuffers::FieldDef &fd, const std::string &field) {
  const flatbuffers::Type &t = fd.value.type;
  if (t.base_type == flatbuffers::BASE_TYPE_STRUCT && t.struct_def != nullptr && !t.struct_def->fixed) {
    check_table(v, *t.struct_def, field);
    return;
  }
  if (t.base_type == flatbuffers::BASE_TYPE_STRING) {
    if (!v.is_string()) bad(field + " must be a JSON string");
    return;
  }
  if (flatbuffers::IsBool(t.base_type)) {
    if (!v.is_bool()) bad(field + " must be true or false");
    return;
  }
  if (t.enum_def != nullptr && flatbuffers::IsInteger(t.base_type)) {
    const flatbuffers::EnumDef &e = *t.enum_def;
    if (e.name == "Policy") {
      // Exactly one name from the policy table; numbers and unions are refused (they meant other policies).
      if (!v.is_string() || policy_by_name(v.as_string()) == nullptr)
        bad(field + (v.is_string() ? " = \"" + v.as_string() + "\" is not" : " must be") +
            " one policy name as a JSON string (one of: " + policy_names_list() + ")");
      return;
    }
    std::string names;
    for (const flatbuffers::EnumVal *ev : e.Vals()) names += (names.empty() ? "" : ", ") + ev->name;
    if (!v.is_string() || e.Lookup(v.as_string()) == nullptr)
      bad(field + (v.is_string() ? " = \"" + v.as_string() + "\" is not" : " must be") + " one name as a JSON string (one of: " +
          names + ")");
    return;
  }
  if (flatbuffers::IsInteger(t.base_type)) {
    if (!v.is_number()) bad(field + " must be a JSON number");
    if (!v.is_integral_literal()) bad(field + " must be a whole number (no fraction or exponent)");
    return;
  }
  if (flatbuffers::IsFloat(t.base_type)) {
    if (!v.is_number()) bad(field + " must be a JSON number");
    return;
  }
  bad(field + " has a schema type this reader does not handle");
}

void check_table(const JsonValue &obj, const flatbuffers::StructDef &sd, const std::string &prefix) {
  if (!obj.is_object()) bad((prefix.empty() ? std::string("the config") : prefix) + " must be a JSON object");
  for (const auto &member : obj.members()) {
    const std::string field = prefix.empty() ? member.first : prefix + "." + member.first;
    const flatbuffers::FieldDef *fd = sd.fields.Lookup(member.first);
    if (fd == nullptr || fd->deprecated) bad("unknown field \"" + field + "\"");
    check_field(member.second, *fd, field);
  }
}

bool valid_utf8(const std::string &s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 0 : (c >> 5) == 0x6 ? 1 : (c >> 4) == 0xe ? 2 : (c >> 3) == 0x1e ? 3 : -1;
    if (n < 0 || c == 0xc0 || c == 0xc1 || c > 0xf4 || i + static_cast<size_t>(n) >= s.size() + (n == 0 ? 1 : 0)) return false;
    for (int k = 1; k <= n; ++k)
      if ((static_cast<unsigned char>(s[i + static_cast<size_t>(k)]) & 0xc0) != 0x80) return false;
    i += static_cast<size_t>(n) + 1;
  }
  return true;
}

}  // namespace

void validate_config(const Config &c) {
  // Strings must be UTF-8 without NUL: the JSON writer cannot represent anything else.
  if (!valid_utf8(c.model_path) || c.model_path.find('\0') != std::string::npos) bad("model_path is not valid UTF-8 text");
  const std::string &d = c.session.device;
  if (!valid_utf8(d) || d.find('\0') != std::string::npos) bad("device is not valid UTF-8 text");
  bool dev_ok = d.empty() || d == "auto" || d == "cpu" || d == "cuda";
  if (!dev_ok && d.size() > 5 && d.compare(0, 5, "cuda:") == 0 && d.size() <= 9) {
    dev_ok = true;
    for (size_t i = 5; i < d.size(); ++i) dev_ok = dev_ok && d[i] >= '0' && d[i] <= '9';
  }
  if (!dev_ok) bad("device = \"" + d + "\" must be \"cpu\", \"cuda\", \"cuda:N\" or \"auto\"");
  const SessionOptions &s = c.session;
  in_range("threads", s.n_threads, 0, limits::max_threads);
  in_range("block_size", s.block_size, 1, limits::max_block_size);
  in_range("ubatch", s.ubatch, 1, 1 << 16);
  in_range<int64_t>("kv_pool_bytes", s.kv_pool_bytes, 0, int64_t{1} << 46);
  in_range<int64_t>("kv_pool_blocks", s.kv_pool_blocks, 0, int64_t{1} << 30);
  in_range("kv_pool_fraction", s.kv_pool_fraction, 0.0, 1.0);
  in_range("max_sequences", s.max_sequences, 1, 1 << 20);
  const CompressionConfig &k = s.compression;
  in_range("compression.budget_fraction", k.budget_fraction, 0.0, 1.0);
  in_range("compression.budget_tokens", k.budget_tokens, 0, 1 << 30);
  in_range("compression.window", k.window, -1, limits::max_window);
  in_range("compression.interval", k.interval, 0, 1 << 30);  // 0 and 1024: when memory requires it
  in_range("compression.alpha", k.alpha, 0.0f, 1.0f);
  in_range("compression.tau", k.tau, 0.0f, 1e6f);
  in_range("compression.entropy_top_k", k.entropy_top_k, 1, 1 << 24);
  in_range("compression.pool_kernel_prefill", k.pool_kernel_prefill, 1, 63);
  in_range("compression.pool_kernel_decode", k.pool_kernel_decode, 1, 63);
  if (!(k.beta > 1.0f && k.beta <= 1e6f)) bad("compression.beta = " + std::to_string(k.beta) + " must be in (1, 1e6]");
  in_range("compression.sink", k.sink, 0, 1 << 20);
  if (!(k.max_loss >= 0.0 && std::isfinite(k.max_loss)))
    bad("compression.max_loss = " + std::to_string(k.max_loss) + " must be finite and >= 0");
  if (k.max_loss > 0.0 && !k.is_auto())
    bad("compression.max_loss (a quality target) needs compression.policy auto, not " + std::string(policy_name(k.policy)));
  // A quality target replaces the budget.
  if (k.enabled() && !k.quality_target() && k.budget_fraction <= 0 && k.budget_tokens <= 0)
    bad("compression.policy " + std::string(policy_name(k.policy)) + " needs compression.budget_fraction or budget_tokens" +
        (k.is_auto() ? " (or compression.max_loss)" : ""));
  try {
    k.validate();
  } catch (const Error &e) {
    bad(std::string("compression: ") + e.what());
  }
  const SamplerParams &p = c.sampler;
  in_range("sampler.temperature", p.temperature, -1e3f, 1e3f);
  in_range("sampler.top_k", p.top_k, -1, 1 << 24);
  in_range("sampler.top_p", p.top_p, 0.0f, 1.0f);
  in_range("sampler.min_p", p.min_p, 0.0f, 1.0f);
  if (!(p.repeat_penalty > 0.0f && p.repeat_penalty <= 100.0f)) bad("sampler.repeat_penalty must be in (0, 100]");
  in_range("sampler.repeat_last_n", p.repeat_last_n, 0, 1 << 20);
  in_range<int64_t>("protection.protect_prefix", c.session.protect_prefix, 0, int64_t{1} << 40);
}

Config config_from_binary(const void *data, size_t size) {
  if (data == nullptr || size < 8 || size > (size_t{1} << 31) - 1) bad("binary config is empty or too large");
  // The verifier wants the buffer aligned; a caller's bytes may not be.
  std::vector<uint8_t> copy(static_cast<const uint8_t *>(data), static_cast<const uint8_t *>(data) + size);
  if (!flatbuffers::BufferHasIdentifier(copy.data(), fbc::ConfigIdentifier())) bad("not an infokv config (identifier is not IKVC)");
  flatbuffers::Verifier v(copy.data(), copy.size());
  if (!fbc::VerifyConfigBuffer(v)) bad("binary config fails the FlatBuffers verifier");
  const fbc::Config *f = fbc::GetConfig(copy.data());
  Config c;
  if (f->model_path() != nullptr) c.model_path = f->model_path()->str();
  SessionOptions &s = c.session;
  if (f->device() != nullptr && f->device()->size() > 0) s.device = f->device()->str();  // the session selects it
  s.n_threads = f->threads();
  const int dt = static_cast<int>(f->kv_dtype());
  if (dt != 0 && !kv_dtype_valid(dt)) bad("kv_dtype = " + std::to_string(dt) + " is not " + kKvDtypeNames);
  if (dt != 0) s.kv_dtype = static_cast<KvDtype>(dt);
  if (f->block_size() != 0) s.block_size = f->block_size();
  s.kv_pool_bytes = f->kv_pool_bytes();
  s.kv_pool_blocks = f->kv_pool_blocks();
  s.kv_pool_fraction = f->kv_pool_fraction();
  if (f->max_sequences() != 0) s.max_sequences = f->max_sequences();
  if (f->ubatch() != 0) s.ubatch = f->ubatch();
  if (const fbc::Compression *k = f->compression()) {
    CompressionConfig &cc = s.compression;
    const int pol = static_cast<int>(k->policy());
    if (pol != kPolicySchemaUnspecified) {
      const PolicyInfo *info = policy_by_schema_value(pol);
      if (info == nullptr) bad("compression.policy = " + std::to_string(pol) + " is not a known policy value");
      cc.policy = info->kind;
    }
    cc.budget_fraction = k->budget_fraction();
    cc.budget_tokens = k->budget_tokens();
    cc.window = k->window();
    cc.interval = k->interval();
    cc.alpha = k->alpha();
    cc.tau = k->tau();
    cc.entropy_top_k = k->entropy_top_k();
    cc.pool_kernel_prefill = k->pool_kernel_prefill();
    cc.pool_kernel_decode = k->pool_kernel_decode();
    const int sh = static_cast<int>(k->shape());
    if (sh < 0 || sh > 2) bad("compression.shape = " + std::to_string(sh) + " is not uniform or pyramid");
    cc.shape = sh == 2 ? BudgetShape::pyramid : BudgetShape::uniform;
    cc.beta = k->beta();
    cc.sink = k->sink();
    cc.compress_after_prefill = k->compress_after_prefill();
    cc.max_loss = k->max_loss();
    const int qv = static_cast<int>(k->question());
    if (qv < 0 || qv > 3) bad("compression.question = " + std::to_string(qv) + " is not both, next or later");
    if (qv > 0) cc.question = static_cast<Question>(qv - 1);
    cc.layer_precision = k->layer_precision();
  }
  if (const fbc::Protection *p = f->protection()) s.protect_prefix = p->protect_prefix();
  if (const fbc::Sampler *p = f->sampler()) {
    c.sampler.temperature = p->temperature();
    c.sampler.top_k = p->top_k();
    c.sampler.top_p = p->top_p();
    c.sampler.min_p = p->min_p();
    c.sampler.repeat_penalty = p->repeat_penalty();
    c.sampler.repeat_last_n = p->repeat_last_n();
    c.sampler.seed = p->seed();
  }
  if (const fbc::SelfTuning *t = f->self_tuning(); t != nullptr && t->enabled())
    bad("self_tuning is deprecated and was never applied: use compression.policy \"auto\" (it chooses per sequence and "
        "layer; compression.max_loss sets a quality target) with a tuning profile from `infokv tune`");
  validate_config(c);
  return c;
}

Config config_from_json(const std::string &text) {
  if (text.find('\0') != std::string::npos) bad("JSON text contains a NUL byte");
  const std::vector<uint8_t> bin = with_schema_parser([&](flatbuffers::Parser &p) {
    const JsonValue doc = JsonValue::parse(text, static_cast<int32_t>(Status::bad_config), "config: invalid JSON");
    if (p.root_struct_def_ == nullptr) fail(Status::internal, "embedded config schema has no root type");
    check_table(doc, *p.root_struct_def_, "");
    if (!p.Parse(text.c_str())) {
      const std::string field = field_near_error(text, p.error_);
      bad("invalid JSON" + (field.empty() ? std::string() : " at field \"" + field + "\"") + ": " + p.error_);
    }
    return std::vector<uint8_t>(p.builder_.GetBufferPointer(), p.builder_.GetBufferPointer() + p.builder_.GetSize());
  });
  return config_from_binary(bin.data(), bin.size());
}

Config config_from_file(const std::string &path) {
  const std::string text = read_regular_file(path, kMaxConfigFileBytes, "config file");
  if (text.size() >= 8 && text.compare(4, 4, "IKVC") == 0) return config_from_binary(text.data(), text.size());
  return config_from_json(text);
}

std::vector<uint8_t> config_to_binary(const Config &c) {
  validate_config(c);
  flatbuffers::FlatBufferBuilder b(512);
  b.ForceDefaults(true);  // so the JSON form lists every setting
  const CompressionConfig &k = c.session.compression;
  auto comp = fbc::CreateCompression(b, static_cast<fbc::Policy>(policy_info(k.policy).schema_value), k.budget_fraction,
                                     k.budget_tokens, k.window, k.interval, k.alpha, k.tau, k.entropy_top_k,
                                     k.pool_kernel_prefill, k.pool_kernel_decode,
                                     static_cast<fbc::BudgetShape>(static_cast<int16_t>(k.shape) + 1), k.beta, k.sink,
                                     k.compress_after_prefill, k.max_loss,
                                     static_cast<fbc::Question>(static_cast<int16_t>(k.question) + 1), k.layer_precision);
  auto prot = fbc::CreateProtection(b, c.session.protect_prefix);
  const SamplerParams &p = c.sampler;
  auto samp = fbc::CreateSampler(b, p.temperature, p.top_k, p.top_p, p.min_p, p.repeat_penalty, p.repeat_last_n, p.seed);
  const SessionOptions &s = c.session;
  auto root = fbc::CreateConfigDirect(b, c.model_path.c_str(), s.device.c_str(), s.n_threads,
                                      static_cast<fbc::KvDtype>(static_cast<int16_t>(s.kv_dtype)), s.block_size,
                                      s.kv_pool_bytes, s.kv_pool_blocks, s.ubatch, comp, prot, samp, 0, s.kv_pool_fraction,
                                      s.max_sequences);
  fbc::FinishConfigBuffer(b, root);
  return std::vector<uint8_t>(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
}

std::string config_to_json(const Config &c) {
  const std::vector<uint8_t> bin = config_to_binary(c);
  return with_schema_parser([&](flatbuffers::Parser &p) {
    std::string out;
    if (!flatbuffers::GenerateText(p, bin.data(), &out)) fail(Status::internal, "config: cannot write JSON");
    return out;
  });
}

std::string resolve_config_model_path(const std::string &model_path) {
  if (model_path.empty() || model_path[0] == '/') return model_path;
  auto exists = [](const std::string &p) {
    std::error_code ec;
    return std::filesystem::is_regular_file(p, ec) || std::filesystem::is_directory(p, ec);
  };
  if (exists(model_path)) return model_path;
  const char *dir = std::getenv("INFOKV_MODELS_DIR");
  if (dir != nullptr && *dir != '\0') {
    const std::string under = std::string(dir) + "/" + model_path;
    if (exists(under)) return under;
  }
  return model_path;
}

}  // namespace infokv
