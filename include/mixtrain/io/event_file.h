// mixtrain/io/event_file.h: TensorBoard event files, written and read back.
//
// An event file is what TensorBoard (and TensorFlow's tf.summary) reads from a log directory: a
// sequence of TFRecord-framed Event protocol buffers (src/io/tensorboard/event.proto holds the part
// of TensorFlow's definition used here; docs/notes/tensorboard.md says why protobuf and what was
// considered). Point TensorBoard at the directory (`tensorboard --logdir DIR`) and every scalar added
// here is a point of the chart named by its tag.
//
// Writing. The writer creates a new file in the directory, named as TensorBoard's own writers name
// theirs:
//   events.out.tfevents.<unix seconds, 10 digits>.<host name>.<process id>.<n>
// n counts the writers this process has opened, so two writers opened in the same second never share
// a file (characters of the host name other than letters, digits, '.', '-' and '_' become '_'). Its
// first record is an Event with file_version "brain.Event:2" and the time of opening. Every record is
// appended with one checked write (io::AppendFile): a full disk is an mt::Error, never a silently
// shorter file, and a process killed at any moment leaves whole records plus at most one cut-off
// last record, which TensorBoard ignores. Records reach the file when they are added; flush() also
// makes them durable.
//
// Resuming. A run resumed from a checkpoint at step S repeats steps S+1, S+2, ... that the crashed
// run may already have logged, possibly with other values. start_session(S + 1) writes a SessionLog
// START event at that step; from file_version 2 on, TensorBoard, on reading it, discards every event
// it has read before it (in any file of the directory, older files are read first) whose step is >=
// S + 1, so the chart shows the steps up to the checkpoint once and then the resumed run's. Events
// written after the marker are kept whatever their step.
//
// Reading (read_event_file) is for tests, tools and fuzzing, and treats the file as hostile: at most
// kMaxEventFileBytes, each record at most kMaxEventRecordBytes and no longer than what is left of the
// file, both CRCs of every record checked, every record a well-formed Event. Any violation, a cut-off
// last record included, is an mt::Error that names the file, the record's index and its byte offset.
// It returns what was written, in file order, without applying session starts.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "mixtrain/io/file.h"

namespace mixtrain::io {

// read_event_file refuses larger files and records (TensorBoard's own scalar files are far smaller;
// the limits bound what a hostile file can make the reader allocate).
inline constexpr uint64_t kMaxEventFileBytes = uint64_t{1} << 30;     // 1 GiB
inline constexpr uint64_t kMaxEventRecordBytes = uint64_t{16} << 20;  // 16 MiB
// What the first record of every file says (TensorBoard honours session_log from version 2).
inline constexpr const char* kEventFileVersion = "brain.Event:2";

class EventFileWriter {
 public:
  // Creates `dir` (and its parents) if missing and a new event file in it (named as above), and
  // writes the file_version record. mt::Error when the directory or the file cannot be created.
  explicit EventFileWriter(const std::string& dir);
  EventFileWriter(EventFileWriter&&) noexcept = default;
  EventFileWriter& operator=(EventFileWriter&&) noexcept = default;

  // Appends one Event at `step` holding one scalar per pair (tag, value), in one record. Values are
  // stored as float, as TensorBoard keeps them (a double beyond float's range becomes +-inf); NaN and
  // infinities are written as they are and TensorBoard shows them. Tags must be non-empty UTF-8
  // (TensorBoard decodes them as such) of at most 1024 bytes; '/' groups charts ("train/loss").
  // `wall_time` is in seconds since the Unix epoch; negative (the default): now. An empty list
  // writes nothing.
  void add_scalars(int64_t step, const std::vector<std::pair<std::string, double>>& scalars, double wall_time = -1);
  // Appends a SessionLog START event at `step`: TensorBoard then drops the events before it whose
  // step is >= `step` (see Resuming above). A run resumed after step S calls start_session(S + 1)
  // before it logs anything.
  void start_session(int64_t step);
  // fsync: what was written survives a crash of the machine (a process crash loses nothing anyway).
  void flush();
  // The file being written.
  const std::string& path() const { return path_; }

 private:
  void append_event(const std::string& serialized);
  std::string path_;
  AppendFile file_;
};

// One scalar of an event file: the Event's step and wall time, the Value's tag and simple_value.
struct ScalarEvent {
  int64_t step = 0;
  double wall_time = 0;
  std::string tag;
  float value = 0;
};

// What read_event_file finds, in file order.
struct EventFileContents {
  std::string file_version;  // of the first record that has one ("" if none)
  std::vector<ScalarEvent> scalars;
  std::vector<int64_t> session_starts;  // steps of the SessionLog START events
};

// Reads an event file (see Reading above). Events and values other than scalars (images,
// histograms, graphs, from other writers) are skipped. mt::Error for a file that is not a regular
// file, larger than kMaxEventFileBytes, empty, or damaged anywhere.
EventFileContents read_event_file(const std::string& path);
// read_event_file(path).scalars.
std::vector<ScalarEvent> read_event_scalars(const std::string& path);

}  // namespace mixtrain::io
