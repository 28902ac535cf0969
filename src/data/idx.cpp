// IDX reader (plain or gzip). Every field of the header is validated before anything is
// allocated, so a corrupt or hostile file costs at most `max_bytes` of memory and always ends in
// an mt::Error that names the file and the byte offset where the problem was found.
#include "mixtrain/data/idx.h"

#include <sys/stat.h>
#include <zlib.h>

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iomanip>
#include <limits>
#include <sstream>
#include <vector>

namespace mixtrain::data {
namespace {

[[noreturn]] void fail_at(const std::string& path, int64_t offset, const std::string& what) {
  MT_FAIL("read_idx: '", path, "': ", what, " (at byte offset ", offset, ")");
}

// Sequential reader over a plain or gzip file. Offsets count bytes of the (decompressed) IDX
// stream, which is what the header fields describe.
class ByteSource {
 public:
  explicit ByteSource(const std::string& path) : path_(path) {
    FILE* f = std::fopen(path.c_str(), "rb");
    MT_CHECK(f != nullptr, "read_idx: cannot open '", path, "': ", std::strerror(errno));
    unsigned char magic[2] = {0, 0};
    size_t got = std::fread(magic, 1, 2, f);
    gzip_ = got == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
    if (!gzip_) {
      struct stat st;
      if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode)) plain_size_ = static_cast<int64_t>(st.st_size);
      std::rewind(f);
      file_ = f;
      return;
    }
    std::fclose(f);
    gz_ = gzopen(path.c_str(), "rb");
    MT_CHECK(gz_ != nullptr, "read_idx: cannot open '", path, "' as gzip: ", std::strerror(errno));
    gzbuffer(gz_, 1 << 18);  // fewer, larger reads of the compressed file
  }
  ~ByteSource() {
    if (file_) std::fclose(file_);
    if (gz_) gzclose(gz_);
  }
  ByteSource(const ByteSource&) = delete;
  ByteSource& operator=(const ByteSource&) = delete;

  bool gzip() const { return gzip_; }
  int64_t offset() const { return offset_; }
  // Size of a plain regular file, -1 when unknown (gzip, pipes).
  int64_t plain_size() const { return plain_size_; }

  // Reads up to n bytes; returns fewer only at the end of the stream. Throws on I/O errors and on
  // corrupt or truncated gzip streams.
  size_t read(void* dst, size_t n) {
    char* p = static_cast<char*>(dst);
    size_t total = 0;
    while (total < n) {
      size_t want = std::min<size_t>(n - total, size_t{1} << 30);  // gzread takes an unsigned count
      size_t got = 0;
      if (file_) {
        got = std::fread(p + total, 1, want, file_);
        if (got < want && std::ferror(file_))
          fail_at(path_, offset_ + total, std::string("read error: ") + std::strerror(errno));
      } else {
        int r = gzread(gz_, p + total, static_cast<unsigned>(want));
        int errnum = Z_OK;
        const char* msg = gzerror(gz_, &errnum);
        if (r < 0 || (errnum != Z_OK && errnum != Z_STREAM_END)) {
          fail_at(path_, offset_ + total + (r > 0 ? r : 0),
                  std::string("corrupt or truncated gzip stream: ") + (msg ? msg : "unknown zlib error"));
        }
        got = static_cast<size_t>(r);
      }
      total += got;
      if (got < want) break;
    }
    offset_ += static_cast<int64_t>(total);
    return total;
  }

 private:
  std::string path_;
  FILE* file_ = nullptr;
  gzFile gz_ = nullptr;
  bool gzip_ = false;
  int64_t plain_size_ = -1;
  int64_t offset_ = 0;
};

struct ElementType {
  uint8_t code;
  const char* name;
  int size;     // bytes per element in the file
  DType dtype;  // what it loads as
};

constexpr ElementType kTypes[] = {
    {0x08, "unsigned byte", 1, kUInt8}, {0x09, "signed byte", 1, kInt32}, {0x0B, "int16", 2, kInt32},
    {0x0C, "int32", 4, kInt32},         {0x0D, "float32", 4, kFloat32},   {0x0E, "float64", 8, kFloat64},
};

std::string hex_bytes(const unsigned char* b, int n) {
  std::ostringstream os;
  for (int i = 0; i < n; ++i) os << (i ? " " : "") << std::hex << std::setw(2) << std::setfill('0') << int(b[i]);
  return os.str();
}

// IDX data is big-endian; swap each element in place on little-endian hosts.
template <typename U>
void big_endian_to_native(void* data, int64_t n) {
  if constexpr (std::endian::native == std::endian::big) return;
  U* p = static_cast<U*>(data);
  for (int64_t i = 0; i < n; ++i) {
    U v = p[i];
    if constexpr (sizeof(U) == 2) v = __builtin_bswap16(v);
    if constexpr (sizeof(U) == 4) v = __builtin_bswap32(v);
    if constexpr (sizeof(U) == 8) v = __builtin_bswap64(v);
    p[i] = v;
  }
}

}  // namespace

Tensor read_idx(const std::string& path, int64_t max_bytes) {
  MT_CHECK(max_bytes >= 0, "read_idx: max_bytes must be non-negative, got ", max_bytes);
  ByteSource src(path);

  unsigned char magic[4];
  size_t got = src.read(magic, 4);
  if (got < 4) fail_at(path, static_cast<int64_t>(got), "file ends inside the 4-byte IDX magic");
  if (magic[0] != 0 || magic[1] != 0)
    fail_at(path, 0, "bad magic " + hex_bytes(magic, 4) + ": an IDX file starts with 00 00 <type> <ndims>");
  const ElementType* type = nullptr;
  for (const ElementType& t : kTypes)
    if (t.code == magic[2]) type = &t;
  if (type == nullptr)
    fail_at(path, 2,
            "unknown element type 0x" + hex_bytes(magic + 2, 1) +
                " (valid: 08 uint8, 09 int8, 0b int16, 0c int32, 0d float32, 0e float64)");
  const int ndims = magic[3];
  if (ndims < 1 || ndims > kMaxDims)
    fail_at(path, 3, detail::concat("unsupported number of dimensions ", ndims, " (valid: 1..", kMaxDims, ")"));

  // Dimensions: the running element count may never exceed what max_bytes allows, which also
  // rules out overflow of the product.
  const int64_t max_elements = max_bytes / type->size;
  Shape shape;
  int64_t numel = 1;
  for (int d = 0; d < ndims; ++d) {
    unsigned char b[4];
    const int64_t at = src.offset();
    if (src.read(b, 4) < 4)
      fail_at(path, src.offset(), detail::concat("file ends inside dimension ", d, " of ", ndims));
    const int64_t dim = (int64_t{b[0]} << 24) | (int64_t{b[1]} << 16) | (int64_t{b[2]} << 8) | int64_t{b[3]};
    if (dim != 0 && numel > max_elements / dim)
      fail_at(path, at,
              detail::concat("dimension ", d, " = ", dim, " makes the data larger than the limit of ", max_bytes,
                             " bytes"));
    numel *= dim;
    shape.push_back(dim);
  }
  const int64_t header_bytes = 4 + 4 * int64_t{ndims};
  const int64_t payload = numel * type->size;
  const int64_t expected_end = header_bytes + payload;

  // A plain file's size is known: reject a wrong length before allocating anything.
  if (src.plain_size() >= 0 && src.plain_size() < expected_end)
    fail_at(path, src.plain_size(),
            detail::concat("truncated: shape ", shape, " of ", type->name, " needs ", expected_end,
                           " bytes, the file has ", src.plain_size()));
  if (src.plain_size() > expected_end)
    fail_at(path, expected_end,
            detail::concat(src.plain_size() - expected_end, " trailing bytes after the data of shape ", shape, " of ",
                           type->name));

  Tensor out = Tensor::empty(shape, type->dtype);
  auto read_exact = [&](void* dst, int64_t n) {
    size_t r = src.read(dst, static_cast<size_t>(n));
    if (static_cast<int64_t>(r) < n)
      fail_at(path, src.offset(),
              detail::concat("truncated: shape ", shape, " of ", type->name, " needs ", expected_end,
                             " bytes, the stream ends after ", src.offset()));
  };
  switch (type->code) {
    case 0x08: read_exact(out.raw_data(), payload); break;
    case 0x0C:
    case 0x0D:
      read_exact(out.raw_data(), payload);
      big_endian_to_native<uint32_t>(out.raw_data(), numel);
      break;
    case 0x0E:
      read_exact(out.raw_data(), payload);
      big_endian_to_native<uint64_t>(out.raw_data(), numel);
      break;
    case 0x09:
    case 0x0B: {
      std::vector<unsigned char> raw(static_cast<size_t>(payload));
      read_exact(raw.data(), payload);
      int32_t* dst = out.data_ptr<int32_t>();
      for (int64_t i = 0; i < numel; ++i) {
        if (type->code == 0x09) {
          dst[i] = static_cast<int8_t>(raw[i]);
        } else {
          dst[i] = static_cast<int16_t>(static_cast<uint16_t>((raw[2 * i] << 8) | raw[2 * i + 1]));
        }
      }
      break;
    }
    default: MT_INTERNAL_ASSERT(false, "unhandled IDX type");
  }

  // Exact length: one more byte means trailing garbage. For gzip this read also reaches the end of
  // the stream, where zlib verifies the CRC and length trailer.
  unsigned char extra;
  if (src.read(&extra, 1) != 0)
    fail_at(path, expected_end, detail::concat("trailing bytes after the data of shape ", shape, " of ", type->name));
  return out;
}

}  // namespace mixtrain::data
