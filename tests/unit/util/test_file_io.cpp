// Files as an embedding app hands them over: concurrent saves to one path, planted symlinks, failing writes, and
// paths that are not regular files (FIFOs, devices) or are too large to be a config. Each test names the probe
// finding of issue 17 it keeps fixed.
#include <gtest/gtest.h>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "config/config.hpp"
#include "infokv/infokv.h"
#include "util/byte_io.hpp"
#include "snapshot/snapshot.hpp"
#include "support/snapshot.hpp"
#include "support/paths.hpp"
#include "support/util.hpp"
#include "util/error.hpp"
#include "util/file_io.hpp"

namespace {

using infokv::Error;
using infokv::Status;

// A fresh empty directory, removed with its contents at the end.
class TempDir {
 public:
  TempDir() {
    std::string t = ::testing::TempDir() + "/infokv_fileio_XXXXXX";
    std::vector<char> buf(t.begin(), t.end());
    buf.push_back('\0');
    if (::mkdtemp(buf.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = buf.data();
  }
  ~TempDir() {
    ::chmod(path_.c_str(), 0755);
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string &path() const { return path_; }
  std::string operator/(const std::string &name) const { return path_ + "/" + name; }
  std::set<std::string> entries() const {
    std::set<std::string> out;
    if (DIR *d = ::opendir(path_.c_str())) {
      while (dirent *e = ::readdir(d))
        if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) out.insert(e->d_name);
      ::closedir(d);
    }
    return out;
  }

 private:
  std::string path_;
};

void write_text_file(const std::string &path, const std::string &text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
}

// ---- Bug 3: saves through a unique temporary ----

// Thread t writes (64 + 16 t) KiB of the byte 'a' + t in 4 KiB pieces; a complete file is exactly one writer's.
bool is_one_writers_output(const std::vector<uint8_t> &b, int n_threads) {
  if (b.empty()) return false;
  const int t = b[0] - 'a';
  if (t < 0 || t >= n_threads || b.size() != static_cast<size_t>(64 + 16 * t) * 1024) return false;
  for (uint8_t c : b)
    if (c != b[0]) return false;
  return true;
}

using Temp = infokv::AtomicFile::Temp;

void concurrent_sinks(Temp kind) {
  TempDir dir;
  const std::string path = dir / "out.bin";
  constexpr int kThreads = 4, kRounds = 25;
  std::atomic<int> failures{0};
  std::vector<std::string> messages(kThreads);
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&, t] {
      const std::vector<uint8_t> piece(4096, static_cast<uint8_t>('a' + t));
      for (int r = 0; r < kRounds; ++r) {
        try {
          infokv::snapshot::FileSink f(path, kind);
          for (int k = 0; k < 16 + 4 * t; ++k) f.write(piece.data(), piece.size());
          f.commit();
          // Whatever writer renamed last, the file under `path` is always someone's complete output.
          if (!is_one_writers_output(infokv_test::read_bytes(path), kThreads)) {
            ++failures;
            messages[t] = "a torn file after a save that returned";
          }
        } catch (const std::exception &e) {
          ++failures;
          messages[t] = e.what();
        }
      }
    });
  for (std::thread &th : ts) th.join();
  for (const std::string &m : messages) EXPECT_EQ(m, "");
  EXPECT_EQ(failures.load(), 0);
  EXPECT_TRUE(is_one_writers_output(infokv_test::read_bytes(path), kThreads));
  EXPECT_EQ(dir.entries(), std::set<std::string>{"out.bin"});  // no temporaries left behind
}

TEST(AtomicSave, ConcurrentFileSinksToOnePathLeaveOneWritersCompleteFile) { concurrent_sinks(Temp::automatic); }
TEST(AtomicSave, ConcurrentFileSinksWithNamedTemporariesToo) { concurrent_sinks(Temp::named); }

TEST(AtomicSave, ConcurrentSessionSavesToOnePathRestore) {
  ikv_model *model = nullptr;
  ASSERT_EQ(ikv_model_load(&model, infokv_test::stories_path().c_str()), IKV_OK) << ikv_last_error_message();
  TempDir dir;
  const std::string path = dir / "shared.ikvs";
  constexpr int kThreads = 4, kRounds = 12;
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&, t] {
      ikv_session *s = nullptr;
      if (ikv_session_create(&s, model, nullptr) != IKV_OK) {
        errors[t] = std::string("create: ") + ikv_last_error_message();
        return;
      }
      // Sessions of different lengths make files of different sizes: a torn file cannot pass the checksums.
      std::vector<int32_t> toks(static_cast<size_t>(8 + 24 * t), 1 + t);
      if (ikv_decode(s, 0, toks.data(), toks.size()) != IKV_OK) errors[t] = std::string("decode: ") + ikv_last_error_message();
      for (int r = 0; r < kRounds && errors[t].empty(); ++r) {
        if (ikv_session_save_file(s, 0, nullptr, path.c_str()) != IKV_OK) {
          errors[t] = std::string("save: ") + ikv_last_error_message();
          break;
        }
        size_t len = 0;
        const int32_t rc = ikv_snapshot_inspect(nullptr, 0, &len, path.c_str());
        if (rc != IKV_ERR_BUFFER_TOO_SMALL) errors[t] = std::string("inspect after a save: ") + ikv_last_error_message();
      }
      ikv_session_free(s);
    });
  for (std::thread &th : ts) th.join();
  for (const std::string &e : errors) EXPECT_EQ(e, "");
  ikv_session *fresh = nullptr;
  ASSERT_EQ(ikv_session_create(&fresh, model, nullptr), IKV_OK);
  size_t count = 0;
  EXPECT_EQ(ikv_session_restore_file(nullptr, 0, &count, fresh, nullptr, path.c_str()), IKV_OK) << ikv_last_error_message();
  EXPECT_EQ(count, 1u);
  EXPECT_EQ(dir.entries(), std::set<std::string>{"shared.ikvs"});
  ikv_session_free(fresh);
  ikv_model_free(model);
}

TEST(AtomicSave, APlantedSymlinkAtTheOldTemporaryNameIsNotFollowed) {
  for (Temp kind : {Temp::automatic, Temp::named}) {
    TempDir dir;
    const std::string path = dir / "snap.ikvs", victim = dir / "victim";
    write_text_file(victim, "precious");
    ASSERT_EQ(::symlink(victim.c_str(), (path + ".tmp").c_str()), 0);
    infokv::snapshot::FileSink f(path, kind);
    f.write("new", 3);
    f.commit();
    EXPECT_EQ(infokv_test::read_text(victim), "precious");
    EXPECT_EQ(infokv_test::read_text(path), "new");
    struct stat st {};
    ASSERT_EQ(::lstat(path.c_str(), &st), 0);
    EXPECT_TRUE(S_ISREG(st.st_mode));
    EXPECT_EQ(dir.entries(), (std::set<std::string>{"snap.ikvs", "snap.ikvs.tmp", "victim"}));
  }
}

// The name of a named temporary is random; every one is created with O_EXCL, so a name taken by anything (a
// link, a file of another writer) is never opened: the writer picks another.
TEST(AtomicSave, TemporaryNamesAreUnpredictableAndRecognisable) {
  TempDir dir;
  const std::string path = dir / "snap.ikvs";
  std::set<std::string> names;
  for (int i = 0; i < 8; ++i) {
    infokv::snapshot::FileSink f(path, Temp::named);
    for (const std::string &e : dir.entries())
      if (e != "snap.ikvs") {
        EXPECT_TRUE(infokv::AtomicFile::is_temp_of(e, "snap.ikvs")) << e;
        names.insert(e);
      }
  }
  EXPECT_EQ(names.size(), 8u);
  EXPECT_FALSE(infokv::AtomicFile::is_temp_of("snap.ikvs.tmp", "snap.ikvs"));
  EXPECT_FALSE(infokv::AtomicFile::is_temp_of(".other.ikvs.AAAAAAAAAAAA.tmp", "snap.ikvs"));
  EXPECT_TRUE(dir.entries().empty());
}

// A process killed in the middle of a save leaves no temporary where O_TMPFILE works (a named one elsewhere:
// the probe found temporaries of the file's size left by SIGKILL).
TEST(AtomicSave, AProcessKilledDuringASaveLeavesNothingBehind) {
  TempDir dir;
  const int probe = ::open(dir.path().c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
  if (probe < 0) GTEST_SKIP() << "no O_TMPFILE on " << dir.path();
  ::close(probe);
  const std::string path = dir / "killed.ikvs";
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    infokv::snapshot::FileSink f(path);
    const std::vector<uint8_t> piece(1 << 20, 9);
    for (int k = 0; k < 4; ++k) f.write(piece.data(), piece.size());
    ::kill(::getpid(), SIGKILL);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_TRUE(dir.entries().empty());
}

TEST(AtomicSave, ASymlinkAtTheDestinationIsReplacedNotItsTarget) {
  TempDir dir;
  const std::string path = dir / "snap.ikvs", victim = dir / "victim";
  write_text_file(victim, "precious");
  ASSERT_EQ(::symlink(victim.c_str(), path.c_str()), 0);
  infokv::snapshot::FileSink f(path);
  f.write("new", 3);
  f.commit();
  EXPECT_EQ(infokv_test::read_text(victim), "precious");
  EXPECT_EQ(infokv_test::read_text(path), "new");
}

TEST(AtomicSave, NewFilesGetTheUmaskModeLikeAnyNewFile) {
  TempDir dir;
  for (mode_t mask : {mode_t{022}, mode_t{077}, mode_t{002}}) {
    const mode_t old = ::umask(mask);
    const std::string path = dir / ("m" + std::to_string(mask));
    {
      infokv::snapshot::FileSink f(path);
      f.write("x", 1);
      f.commit();
    }
    ::umask(old);
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0666 & ~mask) << "umask " << std::oct << mask;
  }
}

void failed_saves(Temp kind) {
  TempDir dir;
  const std::string path = dir / "keep.bin";
  write_text_file(path, "old contents");
  {  // destroyed without commit (an exception between the writes and the commit)
    infokv::snapshot::FileSink f(path, kind);
    f.write("half", 4);
  }
  EXPECT_EQ(infokv_test::read_text(path), "old contents");
  EXPECT_EQ(dir.entries(), std::set<std::string>{"keep.bin"});

  // A write that fails (a file size limit: EFBIG) at some point in the stream or at the flush.
  struct rlimit old_lim {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_lim), 0);
  void (*old_handler)(int) = ::signal(SIGXFSZ, SIG_IGN);
  struct rlimit lim = old_lim;
  lim.rlim_cur = 64 * 1024;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &lim), 0);
  Status st = Status::ok;
  try {
    infokv::snapshot::FileSink f(path, kind);
    const std::vector<uint8_t> piece(16384, 7);
    for (int k = 0; k < 16; ++k) f.write(piece.data(), piece.size());
    f.commit();
  } catch (const Error &e) {
    st = e.status();
  }
  ::setrlimit(RLIMIT_FSIZE, &old_lim);
  ::signal(SIGXFSZ, old_handler);
  EXPECT_EQ(st, Status::io);
  EXPECT_EQ(infokv_test::read_text(path), "old contents");
  EXPECT_EQ(dir.entries(), std::set<std::string>{"keep.bin"});

  // A directory that cannot be written (root may write anywhere: checked only for others).
  if (::geteuid() != 0) {
    ASSERT_EQ(::chmod(dir.path().c_str(), 0555), 0);
    EXPECT_THROW(infokv::snapshot::FileSink f(path, kind), Error);
    ::chmod(dir.path().c_str(), 0755);
    EXPECT_EQ(infokv_test::read_text(path), "old contents");
    EXPECT_EQ(dir.entries(), std::set<std::string>{"keep.bin"});
  }
}

TEST(AtomicSave, AFailedOrAbandonedSaveKeepsTheOldFileAndLeavesNoTemporary) { failed_saves(Temp::automatic); }
TEST(AtomicSave, AFailedOrAbandonedSaveWithANamedTemporaryToo) { failed_saves(Temp::named); }

TEST(AtomicSave, CApiSaveIntoAMissingDirectoryOrOntoADirectoryFailsCleanly) {
  ikv_model *model = nullptr;
  ASSERT_EQ(ikv_model_load(&model, infokv_test::stories_path().c_str()), IKV_OK);
  ikv_session *s = nullptr;
  ASSERT_EQ(ikv_session_create(&s, model, nullptr), IKV_OK);
  const int32_t bos = 1;
  ASSERT_EQ(ikv_decode(s, 0, &bos, 1), IKV_OK);
  TempDir dir;
  EXPECT_EQ(ikv_session_save_file(s, 0, nullptr, (dir / "missing/x.ikvs").c_str()), IKV_ERR_IO);
  ASSERT_EQ(::mkdir((dir / "sub").c_str(), 0755), 0);
  EXPECT_EQ(ikv_session_save_file(s, 0, nullptr, (dir / "sub").c_str()), IKV_ERR_IO);  // rename onto a directory
  EXPECT_EQ(dir.entries(), std::set<std::string>{"sub"});
  ikv_session_free(s);
  ikv_model_free(model);
}

// ---- Only regular files ----

using Result = std::pair<int32_t, std::string>;  // a status and its message
Result capi_result(int32_t rc) { return {rc, ikv_last_error_message()}; }
Result config_file_result(const std::string &path) {
  try {
    infokv::config_from_file(path);
    return {IKV_OK, ""};
  } catch (const Error &e) {
    return {static_cast<int32_t>(e.status()), e.what()};
  }
}

// Runs `call` on another thread; if it is still blocked (on a FIFO's open or read) after a few seconds, the test
// fails and the FIFO is opened and closed for writing until the call returns, so a regression cannot hang the run.
Result call_unblocking(const std::string &fifo, const std::function<Result()> &call) {
  auto fut = std::async(std::launch::async, call);
  if (fut.wait_for(std::chrono::seconds(5)) == std::future_status::timeout) {
    ADD_FAILURE() << "blocked on the FIFO '" << fifo << "'";
    while (fut.wait_for(std::chrono::milliseconds(200)) == std::future_status::timeout) {
      const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
      if (fd >= 0) ::close(fd);
    }
  }
  return fut.get();
}

TEST(RegularFilesOnly, AFifoAsModelOrSnapshotIsRefusedPromptly) {
  TempDir dir;
  const std::string fifo = dir / "pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  ikv_model *m = nullptr;
  auto r = call_unblocking(fifo, [&] { return capi_result(ikv_model_load(&m, fifo.c_str())); });
  EXPECT_EQ(r.first, IKV_ERR_IO) << r.second;
  EXPECT_NE(r.second.find("not a regular file"), std::string::npos) << r.second;
  EXPECT_EQ(m, nullptr);

  ikv_model *model = nullptr;
  ASSERT_EQ(ikv_model_load(&model, infokv_test::stories_path().c_str()), IKV_OK);
  ikv_session *s = nullptr;
  ASSERT_EQ(ikv_session_create(&s, model, nullptr), IKV_OK);
  size_t count = 0;
  int32_t ids[4];
  r = call_unblocking(fifo, [&] { return capi_result(ikv_session_restore_file(ids, 4, &count, s, nullptr, fifo.c_str())); });
  EXPECT_EQ(r.first, IKV_ERR_IO) << r.second;
  EXPECT_NE(r.second.find("not a regular file"), std::string::npos) << r.second;
  size_t len = 0;
  r = call_unblocking(fifo, [&] { return capi_result(ikv_snapshot_inspect(nullptr, 0, &len, fifo.c_str())); });
  EXPECT_EQ(r.first, IKV_ERR_IO) << r.second;
  r = call_unblocking(fifo, [&] { return capi_result(ikv_session_restore_file(ids, 4, &count, s, nullptr, "/dev/zero")); });
  EXPECT_EQ(r.first, IKV_ERR_IO) << r.second;
  r = call_unblocking(fifo, [&] { return capi_result(ikv_session_restore_file(ids, 4, &count, s, nullptr, dir.path().c_str())); });
  EXPECT_EQ(r.first, IKV_ERR_IO) << r.second;
  r = call_unblocking(fifo, [&] { return capi_result(ikv_model_load(&m, "/dev/zero")); });
  EXPECT_EQ(r.first, IKV_ERR_IO) << r.second;
  ikv_session_free(s);
  ikv_model_free(model);
}

TEST(RegularFilesOnly, ConfigFilesMustBeRegularAndAtMost16MiB) {
  TempDir dir;
  const std::string fifo = dir / "cfg";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  Result r = call_unblocking(fifo, [&] { return config_file_result(fifo); });
  EXPECT_EQ(r.first, IKV_ERR_IO) << r.second;
  EXPECT_NE(r.second.find("not a regular file"), std::string::npos) << r.second;
  r = call_unblocking(fifo, [&] { return config_file_result("/dev/zero"); });
  EXPECT_EQ(r.first, IKV_ERR_IO) << r.second;
  EXPECT_NE(r.second.find("not a regular file"), std::string::npos) << r.second;

  const std::string big = dir / "big.json";  // sparse: no disk is spent
  write_text_file(big, "{}");
  ASSERT_EQ(::truncate(big.c_str(), infokv::kMaxConfigFileBytes + 1), 0);
  r = config_file_result(big);
  EXPECT_EQ(r.first, IKV_ERR_IO) << r.second;
  EXPECT_NE(r.second.find("larger than the limit of 16777216 bytes"), std::string::npos) << r.second;

  const std::string ok = dir / "ok.json";
  write_text_file(ok, R"({"threads": 3})");
  EXPECT_EQ(infokv::config_from_file(ok).session.n_threads, 3);
  const std::string bin = dir / "ok.ikvc";
  infokv::Config c;
  c.session.n_threads = 5;
  const std::vector<uint8_t> b = infokv::config_to_binary(c);
  write_text_file(bin, std::string(b.begin(), b.end()));
  EXPECT_EQ(infokv::config_from_file(bin).session.n_threads, 5);
  r = config_file_result(dir / "missing.json");
  EXPECT_EQ(r.first, IKV_ERR_IO) << r.second;
  write_text_file(ok, R"({"threads": "x"})");
  EXPECT_EQ(config_file_result(ok).first, IKV_ERR_BAD_CONFIG);
}

#ifdef INFOKV_CLI_PATH
TEST(RegularFilesOnly, CliRefusesAFifoOrADeviceAsConfig) {
  TempDir dir;
  const std::string fifo = dir / "cfg";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // `timeout` bounds a regression; 124 would be its status.
  for (const std::string &cfg : {fifo, std::string("/dev/zero")}) {
    const infokv_test::CommandOutput r = infokv_test::run_command(
        "timeout 10 " + std::string(INFOKV_CLI_PATH) + " generate --config '" + cfg + "' --prompt x --max-tokens 1 2>&1");
    ASSERT_TRUE(WIFEXITED(r.status)) << r.out;
    EXPECT_NE(WEXITSTATUS(r.status), 124) << "hung on " << cfg;
    EXPECT_NE(WEXITSTATUS(r.status), 0) << r.out;
    EXPECT_NE(r.out.find("not a regular file"), std::string::npos) << r.out;
  }
}
#endif

// ---- Restore checks the pool before reading the bulk ----

// Counts the bytes a restore pulls from a snapshot in memory.
class CountingSource : public infokv::snapshot::ByteSource {
 public:
  CountingSource(const void *p, size_t n) : src_(p, n) {}
  size_t read(void *p, size_t n) override {
    const size_t k = src_.read(p, n);
    read_ += k;
    return k;
  }
  int64_t remaining() const override { return src_.remaining(); }
  size_t bytes_read() const { return read_; }

 private:
  infokv::snapshot::MemorySource src_;
  size_t read_ = 0;
};

TEST(RestoreCapacity, ASnapshotTooLargeForThePoolIsRefusedBeforeItsBulkIsRead) {
  const auto model = infokv_test::stories_model();
  infokv::Session big(model, infokv_test::session_opts());
  const int32_t seq = big.add_sequence();
  std::vector<infokv::BatchToken> b;
  for (int i = 0; i < 200; ++i) b.push_back({seq, 1 + i % 50, false});
  big.decode(b);
  infokv::snapshot::VectorSink out;
  infokv::snapshot::save(big, seq, nullptr, out);
  const std::vector<uint8_t> &bytes = out.bytes();

  infokv::SessionOptions o = infokv_test::session_opts();
  o.kv_pool_blocks = 8;  // 200 tokens in 5 layers need 65 blocks of 16
  infokv::Session small(model, o);
  CountingSource src(bytes.data(), bytes.size());
  try {
    infokv::snapshot::restore(small, nullptr, src);
    ADD_FAILURE() << "restored into a pool that is too small";
  } catch (const Error &e) {
    EXPECT_EQ(e.status(), Status::kv_full) << e.what();
  }
  EXPECT_LT(src.bytes_read(), bytes.size() / 4) << "of " << bytes.size() << " bytes";
  EXPECT_EQ(small.kv().free_blocks(), 8);
}

}  // namespace
