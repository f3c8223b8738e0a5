// The engine's spill directory (src/engine/spill_dir.hpp): its own, 0700, locked while it lives, gone with it; and
// the directories of engines that died (a lock file nobody holds) removed by the next one that starts beside them,
// while a live engine's, a directory being made (no lock file yet), another program's and other users' names stay.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "engine/spill_dir.hpp"
#include "support/random_inputs.hpp"
#include "util/error.hpp"

namespace fs = std::filesystem;
using infokv::SpillDir;

namespace {

fs::path fresh_parent(const char *tag) {
  const fs::path p = fs::temp_directory_path() / ("infokv-spilltest-" + std::string(tag) + "-" +
                                                  std::to_string(::getpid()) + "-" + std::to_string(infokv_test::test_seed()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

void touch(const fs::path &p) { std::ofstream(p) << "x"; }

TEST(SpillDir, IsItsOwnLockedPrivateDirectoryAndGoesWithIt) {
  const fs::path parent = fresh_parent("own");
  std::string path;
  {
    SpillDir a(parent.string(), "engine-");
    SpillDir b(parent.string(), "engine-");
    path = a.path();
    EXPECT_NE(a.path(), b.path());
    EXPECT_EQ(fs::path(path).parent_path(), parent);
    EXPECT_EQ(fs::path(path).filename().string().rfind("engine-", 0), 0u);
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    // held: another open of its lock cannot take it, and a sweep leaves both alone
    const int fd = ::open((fs::path(path) / ".lock").c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    EXPECT_NE(::flock(fd, LOCK_EX | LOCK_NB), 0);
    ::close(fd);
    EXPECT_EQ(SpillDir::sweep(parent.string(), "engine-"), 0);
    EXPECT_TRUE(fs::exists(a.path()));
    EXPECT_TRUE(fs::exists(b.path()));
    touch(fs::path(path) / "conv-1.ikvs");
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_TRUE(fs::is_empty(parent));
  fs::remove_all(parent);
}

TEST(SpillDir, AKilledEnginesDirectoryIsRemovedByTheNextAndNothingElseIs) {
  const fs::path parent = fresh_parent("sweep");
  // A process that makes its directory, writes a spill file and dies without running any destructor (as SIGKILL).
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(pipefd[0]);
    auto *d = new SpillDir(parent.string(), "engine-");  // never destroyed
    touch(fs::path(d->path()) / "conv-7.ikvs");
    const std::string p = d->path();
    if (::write(pipefd[1], p.data(), p.size()) < 0) ::_exit(2);
    ::_exit(0);
  }
  ::close(pipefd[1]);
  char buf[4096];
  const ssize_t got = ::read(pipefd[0], buf, sizeof buf);
  ::close(pipefd[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_GT(got, 0);
  const fs::path dead(std::string(buf, static_cast<size_t>(got)));
  ASSERT_TRUE(fs::exists(dead / "conv-7.ikvs"));
  // Beside it: a directory being made (no lock file yet), a plain file, another program's directories (a `.lock`
  // without our marker, a name that is not ours, one not private), and a copy of the dead one's lock elsewhere.
  auto private_dir = [](const fs::path &p) {
    fs::create_directory(p);
    fs::permissions(p, fs::perms::owner_all, fs::perm_options::replace);
  };
  private_dir(parent / "engine-12345678");
  touch(parent / "engine-abcdef01");
  private_dir(parent / "engine-0badc0de");
  touch(parent / "engine-0badc0de" / ".lock");
  private_dir(parent / "engine-v2");
  fs::copy_file(dead / ".lock", parent / "engine-v2" / ".lock");
  private_dir(parent / "engine-fedcba98");
  fs::copy_file(dead / ".lock", parent / "engine-fedcba98" / ".lock");
  fs::permissions(parent / "engine-fedcba98", fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec,
                  fs::perm_options::replace);
  fs::create_directory(parent / "other-dir");
  private_dir(parent / "other-dir" / "engine-87654321");
  fs::copy_file(dead / ".lock", parent / "other-dir" / "engine-87654321" / ".lock");
  {
    SpillDir live(parent.string(), "engine-");
    EXPECT_FALSE(fs::exists(dead)) << "the dead engine's directory stays";
    for (const char *kept : {"engine-12345678", "engine-abcdef01", "engine-0badc0de", "engine-v2", "engine-fedcba98",
                             "other-dir/engine-87654321"})
      EXPECT_TRUE(fs::exists(parent / kept)) << kept;
    EXPECT_EQ(SpillDir::sweep(parent.string(), "engine-"), 0);
    EXPECT_TRUE(fs::exists(live.path()));
  }
  fs::remove_all(parent);
}

TEST(SpillDir, AParentThatCannotHoldItIsAnIoError) {
  const fs::path parent = fresh_parent("bad");
  touch(parent / "not-a-dir");
  try {
    SpillDir d((parent / "not-a-dir").string(), "engine-");
    FAIL() << "made a directory under a file";
  } catch (const infokv::Error &e) {
    EXPECT_EQ(e.status(), infokv::Status::io);
  }
  fs::remove_all(parent);
}

}  // namespace
