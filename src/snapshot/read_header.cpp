// The snapshot header: format versions, the cache layout, the compression parameters, the tuning profile's record,
// the model it was made with and the sampler's state (snapshot/read_internal.hpp).
#include <algorithm>
#include <cmath>

#include "kernels/kv_quant.hpp"
#include "snapshot/convert.hpp"
#include "snapshot/read_internal.hpp"
#include "util/limits.hpp"

namespace infokv {
namespace snapshot {
namespace detail {

namespace {

// Format versions: a file this reader cannot read is a version error, inconsistent versions are damage.
void read_versions(const fb::Header *h, Summary &sum) {
  sum.format_version = h->format_version();
  sum.min_reader_version = h->min_reader_version();
  if (h->min_reader_version() > kReaderVersion)
    fail(Status::version, "snapshot format " + std::to_string(h->format_version()) + " needs a reader of version " +
                              std::to_string(h->min_reader_version()) + "; this infokv reads up to version " +
                              std::to_string(kReaderVersion));
  if (h->format_version() < 1 || h->min_reader_version() < 1 || h->min_reader_version() > h->format_version())
    bad("invalid format version " + std::to_string(h->format_version()) + " / minimum reader " + std::to_string(h->min_reader_version()));
}

// The cache layout (dtype, block size, heads) and the model's fingerprints; what is implausible is damage.
void read_layout(const fb::Header *h, Summary &sum) {
  sum.producer = h->producer() != nullptr ? h->producer()->str() : "";
  sum.weights_fingerprint = h->weights_fingerprint();
  sum.tokenizer_fingerprint = h->tokenizer_fingerprint();
  const int dt = static_cast<int>(h->kv_dtype());
  if (!kv_dtype_valid(dt)) bad("unknown KV dtype " + std::to_string(dt));
  sum.kv_dtype = static_cast<KvDtype>(dt);
  if (kv_dtype_quantised(sum.kv_dtype) && h->min_reader_version() < kQuantKvVersion)
    bad(std::string("a ") + kv_dtype_name(sum.kv_dtype) + " cache in a file whose minimum reader version is below " +
        std::to_string(kQuantKvVersion));
  sum.block_size = h->block_size();
  sum.n_layer = h->n_layer();
  sum.n_kv_heads = h->n_kv_heads();
  sum.head_dim = h->head_dim();
  sum.n_heads = h->n_heads();
  sum.n_vocab = h->n_vocab();
  if (!in_range(sum.block_size, 1, limits::max_block_size) || !in_range(sum.n_layer, 1, limits::max_layers) ||
      !in_range(sum.n_kv_heads, 1, limits::max_kv_heads) || !in_range(sum.head_dim, 1, limits::max_head_dim) ||
      !in_range(sum.n_heads, 1, 65536) || !in_range(sum.n_vocab, 1, 1 << 26) || sum.n_heads % sum.n_kv_heads != 0)
    bad("implausible cache layout in the header");
  // A quantised row is whole blocks: any other head size would make rows of no bytes (and K/V that read as nothing).
  if (!kv_dtype_fits(sum.kv_dtype, sum.head_dim))
    bad(std::string("a ") + kv_dtype_name(sum.kv_dtype) + " cache with head size " + std::to_string(sum.head_dim) +
        ", not a whole number of " + std::to_string(kKvQuantBlock) + "-value blocks");
}

// The compression parameters, under the same rules as a config: a NaN alpha or a zero interval is damage, and would
// print as invalid JSON.
void read_compression(const fb::Header *h, Summary &sum) {
  sum.compression = from_fb(h->compression());
  try {
    sum.compression.validate();
  } catch (const Error &e) {
    bad(std::string("compression parameters: ") + e.what());
  }
}

// The creation time, the KV byte totals and the record of the tuning profile the session had.
void read_profile_record(const fb::Header *h, Summary &sum) {
  sum.created_unix_ms = h->created_unix_ms();
  sum.kept_kv_bytes = h->kept_kv_bytes();
  sum.full_kv_bytes = h->full_kv_bytes();
  sum.profile_compressions = h->profile_compressions();
  if (sum.profile_compressions < -1) bad("profile_compressions " + std::to_string(sum.profile_compressions) + " is negative");
  if (h->profile_tag() != nullptr) {
    if (sum.profile_compressions < 0) bad("a profile tag without a profile (profile_compressions is -1)");
    if (static_cast<int64_t>(h->profile_tag()->size()) > limits::max_tag_bytes)
      bad("profile tag longer than " + std::to_string(limits::max_tag_bytes) + " bytes");
    sum.profile_tag = h->profile_tag()->str();
  }
}

// The model the snapshot was made with against `model`: another one (weights, tokenizer or head layout) is refused
// as wrong_model.
void check_model(const Summary &sum, const Model &model) {
  const HParams &hp = model.hparams();
  model.check_made_with("snapshot", sum.weights_fingerprint, sum.tokenizer_fingerprint);
  if (sum.n_layer != hp.n_layer || sum.n_kv_heads != hp.n_head_kv || sum.head_dim != hp.head_dim ||
      sum.n_heads != hp.n_head || sum.n_vocab != hp.n_vocab)
    fail(Status::wrong_model, "snapshot head layout (layers " + std::to_string(sum.n_layer) + ", kv heads " +
                                  std::to_string(sum.n_kv_heads) + ", head dim " + std::to_string(sum.head_dim) +
                                  ") differs from the model's");
}

// The sampler's state, checked by making a sampler of it; staged when `staged` is not null.
void read_sampler(const fb::SamplerState *s, Staged *staged, Summary &sum) {
  sum.has_sampler = true;
  sum.sampler.temperature = s->temperature();
  sum.sampler.top_k = s->top_k();
  sum.sampler.top_p = s->top_p();
  sum.sampler.min_p = s->min_p();
  sum.sampler.repeat_penalty = s->repeat_penalty();
  sum.sampler.repeat_last_n = s->repeat_last_n();
  sum.sampler.seed = s->seed();
  if (vsize(s->rng()) != 4) bad("sampler RNG state must have 4 words");
  uint64_t rng[4];
  // Byte by byte, not Vector::Get: the verifier checks the alignment of a vector's length word but not of its
  // elements, so a hostile chunk can put these 8-byte words at an address that is only 4-aligned.
  const uint8_t *words = reinterpret_cast<const uint8_t *>(s->rng()->Data());
  for (int i = 0; i < 4; ++i) rng[i] = get_le(words + 8 * i, 8);
  try {
    Sampler probe(sum.sampler);
    probe.rng().set_state(rng);
  } catch (const Error &e) {
    bad(std::string("sampler state: ") + e.what());
  }
  if (vsize(s->history()) > static_cast<size_t>(std::max(0, sum.sampler.repeat_last_n))) bad("sampler history longer than repeat_last_n");
  if (staged != nullptr) {
    staged->has_sampler = true;
    staged->sp = sum.sampler;
    std::copy(rng, rng + 4, staged->rng);
    if (s->history() != nullptr) staged->history.assign(s->history()->begin(), s->history()->end());
  }
}

}  // namespace

int32_t read_header(ChunkReader &rd, const Model *model, Staged *staged, Summary &sum) {
  const fb::Chunk *c = rd.next();
  if (c == nullptr || c->kind() != fb::ChunkKind::HEADER || c->header() == nullptr) bad("the first chunk is not a header");
  const fb::Header *h = c->header();
  read_versions(h, sum);
  read_layout(h, sum);
  read_compression(h, sum);
  read_profile_record(h, sum);
  if (!in_range(h->n_sequences(), 0, 1 << 20)) bad("implausible sequence count " + std::to_string(h->n_sequences()));
  if (model != nullptr) check_model(sum, *model);
  if (h->sampler() != nullptr) read_sampler(h->sampler(), staged, sum);
  if (staged != nullptr) staged->dtype = sum.kv_dtype;
  return h->n_sequences();
}


bool all_finite(const flatbuffers::Vector<float> *v) {
  if (v == nullptr) return true;
  for (float f : *v)
    if (!std::isfinite(f)) return false;
  return true;
}

// K/V bytes in a KV dtype: an all-ones exponent (f16, bf16, f32) is Inf or NaN.
bool kv_rows_finite(const flatbuffers::Vector<uint8_t> *v, KvDtype dt) {
  if (v == nullptr) return true;
  const uint8_t *p = v->data();
  const size_t n = v->size();
  if (kv_dtype_quantised(dt)) {  // whole blocks (the size was checked): each scale must be a finite f16
    const auto bb = static_cast<size_t>(kv_bytes(dt, kKvQuantBlock));
    for (size_t i = 0; i + bb <= n; i += bb)
      if (!kvq::scale_finite(p + i)) return false;
    return true;
  }
  if (dt == KvDtype::f32) {
    for (size_t i = 0; i + 4 <= n; i += 4) {
      const uint32_t w = static_cast<uint32_t>(get_le(p + i, 4));
      if ((w & 0x7f800000u) == 0x7f800000u) return false;
    }
    return true;
  }
  const uint16_t mask = dt == KvDtype::f16 ? 0x7c00 : 0x7f80;
  for (size_t i = 0; i + 2 <= n; i += 2) {
    const uint16_t h = static_cast<uint16_t>(get_le(p + i, 2));
    if ((h & mask) == mask) return false;
  }
  return true;
}

void kv_full(int64_t need, int64_t free_blocks) {

  fail(Status::kv_full, "KV cache full: the snapshot needs " + std::to_string(need) + " blocks, " +
                            std::to_string(free_blocks) + " are free");
}

}  // namespace detail
}  // namespace snapshot
}  // namespace infokv
