// I/O fault injection (util/fault_injection.hpp): for every N, the Nth write, fsync or rename of a snapshot save
// fails, and the Nth read of a restore. Each run must give Error(io), leak no temporary file and no descriptor, and
// leave state intact: the destination is still the old file, the session exactly as before the restore.
#include <gtest/gtest.h>

#include <dirent.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "sampling/sampler.hpp"
#include "session/session.hpp"
#include "util/byte_io.hpp"
#include "snapshot/snapshot.hpp"
#include "support/snapshot.hpp"
#include "support/util.hpp"
#include "util/error.hpp"
#include "util/fault_injection.hpp"

namespace fs = std::filesystem;
using infokv::AtomicFile;
using infokv::Error;
using infokv::Session;
using infokv::Status;
namespace fault = infokv::fault;
namespace snapshot = infokv::snapshot;

namespace {

int open_fds() {
  int n = 0;
  if (DIR *d = ::opendir("/proc/self/fd")) {
    while (::readdir(d) != nullptr) ++n;
    ::closedir(d);
  }
  return n;
}

std::vector<std::string> entries(const fs::path &dir) {
  std::vector<std::string> v;
  for (const auto &e : fs::directory_iterator(dir)) v.push_back(e.path().filename().string());
  std::sort(v.begin(), v.end());
  return v;
}

struct Disarm {
  ~Disarm() { fault::disarm_all(); }
};

// A session with one decoded sequence of `n` prompt tokens.
std::unique_ptr<Session> session_with(int n, int32_t *seq) {
  auto s = std::make_unique<Session>(infokv_test::stories_model(), infokv_test::session_opts());
  *seq = s->add_sequence();
  std::vector<int32_t> p = infokv_test::story_prompt(s->model());
  p.resize(std::min<size_t>(p.size(), static_cast<size_t>(n)));
  std::vector<infokv::BatchToken> batch;
  for (int32_t t : p) batch.push_back({*seq, t, false});
  s->decode(batch);
  return s;
}

TEST(IoFaults, EveryFailedWriteFsyncOrRenameOfASaveLeavesTheOldFileAndNothingElse) {
  Disarm guard;
  int32_t seq = 0;
  auto s = session_with(20, &seq);
  const fs::path dir = fs::temp_directory_path() / ("infokv_faults_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string dest = (dir / "snap.ikvs").string();
  {  // the old file: a snapshot of a shorter sequence
    int32_t q = 0;
    auto old = session_with(3, &q);
    snapshot::save_file(*old, q, nullptr, dest);
  }
  const std::vector<uint8_t> old_bytes = infokv_test::read_bytes(dest);
  const std::vector<std::string> old_entries = entries(dir);
  // Save through both kinds of temporary: O_TMPFILE (save_file) and the named fallback.
  for (AtomicFile::Temp temp : {AtomicFile::Temp::automatic, AtomicFile::Temp::named}) {
    auto save = [&] {
      snapshot::FileSink sink(dest, temp);
      snapshot::save(*s, seq, nullptr, sink);
      sink.commit();
    };
    for (fault::Op op : {fault::Op::write, fault::Op::fsync, fault::Op::rename}) {
      int64_t failures = 0;
      for (int64_t n = 1;; ++n) {
        SCOPED_TRACE("temp " + std::to_string(static_cast<int>(temp)) + ", op " + std::to_string(static_cast<int>(op)) +
                     ", call " + std::to_string(n));
        const int fds = open_fds();
        fault::arm(op, n);
        Status st = Status::ok;
        std::string msg;
        try {
          save();
        } catch (const Error &e) {
          st = e.status();
          msg = e.what();
        }
        const int64_t seen = fault::calls(op);
        fault::disarm_all();
        if (seen < n) {  // fewer calls than n: nothing was injected, so the save went through
          EXPECT_EQ(st, Status::ok) << msg;
          break;
        }
        ++failures;
        EXPECT_EQ(st, Status::io) << msg;
        EXPECT_EQ(infokv_test::read_bytes(dest), old_bytes);
        EXPECT_EQ(entries(dir), old_entries);  // no temporary left behind
        EXPECT_EQ(open_fds(), fds);
        ASSERT_LT(n, 10000) << "runaway";
      }
      EXPECT_GE(failures, 1);
      // The save that went through replaced the file; put the old one back for the next op.
      EXPECT_NE(infokv_test::read_bytes(dest), old_bytes);
      std::ofstream(dest, std::ios::binary | std::ios::trunc)
          .write(reinterpret_cast<const char *>(old_bytes.data()), static_cast<std::streamsize>(old_bytes.size()));
      ASSERT_EQ(infokv_test::read_bytes(dest), old_bytes);
    }
  }
  fs::remove_all(dir);
}

// A scratch file (the engine's spill files) is renamed into place whole but never synced: a failing fsync cannot
// touch it, while a durable one reports it and leaves nothing.
TEST(IoFaults, AScratchFileIsWrittenWholeWithoutSyncing) {
  Disarm disarm;
  const fs::path dir = fs::temp_directory_path() / ("infokv-scratch-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string bytes(100000, 'z');
  for (const auto sync : {infokv::AtomicFile::Sync::scratch, infokv::AtomicFile::Sync::durable}) {
    const std::string path = (dir / "f").string();
    fault::arm(fault::Op::fsync, 1);
    bool threw = false;
    try {
      infokv::FileSink out(path, infokv::AtomicFile::Temp::automatic, sync);
      out.write(bytes.data(), bytes.size());
      out.commit();
    } catch (const Error &e) {
      threw = true;
      EXPECT_EQ(e.status(), Status::io);
    }
    const int64_t fsyncs = fault::calls(fault::Op::fsync);
    fault::disarm_all();
    if (sync == infokv::AtomicFile::Sync::scratch) {
      EXPECT_FALSE(threw);
      EXPECT_EQ(fsyncs, 0);
      EXPECT_EQ(infokv_test::read_bytes(path).size(), bytes.size());
      fs::remove(path);
    } else {
      EXPECT_TRUE(threw);
      EXPECT_FALSE(fs::exists(path));
    }
    EXPECT_TRUE(entries(dir).empty());  // no temporary left
  }
  fs::remove_all(dir);
}

TEST(IoFaults, EveryFailedReadOfARestoreLeavesTheSessionUnchanged) {
  Disarm guard;
  int32_t seq = 0;
  auto src = session_with(20, &seq);
  const fs::path path = fs::temp_directory_path() / ("infokv_faults_r_" + std::to_string(::getpid()) + ".ikvs");
  snapshot::save_file(*src, -1, nullptr, path.string());

  int32_t mine = 0;
  auto s = session_with(5, &mine);
  infokv::Sampler sampler(infokv::SamplerParams{});
  const std::vector<float> logits = s->logits(mine);
  const infokv::KvStats before = s->kv_stats();
  int64_t failures = 0;
  for (int64_t n = 1;; ++n) {
    SCOPED_TRACE("read " + std::to_string(n));
    const int fds = open_fds();
    fault::arm(fault::Op::read, n);
    Status st = Status::ok;
    std::string msg;
    std::vector<int32_t> ids;
    try {
      ids = snapshot::restore_file(*s, &sampler, path.string());
    } catch (const Error &e) {
      st = e.status();
      msg = e.what();
    }
    const int64_t seen = fault::calls(fault::Op::read);
    fault::disarm_all();
    EXPECT_EQ(open_fds(), fds);
    if (seen < n) {
      EXPECT_EQ(st, Status::ok) << msg;
      EXPECT_EQ(ids.size(), 1u);
      break;
    }
    ++failures;
    EXPECT_EQ(st, Status::io) << msg;
    EXPECT_EQ(s->sequence_count(), 1);
    const infokv::KvStats now = s->kv_stats();
    EXPECT_EQ(now.blocks_used, before.blocks_used);
    EXPECT_EQ(now.host_bytes, before.host_bytes);
    EXPECT_EQ(s->logits(mine), logits);
    s->kv().check_invariants();
    ASSERT_LT(n, 100000) << "runaway";
  }
  EXPECT_GE(failures, 3);
  fs::remove(path);
}

}  // namespace
