// Small file helpers for the data and io tests: a self-removing temporary directory, raw byte
// writers (plain and gzip through zlib), a reader, and a file size limit that makes writes fail.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

namespace mixtrain::testing {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "mixtrain_test_XXXXXX").string();
    char* p = ::mkdtemp(tmpl.data());
    if (p == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = p;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  // Names of the entries in the directory (to check that no temporary file was left behind).
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(path_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  std::string path_;
};

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw std::runtime_error("cannot write " + path);
}

inline void write_gzip(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  if (f == nullptr) throw std::runtime_error("gzopen failed for " + path);
  if (!bytes.empty() && gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) != static_cast<int>(bytes.size()))
    throw std::runtime_error("gzwrite failed for " + path);
  gzclose(f);
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// While alive, limits the size of the files this process writes to `bytes` (RLIMIT_FSIZE) with
// SIGXFSZ ignored, so that a write past the limit fails with EFBIG as on a full disk instead of
// killing the process; the previous limit and handler come back on destruction. ok() is false when
// the limit could not be set.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    if (getrlimit(RLIMIT_FSIZE, &old_limit_) != 0) return;
    old_handler_ = signal(SIGXFSZ, SIG_IGN);
    handler_set_ = true;
    struct rlimit small = old_limit_;
    small.rlim_cur = bytes;
    ok_ = setrlimit(RLIMIT_FSIZE, &small) == 0;
  }
  ~FileSizeLimit() {
    if (ok_) setrlimit(RLIMIT_FSIZE, &old_limit_);
    if (handler_set_) signal(SIGXFSZ, old_handler_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

  bool ok() const { return ok_; }

 private:
  struct rlimit old_limit_ {};
  void (*old_handler_)(int) = SIG_DFL;
  bool handler_set_ = false, ok_ = false;
};

// Big-endian encodings for IDX headers and data.
inline std::string be32(uint32_t v) {
  return std::string{static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
                     static_cast<char>(v)};
}
inline std::string idx_header(uint8_t type, const std::vector<uint32_t>& dims) {
  std::string s{'\0', '\0', static_cast<char>(type), static_cast<char>(dims.size())};
  for (uint32_t d : dims) s += be32(d);
  return s;
}

}  // namespace mixtrain::testing
