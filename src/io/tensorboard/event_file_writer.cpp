// EventFileWriter (mixtrain/io/event_file.h): Events encoded by protobuf, framed as TFRecords.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <string_view>
#include <system_error>

#include "io/tensorboard/event.pb.h"
#include "io/tensorboard/tfrecord.h"
#include "mixtrain/error.h"
#include "mixtrain/io/event_file.h"

namespace mixtrain::io {

namespace fs = std::filesystem;
namespace pb = mixtrain::tensorboard;

namespace {

constexpr const char* kWho = "EventFileWriter";
constexpr size_t kMaxTagBytes = 1024;

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The host name as a file-name part: anything but [A-Za-z0-9._-] becomes '_' (a '/' would make a
// path of it), and an unknown one is "localhost".
std::string host_name_part() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "localhost";
  std::string s(buf);
  for (char& c : s) {
    const bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_';
    if (!ok) c = '_';
  }
  return s;
}

// Writers opened by this process so far: the last part of the file name.
std::atomic<uint64_t> writers_opened{0};

// Strict UTF-8 (no overlong forms, surrogates or code points above U+10FFFF): what TensorBoard's
// protobuf decoder accepts in a string field.
bool is_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    uint32_t cp = 0, min = 0;
    if (b0 < 0x80) {
      ++i;
      continue;
    }
    if ((b0 & 0xE0) == 0xC0) {
      n = 1, cp = b0 & 0x1F, min = 0x80;
    } else if ((b0 & 0xF0) == 0xE0) {
      n = 2, cp = b0 & 0x0F, min = 0x800;
    } else if ((b0 & 0xF8) == 0xF0) {
      n = 3, cp = b0 & 0x07, min = 0x10000;
    } else {
      return false;
    }
    if (s.size() - i <= n) return false;
    for (size_t k = 1; k <= n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (b & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

// The float TensorBoard stores for v, rounded to nearest; beyond float's range +-inf, as IEEE
// rounding gives (a plain cast of such a double is undefined behaviour in C++).
float to_float(double v) {
  constexpr double kMax = std::numeric_limits<float>::max();
  constexpr double kHalfUlpAtMax = 0x1p103;  // float's spacing at its largest values is 2^104
  if (std::isfinite(v) && std::fabs(v) > kMax) {
    const float big = std::fabs(v) >= kMax + kHalfUlpAtMax ? std::numeric_limits<float>::infinity()
                                                           : std::numeric_limits<float>::max();
    return v < 0 ? -big : big;
  }
  return static_cast<float>(v);
}

std::string serialize(const pb::Event& event) {
  std::string bytes;
  const bool ok = event.SerializeToString(&bytes);
  MT_INTERNAL_ASSERT(ok, kWho, ": an Event did not serialize");
  return bytes;
}

}  // namespace

EventFileWriter::EventFileWriter(const std::string& dir) {
  MT_CHECK(!dir.empty(), kWho, ": the log directory is empty (give a path)");
  std::error_code ec;
  fs::create_directories(dir, ec);
  MT_CHECK(!ec, kWho, ": cannot create the log directory ", detail::quote_untrusted(dir, 256), ": ", ec.message());
  const double now = now_seconds();
  const std::string host = host_name_part();
  // The name is checked free first and then created exclusively: a name taken after the check (a
  // foreign file of the same name) is an error, never a shared file.
  for (int attempt = 0;; ++attempt) {
    char stamp[32];
    std::snprintf(stamp, sizeof(stamp), "%010lld", static_cast<long long>(std::floor(now)));
    const std::string name =
        detail::concat("events.out.tfevents.", stamp, ".", host, ".", ::getpid(), ".", writers_opened.fetch_add(1));
    path_ = (fs::path(dir) / name).string();
    if (!fs::exists(fs::symlink_status(path_, ec))) break;
    MT_CHECK(attempt < 1000, kWho, ": no free event file name in ", detail::quote_untrusted(dir, 256), " (last tried ",
             detail::quote_untrusted(name, 256), ")");
  }
  file_ = AppendFile(path_, kWho, AppendMode::kCreateNew);
  pb::Event event;
  event.set_wall_time(now);
  event.set_file_version(kEventFileVersion);
  append_event(serialize(event));
}

void EventFileWriter::append_event(const std::string& serialized) {
  MT_CHECK(file_.is_open(), kWho, ": this writer was moved from");
  MT_CHECK(serialized.size() <= kMaxEventRecordBytes, kWho, ": an Event of ", serialized.size(),
           " bytes is above the record limit of ", kMaxEventRecordBytes, " bytes (too many scalars at once)");
  file_.append(frame_tfrecord(serialized));
}

void EventFileWriter::add_scalars(int64_t step, const std::vector<std::pair<std::string, double>>& scalars,
                                  double wall_time) {
  if (scalars.empty()) return;
  MT_CHECK(!std::isnan(wall_time) && !std::isinf(wall_time), kWho, ": wall_time ", wall_time,
           " is not a time (seconds since the Unix epoch, or negative for now)");
  pb::Event event;
  event.set_wall_time(wall_time < 0 ? now_seconds() : wall_time);
  event.set_step(step);
  pb::Summary* summary = event.mutable_summary();
  for (const auto& [tag, value] : scalars) {
    MT_CHECK(!tag.empty() && tag.size() <= kMaxTagBytes && is_utf8(tag), kWho, ": the tag ",
             detail::quote_untrusted(tag), " at step ", step, " is not 1 to ", kMaxTagBytes, " bytes of UTF-8");
    pb::Summary::Value* v = summary->add_value();
    v->set_tag(tag);
    v->set_simple_value(to_float(value));
  }
  append_event(serialize(event));
}

void EventFileWriter::start_session(int64_t step) {
  pb::Event event;
  event.set_wall_time(now_seconds());
  event.set_step(step);
  event.mutable_session_log()->set_status(pb::SessionLog::START);
  append_event(serialize(event));
}

void EventFileWriter::flush() {
  MT_CHECK(file_.is_open(), kWho, ": this writer was moved from");
  file_.sync();
}

}  // namespace mixtrain::io
