// Snapshot reader: reads and checks everything into staging structures first; restore() then commits them to the
// session only when every check has passed (and the pool has room), so a refused snapshot changes nothing.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <sstream>

#include "compress/auto_report.hpp"
#include "kernels/kv_quant.hpp"
#include "snapshot/container.hpp"
#include "snapshot/convert.hpp"
#include "snapshot/snapshot.hpp"
#include "util/json_escape.hpp"
#include "util/error.hpp"
#include "util/limits.hpp"

namespace infokv {
namespace snapshot {

namespace {

[[noreturn]] void bad(const std::string &m) { fail(Status::bad_snapshot, "corrupt snapshot: " + m); }

struct StagedLayer {
  std::vector<int32_t> pos;
  std::vector<uint8_t> k, v;  // [n_slots][n_kv_heads][head_dim] of the snapshot's dtype (token-major)
  std::array<std::vector<float>, kSlotChannels> channels;
  std::vector<float> window_q;
};

struct StagedSeq {
  Session::SeqState st;
  SeqCompression cst;
  int64_t length = 0;
  std::vector<int32_t> window_pos;
  std::vector<StagedLayer> layers;
};

struct Staged {
  KvDtype dtype = KvDtype::f16;
  bool has_sampler = false;
  SamplerParams sp;
  uint64_t rng[4] = {0, 0, 0, 0};
  std::vector<int32_t> history;
  std::vector<StagedSeq> seqs;
};

template <typename T>
void check_hash(const flatbuffers::Vector<T> *v, uint64_t h, const std::string &what) {
  const size_t n = v == nullptr ? 0 : v->size() * sizeof(T);
  const void *p = v == nullptr ? static_cast<const void *>("") : static_cast<const void *>(v->data());
  if (xxh3(p, n) != h) bad("checksum mismatch in " + what);
}

template <typename T>
size_t vsize(const flatbuffers::Vector<T> *v) { return v == nullptr ? 0 : v->size(); }

constexpr int64_t kMaxCounter = int64_t{1} << 53;

bool in_range(int64_t v, int64_t lo, int64_t hi) { return v >= lo && v <= hi; }

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

// The auto policy's report of a sequence of logical length `len`, checked before anything is staged: a layer per
// model layer (or none), known evidence, budgets within the length, finite non-negative losses, alpha in [0, 1].
AutoReport read_auto_report(const fb::Sequence *s, int32_t n_layer, int64_t len, const std::string &where) {
  AutoReport r;
  const size_t n = vsize(s->auto_layers());
  if (n == 0) {
    if (s->auto_loss() != 0.0 || s->auto_tokens() != 0 || s->auto_uniform_tokens() != 0 || s->auto_max_loss() != 0.0)
      bad(where + ": auto report values without its layers");
    return r;
  }
  if (n != static_cast<size_t>(n_layer))
    bad(where + ": auto report has " + std::to_string(n) + " layers, the cache " + std::to_string(n_layer));
  auto finite_loss = [](double v) { return std::isfinite(v) && v >= 0.0; };
  for (size_t l = 0; l < n; ++l) {
    const fb::AutoLayer *a = s->auto_layers()->Get(static_cast<flatbuffers::uoffset_t>(l));
    const std::string lw = where + ": auto report layer " + std::to_string(l);
    if (a->evidence() < 0 || a->evidence() >= kEvidenceKinds) bad(lw + ": unknown evidence " + std::to_string(a->evidence()));
    if (!in_range(a->budget(), 0, len)) bad(lw + ": budget " + std::to_string(a->budget()) + " outside the length");
    if (!(a->alpha() >= 0.0f && a->alpha() <= 1.0f)) bad(lw + ": alpha outside [0, 1]");
    if (!finite_loss(a->loss())) bad(lw + ": loss is not finite and >= 0");
    AutoLayerChoice ch;
    ch.evidence = static_cast<Evidence>(a->evidence());
    ch.budget = a->budget();
    ch.alpha = a->alpha();
    ch.loss = a->loss();
    r.layers.push_back(ch);
  }
  const int64_t most = static_cast<int64_t>(n_layer) * len;
  if (!finite_loss(s->auto_loss()) || !finite_loss(s->auto_max_loss()) || !in_range(s->auto_tokens(), 0, most) ||
      !in_range(s->auto_uniform_tokens(), 0, most))
    bad(where + ": auto report totals out of range");
  r.loss = s->auto_loss();
  r.tokens = s->auto_tokens();
  r.uniform_tokens = s->auto_uniform_tokens();
  r.max_loss = s->auto_max_loss();
  return r;
}

// What a restore may take from the pool: its free blocks, counted in its own block size.
struct Capacity {
  int64_t free_blocks = 0;
  int32_t block_size = 1;
  const Session *session = nullptr;  // whose max_sequences the header's sequence count must fit
  size_t max_sequences = SIZE_MAX;   // the most sequences the caller can take (see restore())
  int64_t *announced = nullptr;      // receives the header's sequence count (may be null)
};

int64_t blocks_for(int64_t kept, int32_t block_size) { return (kept + block_size - 1) / block_size; }

[[noreturn]] void kv_full(int64_t need, int64_t free_blocks) {
  fail(Status::kv_full, "KV cache full: the snapshot needs " + std::to_string(need) + " blocks, " +
                            std::to_string(free_blocks) + " are free");
}

// Reads and checks the header chunk; returns the number of sequences it announces. `model` (may be null) is checked
// against it; `staged` (may be null) receives the sampler state.
int32_t read_header(ChunkReader &rd, const Model *model, Staged *staged, Summary &sum) {
  const fb::Chunk *c = rd.next();
  if (c == nullptr || c->kind() != fb::ChunkKind::HEADER || c->header() == nullptr) bad("the first chunk is not a header");
  const fb::Header *h = c->header();
  sum.format_version = h->format_version();
  sum.min_reader_version = h->min_reader_version();
  if (h->min_reader_version() > kReaderVersion)
    fail(Status::version, "snapshot format " + std::to_string(h->format_version()) + " needs a reader of version " +
                              std::to_string(h->min_reader_version()) + "; this infokv reads up to version " +
                              std::to_string(kReaderVersion));
  if (h->format_version() < 1 || h->min_reader_version() < 1 || h->min_reader_version() > h->format_version())
    bad("invalid format version " + std::to_string(h->format_version()) + " / minimum reader " + std::to_string(h->min_reader_version()));
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
  sum.compression = from_fb(h->compression());
  // The same rules as a config: a NaN alpha or a zero interval is damage, and would print as invalid JSON.
  try {
    sum.compression.validate();
  } catch (const Error &e) {
    bad(std::string("compression parameters: ") + e.what());
  }
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
  if (!in_range(sum.block_size, 1, limits::max_block_size) || !in_range(sum.n_layer, 1, limits::max_layers) ||
      !in_range(sum.n_kv_heads, 1, limits::max_kv_heads) || !in_range(sum.head_dim, 1, limits::max_head_dim) || !in_range(sum.n_heads, 1, 65536) || !in_range(sum.n_vocab, 1, 1 << 26) ||
      sum.n_heads % sum.n_kv_heads != 0)
    bad("implausible cache layout in the header");
  // A quantised row is whole blocks: any other head size would make rows of no bytes (and K/V that read as nothing).
  if (!kv_dtype_fits(sum.kv_dtype, sum.head_dim))
    bad(std::string("a ") + kv_dtype_name(sum.kv_dtype) + " cache with head size " + std::to_string(sum.head_dim) +
        ", not a whole number of " + std::to_string(kKvQuantBlock) + "-value blocks");
  if (!in_range(h->n_sequences(), 0, 1 << 20)) bad("implausible sequence count " + std::to_string(h->n_sequences()));
  if (model != nullptr) {
    const HParams &hp = model->hparams();
    auto hex = [](uint64_t v) { std::ostringstream s; s << std::hex << v; return s.str(); };
    if (sum.weights_fingerprint != model->weights_fingerprint())
      fail(Status::wrong_model, "snapshot was made with another model (weights fingerprint " + hex(sum.weights_fingerprint) +
                                    ", this model " + hex(model->weights_fingerprint()) + ")");
    if (sum.tokenizer_fingerprint != model->tokenizer().fingerprint())
      fail(Status::wrong_model, "snapshot was made with another tokenizer (fingerprint " + hex(sum.tokenizer_fingerprint) +
                                    ", this model " + hex(model->tokenizer().fingerprint()) + ")");
    if (sum.n_layer != hp.n_layer || sum.n_kv_heads != hp.n_head_kv || sum.head_dim != hp.head_dim ||
        sum.n_heads != hp.n_head || sum.n_vocab != hp.n_vocab)
      fail(Status::wrong_model, "snapshot head layout (layers " + std::to_string(sum.n_layer) + ", kv heads " +
                                    std::to_string(sum.n_kv_heads) + ", head dim " + std::to_string(sum.head_dim) +
                                    ") differs from the model's");
  }
  if (h->sampler() != nullptr) {
    const fb::SamplerState *s = h->sampler();
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
  if (staged != nullptr) staged->dtype = sum.kv_dtype;
  return h->n_sequences();
}

// The byte geometry of one slot's K/V rows and of a window query row, from the header.
struct RowLayout {
  int64_t es, row, qd, slot_bytes;
  explicit RowLayout(const Summary &sum)
      : es(kv_bytes(kv_window_dtype(sum.kv_dtype), 1)), row(kv_bytes(sum.kv_dtype, sum.head_dim)),
        qd(static_cast<int64_t>(sum.n_heads) * sum.head_dim), slot_bytes(2 * sum.n_kv_heads * row) {}
};

// Checks a sequence chunk and stages its state (*sq: the staged sequence, null when not staging). `need` adds the
// pool blocks of its kept counts; `cap` (may be null) refuses a sequence that would not fit.
SequenceSummary read_sequence(const fb::Sequence *s, int32_t si, const Summary &sum, Staged *staged, const Capacity *cap,
                              int64_t &need, StagedSeq **sq_out) {
  const std::string where = "sequence " + std::to_string(si);
  if (s->index() != si) bad(where + ": out of order");
  const int64_t len = s->length();
  if (!in_range(len, 0, (int64_t{1} << 31) - 2)) bad(where + ": invalid length");
  if (static_cast<int64_t>(vsize(s->tokens())) != len) bad(where + ": token count differs from the length");
  check_hash(s->tokens(), s->tokens_xxh3(), where + " tokens");
  if (s->tokens() != nullptr)
    for (int32_t t : *s->tokens())
      if (t < 0 || t >= sum.n_vocab) bad(where + ": token id outside the vocabulary");
  if (s->has_logits() ? vsize(s->logits()) != static_cast<size_t>(sum.n_vocab) : vsize(s->logits()) != 0)
    bad(where + ": logits size differs from the vocabulary");
  check_hash(s->logits(), s->logits_xxh3(), where + " logits");
  if (!all_finite(s->logits())) bad(where + ": logits are not all finite");
  // Counters the session increments or compares: tokens since the last compression cannot exceed the length, and
  // a compression count near the top of int64 would overflow on the next compression.
  if (!in_range(s->since_compress(), 0, len) || !in_range(s->n_compressions(), 0, kMaxCounter) ||
      !(std::isfinite(s->pending_entropy()) && s->pending_entropy() >= 0.0f))
    bad(where + ": invalid counters (since_compress " + std::to_string(s->since_compress()) + ", compressions " +
        std::to_string(s->n_compressions()) + ")");
  if (vsize(s->kept_per_layer()) != static_cast<size_t>(sum.n_layer)) bad(where + ": kept counts do not match the layers");
  const size_t n_wpos = vsize(s->window_pos());
  if (n_wpos > 65536) bad(where + ": observation window too large");
  for (size_t i = 0; i < n_wpos; ++i) {
    const int32_t p = s->window_pos()->Get(static_cast<flatbuffers::uoffset_t>(i));
    if (p < 0 || p >= len || (i > 0 && p <= s->window_pos()->Get(static_cast<flatbuffers::uoffset_t>(i - 1))))
      bad(where + ": window positions not ascending within the length");
  }
  SequenceSummary ss;
  ss.auto_report = read_auto_report(s, sum.n_layer, len, where);
  ss.saved_id = s->saved_id();
  ss.length = len;
  ss.n_compressions = s->n_compressions();
  ss.has_logits = s->has_logits();
  ss.window_rows = static_cast<int64_t>(n_wpos);
  ss.layer_chunks = s->layer_chunks();
  ss.n_spans = static_cast<int64_t>(vsize(s->spans()));
  for (int32_t k : *s->kept_per_layer()) {
    if (k < 0 || k > len) bad(where + ": kept count beyond the length");
    ss.kept_per_layer.push_back(k);
    if (cap != nullptr) need += blocks_for(k, cap->block_size);
  }
  if (cap != nullptr && need > cap->free_blocks) kv_full(need, cap->free_blocks);
  StagedSeq *sq = nullptr;
  if (staged != nullptr) {
    staged->seqs.emplace_back();
    sq = &staged->seqs.back();
    sq->length = len;
    sq->st.tokens.assign(s->tokens()->begin(), s->tokens()->end());
    sq->st.has_logits = s->has_logits();
    if (s->has_logits()) sq->st.logits.assign(s->logits()->begin(), s->logits()->end());
    sq->st.pending_entropy = s->pending_entropy();
    sq->cst.since_compress = s->since_compress();
    sq->st.prefilled = s->prefilled();
    sq->cst.n_compressions = s->n_compressions();
    sq->cst.auto_report = ss.auto_report;
    if (s->window_pos() != nullptr) sq->window_pos.assign(s->window_pos()->begin(), s->window_pos()->end());
    sq->layers.resize(static_cast<size_t>(sum.n_layer));
  }
  if (vsize(s->spans()) > static_cast<size_t>(kMaxProtectedSpans))
    bad(where + ": " + std::to_string(vsize(s->spans())) + " protected spans (at most " + std::to_string(kMaxProtectedSpans) + ")");
  if (s->spans() != nullptr)
    for (const fb::Span *sp : *s->spans()) {
      if (sp->begin() < 0 || sp->end() < sp->begin()) bad(where + ": invalid protected span");
      if (sq != nullptr) add_span(sq->cst.spans, ProtectedSpan{sp->begin(), sp->end(), sp->fair()});
    }
  if (s->layer_chunks() < sum.n_layer) bad(where + ": too few layer chunks");
  *sq_out = sq;
  return ss;
}

// Checks one layer chunk of sequence `si` against its sequence (kept counts, window rows) and the layout; returns
// its number of slot channels.
int check_layer_chunk(const fb::Layer *L, int32_t si, int32_t layer, int32_t first, int32_t &last_pos, const SequenceSummary &ss,
                      size_t n_wpos, const Summary &sum, const RowLayout &lay, const std::string &lw) {
  const int64_t len = ss.length, row = lay.row, qd = lay.qd, es = lay.es;
  const int32_t kept = ss.kept_per_layer[static_cast<size_t>(layer)];
  if (L->seq_index() != si || L->layer() != layer || L->first_slot() != first) bad(lw + ": out of order");
  const int32_t n = L->n_slots();
  if (n < 0 || n > kept - first || (n == 0 && kept != 0)) bad(lw + ": slot count does not add up to the kept count");
  if (vsize(L->pos()) != static_cast<size_t>(n)) bad(lw + ": positions size");
  const size_t kv_size = static_cast<size_t>(n) * static_cast<size_t>(sum.n_kv_heads) * static_cast<size_t>(row);
  if (vsize(L->k()) != kv_size || vsize(L->v()) != kv_size) bad(lw + ": K/V size does not match the layout");
  if ((L->imp_mask() & ~((1u << kSlotChannels) - 1)) != 0) bad(lw + ": unknown slot channel");
  int n_ch = 0;
  for (int ch = 0; ch < kSlotChannels; ++ch) n_ch += (L->imp_mask() >> ch) & 1;
  if (vsize(L->imp()) != static_cast<size_t>(n_ch) * static_cast<size_t>(n)) bad(lw + ": slot channel size");
  // Window rows come as f32 (v1) or, in a v2 file with a 16-bit KV dtype, in that dtype; never both.
  const size_t wq_size = first == 0 ? n_wpos * static_cast<size_t>(qd) : 0;
  const bool wq_kv = vsize(L->window_q_kv()) != 0;
  if (wq_kv && (sum.min_reader_version < kWindowKvVersion || sum.kv_dtype == KvDtype::f32))
    bad(lw + ": 16-bit window queries in a v1 file or an f32 cache");
  if (wq_kv ? vsize(L->window_q()) != 0 || vsize(L->window_q_kv()) != wq_size * static_cast<size_t>(es)
            : vsize(L->window_q()) != wq_size)
    bad(lw + ": window query size");
  check_hash(L->pos(), L->pos_xxh3(), lw + " positions");
  check_hash(L->k(), L->k_xxh3(), lw + " K");
  check_hash(L->v(), L->v_xxh3(), lw + " V");
  check_hash(L->imp(), L->imp_xxh3(), lw + " slot channels");
  check_hash(L->window_q(), L->window_q_xxh3(), lw + " window queries");
  if (wq_kv) check_hash(L->window_q_kv(), L->window_q_kv_xxh3(), lw + " window queries");  // v1: absent
  // Non-finite K/V, queries or slot channel values would turn every later logit into NaN (token 0 forever).
  if (!kv_rows_finite(L->k(), sum.kv_dtype) || !kv_rows_finite(L->v(), sum.kv_dtype)) bad(lw + ": K/V values are not all finite");
  if (!all_finite(L->imp()) || !all_finite(L->window_q()) || !kv_rows_finite(L->window_q_kv(), kv_window_dtype(sum.kv_dtype)))
    bad(lw + ": slot channel or window query values are not all finite");
  for (int32_t j = 0; j < n; ++j) {
    const int32_t p = L->pos()->Get(static_cast<flatbuffers::uoffset_t>(j));
    if (p <= last_pos || p >= len) bad(lw + ": positions not ascending within the length");
    last_pos = p;
  }
  return n_ch;
}

// Appends a checked layer chunk's slots (K/V transposed to [slot][kv head][head_dim], slot channels, and the
// layer's window query rows with its first chunk) to the staged layer.
void stage_layer_chunk(const fb::Layer *L, int32_t first, size_t n_wpos, const Summary &sum, const RowLayout &lay,
                       StagedLayer &SL) {
  const int32_t n = L->n_slots();
  const int64_t row = lay.row;
  const size_t wq_size = first == 0 ? n_wpos * static_cast<size_t>(lay.qd) : 0;
  const bool wq_kv = vsize(L->window_q_kv()) != 0;
  SL.pos.insert(SL.pos.end(), L->pos()->begin(), L->pos()->end());
  const size_t nh = static_cast<size_t>(sum.n_kv_heads), r = static_cast<size_t>(row);
  SL.k.resize(static_cast<size_t>(first + n) * nh * r);
  SL.v.resize(SL.k.size());
  for (size_t hh = 0; hh < nh; ++hh)
    for (int32_t j = 0; j < n; ++j) {
      const size_t src = (hh * static_cast<size_t>(n) + static_cast<size_t>(j)) * r;
      const size_t dst = ((static_cast<size_t>(first + j)) * nh + hh) * r;
      std::memcpy(SL.k.data() + dst, L->k()->data() + src, r);
      std::memcpy(SL.v.data() + dst, L->v()->data() + src, r);
    }
  int k = 0;
  for (int ch = 0; ch < kSlotChannels; ++ch) {
    auto &dst = SL.channels[static_cast<size_t>(ch)];
    if ((L->imp_mask() >> ch) & 1) {
      const float *p = L->imp()->data() + static_cast<size_t>(k) * static_cast<size_t>(n);
      dst.insert(dst.end(), p, p + n);
      ++k;
    } else {
      dst.resize(static_cast<size_t>(first + n), 0.0f);
    }
  }
  if (first == 0 && L->window_q() != nullptr) SL.window_q.assign(L->window_q()->begin(), L->window_q()->end());
  if (first == 0 && wq_kv) {
    SL.window_q.resize(wq_size);
    convert_rows(reinterpret_cast<uint8_t *>(SL.window_q.data()), KvDtype::f32, L->window_q_kv()->data(), kv_window_dtype(sum.kv_dtype),
                 static_cast<int64_t>(wq_size));
  }
}

// The layer chunks of sequence `si`, checked and (sq not null) staged; max_channels takes the most slot
// channels a chunk has.
void read_layer_chunks(ChunkReader &rd, int32_t si, int32_t layer_chunks, const SequenceSummary &ss, size_t n_wpos,
                       const Summary &sum, const RowLayout &lay, StagedSeq *sq, int &max_channels) {
  const std::string where = "sequence " + std::to_string(si);
  int32_t layer = 0, first = 0, last_pos = -1;
  bool started = false;  // the current layer has had a chunk (a layer with nothing kept has one empty chunk)
  for (int32_t ci = 0; ci < layer_chunks; ++ci) {
    const fb::Chunk *c = rd.next();
    const std::string lw = where + " chunk " + std::to_string(ci);
    if (c == nullptr || c->kind() != fb::ChunkKind::LAYER || c->layer() == nullptr) bad(lw + ": layer chunk missing");
    const fb::Layer *L = c->layer();
    if (started && first == ss.kept_per_layer[static_cast<size_t>(layer)]) {  // previous layer complete: next one
      ++layer;
      first = 0;
      last_pos = -1;
      started = false;
      if (layer >= sum.n_layer) bad(lw + ": more layer chunks than layers");
    }
    const int32_t kept = ss.kept_per_layer[static_cast<size_t>(layer)];
    max_channels = std::max(max_channels, check_layer_chunk(L, si, layer, first, last_pos, ss, n_wpos, sum, lay, lw));
    if (sq != nullptr) stage_layer_chunk(L, first, n_wpos, sum, lay, sq->layers[static_cast<size_t>(layer)]);
    first += L->n_slots();
    started = true;
    if (ci + 1 == layer_chunks && (layer != sum.n_layer - 1 || first != kept)) bad(where + ": layer chunks do not cover every layer");
  }
}

// Reads the whole snapshot. `model` (may be null) is checked against the header; `staged` (may be null) receives
// the data; `cap` (may be null) is checked as each sequence chunk gives its kept counts, before that sequence's
// layer chunks (the bulk of the file) are read or staged. Fills `sum` either way.
void read_all(ByteSource &in, const Model *model, Staged *staged, const Capacity *cap, Summary &sum) {
  ChunkReader rd(in);
  const int32_t n_sequences = read_header(rd, model, staged, sum);
  // Refused from the header, before any sequence is read or staged: more sequences than the caller can take, or
  // than the session may hold.
  if (cap != nullptr && cap->announced != nullptr) *cap->announced = n_sequences;
  if (cap != nullptr && static_cast<size_t>(n_sequences) > cap->max_sequences)
    fail(Status::buffer_too_small, "the snapshot holds " + std::to_string(n_sequences) + " sequences; the caller takes at most " +
                                       std::to_string(cap->max_sequences));
  if (cap != nullptr && cap->session != nullptr) cap->session->check_room_for_sequences(n_sequences);
  int64_t need = 0;  // pool blocks of the sequences read so far
  const RowLayout lay(sum);
  int max_channels = 0;
  // The chunk buffer is reused: nothing read from one chunk may be used after the next is read.
  for (int32_t si = 0; si < n_sequences; ++si) {
    const fb::Chunk *c = rd.next();
    if (c == nullptr || c->kind() != fb::ChunkKind::SEQUENCE || c->sequence() == nullptr)
      bad("sequence " + std::to_string(si) + ": sequence chunk missing");
    StagedSeq *sq = nullptr;
    SequenceSummary ss = read_sequence(c->sequence(), si, sum, staged, cap, need, &sq);
    read_layer_chunks(rd, si, ss.layer_chunks, ss, static_cast<size_t>(ss.window_rows), sum, lay, sq, max_channels);
    sum.sequences.push_back(std::move(ss));
  }
  if (rd.next() != nullptr) bad("chunks after the last sequence");
  sum.file_bytes = rd.bytes_read();
  sum.n_chunks = rd.chunks();
  int64_t missing = 0;
  for (const SequenceSummary &ss : sum.sequences) {
    int64_t kept = 0;
    for (int32_t k : ss.kept_per_layer) kept += k;
    missing += ss.length * sum.n_layer - kept;
  }
  sum.uncompressed_estimate_bytes = sum.file_bytes + missing * (lay.slot_bytes + 4 + 4 * max_channels);
}

}  // namespace

std::vector<int32_t> restore(Session &session, Sampler *sampler, ByteSource &in, size_t max_sequences, int64_t *announced) {
  Staged staged;
  Summary sum;
  KvCache &kv = session.kv();
  const KvConfig &kc = kv.config();
  const int32_t bs = kc.block_size;
  const Capacity cap{kv.free_blocks(), bs, &session, max_sequences, announced};
  read_all(in, &session.model(), &staged, &cap, sum);
  int64_t need = 0;  // checked again from what was staged: the commit below takes exactly this many
  for (const StagedSeq &s : staged.seqs)
    for (const StagedLayer &L : s.layers) need += blocks_for(static_cast<int64_t>(L.pos.size()), bs);
  if (need > kv.free_blocks()) kv_full(need, kv.free_blocks());
  session.check_room_for_sequences(static_cast<int64_t>(staged.seqs.size()));
  Sampler new_sampler(staged.has_sampler ? staged.sp : SamplerParams{});
  if (staged.has_sampler) {
    new_sampler.rng().set_state(staged.rng);
    new_sampler.set_history(staged.history);
  }
  // Every check has passed: commit.
  std::vector<int32_t> ids;
  const int64_t row = kv_bytes(kc.dtype, kc.head_dim), src_row = kv_bytes(staged.dtype, kc.head_dim);
  const int64_t hd = kc.head_dim, nkv = kc.n_kv_heads;
  std::vector<uint8_t> blocks;
  std::vector<float> krow(static_cast<size_t>(kc.head_dim));
  std::vector<int32_t> loose;  // blocks taken for the sequence being built, until it is adopted
  // Reserved up front so that recording a block or an adopted id cannot run out of memory (and lose track of it).
  ids.reserve(staged.seqs.size());
  {
    size_t most = 0;
    for (const StagedSeq &s : staged.seqs) {
      size_t n = 0;
      for (const StagedLayer &SL : s.layers) n += (SL.pos.size() + static_cast<size_t>(bs) - 1) / static_cast<size_t>(bs);
      most = std::max(most, n);
    }
    loose.reserve(most);
  }
  try {
    for (StagedSeq &s : staged.seqs) {
      SeqCache c;
      c.length = s.length;
      c.layers.resize(s.layers.size());
      c.window_q.resize(s.layers.size());
      c.window_pos = std::move(s.window_pos);
      for (size_t l = 0; l < s.layers.size(); ++l) {
        StagedLayer &SL = s.layers[l];
        LayerSlots &L = c.layers[l];
        const auto n = static_cast<int64_t>(SL.pos.size());
        L.blocks = kv.alloc_blocks((n + bs - 1) / bs);
        loose.insert(loose.end(), L.blocks.begin(), L.blocks.end());
        // Keys a quantised cache stored less the layer's K bias (kv_keys_less_bias) move to a float cache with it
        // added back, and the other way round.
        const std::vector<float> &bk = session.model().layer(static_cast<int32_t>(l)).bk;
        const float bias_sign = static_cast<float>(kv_keys_less_bias(staged.dtype)) - static_cast<float>(kv_keys_less_bias(kc.dtype));
        // Built in host memory block by block, then written to the store (host or device) in one call.
        blocks.assign(L.blocks.size() * static_cast<size_t>(kv.block_bytes()), 0);
        for (int64_t j = 0; j < n; ++j)
          for (int64_t h = 0; h < nkv; ++h)
            for (int which = 0; which < 2; ++which) {
              uint8_t *dst = blocks.data() + (j / bs) * kv.block_bytes() + ((which * nkv + h) * bs + j % bs) * row;
              const uint8_t *src = (which == 0 ? SL.k : SL.v).data() + (j * nkv + h) * src_row;
              if (which == 0 && bias_sign != 0 && !bk.empty()) {  // keys less their bias on one side only
                convert_rows(reinterpret_cast<uint8_t *>(krow.data()), KvDtype::f32, src, staged.dtype, hd);
                for (int64_t i = 0; i < hd; ++i) krow[static_cast<size_t>(i)] += bias_sign * bk[static_cast<size_t>(h * hd + i)];
                convert_rows(dst, kc.dtype, reinterpret_cast<const uint8_t *>(krow.data()), KvDtype::f32, hd);
              } else {
                convert_rows(dst, kc.dtype, src, staged.dtype, hd);
              }
            }
        kv.store().write_blocks(L.blocks, blocks.data());
        L.pos = std::move(SL.pos);
        L.channels = std::move(SL.channels);
        c.window_q[l].assign(std::move(SL.window_q));
      }
      loose.clear();  // adopt_sequence owns them from here, and releases them itself if it fails
      ids.push_back(session.adopt_sequence(std::move(c), std::move(s.st), std::move(s.cst)));
    }
  } catch (...) {
    kv.release_blocks(loose);
    for (int32_t id : ids) session.remove_sequence(id);
    throw;
  }
  if (sampler != nullptr && staged.has_sampler) *sampler = std::move(new_sampler);
  return ids;
}

std::vector<int32_t> restore_file(Session &session, Sampler *sampler, const std::string &path) {
  FileSource f(path);
  return restore(session, sampler, f);
}

Summary inspect(ByteSource &in) {
  Summary s;
  read_all(in, nullptr, nullptr, nullptr, s);
  return s;
}

int32_t sequence_count(ByteSource &in) {
  ChunkReader rd(in);
  Summary s;
  return read_header(rd, nullptr, nullptr, s);
}

namespace {
std::string jstr(const std::string &s) { return "\"" + json_escape(s) + "\""; }
std::string hex(uint64_t v) { char b[24]; std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v)); return b; }
std::string ints(const std::vector<int32_t> &v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}
std::string num(double v) { std::ostringstream s; s.precision(7); s << v; return s.str(); }
}  // namespace

std::string summary_json(const Summary &s) {
  std::ostringstream o;
  const CompressionConfig &c = s.compression;
  o << "{\"format_version\":" << s.format_version << ",\"min_reader_version\":" << s.min_reader_version
    << ",\"producer\":" << jstr(s.producer) << ",\"weights_fingerprint\":\"" << hex(s.weights_fingerprint)
    << "\",\"tokenizer_fingerprint\":\"" << hex(s.tokenizer_fingerprint) << "\",\"kv_dtype\":\"" << kv_dtype_name(s.kv_dtype)
    << "\",\"block_size\":" << s.block_size << ",\"n_layer\":" << s.n_layer << ",\"n_kv_heads\":" << s.n_kv_heads
    << ",\"head_dim\":" << s.head_dim << ",\"n_heads\":" << s.n_heads << ",\"n_vocab\":" << s.n_vocab
    << ",\"created_unix_ms\":" << s.created_unix_ms << ",\"compression\":{\"policy\":\"" << policy_name(c.policy)
    << "\",\"budget_fraction\":" << num(c.budget_fraction) << ",\"budget_tokens\":" << c.budget_tokens
    << ",\"window\":" << c.window << ",\"interval\":" << c.interval << ",\"alpha\":" << num(c.alpha)
    << ",\"tau\":" << num(c.tau) << ",\"entropy_top_k\":" << c.entropy_top_k << ",\"pool_kernel_prefill\":"
    << c.pool_kernel_prefill << ",\"pool_kernel_decode\":" << c.pool_kernel_decode << ",\"shape\":\""
    << (c.shape == BudgetShape::pyramid ? "pyramid" : "uniform") << "\",\"beta\":" << num(c.beta) << ",\"sink\":" << c.sink
    << ",\"compress_after_prefill\":" << (c.compress_after_prefill ? "true" : "false") << ",\"max_loss\":" << num(c.max_loss)
    << ",\"question\":\"" << question_name(c.question) << "\"}";
  o << ",\"sampler\":";
  if (s.has_sampler)
    o << "{\"temperature\":" << num(s.sampler.temperature) << ",\"top_k\":" << s.sampler.top_k << ",\"top_p\":"
      << num(s.sampler.top_p) << ",\"min_p\":" << num(s.sampler.min_p) << ",\"repeat_penalty\":" << num(s.sampler.repeat_penalty)
      << ",\"repeat_last_n\":" << s.sampler.repeat_last_n << ",\"seed\":" << s.sampler.seed << "}";
  else
    o << "null";
  o << ",\"file_bytes\":" << s.file_bytes << ",\"chunks\":" << s.n_chunks << ",\"kept_kv_bytes\":" << s.kept_kv_bytes
    << ",\"full_kv_bytes\":" << s.full_kv_bytes << ",\"uncompressed_estimate_bytes\":" << s.uncompressed_estimate_bytes
    << ",\"profile\":";
  if (s.profile_compressions >= 0)
    o << "{\"tag\":" << jstr(s.profile_tag) << ",\"compressions\":" << s.profile_compressions << "}";
  else
    o << "null";
  o
    << ",\"sequences\":[";
  for (size_t i = 0; i < s.sequences.size(); ++i) {
    const SequenceSummary &q = s.sequences[i];
    o << (i ? "," : "") << "{\"saved_id\":" << q.saved_id << ",\"length\":" << q.length << ",\"compressions\":"
      << q.n_compressions << ",\"has_logits\":" << (q.has_logits ? "true" : "false") << ",\"protected_spans\":" << q.n_spans
      << ",\"window_rows\":" << q.window_rows << ",\"layer_chunks\":" << q.layer_chunks
      << ",\"kept_per_layer\":" << ints(q.kept_per_layer) << ",\"auto\":" << auto_report_json(q.auto_report) << "}";
  }
  o << "]}";
  return o.str();
}

std::string summary_text(const Summary &s) {
  std::ostringstream o;
  o << "infokv snapshot, format " << s.format_version << " (readers >= " << s.min_reader_version << "), by "
    << s.producer << "\n";
  o << "model:        weights " << hex(s.weights_fingerprint) << ", tokenizer " << hex(s.tokenizer_fingerprint) << "\n";
  o << "layout:       " << s.n_layer << " layers, " << s.n_heads << " heads, " << s.n_kv_heads << " KV heads of "
    << s.head_dim << ", vocab " << s.n_vocab << "\n";
  o << "KV cache:     " << kv_dtype_name(s.kv_dtype) << ", block size " << s.block_size << "\n";
  const CompressionConfig &c = s.compression;
  o << "policy:       " << policy_name(c.policy);
  if (c.enabled()) {
    const std::string target = c.quality_target() ? "max loss " + num(c.max_loss)
                               : c.budget_tokens > 0 ? "budget " + std::to_string(c.budget_tokens) + " tokens"
                                                     : "budget " + num(c.budget_fraction);
    o << " (" << target << ", window " << c.window << ", interval " << c.interval << ", alpha " << num(c.alpha) << ")";
  }
  o << "\n";
  o << "sampler:      " << (s.has_sampler ? "seed " + std::to_string(s.sampler.seed) + ", temperature " + num(s.sampler.temperature) : "none") << "\n";
  o << "size:         " << s.file_bytes << " bytes in " << s.n_chunks << " chunks; KV kept " << s.kept_kv_bytes
    << " of " << s.full_kv_bytes << " bytes; uncompressed snapshot about " << s.uncompressed_estimate_bytes << " bytes\n";
  if (s.profile_compressions >= 0)
    o << "profile:      " << (s.profile_tag.empty() ? std::string("(no tag)") : "'" + s.profile_tag + "'") << ", "
      << s.profile_compressions << " compressions seen\n";
  for (size_t i = 0; i < s.sequences.size(); ++i) {
    const SequenceSummary &q = s.sequences[i];
    o << "sequence " << i << ": length " << q.length << ", compressions " << q.n_compressions << ", kept per layer "
      << ints(q.kept_per_layer) << "\n";
    if (!q.auto_report.empty()) {
      o << "  auto: " << auto_report_summary(q.auto_report) << "\n";
      for (const std::string &line : auto_report_layer_lines(q.auto_report)) o << "    " << line << "\n";
    }
  }
  return o.str();
}

}  // namespace snapshot
}  // namespace infokv
