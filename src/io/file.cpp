// Atomic writes, stale-temporary cleanup, and reads of regular files only (mixtrain/io/file.h).
#include "mixtrain/io/file.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>

#include "mixtrain/error.h"

namespace mixtrain::io {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kTempTag = ".mixtrain-tmp.";

std::string random_suffix() {
  static thread_local std::mt19937_64 rng{std::random_device{}() ^ (static_cast<uint64_t>(::getpid()) << 32)};
  static constexpr char kHex[] = "0123456789abcdef";
  uint64_t r = rng();
  std::string s(12, '0');
  for (char& c : s) {
    c = kHex[r & 15];
    r >>= 4;
  }
  return s;
}

// "<dir>/.<name>.mixtrain-tmp.<pid>.<random>"
std::string temp_name_for(const std::string& path) {
  const fs::path p(path);
  std::string name(1, '.');  // appended piece by piece: GCC 12 warns (-Wrestrict) on "." + string&&
  name += p.filename().string();
  name += kTempTag;
  name += std::to_string(::getpid());
  name += '.';
  name += random_suffix();
  return (p.parent_path() / name).string();
}

void fsync_directory_of(const std::string& path) {
  fs::path dir = fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);  // best effort: the rename has happened; failing here cannot lose the old data
    ::close(dfd);
  }
}

// Writes all n bytes to fd; returns 0 or the errno of the failure (EIO for a zero-byte write).
int write_all(int fd, const char* p, size_t n, uint64_t* written) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, std::min<size_t>(n, size_t{1} << 30));
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return errno;
    if (w == 0) return EIO;
    p += w;
    n -= static_cast<size_t>(w);
    *written += static_cast<uint64_t>(w);
  }
  return 0;
}

}  // namespace

// ---- AtomicFile --------------------------------------------------------------------------------

AtomicFile::AtomicFile(std::string path, std::string who) : path_(std::move(path)), who_(std::move(who)) {
  MT_CHECK(!path_.empty(), who_, ": empty file name");
  for (int attempt = 0; attempt < 8 && fd_ < 0; ++attempt) {
    tmp_ = temp_name_for(path_);
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd_ < 0 && errno != EEXIST) break;
  }
  if (fd_ < 0) {
    const int err = errno;
    MT_FAIL(who_, ": cannot create a temporary file next to '", path_, "' (", std::strerror(err), ")");
  }
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
}

void AtomicFile::fail(const std::string& what, int err) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink(tmp_.c_str());
  committed_ = true;  // nothing left to remove
  MT_FAIL(who_, ": cannot write '", path_, "': ", what, " (", std::strerror(err),
          "); the previous file, if any, is unchanged");
}

void AtomicFile::write(const void* data, size_t n) {
  MT_CHECK(fd_ >= 0 && !committed_, who_, ": '", path_, "' is already committed");
  const uint64_t before = written_;
  if (const int err = write_all(fd_, static_cast<const char*>(data), n, &written_))
    fail(detail::concat("write failed after ", before + (written_ - before), " bytes"), err);
}

void AtomicFile::write_at(uint64_t offset, const void* data, size_t n) {
  MT_CHECK(fd_ >= 0 && !committed_, who_, ": '", path_, "' is already committed");
  MT_CHECK(offset <= written_ && n <= written_ - offset, who_, ": '", path_, "': write_at(", offset, ", ", n,
           " bytes) goes past the ", written_, " bytes written");
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::pwrite(fd_, p, n, static_cast<off_t>(offset));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail(detail::concat("write at offset ", offset, " failed"), w < 0 ? errno : EIO);
    p += w;
    offset += static_cast<uint64_t>(w);
    n -= static_cast<size_t>(w);
  }
}

void AtomicFile::commit() {
  MT_CHECK(fd_ >= 0 && !committed_, who_, ": '", path_, "' is already committed");
  if (::fsync(fd_) != 0) fail("fsync failed", errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("close failed", errno);
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) fail("rename failed", errno);
  committed_ = true;
  fsync_directory_of(path_);
}

void write_file_atomic(const std::string& path, std::string_view contents, const std::string& who) {
  AtomicFile f(path, who);
  f.write(contents);
  f.commit();
}

// ---- stale temporaries --------------------------------------------------------------------------

bool is_temp_file_name(std::string_view name) {
  const size_t tag = name.rfind(kTempTag);
  if (name.empty() || name[0] != '.' || tag == std::string_view::npos || tag < 2) return false;
  const std::string_view rest = name.substr(tag + kTempTag.size());  // "<pid>.<random>"
  const size_t dot = rest.find('.');
  if (dot == 0 || dot == std::string_view::npos || dot + 1 == rest.size()) return false;
  return std::all_of(rest.begin(), rest.begin() + dot, [](char c) { return c >= '0' && c <= '9'; });
}

int remove_stale_temp_files(const std::string& dir) {
  DIR* d = ::opendir(dir.empty() ? "." : dir.c_str());
  if (d == nullptr) return 0;
  int removed = 0;
  while (const dirent* e = ::readdir(d)) {
    const std::string_view name(e->d_name);
    if (!is_temp_file_name(name)) continue;
    const std::string_view rest = name.substr(name.rfind(kTempTag) + kTempTag.size());
    const std::string pid_text(rest.substr(0, rest.find('.')));
    if (pid_text.size() > 9) continue;  // not a pid this system can have
    const pid_t pid = static_cast<pid_t>(std::stol(pid_text));
    // kill(pid, 0): ESRCH when no such process. A live pid (ours, another run's, or a reused one)
    // keeps its file.
    if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH) {
      const fs::path p = fs::path(dir.empty() ? "." : dir) / std::string(name);
      struct stat st;
      if (::lstat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::unlink(p.c_str()) == 0) ++removed;
    }
  }
  ::closedir(d);
  return removed;
}

// ---- reading ------------------------------------------------------------------------------------

ReadFile::ReadFile(const std::string& path, std::string who) : path_(path), who_(std::move(who)) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0) {
    const int err = errno;
    MT_FAIL(who_, ": cannot open '", path, "': ", std::strerror(err));
  }
  struct stat st;
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    MT_FAIL(who_, ": '", path, "' is not a regular file",
            S_ISFIFO(st.st_mode) ? " (a FIFO)" : S_ISDIR(st.st_mode) ? " (a directory)" : "");
  }
  // Regular files ignore O_NONBLOCK; clear it anyway so that reads behave the usual way.
  const int flags = ::fcntl(fd_, F_GETFL);
  if (flags >= 0) ::fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK);
  size_ = static_cast<uint64_t>(st.st_size);
}

ReadFile::~ReadFile() {
  if (fd_ >= 0) ::close(fd_);
}

void ReadFile::read_at(void* dst, uint64_t n, uint64_t offset) const {
  char* p = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t r = ::pread(fd_, p, std::min<uint64_t>(n, uint64_t{1} << 30), static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      const int err = errno;
      MT_FAIL(who_, ": '", path_, "': read error (", std::strerror(err), ") (at byte offset ", offset, ")");
    }
    if (r == 0)
      MT_FAIL(who_, ": '", path_, "': unexpected end of file (was it modified while reading?) (at byte offset ",
              offset, ")");
    p += r;
    n -= static_cast<uint64_t>(r);
    offset += static_cast<uint64_t>(r);
  }
}

size_t ReadFile::read_some(void* dst, size_t n) {
  while (true) {
    const ssize_t r = ::read(fd_, dst, std::min<size_t>(n, size_t{1} << 30));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      const int err = errno;
      MT_FAIL(who_, ": '", path_, "': read error (", std::strerror(err), ")");
    }
    return static_cast<size_t>(r);
  }
}

std::string read_file(const std::string& path, uint64_t max_bytes, const std::string& who) {
  ReadFile f(path, who);
  MT_CHECK(f.size() <= max_bytes, who, ": '", path, "' has ", f.size(), " bytes, above the limit of ", max_bytes);
  std::string s(static_cast<size_t>(f.size()), '\0');
  f.read_at(s.data(), s.size(), 0);
  return s;
}

// ---- AppendFile ----------------------------------------------------------------------------------

AppendFile::AppendFile(const std::string& path, std::string who, AppendMode mode) : path_(path), who_(std::move(who)) {
  const int exclusive = mode == AppendMode::kCreateNew ? O_EXCL : 0;
  fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | exclusive | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    const int err = errno;
    MT_FAIL(who_, ": cannot open '", path, "' for appending: ", std::strerror(err));
  }
}

AppendFile::~AppendFile() {
  if (fd_ >= 0) ::close(fd_);
}

AppendFile::AppendFile(AppendFile&& o) noexcept : path_(std::move(o.path_)), who_(std::move(o.who_)), fd_(o.fd_) {
  o.fd_ = -1;
}

AppendFile& AppendFile::operator=(AppendFile&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(o.path_);
    who_ = std::move(o.who_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

void AppendFile::write_line(std::string_view line) {
  std::string buf(line);
  buf += '\n';
  append(buf);
}

void AppendFile::append(std::string_view bytes) {
  MT_CHECK(fd_ >= 0, who_, ": append file is not open");
  uint64_t written = 0;
  if (const int err = write_all(fd_, bytes.data(), bytes.size(), &written)) {
    // A partial line or record (the disk filled up mid-write) is cut off again, so the file stays
    // whole ones.
    if (written > 0) {
      const off_t end = ::lseek(fd_, 0, SEEK_END);
      if (end >= static_cast<off_t>(written)) (void)::ftruncate(fd_, end - static_cast<off_t>(written));
    }
    MT_FAIL(who_, ": cannot append to '", path_, "': ", std::strerror(err));
  }
}

void AppendFile::sync() {
  MT_CHECK(fd_ >= 0, who_, ": append file is not open");
  if (::fsync(fd_) != 0) {
    const int err = errno;
    MT_FAIL(who_, ": cannot flush '", path_, "' to disk: ", std::strerror(err));
  }
}

namespace {

// The locks this process holds, by canonical directory: re-acquiring shares the handle (a second
// flock on another descriptor of the same file would conflict with our own).
std::mutex& lock_registry_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, std::weak_ptr<DirectoryLock>>& lock_registry() {
  static std::map<std::string, std::weak_ptr<DirectoryLock>> r;
  return r;
}

// The process id a holder wrote into the lock file, or "" (unreadable, still being written).
std::string holder_pid(int fd) {
  char buf[24] = {};
  const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
  std::string s;
  for (ssize_t i = 0; i < n && buf[i] >= '0' && buf[i] <= '9'; ++i) s += buf[i];
  return s.size() <= 10 ? s : "";
}

}  // namespace

std::shared_ptr<DirectoryLock> DirectoryLock::acquire(const std::string& dir, const std::string& who) {
  MT_CHECK(!dir.empty(), who, ": the directory is empty (give a path)");
  std::error_code ec;
  fs::create_directories(dir, ec);
  MT_CHECK(!ec, who, ": cannot create the directory ", detail::quote_untrusted(dir, 256), ": ", ec.message());
  const std::string canonical = fs::canonical(dir, ec).string();
  MT_CHECK(!ec, who, ": ", detail::quote_untrusted(dir, 256), " is not a usable directory: ", ec.message());
  // Keyed by process too: a child forked while the lock was held has a copy of the registry, but
  // not the lock (it must be refused like any other process).
  const std::string key = std::to_string(::getpid()) + ":" + canonical;
  std::lock_guard<std::mutex> guard(lock_registry_mutex());
  if (auto held = lock_registry()[key].lock()) return held;
  const std::string file = (fs::path(canonical) / std::string(kDirectoryLockFile)).string();
  const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  MT_CHECK(fd >= 0, who, ": cannot open the lock file ", detail::quote_untrusted(file, 256), ": ",
           std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    MT_FAIL(who, ": the lock file ", detail::quote_untrusted(file, 256), " is not a regular file");
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string pid = holder_pid(fd);
    ::close(fd);
    MT_CHECK(err != EWOULDBLOCK, who, ": the directory ", detail::quote_untrusted(dir, 256),
             " is in use by another run", pid.empty() ? "" : " (process " + pid + ")",
             ": a directory holds one run at a time; wait for it to finish or choose another directory");
    MT_FAIL(who, ": cannot lock ", detail::quote_untrusted(file, 256), ": ", std::strerror(err));
  }
  // Ours now: record who holds it (best effort: the lock, not the text, is what excludes).
  const std::string me = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
    // A full disk: the lock still holds; only the holder's id is missing from a refusal.
  }
  std::shared_ptr<DirectoryLock> lock(new DirectoryLock(dir, key, fd));
  lock_registry()[key] = lock;
  return lock;
}

DirectoryLock::~DirectoryLock() {
  std::lock_guard<std::mutex> guard(lock_registry_mutex());
  auto it = lock_registry().find(key_);
  if (it != lock_registry().end() && it->second.expired()) lock_registry().erase(it);
  ::close(fd_);  // releases the flock
}

}  // namespace mixtrain::io
