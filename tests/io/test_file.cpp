// mixtrain/io/file.h: atomic writes (nothing half-written, nothing followed, nothing left behind),
// the cleanup of a killed writer's temporaries, and reads that refuse FIFOs and directories without
// blocking.
#include "mixtrain/io/file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "data/file_helpers.h"
#include "support/expect_error.h"

namespace mt = mixtrain;
using mt::testing::TempDir;

namespace {

// A pid that ran and has exited (reaped), so no process has it for now.
pid_t dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return pid;
}

bool has_temp_file(const TempDir& dir) {
  for (const std::string& name : dir.entries())
    if (mt::io::is_temp_file_name(name)) return true;
  return false;
}

}  // namespace

TEST(AtomicFile, CommitReplacesTheTargetAndLeavesNoTemporary) {
  TempDir dir;
  mt::testing::write_bytes(dir.file("a.txt"), "old");
  {
    mt::io::AtomicFile f(dir.file("a.txt"), "test");
    f.write("new ");
    EXPECT_EQ(mt::testing::read_bytes(dir.file("a.txt")), "old");  // untouched until the commit
    EXPECT_TRUE(mt::io::is_temp_file_name(std::filesystem::path(f.temp_path()).filename().string()));
    f.write("contents");
    f.commit();
  }
  EXPECT_EQ(mt::testing::read_bytes(dir.file("a.txt")), "new contents");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"a.txt"});
}

TEST(AtomicFile, AnAbandonedWriteLeavesTheTargetAndNoTemporary) {
  TempDir dir;
  mt::testing::write_bytes(dir.file("a.txt"), "old");
  {
    mt::io::AtomicFile f(dir.file("a.txt"), "test");
    f.write("half");
  }  // destroyed without commit (an exception on the way)
  EXPECT_EQ(mt::testing::read_bytes(dir.file("a.txt")), "old");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"a.txt"});
}

TEST(AtomicFile, AFullDiskKeepsThePreviousFile) {
  TempDir dir;
  const std::string old(1000, 'o');
  mt::testing::write_bytes(dir.file("a.bin"), old);
  mt::testing::FileSizeLimit limit(4096);
  ASSERT_TRUE(limit.ok());
  const std::string msg =
      mt::testing::error_message([&] { mt::io::write_file_atomic(dir.file("a.bin"), std::string(100000, 'x'), "test"); });
  EXPECT_NE(msg.find(dir.file("a.bin")), std::string::npos) << msg;
  EXPECT_NE(msg.find("File too large"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unchanged"), std::string::npos) << msg;
  EXPECT_EQ(mt::testing::read_bytes(dir.file("a.bin")), old);
  EXPECT_FALSE(has_temp_file(dir));
}

TEST(AtomicFile, ASymbolicLinkAtTheTargetIsReplacedNotFollowed) {
  TempDir dir;
  mt::testing::write_bytes(dir.file("victim"), "precious");
  std::filesystem::create_symlink(dir.file("victim"), dir.file("link"));
  mt::io::write_file_atomic(dir.file("link"), "written", "test");
  EXPECT_EQ(mt::testing::read_bytes(dir.file("victim")), "precious");
  EXPECT_FALSE(std::filesystem::is_symlink(dir.file("link")));
  EXPECT_EQ(mt::testing::read_bytes(dir.file("link")), "written");
}

TEST(AtomicFile, AnUnwritableDirectoryIsAClearError) {
  EXPECT_MT_ERROR(mt::io::write_file_atomic("/nonexistent-dir/mixtrain/a.txt", "x", "test"), "test",
                  "/nonexistent-dir/mixtrain/a.txt", "No such file or directory");
}

TEST(TempFiles, NamesAreRecognisedExactly) {
  EXPECT_TRUE(mt::io::is_temp_file_name(".model.safetensors.mixtrain-tmp.1234.ab12cd"));
  EXPECT_FALSE(mt::io::is_temp_file_name("model.safetensors"));
  EXPECT_FALSE(mt::io::is_temp_file_name(".model.safetensors.mixtrain-tmp.12x4.ab"));
  EXPECT_FALSE(mt::io::is_temp_file_name(".model.safetensors.mixtrain-tmp.1234"));
  EXPECT_FALSE(mt::io::is_temp_file_name(".m.mixtrain-tmp..ab"));
  EXPECT_FALSE(mt::io::is_temp_file_name("x.mixtrain-tmp.1.ab"));  // not hidden
}

TEST(TempFiles, OnlyThoseOfDeadProcessesAreRemoved) {
  TempDir dir;
  const std::string dead = ".a.mixtrain-tmp." + std::to_string(dead_pid()) + ".0f0f";
  const std::string live = ".b.mixtrain-tmp." + std::to_string(::getpid()) + ".0f0f";
  mt::testing::write_bytes(dir.file(dead), "x");
  mt::testing::write_bytes(dir.file(live), "x");
  mt::testing::write_bytes(dir.file("keep.txt"), "x");
  EXPECT_EQ(mt::io::remove_stale_temp_files(dir.path()), 1);
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{live, "keep.txt"}));
}

TEST(ReadFile, RefusesAFifoWithoutBlocking) {
  TempDir dir;
  ASSERT_EQ(::mkfifo(dir.file("fifo").c_str(), 0600), 0);
  // With no writer, a blocking open of a FIFO would wait forever: the test would time out.
  EXPECT_MT_ERROR(mt::io::ReadFile(dir.file("fifo"), "test"), "test", "is not a regular file (a FIFO)");
  EXPECT_MT_ERROR(mt::io::read_file(dir.file("fifo"), 100, "test"), "not a regular file");
  EXPECT_MT_ERROR(mt::io::ReadFile(dir.path(), "test"), "not a regular file (a directory)");
}

TEST(ReadFile, ReadsAtOffsetsAndBoundsTheSize) {
  TempDir dir;
  mt::testing::write_bytes(dir.file("f"), "0123456789");
  mt::io::ReadFile f(dir.file("f"), "test");
  EXPECT_EQ(f.size(), 10u);
  char buf[4] = {};
  f.read_at(buf, 3, 4);
  EXPECT_EQ(std::string(buf, 3), "456");
  EXPECT_MT_ERROR(f.read_at(buf, 4, 8), "unexpected end of file", "byte offset 10");
  EXPECT_EQ(mt::io::read_file(dir.file("f"), 10, "test"), "0123456789");
  EXPECT_MT_ERROR(mt::io::read_file(dir.file("f"), 9, "test"), "has 10 bytes, above the limit of 9");
}

TEST(AppendFile, AFullDiskIsAnErrorAndLeavesWholeLines) {
  TempDir dir;
  const std::string path = dir.file("metrics.jsonl");
  std::string err;
  int lines = 0;
  {
    mt::testing::FileSizeLimit limit(1050);  // the 11th line is cut at 50 bytes, then removed
    ASSERT_TRUE(limit.ok());
    mt::io::AppendFile f(path, "test");
    const std::string line(99, 'l');  // 100 bytes with the newline
    for (int i = 0; i < 20 && err.empty(); ++i) {
      err = mt::testing::catch_error([&] { f.write_line(line); }).message;
      if (err == "no exception") {
        err.clear();
        ++lines;
      }
    }
  }
  EXPECT_EQ(lines, 10);
  EXPECT_NE(err.find("cannot append to '" + path + "'"), std::string::npos) << err;
  const std::string content = mt::testing::read_bytes(path);
  ASSERT_EQ(content.size(), 1000u);
  for (size_t i = 0; i < content.size(); ++i) EXPECT_EQ(content[i], i % 100 == 99 ? '\n' : 'l') << i;
}
