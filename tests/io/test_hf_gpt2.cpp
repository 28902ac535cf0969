// GPT-2 in Hugging Face's layout: the committed fixture (a tiny GPT2LMHeadModel saved by transformers,
// with transformers' logits and greedy tokens, made by bench/gpt2/interop.py --make-fixture) loads and
// gives those logits and tokens; a save loads back; config.json and weight files that describe
// another model are refused, naming the key or tensor.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "data/file_helpers.h"
#include "mixtrain/factory.h"
#include "mixtrain/io/hf_gpt2.h"
#include "mixtrain/io/safetensors.h"
#include "mixtrain/nn/generation.h"
#include "support/expect_error.h"
#include "support/gradcheck.h"

namespace mt = mixtrain;
namespace nn = mixtrain::nn;
using mt::testing::TempDir;

namespace {

const std::string kFixture = std::string(MIXTRAIN_TEST_FIXTURES) + "/tiny-gpt2";

std::string fixture_config() { return mt::testing::read_bytes(kFixture + "/config.json"); }

// A copy of the fixture directory whose weights are `tensors` (names as given).
std::string dir_with(const TempDir& dir, const mt::io::NamedTensors& tensors, const std::string& config = "") {
  mt::testing::write_bytes(dir.file("config.json"), config.empty() ? fixture_config() : config);
  mt::io::save_safetensors(dir.file("model.safetensors"), tensors, {{"format", "pt"}});
  return dir.path();
}

mt::io::NamedTensors fixture_tensors() {
  const mt::io::SafetensorsFile f = mt::io::load_safetensors(kFixture + "/model.safetensors");
  return mt::io::NamedTensors(f.tensors.begin(), f.tensors.end());
}

}  // namespace

TEST(HfGpt2, FixtureGivesTransformersLogitsAndGreedyTokens) {
  ASSERT_TRUE(mt::io::is_hf_gpt2_dir(kFixture));
  const auto model = mt::io::load_hf_gpt2(kFixture);
  model->eval();
  EXPECT_EQ(model->config().vocab_size, 64);
  EXPECT_EQ(model->config().n_layer, 2);
  const mt::io::SafetensorsFile expected = mt::io::load_safetensors(kFixture + "/expected.safetensors");
  const mt::Tensor tokens = expected.tensors.at("tokens");
  // transformers' fp32 logits: only the summation order differs (tolerances.h, kFp32VsReference).
  EXPECT_CLOSE((*model)(tokens), expected.tensors.at("logits"), mt::testing::kFp32VsReference);
  const std::vector<int64_t> greedy =
      nn::generate(*model, tokens.to_vector<int64_t>(), {.max_new_tokens = 16, .temperature = 0.0});
  EXPECT_EQ(greedy, expected.tensors.at("greedy").to_vector<int64_t>());
  // The Conv1D weight [in, out] became the Linear weight [out, in].
  EXPECT_EQ(model->state_dict().at("h.0.attn.c_attn.weight").shape(), (mt::Shape{96, 32}));
}

TEST(HfGpt2, SaveLoadsBackWithThePrefixAndTransposes) {
  TempDir dir;
  const auto model = mt::io::load_hf_gpt2(kFixture);
  mt::io::save_hf_gpt2(*model, dir.path(), {{"step", "3"}});
  const mt::io::SafetensorsHeader h = mt::io::read_safetensors_header(dir.file("model.safetensors"));
  EXPECT_EQ(h.metadata.at("format"), "pt");  // transformers refuses a file without it
  EXPECT_EQ(h.metadata.at("step"), "3");
  bool found = false;
  for (const auto& e : h.tensors) {
    EXPECT_EQ(e.name.rfind("transformer.", 0), 0u) << e.name;
    EXPECT_NE(e.name, "transformer.lm_head.weight");
    if (e.name == "transformer.h.1.mlp.c_fc.weight") {
      found = true;
      EXPECT_EQ(e.shape, (mt::Shape{32, 128}));  // [in, out]
    }
  }
  EXPECT_TRUE(found);
  const auto back = mt::io::load_hf_gpt2(dir.path());
  for (const auto& [name, t] : model->state_dict())
    EXPECT_EQ(back->state_dict().at(name).to_vector<float>(), t.to_vector<float>()) << name;
  // Every tensor of the fixture's file written back under the same name and shape.
  EXPECT_EQ(h.tensors.size(), fixture_tensors().size());
}

TEST(HfGpt2, WeightFilesOfAnotherModelAreRefusedByName) {
  const mt::io::NamedTensors good = fixture_tensors();
  auto without = [&](const std::string& name) {
    mt::io::NamedTensors out;
    for (const auto& [n, t] : good)
      if (n != name) out.emplace_back(n, t);
    return out;
  };
  auto with = [&](const std::string& name, const mt::Tensor& t) {
    mt::io::NamedTensors out = good;
    out.emplace_back(name, t);
    return out;
  };
  auto renamed = [&](const std::string& prefix) {
    mt::io::NamedTensors out;
    for (const auto& [n, t] : good) out.emplace_back(prefix + n.substr(std::string("transformer.").size()), t);
    return out;
  };
  const mt::Tensor wte = [&] {
    for (const auto& [n, t] : good)
      if (n == "transformer.wte.weight") return t;
    return mt::Tensor();
  }();
  {
    TempDir d;  // bare names (as the published GPT-2 files), the mask buffers, an equal lm_head: accepted
    mt::io::NamedTensors bare = renamed("");
    bare.emplace_back("h.0.attn.bias", mt::ones({1, 1, 32, 32}));
    bare.emplace_back("h.1.attn.masked_bias", mt::from_vector(std::vector<float>{-1e4f}));
    bare.emplace_back("lm_head.weight", wte.clone());
    const auto m = mt::io::load_hf_gpt2(dir_with(d, bare));
    EXPECT_EQ(m->wte()->weight().to_vector<float>(), wte.to_vector<float>());
  }
  {
    TempDir d;  // 16-bit files are converted to the model's fp32
    mt::io::NamedTensors half;
    for (const auto& [n, t] : good) half.emplace_back(n, t.to(mt::kBFloat16));
    const auto m = mt::io::load_hf_gpt2(dir_with(d, half));
    EXPECT_EQ(m->wte()->weight().dtype(), mt::kFloat32);
    EXPECT_EQ(m->wte()->weight().to_vector<float>(), wte.to(mt::kBFloat16).to(mt::kFloat32).to_vector<float>());
  }
  auto refused = [&](const mt::io::NamedTensors& tensors, std::initializer_list<std::string> parts) {
    TempDir d;
    const std::string path = dir_with(d, tensors);
    mt::testing::expect_error([&] { mt::io::load_hf_gpt2(path); }, parts);
  };
  refused(without("transformer.h.1.ln_2.bias"), {"no \"transformer.h.1.ln_2.bias\""});
  refused(with("transformer.h.2.ln_1.weight", mt::ones({32})), {"unexpected tensor", "h.2.ln_1.weight"});
  refused(with("lm_head.weight", mt::zeros({64, 32})), {"lm_head.weight differs", "untied"});
  mt::io::NamedTensors mixed = good;
  mixed[0].first = mixed[0].first.substr(std::string("transformer.").size());
  refused(mixed, {"some names carry the \"transformer.\" prefix"});
  mt::io::NamedTensors wrong = without("transformer.h.0.attn.c_proj.weight");
  wrong.emplace_back("transformer.h.0.attn.c_proj.weight", mt::zeros({32, 16}));
  refused(wrong, {"h.0.attn.c_proj.weight", "Conv1D layout"});
  mt::io::NamedTensors ints = without("transformer.ln_f.bias");
  ints.emplace_back("transformer.ln_f.bias", mt::zeros({32}, {.dtype = mt::kInt32}));
  refused(ints, {"ln_f.bias", "expected floating point"});
}

TEST(HfGpt2, ConfigsOfAnotherModelAreRefusedByKey) {
  auto parse = [](const std::string& text) { return mt::io::parse_gpt2_config(text, "config.json"); };
  const nn::GPT2Config c = parse(fixture_config());
  EXPECT_EQ(c.n_embd, 32);
  EXPECT_EQ(c.n_inner, 0);  // null: 4 * n_embd
  EXPECT_EQ(c.mlp_width(), 128);
  EXPECT_EQ(parse("{}").n_layer, 12);  // Hugging Face's defaults: GPT-2 small
  EXPECT_EQ(parse(R"({"n_inner": 100})").mlp_width(), 100);
  EXPECT_EQ(parse(R"({"activation_function": "gelu_pytorch_tanh", "reorder_and_upcast_attn": true})").n_embd, 768);
  std::vector<std::string> notes;
  mt::io::parse_gpt2_config(R"({"attn_pdrop": 0.1})", "config.json", &notes);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("attn_pdrop 0.1 is not applied"), std::string::npos);
  auto refused = [&](const std::string& text, std::initializer_list<std::string> parts) {
    mt::testing::expect_error([&] { parse(text); }, parts);
  };
  refused(R"({"model_type": "gpt_neo"})", {"\"model_type\"", "gpt_neo"});
  refused(R"({"activation_function": "relu"})", {"\"activation_function\"", "relu", "tanh"});
  refused(R"({"scale_attn_by_inverse_layer_idx": true})", {"\"scale_attn_by_inverse_layer_idx\""});
  refused(R"({"scale_attn_weights": false})", {"\"scale_attn_weights\""});
  refused(R"({"add_cross_attention": true})", {"\"add_cross_attention\""});
  refused(R"({"tie_word_embeddings": false})", {"\"tie_word_embeddings\"", "token embedding"});
  refused(R"({"n_embd": 100, "n_head": 12})", {"\"n_embd\" (100)", "\"n_head\" (12)"});
  refused(R"({"n_layer": "12"})", {"\"n_layer\" must be an integer"});
  refused(R"({"n_embd": 768.5})", {"\"n_embd\" must be an integer"});
  refused(R"({"vocab_size": 99999999999})", {"\"vocab_size\"", "[1, 16777216]"});
  refused(R"({"layer_norm_epsilon": -1})", {"\"layer_norm_epsilon\""});
  refused(R"({"resid_pdrop": 1})", {"\"resid_pdrop\""});
  refused(R"({"n_layer": 2, "n_layer": 3})", {"config.json", "not a valid config.json"});
  refused(R"([1, 2])", {"one JSON object"});
  refused(R"({"a": [[[[[1]]]]]})", {"not a valid config.json"});
  refused("{", {"not a valid config.json"});
  TempDir d;
  std::filesystem::create_directory(d.file("empty"));
  EXPECT_MT_ERROR(mt::io::load_hf_gpt2(d.file("empty")), "config.json and model.safetensors");
  EXPECT_MT_ERROR(mt::io::read_gpt2_config(d.file("missing.json")), "missing.json");
}
