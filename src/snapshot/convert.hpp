// Conversions between core types and their snapshot schema forms.
#pragma once
#include <cstdint>

#include <flatbuffers/flatbuffers.h>

#include "compress/policy.hpp"
#include "infokv_fb/snapshot_generated.h"
#include "kernels/ops.hpp"

namespace infokv {
namespace snapshot {
namespace fb = ::infokv::snap;

flatbuffers::Offset<fb::CompressionParams> to_fb(flatbuffers::FlatBufferBuilder &b, const CompressionConfig &c);
// Null gives the defaults; unknown enum values (a newer writer) are kept as 'none'/'uniform' for display.
CompressionConfig from_fb(const fb::CompressionParams *p);

// Element conversion for K/V between cache dtypes (cpu::convert: through f32, identical dtypes copied bit for bit;
// n_elems a multiple of kKvQuantBlock where either dtype is quantised).
void convert_rows(uint8_t *dst, KvDtype dst_t, const uint8_t *src, KvDtype src_t, int64_t n_elems);

}  // namespace snapshot
}  // namespace infokv
