// Snapshot writer: one header chunk, then per sequence a sequence chunk and its layer chunks (schemas/snapshot.fbs).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "compress/scores.hpp"
#include "snapshot/container.hpp"
#include "snapshot/convert.hpp"
#include "snapshot/session_access.hpp"
#include "snapshot/snapshot.hpp"
#include "util/error.hpp"

namespace infokv {
namespace snapshot {

namespace {

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

template <typename T>
uint64_t vec_hash(const std::vector<T> &v) { return xxh3(v.data(), v.size() * sizeof(T)); }

// How many of a sequence's last observation-window queries go into the file (see SaveOptions::WindowQueries):
// automatically, only those the next scheduled compression will score with that the restored sequence will not
// have decoded anew by then.
int64_t saved_window_rows(const Session &session, const SaveOptions &opts, int32_t id) {
  if (opts.window_queries != SaveOptions::WindowQueries::automatic)
    return opts.window_queries == SaveOptions::WindowQueries::always
               ? static_cast<int64_t>(session.kv().seq(id).window_pos.size())
               : 0;
  return session.compressor().window_rows_needed(id);
}

// What the header records besides the session: versions, sequence count and the KV byte totals.
struct HeaderFacts {
  uint32_t format_version, min_reader_version;
  int32_t n_sequences;
  int64_t kept_bytes, full_bytes;
};

void write_header(ChunkWriter &w, const Session &session, const Sampler *sampler, const SaveOptions &opts, const HeaderFacts &f) {
  const KvConfig &kc = session.kv().config();
  const HParams &hp = session.model().hparams();
  flatbuffers::FlatBufferBuilder b(1024);
  auto comp = to_fb(b, session.compressor().config());
  flatbuffers::Offset<fb::SamplerState> samp;
  if (sampler != nullptr) {
    const SamplerParams &p = sampler->params();
    // Rng::state is const-accessible only through a copy of the sampler's rng (Sampler::rng() is non-const).
    Sampler copy = *sampler;
    const uint64_t *st = copy.rng().state();
    std::vector<uint64_t> rng(st, st + 4);
    std::vector<int32_t> hist(sampler->history().begin(), sampler->history().end());
    samp = fb::CreateSamplerStateDirect(b, p.temperature, p.top_k, p.top_p, p.min_p, p.repeat_penalty, p.repeat_last_n,
                                        p.seed, &rng, &hist);
  }
  auto producer = b.CreateString(std::string("infokv ") + "0.1.0");
  const TuningProfile *prof = session.compressor().profile();
  flatbuffers::Offset<flatbuffers::String> prof_tag;
  if (prof != nullptr) prof_tag = b.CreateString(prof->tag);
  fb::HeaderBuilder h(b);
  h.add_format_version(f.format_version);
  h.add_min_reader_version(f.min_reader_version);
  h.add_producer(producer);
  h.add_weights_fingerprint(session.model().weights_fingerprint());
  h.add_tokenizer_fingerprint(session.model().tokenizer().fingerprint());
  h.add_kv_dtype(static_cast<fb::KvDtype>(static_cast<int16_t>(kc.dtype)));
  h.add_block_size(kc.block_size);
  h.add_n_layer(hp.n_layer);
  h.add_n_kv_heads(hp.n_head_kv);
  h.add_head_dim(hp.head_dim);
  h.add_n_heads(hp.n_head);
  h.add_n_vocab(hp.n_vocab);
  h.add_compression(comp);
  h.add_created_unix_ms(opts.created_unix_ms >= 0 ? opts.created_unix_ms : now_ms());
  h.add_n_sequences(f.n_sequences);
  if (sampler != nullptr) h.add_sampler(samp);
  h.add_kept_kv_bytes(f.kept_bytes);
  h.add_full_kv_bytes(f.full_bytes);
  if (prof != nullptr) {
    h.add_profile_tag(prof_tag);
    h.add_profile_compressions(prof->compressions);
  }
  auto hdr = h.Finish();
  fb::ChunkBuilder cb(b);
  cb.add_kind(fb::ChunkKind::HEADER);
  cb.add_header(hdr);
  fb::FinishChunkBuffer(b, cb.Finish());
  w.put(b);
}

// Which slot channels each layer of a sequence stores, and how the layer is split into chunks.
struct LayerSplit {
  std::vector<uint32_t> masks;
  std::vector<int32_t> per_chunk;
  int32_t layer_chunks = 0;
  std::vector<int32_t> kept;
};

LayerSplit split_layers(const SeqCache &c, const KvConfig &kc, int64_t max_chunk_bytes) {
  LayerSplit sp;
  sp.masks.assign(c.layers.size(), 0);
  sp.per_chunk.assign(c.layers.size(), 1);
  for (size_t l = 0; l < c.layers.size(); ++l) {
    const LayerSlots &L = c.layers[l];
    sp.kept.push_back(L.n());
    int n_ch = 0;
    for (int ch = 0; ch < kSlotChannels; ++ch)
      if (std::any_of(L.channels[static_cast<size_t>(ch)].begin(), L.channels[static_cast<size_t>(ch)].end(), [](float x) { return x != 0.0f; })) {
        sp.masks[l] |= 1u << ch;
        ++n_ch;
      }
    const int64_t per_slot = int64_t{2} * kc.n_kv_heads * kv_bytes(L.dtype, kc.head_dim) + 4 + 4 * n_ch;
    sp.per_chunk[l] = static_cast<int32_t>(std::max<int64_t>(1, std::min<int64_t>(INT32_MAX, max_chunk_bytes / per_slot)));
    sp.layer_chunks += L.n() == 0 ? 1 : (L.n() + sp.per_chunk[l] - 1) / sp.per_chunk[l];
  }
  return sp;
}

void write_sequence_chunk(ChunkWriter &w, size_t si, int32_t id, const SeqCache &c, const SessionAccess::State &st,
                          const SeqCompression &cst, const std::vector<int32_t> &window_pos, const LayerSplit &sp) {
  flatbuffers::FlatBufferBuilder b(1024 + st.tokens.size() * 4 + st.logits.size() * 4);
  std::vector<flatbuffers::Offset<fb::Span>> spans;
  for (const ProtectedSpan &span : cst.spans) spans.push_back(fb::CreateSpan(b, span.begin, span.end, span.fair));
  const std::vector<float> no_logits;
  const std::vector<float> &logits = st.has_logits ? st.logits : no_logits;
  const AutoReport &ar = cst.auto_report;
  std::vector<fb::AutoLayer> auto_layers;
  for (const AutoLayerChoice &ch : ar.layers)
    auto_layers.emplace_back(static_cast<int32_t>(ch.evidence), ch.budget, ch.alpha, ch.loss);
  auto meta = fb::CreateSequenceDirect(
      b, static_cast<int32_t>(si), id, c.length, &st.tokens, vec_hash(st.tokens), st.has_logits,
      &logits, vec_hash(logits), st.pending_entropy,
      cst.since_compress, st.prefilled, cst.n_compressions, &spans, &window_pos, &sp.kept, sp.layer_chunks,
      ar.empty() ? nullptr : &auto_layers, ar.loss, ar.tokens, ar.uniform_tokens, ar.max_loss);
  fb::ChunkBuilder cb(b);
  cb.add_kind(fb::ChunkKind::SEQUENCE);
  cb.add_sequence(meta);
  fb::FinishChunkBuffer(b, cb.Finish());
  w.put(b);
}

// Scratch reused across a save's layer chunks.
struct LayerBuffers {
  std::vector<uint8_t> kbuf, vbuf, wq_kv;
};

// Layer l of sequence si as chunks of at most sp.per_chunk[l] slots: K/V (gathered per head), positions, the stored
// slot channels and, with the first chunk, the last n_rows window query rows (in the KV dtype when
// half_window).
void write_layer_chunks(ChunkWriter &w, const KvCache &kv, int32_t id, const SeqCache &c, size_t si, size_t l, const LayerSplit &sp,
                        int64_t n_rows, bool half_window, int64_t qd, LayerBuffers &buf) {
  const KvConfig &kc = kv.config();
  const LayerSlots &L = c.layers[l];
  const std::vector<uint8_t> blocks = kv.layer_blocks(id, static_cast<int32_t>(l));
  int32_t first = 0;
  do {
    const int32_t n = std::min(sp.per_chunk[l], L.n() - first);
    kv.gather_rows(blocks, L.dtype, 0, first, n, buf.kbuf);
    kv.gather_rows(blocks, L.dtype, 1, first, n, buf.vbuf);
    std::vector<int32_t> pos(L.pos.begin() + first, L.pos.begin() + first + n);
    std::vector<float> imp;
    for (int ch = 0; ch < kSlotChannels; ++ch)
      if (sp.masks[l] & (1u << ch)) imp.insert(imp.end(), L.channels[static_cast<size_t>(ch)].begin() + first, L.channels[static_cast<size_t>(ch)].begin() + first + n);
    const std::vector<float> empty;
    const std::vector<float> &all_rows = c.window_q[l].get();
    if (static_cast<int64_t>(all_rows.size()) != static_cast<int64_t>(c.window_pos.size()) * qd)
      fail(Status::internal, "window queries do not match their positions");
    const std::vector<float> rows(first == 0 ? all_rows.end() - n_rows * qd : all_rows.end(), all_rows.end());
    // f32 rows as v1 wrote them; 16-bit ones in the KV dtype (exact: they were rounded when recorded).
    const std::vector<float> &wq = half_window ? empty : rows;
    std::vector<uint8_t> &wq_kv = buf.wq_kv;
    const KvDtype wdt = kv_window_dtype(kc.dtype);
    wq_kv.resize(half_window ? static_cast<size_t>(kv_bytes(wdt, static_cast<int64_t>(rows.size()))) : 0);
    if (half_window && !rows.empty()) convert_rows(wq_kv.data(), wdt, reinterpret_cast<const uint8_t *>(rows.data()), KvDtype::f32, static_cast<int64_t>(rows.size()));
    flatbuffers::FlatBufferBuilder b(static_cast<size_t>(1024 + buf.kbuf.size() * 2 + pos.size() * 4 + imp.size() * 4 + wq.size() * 4 + wq_kv.size()));
    auto layer = fb::CreateLayerDirect(b, static_cast<int32_t>(si), static_cast<int32_t>(l), first, n, &pos, vec_hash(pos),
                                       &buf.kbuf, vec_hash(buf.kbuf), &buf.vbuf, vec_hash(buf.vbuf), sp.masks[l], &imp, vec_hash(imp), &wq,
                                       vec_hash(wq), half_window ? &wq_kv : nullptr, vec_hash(wq_kv),
                                       L.dtype == kc.dtype ? fb::KvDtype::UNSPECIFIED : static_cast<fb::KvDtype>(static_cast<int16_t>(L.dtype)));
    fb::ChunkBuilder cb(b);
    cb.add_kind(fb::ChunkKind::LAYER);
    cb.add_layer(layer);
    fb::FinishChunkBuffer(b, cb.Finish());
    w.put(b);
    first += n;
  } while (first < L.n());
}

}  // namespace

void save(const Session &session, int32_t seq, const Sampler *sampler, ByteSink &out, const SaveOptions &opts) {
  const KvCache &kv = session.kv();
  const KvConfig &kc = kv.config();
  const HParams &hp = session.model().hparams();
  std::vector<int32_t> ids;
  if (seq < 0) {
    ids = kv.sequence_ids();
  } else {
    if (!session.has_sequence(seq)) fail(Status::not_found, "no sequence " + std::to_string(seq));
    ids.push_back(seq);
  }
  const auto slot_bytes = [&kc](KvDtype d) { return int64_t{2} * kc.n_kv_heads * kv_bytes(d, kc.head_dim); };
  int64_t kept_bytes = 0, full_bytes = 0;
  bool layer_dtypes = false;  // some layer in a dtype of its own
  for (int32_t id : ids) {
    const SeqCache &c = kv.seq(id);
    full_bytes += c.length * kc.n_layer * slot_bytes(kc.dtype);
    for (const LayerSlots &L : c.layers) {
      kept_bytes += static_cast<int64_t>(L.n()) * slot_bytes(L.dtype);
      layer_dtypes = layer_dtypes || L.dtype != kc.dtype;
    }
  }
  // Window queries are held at the KV dtype's precision (KvCache::commit_step; f16 beside a quantised cache), so a
  // 16-bit or quantised cache stores them in 16 bits: a v2 file.
  bool half_window = false;
  if (kc.dtype != KvDtype::f32)
    for (int32_t id : ids) half_window = half_window || saved_window_rows(session, opts, id) > 0;
  HeaderFacts facts;
  facts.format_version = half_window ? std::max(opts.format_version, kWindowKvVersion) : opts.format_version;
  facts.min_reader_version = half_window ? std::max(opts.min_reader_version, kWindowKvVersion) : opts.min_reader_version;
  if (kv_dtype_quantised(kc.dtype)) {  // readers before v3 know neither the dtype nor its blocks
    facts.format_version = std::max(facts.format_version, kQuantKvVersion);
    facts.min_reader_version = std::max(facts.min_reader_version, kQuantKvVersion);
  }
  if (layer_dtypes) {  // readers before v4 would read such a layer's rows in the header's dtype
    facts.format_version = std::max(facts.format_version, kLayerDtypeVersion);
    facts.min_reader_version = std::max(facts.min_reader_version, kLayerDtypeVersion);
  }
  facts.n_sequences = static_cast<int32_t>(ids.size());
  facts.kept_bytes = kept_bytes;
  facts.full_bytes = full_bytes;

  ChunkWriter w(out);
  write_header(w, session, sampler, opts, facts);
  const int64_t qd = static_cast<int64_t>(hp.n_head) * hp.head_dim;
  LayerBuffers buf;
  for (size_t si = 0; si < ids.size(); ++si) {
    const SeqCache &c = kv.seq(ids[si]);
    const LayerSplit sp = split_layers(c, kc, opts.max_chunk_bytes);
    const int64_t n_rows = saved_window_rows(session, opts, ids[si]);
    const std::vector<int32_t> window_pos(c.window_pos.end() - n_rows, c.window_pos.end());
    write_sequence_chunk(w, si, ids[si], c, SessionAccess::state(session, ids[si]),
                         session.compressor().state(ids[si]), window_pos, sp);
    for (size_t l = 0; l < c.layers.size(); ++l) write_layer_chunks(w, kv, ids[si], c, si, l, sp, n_rows, half_window, qd, buf);
  }
  w.finish();
}

int64_t save_file(const Session &session, int32_t seq, const Sampler *sampler, const std::string &path, const SaveOptions &opts) {
  FileSink f(path);
  save(session, seq, sampler, f, opts);
  f.commit();
  return static_cast<int64_t>(f.size());
}

}  // namespace snapshot
}  // namespace infokv
