// TFRecord framing, the container of TensorBoard's event files (TensorFlow's
// tensorflow/core/lib/io/record_writer.cc): each record is
//   uint64 length (little-endian) | uint32 masked CRC-32C of those 8 bytes | length bytes of data |
//   uint32 masked CRC-32C of the data
// with no file header and no padding. Framing and reading are apart from the Event messages inside
// (event_file_writer.cpp, event_file_reader.cpp), which protobuf encodes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "mixtrain/io/file.h"

namespace mixtrain::io {

inline constexpr uint64_t kTfRecordHeaderBytes = 12;  // length + its CRC
inline constexpr uint64_t kTfRecordFooterBytes = 4;   // the data's CRC

// One record: header, data, footer, ready for a single append.
std::string frame_tfrecord(std::string_view data);

// Reads the records of a file in order, trusting nothing: every CRC is checked, and a length is
// checked against `max_record_bytes` and against the bytes left in the file before anything is
// allocated for it. Every error is an mt::Error "<who>: '<path>': record <i> (at byte offset <o>):
// <what>", <o> being where that record starts.
class TfRecordReader {
 public:
  TfRecordReader(const ReadFile& file, std::string who, uint64_t max_record_bytes);

  // The next record's data into *data; false at the end of the file, which must fall just after a
  // whole record (a cut-off last record is an error, not the end).
  bool next(std::string* data);
  // The index (from 0) and start offset of the record next() returned last.
  uint64_t index() const { return index_ - 1; }
  uint64_t offset() const { return record_offset_; }
  // Throws the error above for the record next() returned last.
  [[noreturn]] void fail(std::string_view what) const;

 private:
  [[noreturn]] void fail_at(uint64_t index, uint64_t offset, std::string_view what) const;

  const ReadFile& file_;
  std::string who_;
  uint64_t max_record_bytes_;
  uint64_t pos_ = 0;            // where the next record starts
  uint64_t index_ = 0;          // records returned so far
  uint64_t record_offset_ = 0;  // where the last returned record starts
};

}  // namespace mixtrain::io
