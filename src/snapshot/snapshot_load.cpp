// Snapshot reader: reads and checks everything into staging structures first (the header, each sequence's state and
// its layers: snapshot/read_internal.hpp); restore() then commits them to the session only when every check has
// passed (and the pool has room), so a refused snapshot changes nothing.
#include <algorithm>
#include <vector>

#include "snapshot/read_internal.hpp"
#include "snapshot/snapshot.hpp"

namespace infokv {
namespace snapshot {

using namespace detail;  // NOLINT: the reader's parts

namespace {

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
        c.layers[l] = commit_layer(kv, s.layers[l], staged.dtype, session.model().layer(static_cast<int32_t>(l)).bk, loose);
        c.window_q[l].assign(std::move(s.layers[l].window_q));
      }
      loose.clear();  // the adopted sequence owns them from here, and releases them itself if it fails
      ids.push_back(SessionAccess::adopt(session, std::move(c), std::move(s.st), std::move(s.cst)));
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

}  // namespace snapshot
}  // namespace infokv
