// libFuzzer target for tuning profiles (schemas/profile.fbs): profile_from_bytes on every input. Any infokv::Error
// is fine; a crash or a sanitizer report is a bug. A profile that reads must write, re-read to the same bytes, and
// survive a refinement (the counters it carries saturate instead of overflowing).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "compress/auto_policy.hpp"
#include "compress/profile.hpp"
#include "util/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  try {
    infokv::TuningProfile p = infokv::profile_from_bytes(data, size);
    const std::string b = infokv::profile_to_bytes(p);
    const infokv::TuningProfile q = infokv::profile_from_bytes(b.data(), b.size());
    if (infokv::profile_to_bytes(q) != b) std::abort();  // a profile that reads writes back what it read
    // One auto compression folded in, as a session would: the result must still be a valid profile.
    infokv::AutoReport r;
    r.layers.resize(p.layers.size());
    int64_t kept = 0;
    for (size_t l = 0; l < r.layers.size(); ++l) {
      r.layers[l].budget = static_cast<int32_t>(8 + l);
      kept += r.layers[l].budget;
    }
    r.uniform_tokens = kept;
    p.refine(r);
    p.validate();
    const std::string c = infokv::profile_to_bytes(p);
    (void)infokv::profile_from_bytes(c.data(), c.size());
  } catch (const infokv::Error &e) {
    if (e.status() == infokv::Status::internal) std::abort();
  }
  return 0;
}
