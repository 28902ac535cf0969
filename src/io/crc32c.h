// CRC-32C (Castagnoli), the checksum of TFRecord framing (TensorBoard's event files,
// src/io/tensorboard/). Written here because protobuf does not provide it and Debian 12 packages no
// C/C++ crc32c library (docs/notes/tensorboard.md); a table per byte is fast enough for a few
// records per training step.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mixtrain::io {

// The CRC-32C of n bytes (reflected polynomial 0x82F63B78, initial value and final xor 0xFFFFFFFF):
// crc32c("123456789") == 0xE3069283. `crc` continues an earlier result over the bytes that follow:
// crc32c(b, nb, crc32c(a, na)) == crc32c(a + b).
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);

// TFRecord's masked form of a CRC, the one stored in files: rotated right by 15 bits and offset.
// TensorFlow masks because the CRC of data that itself holds CRCs (a record inside a record) is
// weak; the mask is part of the format, so every reader and writer of it applies the same one.
constexpr uint32_t mask_crc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

}  // namespace mixtrain::io
