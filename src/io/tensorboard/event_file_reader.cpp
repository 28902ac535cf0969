// read_event_file (mixtrain/io/event_file.h): TFRecords checked by TfRecordReader, each an Event
// that protobuf parses from bytes already bounded and CRC-checked.
#include <string>

#include "io/tensorboard/event.pb.h"
#include "io/tensorboard/tfrecord.h"
#include "mixtrain/error.h"
#include "mixtrain/io/event_file.h"

namespace mixtrain::io {

namespace pb = mixtrain::tensorboard;

EventFileContents read_event_file(const std::string& path) {
  constexpr const char* kWho = "read_event_file";
  const ReadFile file(path, kWho);
  MT_CHECK(file.size() <= kMaxEventFileBytes, kWho, ": '", path, "' has ", file.size(), " bytes, above the limit of ",
           kMaxEventFileBytes);
  MT_CHECK(file.size() > 0, kWho, ": '", path,
           "' is empty (at byte offset 0): an event file holds at least its file_version record");
  TfRecordReader records(file, kWho, kMaxEventRecordBytes);
  EventFileContents out;
  bool have_version = false;
  std::string data;
  pb::Event event;
  while (records.next(&data)) {
    event.Clear();
    if (!event.ParseFromString(data)) records.fail("not an Event protocol buffer");
    switch (event.what_case()) {
      case pb::Event::kFileVersion:
        if (!have_version) out.file_version = event.file_version();
        have_version = true;
        break;
      case pb::Event::kSummary:
        for (const pb::Summary::Value& v : event.summary().value()) {
          if (v.value_case() != pb::Summary::Value::kSimpleValue) continue;  // not a scalar
          out.scalars.push_back({event.step(), event.wall_time(), v.tag(), v.simple_value()});
        }
        break;
      case pb::Event::kSessionLog:
        if (event.session_log().status() == pb::SessionLog::START) out.session_starts.push_back(event.step());
        break;
      default: break;  // a kind of event this reader does not know
    }
  }
  return out;
}

std::vector<ScalarEvent> read_event_scalars(const std::string& path) { return read_event_file(path).scalars; }

}  // namespace mixtrain::io
