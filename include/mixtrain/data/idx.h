// mixtrain/data/idx.h: the IDX file format of MNIST and Fashion-MNIST.
//
// An IDX file is a 4-byte magic (00 00 <type> <ndims>), ndims big-endian uint32 dimensions, then
// the elements in row-major order, big-endian. Files may be gzip-compressed (detected by the gzip
// magic 1f 8b, not by the file name). The reader treats the file as hostile: every field is
// checked, the element count may not overflow or exceed a size limit, and the data must have
// exactly the declared length. Errors are mt::Error naming the file and the byte offset (offsets
// count decompressed bytes for .gz files).
#pragma once

#include <cstdint>
#include <string>

#include "mixtrain/tensor.h"

namespace mixtrain::data {

// Largest payload read_idx accepts by default (2 GiB; Fashion-MNIST's training images are 47 MB).
inline constexpr int64_t kIdxDefaultMaxBytes = int64_t{1} << 31;

// Reads an IDX file into a new contiguous CPU tensor of the file's shape.
// Element types and the dtype they load as:
//   0x08 unsigned byte -> uint8     0x09 signed byte -> int32     0x0B int16 -> int32
//   0x0C int32 -> int32             0x0D float32 -> float32       0x0E float64 -> float64
// (mixtrain has no int8/int16 dtype, so those widen to int32 exactly.) ndims is 1..8.
// `max_bytes` bounds the decoded payload (in file element sizes), so a hostile header cannot
// make the reader allocate more.
Tensor read_idx(const std::string& path, int64_t max_bytes = kIdxDefaultMaxBytes);

}  // namespace mixtrain::data
