// The seam between Session and a device backend: Session keeps the KV bookkeeping (KvCache: block tables, slot
// positions, free list) on the host and hands each forward chunk to a DeviceForward, which owns the weights, the
// KV block pool mirror and the activations on the device. No CUDA header here.
//
// Scope of the CUDA implementation (kernels/cuda/forward.cpp), enforced by Session: compression policy none, no
// fork (copy-on-write and compaction move KV bytes in the host pool; mirroring them on the device is the next step).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/device.hpp"

namespace infokv {

class Model;
class KvCache;

// Items of one sequence within a chunk: chunk-relative indices, ascending.
using ForwardGroups = std::vector<std::pair<int32_t, std::vector<int64_t>>>;

class DeviceForward {
 public:
  virtual ~DeviceForward() = default;
  // Runs the decoder on tokens[T] at positions[T]. The caller has already reserved the KV slots with
  // KvCache::append_slots (each group's items are the last idx.size() slots of every layer of its sequence).
  // Writes the logits of the chunk-relative rows `rows` to out[rows.size(), n_vocab]. Throws Error on failure.
  virtual void forward_chunk(const int32_t *tokens, const int32_t *positions, int64_t T, const ForwardGroups &groups,
                             KvCache &kv, const std::vector<int64_t> &rows, float *out) = 0;
  virtual std::string describe() const = 0;
};

// The backend for a resolved device choice (kind cuda). Throws Error(unsupported) in a build without CUDA,
// Error(no_device) when the device or cuBLAS is unusable, Error(out_of_memory) when weights or KV do not fit.
std::unique_ptr<DeviceForward> make_device_forward(const Model &model, const KvCache &kv, const DeviceChoice &choice);

}  // namespace infokv
