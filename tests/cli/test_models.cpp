// The named models: parameter names and shapes exactly as PyTorch names them, parameter counts and
// FLOP formulas worked out by hand, PyTorch-default initialisation bounds, seed reproducibility,
// state_dict round trips, gradients reaching every parameter, and a short GPT training run whose
// loss must fall.
#include <gtest/gtest.h>

#include <cmath>

#include "mixtrain/mixtrain.h"
#include "models.h"
#include "mixtrain/nn/modules.h"

namespace mt = mixtrain;
namespace nn = mixtrain::nn;
namespace F = mixtrain::nn::functional;

namespace {

// The models these tests build and run: every model but gpt-small, the 86M-parameter GPU benchmark,
// and gpt2 (GPT-2 small, 124M), whose construction and 1024-token forward would dominate the suite
// (their configurations and parameter counts are checked without building them, below; GPT-2's
// architecture in tests/nn/test_gpt2.cpp and tests/io/test_hf_gpt2.cpp).
std::vector<std::string> cpu_sized_models() {
  std::vector<std::string> names;
  for (const auto& n : mixtrain::cli::model_names())
    if (n != "gpt-small" && n != "gpt2") names.push_back(n);
  return names;
}


using Expected = std::vector<std::pair<std::string, mt::Shape>>;

void expect_params(const nn::Module& m, const Expected& expected) {
  auto named = m.named_parameters();
  ASSERT_EQ(named.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(named[i].first, expected[i].first) << "parameter " << i;
    EXPECT_EQ(named[i].second.shape(), expected[i].second) << named[i].first;
    EXPECT_EQ(named[i].second.dtype(), mt::kFloat32) << named[i].first;
  }
}

Expected gpt_expected() {
  Expected e = {{"tok_emb.weight", {256, 256}}, {"pos_emb.weight", {128, 256}}};
  for (int i = 0; i < 4; ++i) {
    const std::string p = "blocks." + std::to_string(i) + ".";
    Expected block = {{p + "ln1.weight", {256}},
                      {p + "ln1.bias", {256}},
                      {p + "attn.qkv.weight", {768, 256}},
                      {p + "attn.qkv.bias", {768}},
                      {p + "attn.proj.weight", {256, 256}},
                      {p + "attn.proj.bias", {256}},
                      {p + "ln2.weight", {256}},
                      {p + "ln2.bias", {256}},
                      {p + "mlp.0.weight", {1024, 256}},
                      {p + "mlp.0.bias", {1024}},
                      {p + "mlp.2.weight", {256, 1024}},
                      {p + "mlp.2.bias", {256}}};
    e.insert(e.end(), block.begin(), block.end());
  }
  e.push_back({"ln_f.weight", {256}});
  e.push_back({"ln_f.bias", {256}});
  e.push_back({"head.weight", {256, 256}});
  e.push_back({"head.bias", {256}});
  return e;
}

// A small batch of the model's input and targets.
std::pair<mt::Tensor, mt::Tensor> batch_for(const std::string& name, int64_t B, int64_t T = 16) {
  mt::Generator g(42);
  if (name == "gpt") {
    return {mt::randint(0, 256, {B, T}, {.dtype = mt::kInt64}, &g),
            mt::randint(0, 256, {B, T}, {.dtype = mt::kInt64}, &g)};
  }
  return {mt::randn({B, 1, 28, 28}, {}, &g), mt::randint(0, 10, {B}, {.dtype = mt::kInt64}, &g)};
}

mt::Tensor loss_of(const std::string& name, nn::Module& model, const mt::Tensor& x, const mt::Tensor& y) {
  mt::Tensor logits = model(x);
  if (name == "gpt") return F::cross_entropy(logits.reshape({-1, 256}), y.reshape({-1}));
  return F::cross_entropy(logits, y);
}

}  // namespace

TEST(ModelsTest, ParameterNamesAndShapesMatchPyTorch) {
  expect_params(*mixtrain::cli::make_model("mlp"), {{"1.weight", {512, 784}},
                                         {"1.bias", {512}},
                                         {"3.weight", {256, 512}},
                                         {"3.bias", {256}},
                                         {"5.weight", {10, 256}},
                                         {"5.bias", {10}}});
  expect_params(*mixtrain::cli::make_model("mlp-wide"), {{"1.weight", {1024, 784}},
                                              {"1.bias", {1024}},
                                              {"3.weight", {1024, 1024}},
                                              {"3.bias", {1024}},
                                              {"5.weight", {10, 1024}},
                                              {"5.bias", {10}}});
  expect_params(*mixtrain::cli::make_model("cnn"), {{"0.weight", {32, 1, 3, 3}},
                                         {"0.bias", {32}},
                                         {"3.weight", {64, 32, 3, 3}},
                                         {"3.bias", {64}},
                                         {"7.weight", {128, 3136}},
                                         {"7.bias", {128}},
                                         {"9.weight", {10, 128}},
                                         {"9.bias", {10}}});
  expect_params(*mixtrain::cli::make_model("gpt"), gpt_expected());
  // No buffers in these models: state_dict is exactly the parameters.
  for (const auto& name : cpu_sized_models())
    EXPECT_EQ(mixtrain::cli::make_model(name)->state_dict().size(), mixtrain::cli::make_model(name)->named_parameters().size()) << name;
}

TEST(ModelsTest, ParameterCountsAndFlops) {
  // mlp: 784*512+512 + 512*256+256 + 256*10+10. mlp-wide: 784*1024+1024 + 1024*1024+1024 + 1024*10+10.
  // cnn: 32*9+32 + 64*32*9+64 + 3136*128+128 + 128*10+10.
  // gpt: tok 256*256 + pos 128*256 + 4 * (ln 512 + qkv 256*768+768 + proj 256*256+256 + ln 512
  //      + fc 256*1024+1024 + fc 1024*256+256) + ln_f 512 + head 256*256+256
  //      = 65536 + 32768 + 4 * 789760 + 512 + 65792.
  const std::vector<std::pair<std::string, int64_t>> counts = {
      {"mlp", 535818}, {"mlp-wide", 1863690}, {"cnn", 421642}, {"gpt", 3323648}};
  for (const auto& [name, n] : counts) {
    EXPECT_EQ(mixtrain::cli::make_model(name)->num_parameters(), n) << name;
    EXPECT_EQ(mixtrain::cli::model_info(name).num_parameters, n) << name;
  }
  // 6 * forward MACs. mlp: 784*512 + 512*256 + 256*10 = 535040. mlp-wide: 802816 + 1048576 + 10240.
  // cnn: 28*28*32*9 + 14*14*64*288 + 3136*128 + 1280 = 4241152.
  // gpt: 128 tokens * (4 * (256*768 + 2*128*256 + 256*256 + 2*256*1024) + 256*256) = 128 * 3473408.
  EXPECT_EQ(mixtrain::cli::model_flops_per_sample("mlp"), 6 * 535040);
  EXPECT_EQ(mixtrain::cli::model_flops_per_sample("mlp-wide"), 6 * 1861632);
  EXPECT_EQ(mixtrain::cli::model_flops_per_sample("cnn"), 6 * 4241152);
  // gpt: per token 4 layers x (qkv 3C^2 + proj C^2 + MLP 8C^2) + head C*V, plus causal attention:
  // 4 layers x C*T*(T+1) per sequence (query t sees t keys, for scores and att@v).
  EXPECT_EQ(mixtrain::cli::model_flops_per_sample("gpt"),
            int64_t{6} * (128 * (4 * (12 * 256 * 256) + 256 * 256) + 4 * 256 * 128 * 129));
  EXPECT_EQ(mixtrain::cli::model_info("gpt").sample_shape, (mt::Shape{128}));
  EXPECT_EQ(mixtrain::cli::model_info("gpt").input_dtype, mt::kInt64);
  EXPECT_EQ(mixtrain::cli::model_info("cnn").sample_shape, (mt::Shape{1, 28, 28}));
  EXPECT_EQ(mixtrain::cli::model_names(), (std::vector<std::string>{"mlp", "mlp-wide", "cnn", "gpt", "gpt-small", "gpt2"}));
  // GPT-2 small as published: 124,439,808 parameters, the head tied to the embedding.
  EXPECT_EQ(mixtrain::cli::model_info("gpt2").num_parameters, int64_t{124439808});
  EXPECT_EQ(mixtrain::cli::model_info("gpt2").num_outputs, 50257);
  // GPT-2 small's shape with a byte vocabulary: embeddings (256 + 1024) * 768, 12 blocks of
  // 7,087,872, the final LayerNorm and the 768 -> 256 head.
  EXPECT_EQ(mixtrain::cli::model_info("gpt-small").num_parameters, int64_t{86235904});
  EXPECT_EQ(mixtrain::cli::model_info("gpt-small").sample_shape, (mt::Shape{1024}));
  EXPECT_EQ(mixtrain::cli::gpt_config("gpt-small").num_heads, 12);
  try {
    mixtrain::cli::make_model("resnet");
    ADD_FAILURE() << "expected an error";
  } catch (const mt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown model \"resnet\"; valid models: mlp, mlp-wide, cnn, gpt"),
              std::string::npos)
        << e.what();
  }
}

TEST(ModelsTest, PyTorchDefaultInitialisation) {
  for (const auto& name : cpu_sized_models()) {
    auto model = mixtrain::cli::make_model(name, 1);
    for (const auto& [pname, p] : model->named_parameters()) {
      std::vector<float> v = p.to_vector<float>();
      double sq = 0;
      for (float x : v) sq += double(x) * x;
      const double rms = std::sqrt(sq / v.size());
      const bool is_emb = pname.find("emb") != std::string::npos;
      const bool is_ln = pname.find("ln") != std::string::npos;
      if (is_ln) {  // LayerNorm: weight ones, bias zeros
        const float want = pname.ends_with("weight") ? 1.0f : 0.0f;
        for (float x : v) ASSERT_EQ(x, want) << pname;
      } else if (is_emb) {  // Embedding: N(0, 1)
        EXPECT_NEAR(rms, 1.0, 0.03) << pname;
      } else {  // Linear / Conv2d weight and bias: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
        const std::string owner = pname.substr(0, pname.rfind('.'));
        const mt::Tensor w = model->state_dict().at(owner + ".weight");
        int64_t fan_in = 1;
        for (int d = 1; d < w.dim(); ++d) fan_in *= w.size(d);
        const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
        for (float x : v) ASSERT_LE(std::abs(x), bound) << pname;
        // Empirical std of U(-b, b) is b / sqrt(3); the tolerance is ~5 standard errors.
        if (v.size() >= 1000)
          EXPECT_NEAR(rms, bound / std::sqrt(3.0), 5 * bound / std::sqrt(3.0 * v.size()) + 1e-3 * bound) << pname;
      }
    }
  }
}

TEST(ModelsTest, SeedReproducibilityAndStateDictRoundTrip) {
  for (const auto& name : cpu_sized_models()) {
    auto a = mixtrain::cli::make_model(name, 7), a2 = mixtrain::cli::make_model(name, 7), b = mixtrain::cli::make_model(name, 8);
    EXPECT_EQ(a->parameters().back().to_vector<float>(), a2->parameters().back().to_vector<float>()) << name;
    EXPECT_NE(a->parameters()[1].to_vector<float>(), b->parameters()[1].to_vector<float>()) << name;
    auto [x, y] = batch_for(name, 2);
    mt::NoGradGuard no_grad;
    std::vector<float> ya = (*a)(x).to_vector<float>();
    EXPECT_NE(ya, (*b)(x).to_vector<float>()) << name;
    // Save (snapshot), load into the other-seed model: identical outputs, bit for bit.
    nn::StateDict saved;
    for (const auto& [k, t] : a->state_dict()) saved.insert(k, t.clone());
    b->load_state_dict(saved);
    EXPECT_EQ(ya, (*b)(x).to_vector<float>()) << name;
  }
}

TEST(ModelsTest, GradientsReachEveryParameter) {
  for (const auto& name : cpu_sized_models()) {
    auto model = mixtrain::cli::make_model(name, 3);
    auto [x, y] = batch_for(name, 2);
    mt::Tensor loss = loss_of(name, *model, x, y);
    EXPECT_TRUE(std::isfinite(loss.item<float>())) << name;
    loss.backward();
    for (const auto& [pname, p] : model->named_parameters()) {
      mt::Tensor g = p.grad();
      ASSERT_TRUE(g.defined()) << name << " " << pname;
      EXPECT_EQ(g.shape(), p.shape()) << pname;
      EXPECT_EQ(g.dtype(), mt::kFloat32) << pname;
      double norm = 0;
      for (float v : g.to_vector<float>()) {
        ASSERT_TRUE(std::isfinite(v)) << name << " " << pname;
        norm += double(v) * v;
      }
      EXPECT_GT(norm, 0.0) << name << " " << pname << " got an all-zero gradient";
    }
  }
}

TEST(ModelsTest, GptCausalAndShapes) {
  auto model = mixtrain::cli::make_model("gpt", 0);
  mt::NoGradGuard no_grad;
  mt::Tensor tokens = mt::from_vector<int64_t>({72, 101, 108, 108, 111, 33}, {1, 6});
  mt::Tensor logits = (*model)(tokens);
  ASSERT_EQ(logits.shape(), (mt::Shape{1, 6, 256}));
  mt::Tensor changed = mt::from_vector<int64_t>({72, 101, 108, 0, 111, 33}, {1, 6});
  std::vector<float> a = logits.to_vector<float>(), b = (*model)(changed).to_vector<float>();
  for (int i = 0; i < 3 * 256; ++i) ASSERT_EQ(a[i], b[i]) << "position " << i / 256;
  EXPECT_NE(a[3 * 256], b[3 * 256]);
  EXPECT_THROW((*model)(mt::zeros({1, 129}, {.dtype = mt::kInt64})), mt::Error);  // longer than the context
  EXPECT_THROW((*model)(mt::zeros({1, 4})), mt::Error);                           // float tokens
}

TEST(ModelsTest, GptLossFallsUnderPlainSgd) {
  // 20 SGD steps (p -= lr * grad under NoGradGuard) on one batch of a repeated byte string.
  auto model = mixtrain::cli::make_model("gpt", 0);
  const std::string text = "the quick brown fox jumps over the lazy dog. ";
  const int64_t B = 2, T = 16;
  std::vector<int64_t> in, tgt;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      in.push_back(static_cast<unsigned char>(text[(b * 7 + t) % text.size()]));
      tgt.push_back(static_cast<unsigned char>(text[(b * 7 + t + 1) % text.size()]));
    }
  mt::Tensor x = mt::from_vector(in, {B, T}), y = mt::from_vector(tgt, {B, T});
  std::vector<float> losses;
  for (int step = 0; step < 20; ++step) {
    model->zero_grad();
    mt::Tensor loss = loss_of("gpt", *model, x, y);
    losses.push_back(loss.item<float>());
    loss.backward();
    mt::NoGradGuard no_grad;
    for (mt::Tensor& p : model->parameters()) p.add_(p.grad(), -0.1);
  }
  EXPECT_GT(losses.front(), 4.0f);  // about ln(256) = 5.5 at initialisation
  std::string trace;
  for (float l : losses) trace += std::to_string(l) + " ";
  EXPECT_LT(losses.back(), 0.6f * losses.front()) << trace;
  for (float l : losses) EXPECT_TRUE(std::isfinite(l));
}
