// The defaults live in src/util/defaults.hpp; the C header's *_INIT macros, the *_init() functions and
// schemas/config.fbs spell them again as literals. Each is checked against the core's structs here (checking the
// macro against init() alone could not fail: init() copies the macro).
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <flatbuffers/idl.h>

#include "compress/policy.hpp"
#include "config/config.hpp"
#include "infokv/infokv.h"
#include "sampling/sampler.hpp"
#include "session/session.hpp"

using namespace infokv;

namespace {

void expect_session_options_match_core(const ikv_session_options &o, const char *what) {
  SCOPED_TRACE(what);
  const SessionOptions s;
  const CompressionConfig &c = s.compression;
  EXPECT_EQ(o.n_threads, s.n_threads);
  EXPECT_EQ(o.kv_dtype, static_cast<int32_t>(s.kv_dtype));
  EXPECT_EQ(o.block_size, s.block_size);
  EXPECT_EQ(o.ubatch, s.ubatch);
  EXPECT_EQ(o.kv_pool_blocks, s.kv_pool_blocks);
  EXPECT_EQ(o.kv_pool_bytes, s.kv_pool_bytes);
  EXPECT_EQ(o.policy, static_cast<int32_t>(c.policy));
  EXPECT_EQ(o.policy, IKV_POLICY_NONE);
  EXPECT_EQ(o.budget_tokens, c.budget_tokens);
  EXPECT_EQ(o.budget_fraction, c.budget_fraction);
  EXPECT_EQ(o.window, c.window);
  EXPECT_EQ(o.interval, c.interval);
  EXPECT_EQ(o.alpha, c.alpha);
  EXPECT_EQ(o.tau, c.tau);
  EXPECT_EQ(o.entropy_top_k, c.entropy_top_k);
  EXPECT_EQ(o.pool_kernel_prefill, c.pool_kernel_prefill);
  EXPECT_EQ(o.pool_kernel_decode, c.pool_kernel_decode);
  EXPECT_EQ(o.shape, static_cast<int32_t>(c.shape));
  EXPECT_EQ(o.beta, c.beta);
  EXPECT_EQ(o.sink, c.sink);
  EXPECT_EQ(o.compress_after_prefill != 0, c.compress_after_prefill);
  EXPECT_EQ(o.max_loss, c.max_loss);
  EXPECT_EQ(o.layer_precision == IKV_LAYER_PRECISION_AUTO, c.layer_precision);
  EXPECT_EQ(o.max_sequences, 0);  // 0 means the core's default
  EXPECT_EQ(s.max_sequences, defaults::max_sequences);
  EXPECT_EQ(o.device, nullptr);  // NULL means the core's default device
  EXPECT_EQ(s.device, "auto");
}

void expect_sampler_options_match_core(const ikv_sampler_options &o, const char *what) {
  SCOPED_TRACE(what);
  const SamplerParams p;
  EXPECT_EQ(o.temperature, p.temperature);
  EXPECT_EQ(o.top_k, p.top_k);
  EXPECT_EQ(o.top_p, p.top_p);
  EXPECT_EQ(o.min_p, p.min_p);
  EXPECT_EQ(o.repeat_penalty, p.repeat_penalty);
  EXPECT_EQ(o.repeat_last_n, p.repeat_last_n);
  EXPECT_EQ(o.seed, p.seed);
}

TEST(Defaults, CoreStructsTakeTheDefaultsHeader) {
  const SessionOptions s;
  EXPECT_EQ(s.block_size, defaults::block_size);
  EXPECT_EQ(s.ubatch, defaults::ubatch);
  EXPECT_EQ(s.n_threads, defaults::n_threads);
  EXPECT_EQ(s.compression.entropy_top_k, 256);  // the documented values, once
  EXPECT_EQ(s.compression.interval, 1024);
  EXPECT_FLOAT_EQ(s.compression.alpha, 0.9f);
  EXPECT_EQ(s.compression.window, -1);
  EXPECT_EQ(s.compression.pool_kernel_prefill, 5);
  EXPECT_EQ(s.compression.pool_kernel_decode, 7);
  EXPECT_FLOAT_EQ(s.compression.tau, 1.0f);
  EXPECT_FLOAT_EQ(s.compression.beta, 20.0f);
  EXPECT_EQ(s.compression.sink, 4);
  EXPECT_EQ(s.block_size, 16);
  EXPECT_EQ(s.ubatch, 256);
}

// struct_size and version as the INIT macro and the _init() function must set them.
template <typename T>
void expect_revision(const T &o, int version) {
  EXPECT_EQ(o.struct_size, sizeof(T));
  EXPECT_EQ(o.version, static_cast<uint32_t>(version));
}

// What an _init() call writes over garbage (0x5A bytes); it refuses NULL.
template <typename T, typename Init>
T init_over_garbage(Init init) {
  T o;
  std::memset(&o, 0x5A, sizeof o);
  if (init(&o) != IKV_OK) ADD_FAILURE() << "_init() failed: " << ikv_last_error_message();
  EXPECT_EQ(init(nullptr), IKV_ERR_INVALID_ARGUMENT);
  return o;
}

TEST(Defaults, SessionOptionsInitMacroMatchesTheCore) {
  const ikv_session_options o = IKV_SESSION_OPTIONS_INIT;
  expect_revision(o, IKV_SESSION_OPTIONS_VERSION);
  expect_session_options_match_core(o, "IKV_SESSION_OPTIONS_INIT");
}

// The function is checked against the core on its own (not against the macro, which it may copy), over garbage.
// ikv_session_options_init(&o) in a source built against this header is the versioned call with this header's size
// and version.
TEST(Defaults, SessionOptionsInitFunctionMatchesTheCore) {
  const auto o = init_over_garbage<ikv_session_options>([](ikv_session_options *p) { return ikv_session_options_init(p); });
  expect_revision(o, IKV_SESSION_OPTIONS_VERSION);
  expect_session_options_match_core(o, "ikv_session_options_init");
}

TEST(Defaults, SamplerOptionsInitMacroAndFunctionMatchTheCore) {
  const ikv_sampler_options a = IKV_SAMPLER_OPTIONS_INIT;
  expect_revision(a, IKV_SAMPLER_OPTIONS_VERSION);
  expect_sampler_options_match_core(a, "IKV_SAMPLER_OPTIONS_INIT");
  const auto b = init_over_garbage<ikv_sampler_options>([](ikv_sampler_options *p) { return ikv_sampler_options_init(p); });
  expect_revision(b, IKV_SAMPLER_OPTIONS_VERSION);
  expect_sampler_options_match_core(b, "ikv_sampler_options_init");
  // the exported symbol (what programs built before the versioned initialiser call) writes revision 1, the released one
  const auto c = init_over_garbage<ikv_sampler_options>(&(ikv_sampler_options_init));
  expect_revision(c, 1);
  expect_sampler_options_match_core(c, "the ikv_sampler_options_init symbol");
}

// A program built before the versioned initialiser calls the exported ikv_session_options_init symbol: the library
// writes revision 4 (the released header's, frozen) and nothing past it, whatever revisions come later.
TEST(Defaults, TheOldInitSymbolWritesTheReleasedRevisionAndNothingPast) {
  const size_t v4 = offsetof(ikv_session_options, max_loss) + sizeof(double);
  std::vector<unsigned char> buf(v4 + 64, 0xA5);
  auto *o = reinterpret_cast<ikv_session_options *>(buf.data());
  int32_t (*old_init)(ikv_session_options *) = &(ikv_session_options_init);
  ASSERT_EQ(old_init(o), IKV_OK);
  EXPECT_EQ(o->struct_size, v4);
  EXPECT_EQ(o->version, 4u);
  EXPECT_EQ(o->budget_fraction, 0.0);
  EXPECT_EQ(o->compress_after_prefill, 1);
  EXPECT_EQ(o->device, nullptr);
  EXPECT_EQ(o->max_sequences, 0);
  EXPECT_EQ(o->max_loss, 0.0);
  for (size_t i = v4; i < buf.size(); ++i) ASSERT_EQ(buf[i], 0xA5) << "byte " << i << " past revision 4 was written";
  EXPECT_EQ(old_init(nullptr), IKV_ERR_INVALID_ARGUMENT);
}

// The versioned initialisers: each revision's bytes and no more; a newer revision than the library's, a size too
// small for the revision, version 0 and NULL are refused with nothing written.
TEST(Defaults, VersionedInitWritesExactlyTheRevisionAsked) {
  const size_t ends[] = {offsetof(ikv_session_options, device), offsetof(ikv_session_options, max_sequences),
                         offsetof(ikv_session_options, max_sequences) + sizeof(int32_t),
                         offsetof(ikv_session_options, max_loss) + sizeof(double),
                         offsetof(ikv_session_options, layer_precision) + sizeof(int32_t)};
  static_assert(sizeof(ends) / sizeof(ends[0]) == IKV_SESSION_OPTIONS_VERSION, "one end per revision");
  for (uint32_t v = 1; v <= IKV_SESSION_OPTIONS_VERSION; ++v) {
    SCOPED_TRACE("version " + std::to_string(v));
    const size_t end = ends[v - 1];
    std::vector<unsigned char> buf(sizeof(ikv_session_options) + 32, 0xA5);
    auto *o = reinterpret_cast<ikv_session_options *>(buf.data());
    ASSERT_EQ(ikv_session_options_init_version(o, end, v), IKV_OK) << ikv_last_error_message();
    EXPECT_EQ(o->struct_size, end);
    EXPECT_EQ(o->version, v);
    EXPECT_EQ(o->kv_dtype, IKV_KV_F16);
    if (v >= 2) {
      EXPECT_EQ(o->device, nullptr);
    }
    if (v >= 4) {
      EXPECT_EQ(o->max_loss, 0.0);
    }
    if (v >= 5) {
      EXPECT_EQ(o->layer_precision, IKV_LAYER_PRECISION_AUTO);
    }
    // the tail after the revision's last field (alignment padding within `end` aside) keeps its bytes
    for (size_t i = end; i < buf.size(); ++i) ASSERT_EQ(buf[i], 0xA5) << "byte " << i;
    // one byte short of the revision is refused, writing nothing
    std::vector<unsigned char> again(buf.size(), 0xA5);
    auto *p = reinterpret_cast<ikv_session_options *>(again.data());
    EXPECT_EQ(ikv_session_options_init_version(p, end - 1, v), IKV_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(ikv_last_error_message()).find("struct_size"), std::string::npos);
    for (unsigned char c : again) ASSERT_EQ(c, 0xA5);
  }
  ikv_session_options o;
  std::memset(&o, 0xA5, sizeof o);
  const ikv_session_options before = o;
  EXPECT_EQ(ikv_session_options_init_version(&o, sizeof o, IKV_SESSION_OPTIONS_VERSION + 1), IKV_ERR_VERSION);
  EXPECT_NE(std::string(ikv_last_error_message()).find("newer than this library"), std::string::npos);
  EXPECT_EQ(ikv_session_options_init_version(&o, sizeof o, 0), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ikv_session_options_init_version(&o, SIZE_MAX, 1), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::memcmp(&o, &before, sizeof o), 0);
  EXPECT_EQ(ikv_session_options_init_version(nullptr, sizeof o, 1), IKV_ERR_INVALID_ARGUMENT);

  ikv_sampler_options so;
  std::memset(&so, 0xA5, sizeof so);
  EXPECT_EQ(ikv_sampler_options_init_version(&so, sizeof so, IKV_SAMPLER_OPTIONS_VERSION + 1), IKV_ERR_VERSION);
  EXPECT_EQ(ikv_sampler_options_init_version(&so, sizeof so - 1, 1), IKV_ERR_INVALID_ARGUMENT);
  ASSERT_EQ(ikv_sampler_options_init_version(&so, sizeof so, 1), IKV_OK);
  expect_sampler_options_match_core(so, "ikv_sampler_options_init_version");
}

// The schema's own default for a field (its `= value`, "0" when none), read from the schema compiled into the
// library.
std::string schema_default(const char *table, const char *field) {
  flatbuffers::Parser p;
  EXPECT_TRUE(p.Parse(schema_text_config())) << p.error_;
  const flatbuffers::StructDef *sd = p.LookupStruct(std::string("infokv.config.") + table);
  EXPECT_NE(sd, nullptr) << table;
  if (sd == nullptr) return "";
  const flatbuffers::FieldDef *fd = sd->fields.Lookup(field);
  EXPECT_NE(fd, nullptr) << table << "." << field;
  return fd == nullptr ? "" : fd->value.constant;
}

double schema_number(const char *table, const char *field) { return std::stod(schema_default(table, field)); }

TEST(Defaults, ConfigSchemaDefaultsMatchTheCore) {
  const CompressionConfig c;
  EXPECT_EQ(schema_number("Compression", "window"), c.window);
  EXPECT_EQ(schema_number("Compression", "interval"), c.interval);
  EXPECT_FLOAT_EQ(static_cast<float>(schema_number("Compression", "alpha")), c.alpha);
  EXPECT_FLOAT_EQ(static_cast<float>(schema_number("Compression", "tau")), c.tau);
  EXPECT_EQ(schema_number("Compression", "entropy_top_k"), c.entropy_top_k);
  EXPECT_EQ(schema_number("Compression", "pool_kernel_prefill"), c.pool_kernel_prefill);
  EXPECT_EQ(schema_number("Compression", "pool_kernel_decode"), c.pool_kernel_decode);
  EXPECT_FLOAT_EQ(static_cast<float>(schema_number("Compression", "beta")), c.beta);
  EXPECT_EQ(schema_number("Compression", "sink"), c.sink);
  EXPECT_EQ(schema_number("Compression", "budget_tokens"), c.budget_tokens);
  EXPECT_EQ(schema_number("Compression", "budget_fraction"), c.budget_fraction);
  EXPECT_EQ(schema_number("Compression", "compress_after_prefill") != 0, c.compress_after_prefill);
  EXPECT_EQ(schema_number("Compression", "max_loss"), c.max_loss);
  const SamplerParams p;
  EXPECT_FLOAT_EQ(static_cast<float>(schema_number("Sampler", "temperature")), p.temperature);
  EXPECT_EQ(schema_number("Sampler", "top_k"), p.top_k);
  EXPECT_FLOAT_EQ(static_cast<float>(schema_number("Sampler", "top_p")), p.top_p);
  EXPECT_FLOAT_EQ(static_cast<float>(schema_number("Sampler", "min_p")), p.min_p);
  EXPECT_FLOAT_EQ(static_cast<float>(schema_number("Sampler", "repeat_penalty")), p.repeat_penalty);
  EXPECT_EQ(schema_number("Sampler", "repeat_last_n"), p.repeat_last_n);
  EXPECT_EQ(schema_number("Sampler", "seed"), static_cast<double>(p.seed));
  // Zero / UNSPECIFIED in the schema mean "the runtime's default" for these: the reader must map them to the core's.
  const SessionOptions s;
  EXPECT_EQ(schema_number("Config", "block_size"), 0);
  EXPECT_EQ(schema_number("Config", "ubatch"), 0);
  EXPECT_EQ(schema_number("Config", "threads"), s.n_threads);
}

TEST(Defaults, ConfigWithEmptyTablesReadsAsTheCoreDefaults) {
  // Empty tables make the reader take every field's schema default, and zero-means-default fields the core's.
  const Config c = config_from_json(R"({"compression": {}, "sampler": {}, "protection": {}, "self_tuning": {}})");
  const SessionOptions s;
  EXPECT_EQ(c.session.block_size, s.block_size);
  EXPECT_EQ(c.session.ubatch, s.ubatch);
  EXPECT_EQ(c.session.n_threads, s.n_threads);
  EXPECT_EQ(c.session.kv_dtype, s.kv_dtype);
  const CompressionConfig &a = c.session.compression, &b = s.compression;
  EXPECT_EQ(a.policy, b.policy);
  EXPECT_EQ(a.window, b.window);
  EXPECT_EQ(a.interval, b.interval);
  EXPECT_EQ(a.alpha, b.alpha);
  EXPECT_EQ(a.tau, b.tau);
  EXPECT_EQ(a.entropy_top_k, b.entropy_top_k);
  EXPECT_EQ(a.pool_kernel_prefill, b.pool_kernel_prefill);
  EXPECT_EQ(a.pool_kernel_decode, b.pool_kernel_decode);
  EXPECT_EQ(a.shape, b.shape);
  EXPECT_EQ(a.beta, b.beta);
  EXPECT_EQ(a.sink, b.sink);
  EXPECT_EQ(a.compress_after_prefill, b.compress_after_prefill);
  EXPECT_EQ(a.max_loss, b.max_loss);
  const SamplerParams p;
  EXPECT_EQ(c.sampler.temperature, p.temperature);
  EXPECT_EQ(c.sampler.top_k, p.top_k);
  EXPECT_EQ(c.sampler.top_p, p.top_p);
  EXPECT_EQ(c.sampler.min_p, p.min_p);
  EXPECT_EQ(c.sampler.repeat_penalty, p.repeat_penalty);
  EXPECT_EQ(c.sampler.repeat_last_n, p.repeat_last_n);
  EXPECT_EQ(c.sampler.seed, p.seed);
}

}  // namespace
