// IDX reader (plain or gzip). Every field of the header is validated before anything is
// allocated, so a corrupt or hostile file costs at most `max_bytes` of memory and always ends in
// an mt::Error that names the file and the byte offset where the problem was found.
#include "mixtrain/data/idx.h"

#include <zlib.h>

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iomanip>
#include <limits>
#include <sstream>
#include <vector>

#include "mixtrain/io/file.h"

namespace mixtrain::data {
namespace {

[[noreturn]] void fail_at(const std::string& path, int64_t offset, const std::string& what) {
  MT_FAIL("read_idx: '", path, "': ", what, " (at byte offset ", offset, ")");
}

// Sequential reader over a plain or gzip file. Offsets count bytes of the (decompressed) IDX
// stream, which is what the header fields describe; gzip errors also name the offset in the
// compressed file. Only regular files are opened (a FIFO is refused without blocking). A gzip file
// is one or more complete members (`cat a.gz b.gz` is valid gzip) and nothing else: bytes after
// the last member that do not start another one are an error, not silently ignored.
class ByteSource {
 public:
  explicit ByteSource(const std::string& path) : path_(path), file_(path, "read_idx"), in_(kInputBytes) {
    gzip_ = ensure(2) && in_[0] == 0x1f && in_[1] == 0x8b;
    if (!gzip_) {
      plain_size_ = static_cast<int64_t>(file_.size());
      return;
    }
    MT_CHECK(inflateInit2(&zs_, 16 + MAX_WBITS) == Z_OK, "read_idx: '", path, "': cannot start zlib");
    inflating_ = true;
  }
  ~ByteSource() {
    if (inflating_) inflateEnd(&zs_);
  }
  ByteSource(const ByteSource&) = delete;
  ByteSource& operator=(const ByteSource&) = delete;

  bool gzip() const { return gzip_; }
  int64_t offset() const { return offset_; }
  // Size of a plain file, -1 for gzip.
  int64_t plain_size() const { return plain_size_; }

  // Reads up to n bytes; returns fewer only at the end of the stream. Throws on I/O errors and on
  // corrupt or truncated gzip streams.
  size_t read(void* dst, size_t n) {
    unsigned char* p = static_cast<unsigned char*>(dst);
    size_t total = 0;
    while (total < n) {
      if (!gzip_) {
        if (in_pos_ == in_len_ && !refill()) break;
        const size_t k = std::min(n - total, in_len_ - in_pos_);
        std::memcpy(p + total, in_.data() + in_pos_, k);
        in_pos_ += k;
        total += k;
        continue;
      }
      if (finished_) break;
      if (in_pos_ == in_len_ && !refill()) gzip_fail(total, "truncated gzip stream (the file ends inside it)");
      zs_.next_in = in_.data() + in_pos_;
      zs_.avail_in = static_cast<uInt>(in_len_ - in_pos_);
      zs_.next_out = p + total;
      zs_.avail_out = static_cast<uInt>(std::min<size_t>(n - total, size_t{1} << 30));
      const uInt out_before = zs_.avail_out;
      const int rc = inflate(&zs_, Z_NO_FLUSH);
      in_pos_ = in_len_ - zs_.avail_in;
      total += out_before - zs_.avail_out;
      if (rc == Z_STREAM_END) {
        // Another member may follow; anything else after a member is garbage.
        if (!ensure(1)) {
          finished_ = true;
          break;
        }
        if (!ensure(2) || in_[in_pos_] != 0x1f || in_[in_pos_ + 1] != 0x8b)
          gzip_fail(total, "trailing bytes after the gzip stream");
        inflateReset(&zs_);
        continue;
      }
      if (rc == Z_BUF_ERROR && zs_.avail_in == 0) continue;  // needs more input: refilled above
      if (rc != Z_OK)
        gzip_fail(total, std::string("corrupt gzip stream: ") + (zs_.msg != nullptr ? zs_.msg : "zlib error"));
    }
    offset_ += static_cast<int64_t>(total);
    return total;
  }

 private:
  static constexpr size_t kInputBytes = size_t{1} << 18;

  // Reads the next block of the file into the buffer; false at the end of the file.
  bool refill() {
    in_offset_ += in_len_;
    in_pos_ = in_len_ = 0;
    in_len_ = file_.read_some(in_.data(), in_.size());
    return in_len_ > 0;
  }
  // Makes k unread bytes available in the buffer if the file has them.
  bool ensure(size_t k) {
    if (in_len_ - in_pos_ >= k) return true;
    std::memmove(in_.data(), in_.data() + in_pos_, in_len_ - in_pos_);
    in_offset_ += in_pos_;
    in_len_ -= in_pos_;
    in_pos_ = 0;
    while (in_len_ < k) {
      const size_t r = file_.read_some(in_.data() + in_len_, in_.size() - in_len_);
      if (r == 0) return false;
      in_len_ += r;
    }
    return true;
  }
  [[noreturn]] void gzip_fail(size_t produced, const std::string& what) {
    fail_at(path_, offset_ + static_cast<int64_t>(produced),
            detail::concat(what, "; compressed byte offset ", in_offset_ + in_pos_));
  }

  std::string path_;
  io::ReadFile file_;
  std::vector<unsigned char> in_;  // input buffer: bytes [in_pos_, in_len_) are unread
  size_t in_pos_ = 0, in_len_ = 0;
  uint64_t in_offset_ = 0;  // file offset of in_[0]
  z_stream zs_{};
  bool gzip_ = false, inflating_ = false, finished_ = false;
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
