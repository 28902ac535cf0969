// mixtrain/io/safetensors.h: the safetensors file format (Hugging Face), for weights and
// checkpoints.
//
// Layout: 8-byte little-endian header length N; N bytes of JSON
//   {"__metadata__":{"k":"v",...},"name":{"dtype":"F32","shape":[2,3],"data_offsets":[b,e]},...}
// padded with spaces so that 8 + N is a multiple of 8; then the data section, where each tensor
// occupies bytes [b, e) (relative to the section), little-endian, row-major, contiguous. Dtypes:
// F32 F16 BF16 F64 I64 I32 U8 BOOL (mixtrain's dtypes; other safetensors dtypes are rejected).
//
// Writing follows the reference implementation (huggingface/safetensors): tensors ordered by
// descending dtype alignment (I64, F64, F32, I32, BF16, F16, U8, BOOL), then by name, which keeps
// every tensor aligned to its element size; "__metadata__" first, its keys sorted. The reference's
// own serialization test vectors are reproduced byte for byte. The write is atomic (io/file.h): a
// temporary file beside `path`, fsync'ed, then renamed over it; on any failure the temporary file is
// removed and an existing `path` is left untouched.
//
// Reading treats the file as hostile: the header length is limited (100 MB, as the reference),
// the JSON must parse with no key twice in any object and no deeper nesting than the format's,
// every entry must have a known dtype, at most 8 dims, a shape whose element count and strides fit
// in int64 and whose byte size matches its offsets, and the offsets must tile the data section
// exactly (no gaps, no overlap, no trailing bytes); BOOL bytes must be 0 or 1. Only regular files
// are opened. Every error is an mt::Error naming the file and the byte offset; names from the file
// are quoted and escaped.
#pragma once

#include <concepts>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "mixtrain/tensor.h"

namespace mixtrain::io {

using Metadata = std::map<std::string, std::string>;
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

// One header entry. Offsets are relative to the data section (add SafetensorsHeader::data_start
// for the file offset).
struct SafetensorsEntry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> tensors;  // in file order (ascending offsets)
  Metadata metadata;
  uint64_t header_bytes = 0;  // N, padding included
  uint64_t data_start = 0;    // 8 + N
  uint64_t file_bytes = 0;
};

struct SafetensorsFile {
  std::map<std::string, Tensor> tensors;  // by name
  Metadata metadata;
};

// Writes `tensors` (any dtype, any strides: written contiguous; CPU tensors) and `metadata`.
// Names must be unique, non-empty and not "__metadata__".
void save_safetensors(const std::string& path, const NamedTensors& tensors, const Metadata& metadata = {});

// The same for a map-like container of (name, Tensor) (std::map, std::unordered_map, ...).
template <typename Map>
requires(!std::same_as<Map, NamedTensors>) && requires(const Map& m) {
  { m.begin()->first } -> std::convertible_to<std::string>;
  { m.begin()->second } -> std::convertible_to<Tensor>;
}
void save_safetensors(const std::string& path, const Map& tensors, const Metadata& metadata = {}) {
  save_safetensors(path, NamedTensors(tensors.begin(), tensors.end()), metadata);
}

// Reads every tensor (new contiguous CPU tensors) and the metadata.
SafetensorsFile load_safetensors(const std::string& path);

// Decides from the header alone (names, dtypes, shapes: nothing allocated or read yet) which entries
// to read: one flag per entry of header.tensors, or an mt::Error that refuses the file. A loader
// that knows what it expects checks it here, so that a file declaring a 40 GiB tensor the model does
// not have is refused at once instead of after allocating it.
using SafetensorsSelect = std::function<std::vector<bool>(const SafetensorsHeader& header)>;

// Reads the tensors `select` picks (the others are absent from the result) and the metadata.
SafetensorsFile load_safetensors(const std::string& path, const SafetensorsSelect& select);

// Reads and validates only the header (no tensor data is read): names, dtypes, shapes, offsets.
SafetensorsHeader read_safetensors_header(const std::string& path);

}  // namespace mixtrain::io
