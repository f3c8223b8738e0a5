// A tuning profile: what the `auto` policy learned on one workload, for one model — each layer's mean
// share of the uniform budget and how often each evidence ranked it, plus calibration points (proxy-loss target ->
// KL measured by `infokv tune`). A session with a profile starts each byte-budget compression from the profile's
// layer shape (Compressor::plan_auto) and refines the profile from every auto compression it applies.
// File format: schemas/profile.fbs (FlatBuffers, identifier IKVP).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "compress/auto_policy.hpp"
#include "util/limits.hpp"

namespace infokv {

constexpr int32_t kProfileFormatVersion = 1;
constexpr int32_t kProfileMaxLayers = limits::max_layers;
constexpr int64_t kProfileMaxBytes = int64_t{64} << 20;
// The most compressions a profile counts (2^40): a loaded profile above it is refused, and refining one at it keeps
// averaging the shares but counts no further (a counter near INT64_MAX overflowed the running mean's arithmetic).
constexpr int64_t kProfileMaxCompressions = int64_t{1} << 40;

struct ProfileLayer {
  double share = 1.0;                                // mean of budget / uniform budget over the compressions seen
  std::array<int64_t, kEvidenceKinds> evidence{};    // how often each Evidence ranked the layer
};

struct CalibrationPoint {
  double max_loss = 0;
  double kl = 0;
};

struct TuningProfile {
  uint64_t weights_fingerprint = 0;
  uint64_t tokenizer_fingerprint = 0;
  std::string tag;
  std::vector<ProfileLayer> layers;
  int64_t compressions = 0;
  std::vector<CalibrationPoint> calibration;
  std::string tuned_file;
  uint64_t tuned_text_xxh3 = 0;
  int64_t tuned_begin = 0, tuned_end = 0;

  // An empty profile for a model of n_layer layers (shares 1, no counts).
  static TuningProfile empty(uint64_t weights_fp, uint64_t tokenizer_fp, int32_t n_layer);
  // Folds one byte-budget auto compression in: each layer's budget / (uniform_tokens / n_layer) into the running
  // mean of its share, its evidence counted, compressions + 1 (saturating at kProfileMaxCompressions). A report
  // without a uniform budget (a quality target) or of another layer count changes nothing and returns false.
  bool refine(const AutoReport &r);
  // The layer's floor factor for plan_auto: its share clamped to [0.5, 1.5] (1 before any compression).
  double floor_factor(size_t layer) const;
  // Checks every semantic rule schemas/profile.fbs lists; throws Error(bad_config) naming the field.
  void validate() const;
};

// The profile's FlatBuffer bytes, and back. from_bytes verifies (identifier, FlatBuffers verifier, versions,
// validate()) and throws Error(bad_config) or Error(version) with a message; it never crashes on any input.
std::string profile_to_bytes(const TuningProfile &p);
TuningProfile profile_from_bytes(const void *data, size_t size);
// Files: save is atomic (AtomicFile); load throws Error(io) for the file and as from_bytes for its content.
void save_profile(const TuningProfile &p, const std::string &path);
TuningProfile load_profile(const std::string &path);
// XXH3-64 of a text, as recorded in tuned_text_xxh3.
uint64_t profile_text_hash(const std::string &text);

}  // namespace infokv
