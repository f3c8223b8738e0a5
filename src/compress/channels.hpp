// The slot channels' meanings (the cache keeps kSlotChannels anonymous float channels per cached token and moves
// them with it): what the compressor records from each step's observations (Compressor::observe) and its scorers read.
#pragma once
#include "kv/kv_cache.hpp"

namespace infokv {

enum SlotChannel : int {
  kChanAttnSum = 0,    // H2O: attention the token received from every later query, summed
  kChanAttnCount = 1,  // H2O: how many queries could see it
  kChanEntropy = 2,    // InfoKV: entropy (nats) of the distribution that predicted it (0 for position 0)
  kChanRepChange = 3,  // InfoKV: 1 - cos(h_l, h_L), the representation change of its layer against the last
};
static_assert(kChanRepChange + 1 == kSlotChannels, "every slot channel has a meaning");

}  // namespace infokv
