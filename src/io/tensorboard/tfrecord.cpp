// TFRecord framing and its checked reader (src/io/tensorboard/tfrecord.h).
#include "io/tensorboard/tfrecord.h"

#include <cstdio>
#include <utility>

#include "io/crc32c.h"
#include "mixtrain/error.h"

namespace mixtrain::io {

namespace {

void put_le(char* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xffu);
}

uint64_t get_le(const char* in, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(in[i])) << (8 * i);
  return v;
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

}  // namespace

std::string frame_tfrecord(std::string_view data) {
  std::string out(kTfRecordHeaderBytes + data.size() + kTfRecordFooterBytes, '\0');
  put_le(out.data(), data.size(), 8);
  put_le(out.data() + 8, mask_crc32c(crc32c(out.data(), 8)), 4);
  out.replace(kTfRecordHeaderBytes, data.size(), data);
  put_le(out.data() + kTfRecordHeaderBytes + data.size(), mask_crc32c(crc32c(data.data(), data.size())), 4);
  return out;
}

TfRecordReader::TfRecordReader(const ReadFile& file, std::string who, uint64_t max_record_bytes)
    : file_(file), who_(std::move(who)), max_record_bytes_(max_record_bytes) {}

void TfRecordReader::fail_at(uint64_t index, uint64_t offset, std::string_view what) const {
  MT_FAIL(who_, ": '", file_.path(), "': record ", index, " (at byte offset ", offset, "): ", what);
}

void TfRecordReader::fail(std::string_view what) const { fail_at(index(), record_offset_, what); }

bool TfRecordReader::next(std::string* data) {
  const uint64_t size = file_.size();
  if (pos_ == size) return false;
  const uint64_t left = size - pos_;
  if (left < kTfRecordHeaderBytes)
    fail_at(index_, pos_,
            detail::concat("truncated: ", left, " bytes left where a record header needs ", kTfRecordHeaderBytes,
                           " (a cut-off last record)"));
  char header[kTfRecordHeaderBytes];
  file_.read_at(header, sizeof(header), pos_);
  // The length's own CRC first: a damaged length is named as such, not as a short file.
  const uint32_t stored_length_crc = static_cast<uint32_t>(get_le(header + 8, 4));
  const uint32_t length_crc = mask_crc32c(crc32c(header, 8));
  if (stored_length_crc != length_crc)
    fail_at(index_, pos_,
            detail::concat("the CRC of the length field does not match (stored ", hex32(stored_length_crc),
                           ", computed ", hex32(length_crc), "): a damaged record header"));
  const uint64_t length = get_le(header, 8);
  if (length > max_record_bytes_)
    fail_at(index_, pos_, detail::concat("length ", length, " bytes is above the limit of ", max_record_bytes_));
  const uint64_t after_header = left - kTfRecordHeaderBytes;
  if (length > after_header || after_header - length < kTfRecordFooterBytes)
    fail_at(index_, pos_,
            detail::concat("truncated: the record needs ", length, " data bytes and a ", kTfRecordFooterBytes,
                           "-byte CRC, but only ", after_header, " bytes are left (a cut-off last record)"));
  data->resize(static_cast<size_t>(length));
  file_.read_at(data->data(), length, pos_ + kTfRecordHeaderBytes);
  char footer[kTfRecordFooterBytes];
  file_.read_at(footer, sizeof(footer), pos_ + kTfRecordHeaderBytes + length);
  const uint32_t stored_data_crc = static_cast<uint32_t>(get_le(footer, 4));
  const uint32_t data_crc = mask_crc32c(crc32c(data->data(), data->size()));
  if (stored_data_crc != data_crc)
    fail_at(index_, pos_,
            detail::concat("the CRC of the ", length, " data bytes does not match (stored ", hex32(stored_data_crc),
                           ", computed ", hex32(data_crc), ")"));
  record_offset_ = pos_;
  pos_ += kTfRecordHeaderBytes + length + kTfRecordFooterBytes;
  ++index_;
  return true;
}

}  // namespace mixtrain::io
