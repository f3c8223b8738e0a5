// Snapshots of a session's sequences (KV cache as kept after compression, slot channels, logical length,
// tokens, logits, protected spans, and optionally a sampler's state) in the container format described at the
// top of schemas/snapshot.fbs. Restore is all or nothing: every check passes before any state changes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "sampling/sampler.hpp"
#include "session/session.hpp"
#include "util/byte_io.hpp"

namespace infokv {
namespace snapshot {

// The byte streams a snapshot is written to and read from (util/byte_io.hpp), by their snapshot:: names too.
using ::infokv::ByteSink;
using ::infokv::ByteSource;
using ::infokv::CountingSink;
using ::infokv::FileSink;
using ::infokv::FileSource;
using ::infokv::MemorySource;
using ::infokv::SpanSink;
using ::infokv::VectorSink;

constexpr uint32_t kFormatVersion = 1;     // what this version writes
constexpr uint32_t kMinReaderVersion = 1;  // the oldest reader that can read what this version writes
constexpr uint32_t kReaderVersion = 4;     // the newest format this version reads
constexpr uint32_t kWindowKvVersion = 2;   // format (and minimum reader) of a file with 16-bit window queries
constexpr uint32_t kQuantKvVersion = 3;    // format (and minimum reader) of a file whose KV dtype is q8_0 or q4_0
constexpr uint32_t kLayerDtypeVersion = 4; // format (and minimum reader) of a file with a layer in a dtype of its own

struct SaveOptions {
  int64_t max_chunk_bytes = int64_t{1} << 30;  // bulk bytes per layer chunk before a layer is split (< 2 GiB)
  uint32_t format_version = kFormatVersion;    // tests only: to make snapshots of other versions
  uint32_t min_reader_version = kMinReaderVersion;
  int64_t created_unix_ms = -1;                // -1: now (golden files fix it)
  // The observation-window queries (the last <= 32 queries of every layer) cost as much as ~64 cached tokens, a
  // fixed cost that would dominate a compressed snapshot of a short context. They matter only to a compression
  // that runs before the restored sequence has decoded a new window. Auto keeps them when the policy's next
  // scheduled compression falls within that span; a compression forced earlier (full pool, explicit call) then
  // scores with the rows decoded since the restore. Always/never override.
  enum class WindowQueries { automatic, always, never };
  WindowQueries window_queries = WindowQueries::automatic;
};

// Writes sequence `seq` (or every sequence when seq < 0) and the sampler's state (when not null).
// Throws Error(not_found) for an unknown sequence, Error(io) for a failed write.
void save(const Session &session, int32_t seq, const Sampler *sampler, ByteSink &out, const SaveOptions &opts = {});
// Writes a file atomically (a temporary renamed over `path`); returns its size in bytes.
int64_t save_file(const Session &session, int32_t seq, const Sampler *sampler, const std::string &path,
                  const SaveOptions &opts = {});

// Restores the snapshot's sequences into `session` as new sequences and returns their ids in file order; when
// `sampler` is not null and the snapshot has sampler state, the sampler is replaced by it. Throws, changing
// nothing: Error(bad_snapshot) for damaged or inconsistent data, Error(version) for a format this version cannot
// read, Error(wrong_model) for another model, tokenizer or head layout, Error(kv_full) when the pool cannot
// hold the kept tokens, Error(io) for a failed read. The pool is checked as each sequence chunk gives its kept
// counts, before that sequence's K/V chunks are read: a snapshot too large for the pool costs the reading of its
// header and sequence chunks, not of its bulk (and may be refused as kv_full before damage further on is seen).
// max_sequences: the most sequences the caller can take (a C caller's id buffer); a file announcing more restores
// nothing, leaves the sampler as it was and throws Error(buffer_too_small), checked from the header it restores
// from. *announced (may be null) receives the header's sequence count once the header is read.
std::vector<int32_t> restore(Session &session, Sampler *sampler, ByteSource &in, size_t max_sequences = SIZE_MAX,
                             int64_t *announced = nullptr);
std::vector<int32_t> restore_file(Session &session, Sampler *sampler, const std::string &path);

struct SequenceSummary {
  int32_t saved_id = 0;
  int64_t length = 0;
  int64_t n_compressions = 0;
  bool has_logits = false;
  std::vector<int32_t> kept_per_layer;
  int64_t n_spans = 0;
  int64_t window_rows = 0;
  int64_t layer_chunks = 0;
  AutoReport auto_report;  // what the auto policy chose at the latest compression (empty: it has not compressed it)
};

struct Summary {
  uint32_t format_version = 0;
  uint32_t min_reader_version = 0;
  std::string producer;
  uint64_t weights_fingerprint = 0;
  uint64_t tokenizer_fingerprint = 0;
  KvDtype kv_dtype = KvDtype::f16;
  int32_t block_size = 0, n_layer = 0, n_kv_heads = 0, head_dim = 0, n_heads = 0, n_vocab = 0;
  CompressionConfig compression;
  int64_t created_unix_ms = 0;
  bool has_sampler = false;
  SamplerParams sampler;
  int64_t kept_kv_bytes = 0;
  int64_t full_kv_bytes = 0;
  int64_t file_bytes = 0;
  int64_t n_chunks = 0;
  int64_t uncompressed_estimate_bytes = 0;  // what the snapshot would take with every position kept
  // The saving session's tuning profile (informational): compressions -1 when it had none.
  std::string profile_tag;
  int64_t profile_compressions = -1;
  std::vector<SequenceSummary> sequences;
};

// Reads and checks a whole snapshot (container, checksums, verifier, invariants) without a model.
// Throws like restore() except for wrong_model and kv_full.
Summary inspect(ByteSource &in);
// The sequence count the header announces, from the header chunk alone (a restore checks that the file holds
// exactly that many). Throws like inspect() for a damaged or unreadable header.
int32_t sequence_count(ByteSource &in);
std::string summary_json(const Summary &s);
std::string summary_text(const Summary &s);

}  // namespace snapshot
}  // namespace infokv
