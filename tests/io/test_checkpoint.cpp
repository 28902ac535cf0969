// Training checkpoints: round trip, the format marker, atomic overwrite, and RNG state.
#include <gtest/gtest.h>

#include "data/file_helpers.h"
#include "mixtrain/io/checkpoint.h"
#include "mixtrain/io/safetensors.h"
#include "mixtrain/mixtrain.h"
#include "support/expect_error.h"

namespace mt = mixtrain;
using mt::testing::FileSizeLimit;
using mt::testing::TempDir;

namespace {

mt::io::Checkpoint sample_checkpoint(float fill) {
  mt::io::Checkpoint c;
  c.tensors["model.0.weight"] = mt::full({4, 3}, fill, {.dtype = mt::kBFloat16});
  c.tensors["model.0.bias"] = mt::full({4}, fill, {.dtype = mt::kFloat32});
  c.tensors["optim.0.weight.exp_avg"] = mt::full({4, 3}, fill / 2, {.dtype = mt::kFloat32});
  c.tensors["optim.step_count"] = mt::full({}, 7, {.dtype = mt::kInt64});
  c.set_meta_int("step", 1200);
  c.set_meta_int("epoch", 3);
  c.metadata["scaler"] = R"({"scale":32768.0,"growth_tracker":17})";
  c.metadata["rng"] = mt::io::rng_state();
  return c;
}

}  // namespace

TEST(Checkpoint, RoundTripTensorsAndMetadata) {
  TempDir dir;
  mt::io::Checkpoint c = sample_checkpoint(1.5f);
  mt::io::save_checkpoint(dir.file("ckpt.safetensors"), c);
  mt::io::Checkpoint back = mt::io::load_checkpoint(dir.file("ckpt.safetensors"));
  EXPECT_EQ(back.metadata, c.metadata);  // the format marker is not returned
  ASSERT_EQ(back.tensors.size(), c.tensors.size());
  for (const auto& [name, t] : c.tensors) {
    const mt::Tensor& b = back.tensor(name);
    EXPECT_EQ(b.dtype(), t.dtype()) << name;
    EXPECT_EQ(b.shape(), t.shape()) << name;
    EXPECT_EQ(b.to_vector<double>(), t.to_vector<double>()) << name;
  }
  EXPECT_EQ(back.meta_int("step"), 1200);
  EXPECT_EQ(back.meta_int("epoch"), 3);
  EXPECT_THROW(back.meta_int("scaler"), mt::Error);  // an object, not an integer
  EXPECT_THROW(back.meta("missing"), mt::Error);
  EXPECT_THROW(back.tensor("model.1.weight"), mt::Error);

  // It is a standard safetensors file carrying the marker.
  mt::io::SafetensorsFile raw = mt::io::load_safetensors(dir.file("ckpt.safetensors"));
  EXPECT_EQ(raw.metadata.at(mt::io::kCheckpointVersionKey), "1");
  EXPECT_EQ(raw.tensors.size(), c.tensors.size());
}

TEST(Checkpoint, WeightsOnlyFileAndReservedKey) {
  TempDir dir;
  mt::io::save_safetensors(dir.file("weights.safetensors"), {{"0.weight", mt::zeros({2})}});
  try {
    mt::io::load_checkpoint(dir.file("weights.safetensors"));
    ADD_FAILURE() << "no error";
  } catch (const mt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("load_safetensors"), std::string::npos) << e.what();
  }
  mt::io::save_safetensors(dir.file("future.safetensors"), mt::io::NamedTensors{},
                           {{mt::io::kCheckpointVersionKey, "2"}});
  EXPECT_THROW(mt::io::load_checkpoint(dir.file("future.safetensors")), mt::Error);
  mt::io::Checkpoint c;
  c.metadata[mt::io::kCheckpointVersionKey] = "1";
  EXPECT_THROW(mt::io::save_checkpoint(dir.file("x"), c), mt::Error);
}

TEST(Checkpoint, FailedSaveKeepsThePreviousCheckpoint) {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  mt::io::save_checkpoint(path, sample_checkpoint(1.0f));

  mt::io::Checkpoint big = sample_checkpoint(2.0f);
  big.tensors["model.big"] = mt::zeros({1 << 15});
  mt::testing::Caught caught;
  {
    const FileSizeLimit limit(8192);
    ASSERT_TRUE(limit.ok());
    caught = mt::testing::catch_error([&] { mt::io::save_checkpoint(path, big); });
  }
  EXPECT_TRUE(caught.is_mt_error) << caught.message;

  mt::io::Checkpoint back = mt::io::load_checkpoint(path);
  EXPECT_EQ(back.tensor("model.0.bias").to_vector<float>(), (std::vector<float>{1, 1, 1, 1}));
  EXPECT_EQ(back.tensors.count("model.big"), 0u);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"ckpt.safetensors"});
}

TEST(Checkpoint, RngStateRestoresTheRandomStream) {
  mt::Generator gen(123);
  mt::Tensor warmup = mt::randn({10}, {}, &gen);  // advance the offset
  const std::string state = mt::io::rng_state(gen);
  EXPECT_EQ(state, R"({"offset":10,"seed":123})");
  std::vector<float> first = mt::randn({16}, {}, &gen).to_vector<float>();

  mt::Generator other(999);
  mt::io::set_rng_state(state, other);
  EXPECT_EQ(other.seed(), 123u);
  EXPECT_EQ(other.offset(), 10u);
  EXPECT_EQ(mt::randn({16}, {}, &other).to_vector<float>(), first);

  // Through a checkpoint file, with the default generator and a 64-bit seed (its state is
  // restored at the end so that other tests see the generator as they left it).
  const std::array<uint64_t, 2> saved = mt::default_generator().state();
  TempDir dir;
  mt::manual_seed(0xFEDCBA9876543210ull);
  mt::rand({5});
  mt::io::Checkpoint c;
  c.metadata["rng"] = mt::io::rng_state();
  mt::io::save_checkpoint(dir.file("c"), c);
  std::vector<float> expected = mt::rand({8}).to_vector<float>();
  mt::manual_seed(1);
  mt::io::set_rng_state(mt::io::load_checkpoint(dir.file("c")).meta("rng"));
  EXPECT_EQ(mt::default_generator().seed(), 0xFEDCBA9876543210ull);
  EXPECT_EQ(mt::rand({8}).to_vector<float>(), expected);
  mt::default_generator().set_state(saved);

  EXPECT_THROW(mt::io::set_rng_state("{\"seed\":1}", gen), mt::Error);
  EXPECT_THROW(mt::io::set_rng_state("{\"seed\":-1,\"offset\":0}", gen), mt::Error);
  EXPECT_THROW(mt::io::set_rng_state("not json", gen), mt::Error);
}
