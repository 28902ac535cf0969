// Readers of untrusted files, at their shared roots: JSON that stops at the last byte (no NUL
// ending the parse, nothing but whitespace after the value), files checked against the model from
// their header before anything is allocated, bounded messages, the run directory's lock, and a saved
// GPT-2 config that keeps every key of its source.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/file_helpers.h"
#include "mixtrain/io/checkpoint.h"
#include "mixtrain/io/file.h"
#include "mixtrain/io/hf_gpt2.h"
#include "mixtrain/io/safetensors.h"
#include "mixtrain/mixtrain.h"
#include "support/expect_error.h"

namespace mt = mixtrain;
using mt::testing::TempDir;
using mt::testing::write_bytes;

namespace {

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

// A valid one-tensor file with `tail` appended to its JSON header (the header length covers it).
std::string safetensors_with_header_tail(const std::string& tail) {
  std::string header = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})" + tail;
  return le64(header.size()) + header + std::string(4, '\0');
}

// Every kind of trailing byte after a JSON value.
struct Tail {
  std::string bytes;
  bool json_allows;  // JSON's own whitespace
};
const std::vector<Tail>& tails() {
  static const std::vector<Tail> t = {
      {std::string("\0", 1), false},         {std::string("\0garbage}{", 10), false},
      {"garbage", false},                    {"}", false},
      {"{}", false},                         {"\x01", false},
      {"\xff", false},                       {"  ", true},
      {"\n", true},                          {"\t \r\n", true},
      {std::string(" \0", 2), false},
  };
  return t;
}

const char* kConfig = R"({"model_type":"gpt2","n_embd":8,"n_head":2,"n_layer":1,"n_positions":8,"vocab_size":16})";

}  // namespace

TEST(UntrustedJson, SafetensorsHeadersAcceptOnlySpacesAfterTheObject) {
  TempDir dir;
  for (const Tail& t : tails()) {
    SCOPED_TRACE(mt::detail::quote_untrusted(t.bytes));
    write_bytes(dir.file("f.safetensors"), safetensors_with_header_tail(t.bytes));
    const bool spaces_only = t.bytes.find_first_not_of(' ') == std::string::npos;
    const mt::testing::Caught c = mt::testing::catch_error([&] { mt::io::load_safetensors(dir.file("f.safetensors")); });
    if (spaces_only) {
      EXPECT_EQ(c.message, "no exception");
    } else {
      EXPECT_TRUE(c.is_mt_error) << c.message;
      EXPECT_NE(c.message.find("f.safetensors"), std::string::npos) << c.message;
    }
  }
}

TEST(UntrustedJson, GptConfigsAcceptOnlyWhitespaceAfterTheObject) {
  for (const Tail& t : tails()) {
    SCOPED_TRACE(mt::detail::quote_untrusted(t.bytes));
    const mt::testing::Caught c =
        mt::testing::catch_error([&] { mt::io::parse_gpt2_config(std::string(kConfig) + t.bytes, "'config.json'"); });
    if (t.json_allows)
      EXPECT_EQ(c.message, "no exception");
    else
      EXPECT_TRUE(c.is_mt_error && c.message.find("'config.json'") != std::string::npos) << c.message;
  }
}

TEST(UntrustedJson, CheckpointMetadataAcceptsOnlyWhitespaceAfterTheValue) {
  for (const Tail& t : tails()) {
    SCOPED_TRACE(mt::detail::quote_untrusted(t.bytes));
    mt::io::Checkpoint ck;
    ck.metadata["step"] = "3" + t.bytes;
    const mt::testing::Caught c = mt::testing::catch_error([&] { (void)ck.meta_int("step"); });
    if (t.json_allows)
      EXPECT_EQ(c.message, "no exception");
    else
      EXPECT_TRUE(c.is_mt_error && c.message.find("'step'") != std::string::npos) << c.message;
  }
}

TEST(UntrustedJson, AHugeNumberIsQuotedBounded) {
  const std::string digits(100000, '7');
  const std::string text = R"({"model_type":"gpt2","n_embd":)" + digits + "}";
  const std::string msg = mt::testing::error_message([&] { mt::io::parse_gpt2_config(text, "'config.json'"); });
  EXPECT_NE(msg.find("'config.json'"), std::string::npos) << msg;
  EXPECT_LT(msg.size(), 600u) << msg.substr(0, 600);
}

TEST(BoundedMessages, LoadStateDictIsOneBoundedLine) {
  mt::nn::Linear model(4, 2);
  mt::nn::StateDict dict;
  for (int i = 0; i < 200; ++i) dict.insert(std::string(1000, 'k') + std::to_string(i) + "\n\x1b[2J", mt::zeros({1}));
  const std::string msg = mt::testing::error_message([&] { model.load_state_dict(dict); });
  EXPECT_LT(msg.size(), 1200u) << msg.substr(0, 1200);
  EXPECT_EQ(msg.find('\n'), std::string::npos);
  EXPECT_EQ(msg.find('\x1b'), std::string::npos);
  EXPECT_NE(msg.find("196 more"), std::string::npos) << msg.substr(0, 1200);
  EXPECT_NE(msg.find("missing keys"), std::string::npos);
}

// A sparse file declaring a 40 GiB tensor: refused by name from the header, nothing allocated.
TEST(ValidateBeforeAllocating, AHugeDeclaredTensorIsRefusedFromTheHeader) {
  TempDir dir;
  const uint64_t bytes = uint64_t{40} << 30;
  auto huge_file = [&](const std::string& name, const std::string& tensor, const std::string& meta) {
    std::string header = "{" + meta + "\"" + tensor + "\":{\"dtype\":\"F32\",\"shape\":[" + std::to_string(bytes / 4) +
                         "],\"data_offsets\":[0," + std::to_string(bytes) + "]}}";
    header.append((8 - header.size() % 8) % 8, ' ');
    const std::string path = dir.file(name);
    write_bytes(path, le64(header.size()) + header);
    std::filesystem::resize_file(path, 8 + header.size() + bytes);  // sparse: no disk used
    return path;
  };
  const int64_t before = mt::memory::stats(mt::Device{}).peak_bytes;

  // GPT-2 weights: a name the model has, with another shape.
  mt::nn::GPT2Config config;
  config.vocab_size = 16;
  config.n_positions = 8;
  config.n_embd = 8;
  config.n_layer = 1;
  config.n_head = 2;
  mt::nn::GPT2 gpt(config);
  const std::string hf = huge_file("hf.safetensors", "transformer.wte.weight", "");
  std::string msg = mt::testing::error_message([&] { mt::io::load_hf_gpt2_weights(gpt, hf); });
  EXPECT_NE(msg.find("hf.safetensors"), std::string::npos) << msg;

  // A training checkpoint: a model tensor of another shape.
  const std::string ck = huge_file("ck.safetensors", "model.1.weight", R"("__metadata__":{"mixtrain.checkpoint":"1"},)");
  auto model = std::make_shared<mt::nn::Sequential>(mt::nn::Flatten(), mt::nn::Linear(16, 4));
  const mt::data::SyntheticDataset data(16, {1, 4, 4}, 4, 3);
  mt::train::TrainerOptions o;
  o.batch_size = 4;
  o.max_steps = 1;
  o.resume_from = ck;
  mt::train::Trainer trainer(*model, mt::train::adamw(1e-3, 0.0), data, nullptr, o);
  msg = mt::testing::error_message([&] { trainer.load_checkpoint(ck); });
  EXPECT_NE(msg.find("ck.safetensors"), std::string::npos) << msg;

  EXPECT_LT(mt::memory::stats(mt::Device{}).peak_bytes - before, int64_t{1} << 30);
}

TEST(DirectoryLock, ASecondProcessIsRefusedNamingTheDirectoryAndTheHolder) {
  TempDir dir;
  const std::string run = dir.file("run");
  auto lock = mt::io::DirectoryLock::acquire(run, "test");
  EXPECT_EQ(mt::io::DirectoryLock::acquire(run, "test"), lock);  // the same process shares it
  const pid_t child = ::fork();
  if (child == 0) {
    // Another process: refused, with the directory and our pid in the message.
    const mt::testing::Caught c = mt::testing::catch_error([&] { mt::io::DirectoryLock::acquire(run, "test"); });
    const bool ok = c.is_mt_error && c.message.find(run) != std::string::npos &&
                    c.message.find("process " + std::to_string(::getppid())) != std::string::npos;
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);

  lock.reset();  // released: another process takes it
  const pid_t second = ::fork();
  if (second == 0) {
    const mt::testing::Caught c = mt::testing::catch_error([&] { mt::io::DirectoryLock::acquire(run, "test"); });
    ::_exit(c.message == "no exception" ? 0 : 1);
  }
  ASSERT_EQ(::waitpid(second, &status, 0), second);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST(Gpt2Config, ASavedConfigKeepsEveryKeyOfItsSource) {
  const std::string source = mt::testing::read_bytes(std::string(MIXTRAIN_TEST_FIXTURES) + "/tiny-gpt2/config.json");
  const mt::nn::GPT2Config c = mt::io::parse_gpt2_config(source, "fixture");
  const nlohmann::json in = nlohmann::json::parse(source);
  const nlohmann::json out = nlohmann::json::parse(mt::io::gpt2_config_json(c, source));
  for (const auto& [key, value] : in.items()) {
    ASSERT_TRUE(out.contains(key)) << key;
    EXPECT_EQ(out.at(key), value) << key;
  }
  // Without a source: mixtrain's own keys only.
  EXPECT_FALSE(nlohmann::json::parse(mt::io::gpt2_config_json(c)).contains("bos_token_id"));
}
