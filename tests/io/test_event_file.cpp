// mixtrain/io/event_file.h: TensorBoard event files. CRC-32C against published check values, the
// bytes of a record against TensorBoard's own encoder, round trips, the file name, and the reader
// on damaged files (every truncation, every flipped byte, lengths that lie) failing with an mt::Error
// that names the record and its offset.
#include "mixtrain/io/event_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "data/file_helpers.h"
#include "io/crc32c.h"
#include "io/tensorboard/tfrecord.h"
#include "support/expect_error.h"

namespace mt = mixtrain;
namespace fs = std::filesystem;
using mt::testing::TempDir;

namespace {

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

uint32_t crc_of(const std::string& s) { return mt::io::crc32c(s.data(), s.size()); }

// The byte offsets where the records of an event file start, from the length fields.
std::vector<uint64_t> record_starts(const std::string& bytes) {
  std::vector<uint64_t> starts;
  uint64_t pos = 0;
  while (pos < bytes.size()) {
    starts.push_back(pos);
    uint64_t len = 0;
    for (int i = 0; i < 8; ++i) len |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[pos + i])) << (8 * i);
    pos += 12 + len + 4;
  }
  EXPECT_EQ(pos, bytes.size());
  return starts;
}

// A small complete file: the file_version record, two scalar events, a session start.
std::string small_event_file(const TempDir& dir) {
  mt::io::EventFileWriter w(dir.file("logs"));
  w.add_scalars(1, {{"train/loss", 2.5}, {"train/lr", 0.001}}, 1700000000.25);
  w.add_scalars(2, {{"train/loss", 2.25}}, 1700000001.0);
  w.start_session(2);
  return mt::testing::read_bytes(w.path());
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

// Seconds since the epoch from the clock the writer reads (time() may lag it by a tick).
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

// ---- CRC-32C -----------------------------------------------------------------------------------

TEST(Crc32c, MatchesPublishedCheckValues) {
  EXPECT_EQ(crc_of("123456789"), 0xE3069283u);  // the CRC catalogue's check value
  // RFC 3720 (iSCSI), appendix B.4.
  EXPECT_EQ(crc_of(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc_of(std::string(32, '\xff')), 0x62A8AB43u);
  std::string up, down;
  for (int i = 0; i < 32; ++i) up += static_cast<char>(i), down += static_cast<char>(31 - i);
  EXPECT_EQ(crc_of(up), 0x46DD794Eu);
  EXPECT_EQ(crc_of(down), 0x113FDB5Cu);
  EXPECT_EQ(crc_of(""), 0u);
}

TEST(Crc32c, ContinuesOverSplitInput) {
  const std::string s = "The quick brown fox jumps over the lazy dog";
  for (size_t cut = 0; cut <= s.size(); ++cut)
    EXPECT_EQ(mt::io::crc32c(s.data() + cut, s.size() - cut, mt::io::crc32c(s.data(), cut)), crc_of(s)) << cut;
}

TEST(Crc32c, MaskRotatesAndOffsets) {
  EXPECT_EQ(mt::io::mask_crc32c(0), 0xa282ead8u);
  // rotr(0x12345678, 15) = 0xACF02468; + 0xa282ead8 = 0x4F730F40 (mod 2^32)
  EXPECT_EQ(mt::io::mask_crc32c(0x12345678u), 0x4F730F40u);
}

// ---- writing -----------------------------------------------------------------------------------

// One scalar record, byte for byte, against what TensorBoard's own Python encoder and RecordWriter
// produce for Event(wall_time=1700000000.5, step=42, summary={value {tag: "train/loss",
// simple_value: 0.25}}): a wrong field number, wire type, CRC or mask changes these bytes.
TEST(EventFile, ScalarRecordMatchesTensorBoardsEncodingByteForByte) {
  TempDir dir;
  mt::io::EventFileWriter w(dir.path());
  const std::string before = mt::testing::read_bytes(w.path());
  w.add_scalars(42, {{"train/loss", 0.25}}, 1700000000.5);
  const std::string bytes = mt::testing::read_bytes(w.path());
  ASSERT_GT(bytes.size(), before.size());
  const std::string record = bytes.substr(before.size());
  const std::string expected = from_hex(
      "2000000000000000"                                                  // length 32, little-endian
      "29eda950"                                                          // masked CRC-32C of those 8 bytes
      "0900002040fc54d941102a2a130a110a0a747261696e2f6c6f7373150000803e"  // the Event
      "01be611b");                                                        // masked CRC-32C of the Event
  EXPECT_EQ(record, expected);
  EXPECT_EQ(mt::io::frame_tfrecord(expected.substr(12, 32)), expected);
}

TEST(EventFile, FirstRecordIsTheFileVersion) {
  TempDir dir;
  mt::io::EventFileWriter w(dir.path());
  const std::string bytes = mt::testing::read_bytes(w.path());
  // One record: 12 + 24 + 4 bytes (wall_time as field 1, then field 3 "brain.Event:2").
  ASSERT_EQ(bytes.size(), 40u);
  EXPECT_EQ(bytes.substr(0, 8), from_hex("1800000000000000"));
  EXPECT_EQ(bytes[12], '\x09');                                                // field 1 (wall_time), 64-bit
  EXPECT_EQ(bytes.substr(21, 15), std::string("\x1a\x0d") + "brain.Event:2");  // field 3 (file_version), 13 bytes
  double wall_time = 0;
  std::memcpy(&wall_time, bytes.data() + 13, 8);
  EXPECT_NEAR(wall_time, now_seconds(), 5.0);
  const mt::io::EventFileContents c = mt::io::read_event_file(w.path());
  EXPECT_EQ(c.file_version, "brain.Event:2");
  EXPECT_TRUE(c.scalars.empty());
  EXPECT_TRUE(c.session_starts.empty());
}

TEST(EventFile, FileNameFollowsTensorBoardsPattern) {
  TempDir dir;
  const auto before = static_cast<long long>(std::floor(now_seconds()));
  mt::io::EventFileWriter w(dir.file("a/b"));  // missing parents are created
  const auto after = static_cast<long long>(std::floor(now_seconds()));
  EXPECT_EQ(fs::path(w.path()).parent_path(), fs::path(dir.file("a/b")));
  const std::string name = fs::path(w.path()).filename().string();
  std::smatch m;
  ASSERT_TRUE(
      std::regex_match(name, m, std::regex(R"(events\.out\.tfevents\.(\d{10})\.([A-Za-z0-9._-]+)\.(\d+)\.(\d+))")))
      << name;
  const long long seconds = std::stoll(m[1].str());
  EXPECT_GE(seconds, before);
  EXPECT_LE(seconds, after);
  EXPECT_EQ(m[3].str(), std::to_string(::getpid()));
  // TensorBoard finds event files by "tfevents" in the name.
  EXPECT_NE(name.find("tfevents"), std::string::npos);
}

TEST(EventFile, WritersOpenedTogetherGetDifferentFiles) {
  TempDir dir;
  std::vector<mt::io::EventFileWriter> writers;
  std::set<std::string> paths;
  for (int i = 0; i < 20; ++i) {  // within one second, in practice
    writers.emplace_back(dir.path());
    writers.back().add_scalars(i, {{"x", static_cast<double>(i)}}, 1.0);
    paths.insert(writers.back().path());
  }
  EXPECT_EQ(paths.size(), 20u);
  EXPECT_EQ(dir.entries().size(), 20u);
  for (int i = 0; i < 20; ++i) {
    const auto scalars = mt::io::read_event_scalars(writers[i].path());
    ASSERT_EQ(scalars.size(), 1u);
    EXPECT_EQ(scalars[0].step, i);
    EXPECT_EQ(scalars[0].value, static_cast<float>(i));
  }
}

TEST(EventFile, RoundTripOfManyScalars) {
  TempDir dir;
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  constexpr double kHalfway = 3.4028235677973366e38;  // float's largest value + half its spacing there
  // Written at tag 0 of the first steps, and what is read back: beyond float's range +-inf, as IEEE
  // rounding gives (a tie goes to the even one, inf); just below the halfway point float's largest.
  const std::vector<double> specials = {0.0,          -0.0,    1e-45,        -3.5,
                                        1e39,         -1e39,   3.4028235e38, std::numeric_limits<double>::infinity(),
                                        std::nan(""), kHalfway};
  const std::vector<float> special_floats = {0.0f, -0.0f, 1e-45f, -3.5f, inf, -inf, std::numeric_limits<float>::max(),
                                             inf,  nan,   inf};
  std::vector<mt::io::ScalarEvent> expected;
  std::string path;
  {
    mt::io::EventFileWriter w(dir.path());
    path = w.path();
    for (int64_t step = 0; step < 400; ++step) {
      std::vector<std::pair<std::string, double>> scalars;
      const double wall_time = 1.7e9 + 0.125 * static_cast<double>(step);
      for (int t = 0; t < 5; ++t) {
        const bool special = t == 0 && step < static_cast<int64_t>(specials.size());
        const double v = special ? specials[step] : std::sin(0.01 * static_cast<double>(step * 7 + t)) * 1e3;
        const std::string tag = "group" + std::to_string(t % 2) + "/tag" + std::to_string(t) + (t == 4 ? " é" : "");
        scalars.emplace_back(tag, v);
        expected.push_back({step * 1000 - 7, wall_time, tag, special ? special_floats[step] : static_cast<float>(v)});
      }
      w.add_scalars(step * 1000 - 7, scalars, wall_time);
    }
    w.flush();
  }
  const std::vector<mt::io::ScalarEvent> got = mt::io::read_event_scalars(path);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].step, expected[i].step) << i;
    EXPECT_EQ(got[i].wall_time, expected[i].wall_time) << i;
    EXPECT_EQ(got[i].tag, expected[i].tag) << i;
    EXPECT_TRUE(same_bits(got[i].value, expected[i].value)) << i << ": " << got[i].value << " vs " << expected[i].value;
  }
  EXPECT_TRUE(std::signbit(got[1 * 5].value) && got[1 * 5].value == 0.0f);  // -0 kept
  EXPECT_EQ(got[6 * 5].value, std::numeric_limits<float>::max());
  EXPECT_TRUE(std::isnan(got[8 * 5].value));
  EXPECT_EQ(got[9 * 5].value, inf);
}

TEST(EventFile, SessionStartsAreRecordedInOrder) {
  TempDir dir;
  mt::io::EventFileWriter w(dir.path());
  w.add_scalars(5, {{"a", 1.0}});
  w.start_session(3);
  w.add_scalars(3, {{"a", 2.0}});
  w.start_session(9);
  const mt::io::EventFileContents c = mt::io::read_event_file(w.path());
  EXPECT_EQ(c.session_starts, (std::vector<int64_t>{3, 9}));
  ASSERT_EQ(c.scalars.size(), 2u);
  EXPECT_EQ(c.scalars[1].step, 3);
  EXPECT_EQ(c.scalars[1].value, 2.0f);
  EXPECT_NEAR(c.scalars[0].wall_time, now_seconds(), 5.0);  // default: now
}

TEST(EventFile, RefusesBadTagsAndTimes) {
  TempDir dir;
  mt::io::EventFileWriter w(dir.path());
  const std::string before = mt::testing::read_bytes(w.path());
  EXPECT_MT_ERROR(w.add_scalars(1, {{"ok", 1.0}, {"", 2.0}}), "EventFileWriter", "tag");
  EXPECT_MT_ERROR(w.add_scalars(1, {{"bad\xff", 1.0}}), "EventFileWriter", "UTF-8");
  EXPECT_MT_ERROR(w.add_scalars(1, {{"\xed\xa0\x80", 1.0}}), "UTF-8");  // a surrogate
  EXPECT_MT_ERROR(w.add_scalars(1, {{std::string(1025, 'x'), 1.0}}), "1024 bytes");
  EXPECT_MT_ERROR(w.add_scalars(1, {{"a", 1.0}}, std::nan("")), "wall_time");
  w.add_scalars(1, {});  // nothing
  EXPECT_EQ(mt::testing::read_bytes(w.path()), before);
}

TEST(EventFile, AFullDiskIsAnErrorAndLeavesWholeRecords) {
  TempDir dir;
  mt::io::EventFileWriter w(dir.path());
  w.add_scalars(1, {{"loss", 1.0}}, 1.0);
  const std::string before = mt::testing::read_bytes(w.path());
  {
    mt::testing::FileSizeLimit limit(before.size() + 10);  // room for 10 bytes of the next record
    if (!limit.ok()) GTEST_SKIP() << "cannot set RLIMIT_FSIZE";
    EXPECT_MT_ERROR(w.add_scalars(2, {{"loss", 0.5}, {"lr", 0.1}}, 2.0), "EventFileWriter", "cannot append", w.path());
  }
  EXPECT_EQ(mt::testing::read_bytes(w.path()), before);  // the partial record was cut off again
  w.add_scalars(3, {{"loss", 0.25}}, 3.0);
  const auto scalars = mt::io::read_event_scalars(w.path());
  ASSERT_EQ(scalars.size(), 2u);
  EXPECT_EQ(scalars[1].step, 3);
}

TEST(EventFile, AnExistingFileIsNeverAppendedTo) {
  TempDir dir;
  // AppendMode::kCreateNew, which the writer opens with: a file of the chosen name is refused.
  mt::testing::write_bytes(dir.file("taken"), "x");
  EXPECT_MT_ERROR(mt::io::AppendFile(dir.file("taken"), "test", mt::io::AppendMode::kCreateNew), "taken",
                  "File exists");
}

// ---- reading damaged files ---------------------------------------------------------------------

TEST(EventFileReader, EveryTruncationIsAnErrorNamingTheCutRecord) {
  TempDir dir;
  const std::string bytes = small_event_file(dir);
  const std::vector<uint64_t> starts = record_starts(bytes);
  ASSERT_EQ(starts.size(), 4u);
  const std::string path = dir.file("cut");
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    SCOPED_TRACE("cut at " + std::to_string(cut));
    mt::testing::write_bytes(path, bytes.substr(0, cut));
    size_t record = 0;
    while (record + 1 < starts.size() && starts[record + 1] <= cut) ++record;
    if (cut == 0) {
      EXPECT_MT_ERROR(mt::io::read_event_file(path), "read_event_file", path, "empty", "byte offset 0");
    } else if (cut == starts[record]) {  // a whole number of records: a valid, shorter file
      const auto c = mt::io::read_event_file(path);
      EXPECT_EQ(c.file_version, "brain.Event:2");
      EXPECT_EQ(c.scalars.size(), record == 1 ? 0u : record == 2 ? 2u : 3u);
    } else {
      EXPECT_MT_ERROR(mt::io::read_event_file(path), "read_event_file", path, "truncated",
                      "record " + std::to_string(record) + " (at byte offset " + std::to_string(starts[record]) + ")");
    }
  }
}

TEST(EventFileReader, EveryFlippedByteIsACrcErrorNamingItsRecord) {
  TempDir dir;
  const std::string bytes = small_event_file(dir);
  const std::vector<uint64_t> starts = record_starts(bytes);
  const std::string path = dir.file("flipped");
  for (size_t at = 0; at < bytes.size(); ++at) {
    SCOPED_TRACE("byte " + std::to_string(at));
    std::string damaged = bytes;
    damaged[at] = static_cast<char>(damaged[at] ^ 0x10);
    mt::testing::write_bytes(path, damaged);
    size_t record = 0;
    while (record + 1 < starts.size() && starts[record + 1] <= at) ++record;
    const uint64_t within = at - starts[record];
    // The length and its CRC (header) are checked before the length is used.
    const std::string what = within < 12 ? "CRC of the length field does not match" : "data bytes does not match";
    EXPECT_MT_ERROR(mt::io::read_event_file(path), path, what,
                    "record " + std::to_string(record) + " (at byte offset " + std::to_string(starts[record]) + ")");
  }
}

// A header whose CRC is right but whose length is not: checked against the limit and against what is
// left of the file before anything is allocated.
TEST(EventFileReader, LyingLengthsAreRefusedBeforeAllocating) {
  TempDir dir;
  const std::string path = dir.file("lie");
  auto header = [](uint64_t len) {
    std::string h(8, '\0');
    for (int i = 0; i < 8; ++i) h[i] = static_cast<char>((len >> (8 * i)) & 0xff);
    const uint32_t crc = mt::io::mask_crc32c(mt::io::crc32c(h.data(), 8));
    for (int i = 0; i < 4; ++i) h += static_cast<char>((crc >> (8 * i)) & 0xff);
    return h;
  };
  const std::string first = mt::io::frame_tfrecord(from_hex("0900000000000000401a0d627261696e2e4576656e743a32"));
  for (uint64_t len : {~uint64_t{0}, uint64_t{1} << 40, mt::io::kMaxEventRecordBytes + 1}) {
    mt::testing::write_bytes(path, first + header(len) + "abcd");
    EXPECT_MT_ERROR(mt::io::read_event_file(path), "record 1 (at byte offset 40)", std::to_string(len),
                    "above the limit of 16777216");
  }
  for (uint64_t len : {uint64_t{1000}, uint64_t{5}, uint64_t{1}}) {
    mt::testing::write_bytes(path, first + header(len) + "abcd");  // 4 bytes where len + 4 are needed
    EXPECT_MT_ERROR(mt::io::read_event_file(path), "record 1 (at byte offset 40)", "truncated",
                    "needs " + std::to_string(len) + " data bytes");
  }
  mt::testing::write_bytes(path, first + header(0) + "abcd");  // an empty record with a bad CRC
  EXPECT_MT_ERROR(mt::io::read_event_file(path), "record 1 (at byte offset 40)", "the CRC of the 0 data bytes");
}

TEST(EventFileReader, RefusesWhatIsNotAnEventFile) {
  TempDir dir;
  const std::string path = dir.file("f");
  // Well framed, but not an Event: field 1 with wire type 7 (no such type).
  mt::testing::write_bytes(path, mt::io::frame_tfrecord(from_hex("0900000000000000401a0d627261696e2e4576656e743a32")) +
                                     mt::io::frame_tfrecord("\x0f\x01\x02"));
  EXPECT_MT_ERROR(mt::io::read_event_file(path), path, "record 1 (at byte offset 40)", "not an Event");
  // A text file.
  mt::testing::write_bytes(path, "step,loss\n1,2.5\n");
  EXPECT_MT_ERROR(mt::io::read_event_file(path), path, "record 0 (at byte offset 0)");
  // A directory.
  EXPECT_MT_ERROR(mt::io::read_event_file(dir.path()), dir.path(), "not a regular file", "directory");
  // A missing file.
  EXPECT_MT_ERROR(mt::io::read_event_file(dir.file("missing")), "cannot open");
  // Above the size limit (a sparse file: nothing is written or read).
  mt::testing::write_bytes(path, "");
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(mt::io::kMaxEventFileBytes + 1)), 0);
  EXPECT_MT_ERROR(mt::io::read_event_file(path), path, std::to_string(mt::io::kMaxEventFileBytes + 1),
                  "above the limit");
}

// Events of kinds this reader does not know (another writer's images, graphs, source metadata) are
// skipped, not refused: TensorFlow's and TensorBoard's own files read.
TEST(EventFileReader, SkipsEventsAndValuesItDoesNotKnow) {
  TempDir dir;
  const std::string path = dir.file("other");
  std::string bytes;
  // Encoded by TensorBoard's Python protobuf classes:
  // Event{wall_time: 2, file_version: "brain.Event:2", source_metadata {writer: "x"}} (field 10)
  bytes += mt::io::frame_tfrecord(from_hex("0900000000000000401a0d627261696e2e4576656e743a3252030a0178"));
  // Event{step: 3, graph_def: "gg"} (field 4)
  bytes += mt::io::frame_tfrecord(from_hex("100322026767"));
  // Event{step: 3, summary {value {tag: "a", simple_value: 0}, value {tag: "h", histo {num: 1}}}}
  bytes += mt::io::frame_tfrecord(from_hex("10032a1a0a080a016115000000000a0e0a01682a0919000000000000f03f"));
  mt::testing::write_bytes(path, bytes);
  const auto c = mt::io::read_event_file(path);
  EXPECT_EQ(c.file_version, "brain.Event:2");
  ASSERT_EQ(c.scalars.size(), 1u);
  EXPECT_EQ(c.scalars[0].tag, "a");
  EXPECT_EQ(c.scalars[0].step, 3);
  EXPECT_TRUE(same_bits(c.scalars[0].value, 0.0f));  // 0.0 is present, not "no value"
}
