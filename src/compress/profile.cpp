#include "compress/profile.hpp"

#include <algorithm>
#include <cstring>
#include <cmath>
#include <xxhash.h>

#include "infokv_fb/profile_generated.h"
#include "util/error.hpp"
#include "util/file_io.hpp"
#include "util/limits.hpp"

namespace infokv {

namespace fbp = ::infokv::prof;

namespace {

[[noreturn]] void bad(const std::string &m) { fail(Status::bad_config, "tuning profile: " + m); }

bool finite_nonneg(double v) { return std::isfinite(v) && v >= 0; }

}  // namespace

TuningProfile TuningProfile::empty(uint64_t weights_fp, uint64_t tokenizer_fp, int32_t n_layer) {
  if (n_layer <= 0 || n_layer > kProfileMaxLayers) bad("layer count " + std::to_string(n_layer) + " outside 1.." + std::to_string(kProfileMaxLayers));
  TuningProfile p;
  p.weights_fingerprint = weights_fp;
  p.tokenizer_fingerprint = tokenizer_fp;
  p.layers.resize(static_cast<size_t>(n_layer));
  return p;
}

bool TuningProfile::refine(const AutoReport &r) {
  if (r.uniform_tokens <= 0 || r.layers.size() != layers.size() || layers.empty()) return false;
  const double uniform = static_cast<double>(r.uniform_tokens) / static_cast<double>(layers.size());
  const double n = static_cast<double>(compressions);
  for (size_t l = 0; l < layers.size(); ++l) {
    const AutoLayerChoice &c = r.layers[l];
    const double s = static_cast<double>(c.budget) / uniform;
    layers[l].share = (layers[l].share * n + s) / (n + 1.0);
    const auto e = static_cast<int32_t>(c.evidence);
    if (e >= 0 && e < kEvidenceKinds && compressions < kProfileMaxCompressions) ++layers[l].evidence[static_cast<size_t>(e)];
  }
  if (compressions < kProfileMaxCompressions) ++compressions;
  return true;
}

double TuningProfile::floor_factor(size_t layer) const {
  if (compressions <= 0 || layer >= layers.size()) return 1.0;
  return std::clamp(layers[layer].share, 0.5, 1.5);
}

void TuningProfile::validate() const {
  if (layers.empty() || layers.size() > static_cast<size_t>(kProfileMaxLayers))
    bad("layers: " + std::to_string(layers.size()) + " layers, expected 1.." + std::to_string(kProfileMaxLayers));
  if (compressions < 0 || compressions > kProfileMaxCompressions)
    bad("compressions = " + std::to_string(compressions) + " is outside 0.." + std::to_string(kProfileMaxCompressions));
  for (size_t l = 0; l < layers.size(); ++l) {
    const ProfileLayer &L = layers[l];
    if (!finite_nonneg(L.share) || L.share > 1e6) bad("layers[" + std::to_string(l) + "].share is not a finite value in [0, 1e6]");
    for (size_t e = 0; e < L.evidence.size(); ++e)
      if (L.evidence[e] < 0 || L.evidence[e] > compressions)
        bad("layers[" + std::to_string(l) + "].evidence_counts[" + std::to_string(e) + "] = " + std::to_string(L.evidence[e]) +
            " is outside 0..compressions (" + std::to_string(compressions) + ")");
  }
  for (size_t i = 0; i < calibration.size(); ++i)
    if (!finite_nonneg(calibration[i].max_loss) || !finite_nonneg(calibration[i].kl))
      bad("calibration[" + std::to_string(i) + "] is not finite and non-negative");
  if (tuned_begin < 0 || tuned_end < tuned_begin) bad("tuned range [" + std::to_string(tuned_begin) + ", " + std::to_string(tuned_end) + ") is invalid");
  if (static_cast<int64_t>(tag.size()) > limits::max_tag_bytes)
    bad("tag is longer than " + std::to_string(limits::max_tag_bytes) + " bytes");
}

std::string profile_to_bytes(const TuningProfile &p) {
  p.validate();
  flatbuffers::FlatBufferBuilder b(1024);
  std::vector<flatbuffers::Offset<fbp::ProfileLayer>> layers;
  for (const ProfileLayer &L : p.layers) {
    const auto counts = b.CreateVector(std::vector<int64_t>(L.evidence.begin(), L.evidence.end()));
    layers.push_back(fbp::CreateProfileLayer(b, static_cast<float>(L.share), counts));
  }
  const auto lv = b.CreateVector(layers);
  std::vector<fbp::CalibrationPoint> cal;
  for (const CalibrationPoint &c : p.calibration) cal.emplace_back(c.max_loss, c.kl);
  const auto cv = b.CreateVectorOfStructs(cal);
  const auto tag = b.CreateString(p.tag);
  const auto file = b.CreateString(p.tuned_file);
  fbp::ProfileBuilder pb(b);
  pb.add_format_version(kProfileFormatVersion);
  pb.add_min_reader_version(1);
  pb.add_weights_fingerprint(p.weights_fingerprint);
  pb.add_tokenizer_fingerprint(p.tokenizer_fingerprint);
  pb.add_tag(tag);
  pb.add_layers(lv);
  pb.add_compressions(p.compressions);
  pb.add_calibration(cv);
  pb.add_tuned_file(file);
  pb.add_tuned_text_xxh3(p.tuned_text_xxh3);
  pb.add_tuned_begin(p.tuned_begin);
  pb.add_tuned_end(p.tuned_end);
  b.Finish(pb.Finish(), fbp::ProfileIdentifier());
  return std::string(reinterpret_cast<const char *>(b.GetBufferPointer()), b.GetSize());
}

TuningProfile profile_from_bytes(const void *data, size_t size) {
  if (data == nullptr || size < 8) bad("empty or truncated (" + std::to_string(size) + " bytes)");
  if (size > static_cast<size_t>(kProfileMaxBytes)) bad("larger than " + std::to_string(kProfileMaxBytes) + " bytes");
  // The verifier wants the buffer aligned; a caller's bytes may not be.
  std::vector<uint8_t> copy(static_cast<const uint8_t *>(data), static_cast<const uint8_t *>(data) + size);
  if (!flatbuffers::BufferHasIdentifier(copy.data(), fbp::ProfileIdentifier())) bad("not an infokv tuning profile (identifier is not IKVP)");
  flatbuffers::Verifier v(copy.data(), copy.size());
  if (!fbp::VerifyProfileBuffer(v)) bad("fails the FlatBuffers verifier (truncated or corrupted)");
  const fbp::Profile *f = fbp::GetProfile(copy.data());
  if (f->min_reader_version() > kProfileFormatVersion)
    fail(Status::version, "tuning profile needs reader version " + std::to_string(f->min_reader_version()) + "; this one reads " +
                              std::to_string(kProfileFormatVersion));
  if (f->format_version() < 1) bad("format_version " + std::to_string(f->format_version()) + " is not a version");
  TuningProfile p;
  p.weights_fingerprint = f->weights_fingerprint();
  p.tokenizer_fingerprint = f->tokenizer_fingerprint();
  if (f->tag() != nullptr) p.tag = f->tag()->str();
  if (f->layers() == nullptr) bad("no layers");
  if (f->layers()->size() > static_cast<flatbuffers::uoffset_t>(kProfileMaxLayers)) bad("more than " + std::to_string(kProfileMaxLayers) + " layers");
  for (flatbuffers::uoffset_t l = 0; l < f->layers()->size(); ++l) {
    const fbp::ProfileLayer *fl = f->layers()->Get(l);
    ProfileLayer L;
    L.share = fl->share();
    if (fl->evidence_counts() != nullptr) {
      // Counts of evidence kinds this reader does not know are dropped; missing ones are 0.
      // Read element by element through memcpy: the verifier (FlatBuffers 2.0) checks a vector's alignment only to 4
      // bytes, so a damaged file can place these 8-byte counts off their alignment.
      const auto *c = fl->evidence_counts();
      for (flatbuffers::uoffset_t e = 0; e < c->size(); ++e) {
        int64_t v = 0;
        std::memcpy(&v, c->Data() + static_cast<size_t>(e) * sizeof(int64_t), sizeof v);
        v = flatbuffers::EndianScalar(v);
        if (v < 0) bad("layers[" + std::to_string(l) + "].evidence_counts[" + std::to_string(e) + "] is negative");
        if (e < static_cast<flatbuffers::uoffset_t>(kEvidenceKinds)) L.evidence[e] = v;
      }
    }
    p.layers.push_back(L);
  }
  p.compressions = f->compressions();
  if (f->calibration() != nullptr)
    for (flatbuffers::uoffset_t i = 0; i < f->calibration()->size(); ++i) {
      // As above: the structs' doubles may sit off their 8-byte alignment in a damaged file.
      double xy[2] = {0, 0};
      std::memcpy(xy, f->calibration()->Data() + static_cast<size_t>(i) * sizeof(fbp::CalibrationPoint), sizeof xy);
      p.calibration.push_back({flatbuffers::EndianScalar(xy[0]), flatbuffers::EndianScalar(xy[1])});
    }
  if (f->tuned_file() != nullptr) p.tuned_file = f->tuned_file()->str();
  p.tuned_text_xxh3 = f->tuned_text_xxh3();
  p.tuned_begin = f->tuned_begin();
  p.tuned_end = f->tuned_end();
  p.validate();
  return p;
}

void save_profile(const TuningProfile &p, const std::string &path) {
  const std::string bytes = profile_to_bytes(p);
  AtomicFile f(path);
  f.write(bytes.data(), bytes.size());
  f.commit();
}

TuningProfile load_profile(const std::string &path) {
  const std::string bytes = read_regular_file(path, kProfileMaxBytes, "tuning profile");
  try {
    return profile_from_bytes(bytes.data(), bytes.size());
  } catch (const Error &e) {
    fail(e.status(), path + ": " + e.what());
  }
}

uint64_t profile_text_hash(const std::string &text) { return XXH3_64bits(text.data(), text.size()); }

}  // namespace infokv
