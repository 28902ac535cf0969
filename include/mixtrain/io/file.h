// mixtrain/io/file.h: how mixtrain writes and opens files. Every writer of the library and the CLI
// goes through these, so every file is written the same safe way.
//
// Writing is atomic. The data goes to a temporary file in the target's directory, named
// ".<name>.mixtrain-tmp.<pid>.<random>", created exclusively and without following a symbolic link
// (O_CREAT | O_EXCL | O_NOFOLLOW: nobody can pre-plant it); every write is checked; then fsync,
// rename over the target and fsync of the directory. On any failure (a full disk, a file-size
// limit, a read-only directory) the temporary is removed, the target keeps its previous contents
// and mt::Error names the target and the system's reason. A process killed mid-write leaves only
// its temporary, which remove_stale_temp_files() recognises by its dead pid and removes.
//
// Reading opens only regular files, and never blocks doing so: a FIFO, a device or a directory is
// an mt::Error before any read.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace mixtrain::io {

// A file written in pieces and committed at the end (see above). `who` starts every error message
// ("save_safetensors", "Trainer", ...). Destroying it uncommitted removes the temporary.
class AtomicFile {
 public:
  AtomicFile(std::string path, std::string who);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t n);
  void write(std::string_view text) { write(text.data(), text.size()); }
  // Overwrites n bytes at `offset` within what was written already (a header whose counts are
  // known only at the end); the end of the file stays where it was.
  void write_at(uint64_t offset, const void* data, size_t n);
  uint64_t size() const { return written_; }
  // fsync, rename over the target, fsync of the directory. At most once.
  void commit();

  const std::string& temp_path() const { return tmp_; }

 private:
  [[noreturn]] void fail(const std::string& what, int err);
  std::string path_, who_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
  uint64_t written_ = 0;
};

// Writes `contents` to `path` atomically (AtomicFile in one call).
void write_file_atomic(const std::string& path, std::string_view contents, const std::string& who = "write");

// True for names this module gives its temporary files.
bool is_temp_file_name(std::string_view file_name);
// Removes the temporary files in `dir` (not its subdirectories) whose writing process no longer
// runs: what a crash or SIGKILL during a write leaves. Returns how many it removed.
int remove_stale_temp_files(const std::string& dir);

// A regular file opened for reading (O_NONBLOCK until checked, so a FIFO cannot block the open).
class ReadFile {
 public:
  ReadFile(const std::string& path, std::string who);
  ~ReadFile();
  ReadFile(const ReadFile&) = delete;
  ReadFile& operator=(const ReadFile&) = delete;

  uint64_t size() const { return size_; }
  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  // Reads exactly n bytes at `offset`; mt::Error naming the offset on a read error or a short file.
  void read_at(void* dst, uint64_t n, uint64_t offset) const;
  // Reads up to n bytes from the current position; 0 at the end of the file.
  size_t read_some(void* dst, size_t n);

 private:
  std::string path_, who_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// The whole file as bytes; mt::Error when it is not a regular file or holds more than max_bytes.
std::string read_file(const std::string& path, uint64_t max_bytes, const std::string& who);

// How AppendFile opens its file: kCreateOrAppend appends to the file or creates it (metrics.jsonl
// of a resumed run), kCreateNew creates it and refuses an existing one (a file whose name is meant
// to be this writer's alone, such as a TensorBoard event file).
enum class AppendMode { kCreateOrAppend, kCreateNew };

// An append-only file (metrics.jsonl, TensorBoard event files): every line or record is written
// with one write() and checked, so a full disk is an mt::Error at the line that did not fit, never a
// silently shorter file. A write that fails part-way is cut off again, so the file stays whole
// lines or records.
class AppendFile {
 public:
  AppendFile() = default;
  AppendFile(const std::string& path, std::string who, AppendMode mode = AppendMode::kCreateOrAppend);
  ~AppendFile();
  AppendFile(AppendFile&& other) noexcept;
  AppendFile& operator=(AppendFile&& other) noexcept;

  bool is_open() const { return fd_ >= 0; }
  void write_line(std::string_view line);  // appends line + '\n'
  void append(std::string_view bytes);     // appends the bytes as they are
  // fsync: what was appended survives a crash of the machine, not only of the process.
  void sync();

 private:
  std::string path_, who_;
  int fd_ = -1;
};

// Exclusive use of a directory by one process for as long as a handle lives: an advisory lock
// (flock) on DIR/.mixtrain.lock, which holds the owner's process id. Two runs started together into
// one output directory cannot both write it: the second is refused, naming the directory and the
// holder. The kernel releases the lock when the process dies, however it dies, so a crashed run
// never leaves the directory locked (the file stays; it is not a lock by existing).
//
// Within one process the lock is shared: acquiring a directory this process already holds returns
// the same lock (a CLI that locks before it looks for a checkpoint, then the Trainer that writes).
class DirectoryLock {
 public:
  // Creates `dir` if needed and locks it, or throws mt::Error: "<who>: the directory 'DIR' is in use
  // by another run (process 1234)". Never blocks.
  static std::shared_ptr<DirectoryLock> acquire(const std::string& dir, const std::string& who);
  ~DirectoryLock();
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;
  const std::string& directory() const { return dir_; }

 private:
  DirectoryLock(std::string dir, std::string key, int fd) : dir_(std::move(dir)), key_(std::move(key)), fd_(fd) {}
  std::string dir_, key_;
  int fd_ = -1;
};

// The lock file's name: not a run's file (an output directory holding only it counts as empty).
inline constexpr std::string_view kDirectoryLockFile = ".mixtrain.lock";

}  // namespace mixtrain::io
