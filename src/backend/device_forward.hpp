// The seam between Session and a backend: Session keeps the KV bookkeeping (KvCache: block tables, slot positions,
// free list, slot channels, window queries) on the host and hands each forward chunk to a DeviceForward,
// which owns the weights, the activations and the KV block pool (through the KvStore it makes) on its device.
// One implementation (OpsForward, ops_forward.cpp) serves every device through DeviceOps (device_ops.hpp).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/device.hpp"
#include "kernels/ops.hpp"
#include "kv/kv_cache.hpp"
#include "kv/kv_store.hpp"

namespace infokv {

class Model;
class KvCache;
class ThreadPool;

// The items of one sequence within a chunk.
struct ForwardGroup {
  int32_t seq = 0;
  std::vector<int64_t> items;        // chunk-relative indices, ascending (their slots: the last items.size() of each layer)
  float *pending_entropy = nullptr;  // host, in/out: entropy of the distribution that predicts the next token
  StepObservations *step = nullptr;  // host, out: what the step observed, applied by the caller when the step commits
};

struct ForwardChunk {
  const int32_t *tokens = nullptr;     // [T] host
  const int32_t *positions = nullptr;  // [T] host
  int64_t T = 0;
  std::vector<ForwardGroup> groups;
  std::vector<int64_t> logit_rows;     // chunk rows whose logits are returned, ascending
  // Side channels for compression (CompressionConfig::needs_*):
  bool attention_acc = false;          // H2O: attention each slot receives, and from how many queries
  bool entropy = false;                // InfoKV: entropy of each position's logits and the representation change
  int32_t entropy_top_k = 256;
  int32_t window_rows = 0;             // keep the last window_rows query rows of each sequence (0: none)
};

class DeviceForward {
 public:
  virtual ~DeviceForward() = default;
  virtual std::string describe() const = 0;
  // Bytes of memory free on the device now (the weights already resident); -1 when it cannot tell.
  virtual int64_t free_memory() const = 0;
  // The share of free_memory() a KV pool takes by default (DeviceOps::default_pool_fraction).
  virtual double default_pool_fraction() const = 0;
  // DeviceOps::chunk_invariant_from: the prefill chunk size from which a token's results do not depend on the cuts.
  virtual int64_t chunk_invariant_from() const { return 0; }
  // The KV block pool for a cache of this geometry, in this backend's memory.
  virtual std::unique_ptr<KvStore> make_kv_store(const PagedKv &geometry, int64_t n_blocks) = 0;
  // Runs the decoder on the chunk. The caller has already reserved the KV slots with KvCache::append_slots.
  // Writes the logits of c.logit_rows to out[logit_rows.size(), n_vocab] and K/V of the new slots into `kv`; updates
  // the groups' pending_entropy and records what compression asked to observe (attention sums, window rows,
  // entropy and representation change) in the groups' StepObservations, which the caller applies on commit. Throws
  // Error on failure.
  virtual void forward_chunk(const ForwardChunk &c, KvCache &kv, float *out) = 0;
  // Observation-window scoring: out[r, j] for j < vis[r] = attention probability, averaged over heads, that slot
  // j of `kv` (a view of this backend's pool) receives from query row r of q[rows, n_heads * head_dim] (host);
  // out is host memory [rows, kv.n_slots] and entries j >= vis[r] are 0.
  virtual void window_probs(float *out, const float *q, const int32_t *vis, int32_t rows, const PagedKv &kv,
                            int32_t n_heads, float scale) = 0;
};

// The backend for a resolved device choice: the CPU (threads from `pool`, which must outlive it) or CUDA. Throws
// Error(unsupported) for CUDA in a build without it, Error(no_device) when the device or cuBLAS is unusable,
// Error(out_of_memory) when the weights do not fit.
std::unique_ptr<DeviceForward> make_device_forward(const Model &model, const DeviceChoice &choice, ThreadPool *pool);

}  // namespace infokv
