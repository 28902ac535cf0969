// Every layer's forward against values computed by hand or by plain loops in double here, plus
// the options plumbing (stride, padding, groups, approximate GELU, ...), Dropout's training flag
// and reproducible generator, and the causal structure of attention.
#include <gtest/gtest.h>

#include <cmath>

#include "mixtrain/mixtrain.h"
#include "mixtrain/nn/modules.h"
#include "support/gradcheck.h"

namespace mt = mixtrain;
namespace nn = mixtrain::nn;
using mt::testing::kFp32VsReference;

namespace {

// Overwrites a parameter's values (shape unchanged).
void set(const mt::Tensor& p, const std::vector<float>& v) {
  mt::NoGradGuard no_grad;
  mt::Tensor h = p;
  h.copy_(mt::from_vector(v, p.shape()));
}

mt::Tensor rnd(const mt::Shape& s, uint64_t seed) {
  mt::Generator g(seed);
  return mt::randn(s, {}, &g);
}

mt::Tensor f64(const std::vector<double>& v, const mt::Shape& s) { return mt::from_vector(v, s); }

}  // namespace

TEST(NnLayersTest, LinearMatchesXWtPlusB) {
  nn::Linear lin(3, 2);
  set(lin.weight(), {1, 2, 3, -1, 0, 0.5});
  set(lin.bias(), {0.25, -2});
  mt::Tensor x = mt::from_vector<float>({1, 0, -1, 2, 3, 4}, {2, 3});
  // Row 0: [1*1 + 0*2 - 1*3 + 0.25, -1*1 + 0 - 0.5 - 2] = [-1.75, -3.5]
  // Row 1: [2 + 6 + 12 + 0.25, -2 + 0 + 2 - 2] = [20.25, -2]
  EXPECT_EQ(lin(x).to_vector<float>(), (std::vector<float>{-1.75f, -3.5f, 20.25f, -2.0f}));
  // Leading dims are kept; no-bias form.
  nn::Linear nob(3, 2, {.bias = false});
  EXPECT_FALSE(nob.bias().defined());
  EXPECT_EQ(nob.named_parameters().size(), 1u);
  set(nob.weight(), {1, 1, 1, 0, 0, 1});
  EXPECT_EQ(nob(mt::ones({2, 5, 3})).shape(), (mt::Shape{2, 5, 2}));
  std::string msg;
  try {
    lin(mt::ones({2, 4}));
  } catch (const mt::Error& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("Linear(in_features=3"), std::string::npos) << msg;
}

TEST(NnLayersTest, Conv2dMatchesDirectLoop) {
  struct Case {
    int64_t cin, cout, k;
    nn::Conv2dOptions opts;
  };
  for (const Case& c : {Case{2, 3, 3, {.stride = 2, .padding = 1}}, Case{4, 6, 3, {.padding = {1, 0}, .groups = 2}},
                        Case{1, 2, 2, {.dilation = 2, .bias = false}}}) {
    mt::Generator g(5);
    nn::Conv2d conv(c.cin, c.cout, c.k,
                    {.stride = c.opts.stride,
                     .padding = c.opts.padding,
                     .dilation = c.opts.dilation,
                     .groups = c.opts.groups,
                     .bias = c.opts.bias,
                     .generator = &g});
    const int64_t N = 2, H = 6, W = 5, G = c.opts.groups, cin_g = c.cin / G, cout_g = c.cout / G;
    mt::Tensor x = rnd({N, c.cin, H, W}, 9);
    mt::Tensor y = conv(x);
    const auto s = c.opts.stride, p = c.opts.padding, d = c.opts.dilation;
    const int64_t OH = (H + 2 * p.h - d.h * (c.k - 1) - 1) / s.h + 1,
                  OW = (W + 2 * p.w - d.w * (c.k - 1) - 1) / s.w + 1;
    ASSERT_EQ(y.shape(), (mt::Shape{N, c.cout, OH, OW}));
    std::vector<double> xv = x.to_vector<double>(), wv = conv.weight().to_vector<double>(), ref(y.numel());
    std::vector<double> bv = c.opts.bias ? conv.bias().to_vector<double>() : std::vector<double>(c.cout, 0.0);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t o = 0; o < c.cout; ++o)
        for (int64_t oh = 0; oh < OH; ++oh)
          for (int64_t ow = 0; ow < OW; ++ow) {
            double acc = bv[o];
            const int64_t grp = o / cout_g;
            for (int64_t i = 0; i < cin_g; ++i)
              for (int64_t kh = 0; kh < c.k; ++kh)
                for (int64_t kw = 0; kw < c.k; ++kw) {
                  int64_t ih = oh * s.h - p.h + kh * d.h, iw = ow * s.w - p.w + kw * d.w;
                  if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                  acc += xv[((n * c.cin + grp * cin_g + i) * H + ih) * W + iw] *
                         wv[((o * cin_g + i) * c.k + kh) * c.k + kw];
                }
            ref[((n * c.cout + o) * OH + oh) * OW + ow] = acc;
          }
    EXPECT_CLOSE(y, f64(ref, y.shape()), kFp32VsReference);
  }
  EXPECT_THROW(nn::Conv2d(3, 4, 3, {.groups = 2}), mt::Error);
  nn::Conv2d conv(3, 4, 3);
  EXPECT_THROW(conv(mt::zeros({1, 2, 8, 8})), mt::Error);
}

TEST(NnLayersTest, PoolingByHand) {
  // One 4x4 plane: 0..15.
  std::vector<float> v(16);
  for (int i = 0; i < 16; ++i) v[i] = static_cast<float>(i);
  mt::Tensor x = mt::from_vector(v, {1, 1, 4, 4});
  EXPECT_EQ(nn::MaxPool2d(2)(x).to_vector<float>(), (std::vector<float>{5, 7, 13, 15}));
  EXPECT_EQ(nn::AvgPool2d(2)(x).to_vector<float>(), (std::vector<float>{2.5, 4.5, 10.5, 12.5}));
  // Stride 1: 3x3 outputs; kernel 3 with stride 1 and padding 1 keeps 4x4.
  EXPECT_EQ(nn::MaxPool2d(2, {.stride = 1})(x).shape(), (mt::Shape{1, 1, 3, 3}));
  mt::Tensor padded = nn::AvgPool2d(3, {.stride = 1, .padding = 1})(x);
  ASSERT_EQ(padded.shape(), (mt::Shape{1, 1, 4, 4}));
  // Corner: (0 + 1 + 4 + 5) / 9 (padding counts toward the divisor).
  EXPECT_FLOAT_EQ(padded.to_vector<float>()[0], 10.0f / 9.0f);
  EXPECT_THROW(nn::MaxPool2d(2, {.padding = 2}), mt::Error);
}

TEST(NnLayersTest, FlattenAndActivations) {
  EXPECT_EQ(nn::Flatten()(mt::zeros({2, 1, 28, 28})).shape(), (mt::Shape{2, 784}));
  EXPECT_EQ(nn::Flatten(0, 1)(mt::zeros({2, 3, 4})).shape(), (mt::Shape{6, 4}));
  mt::Tensor x = mt::from_vector<double>({-2, -0.5, 0, 0.5, 2});
  std::vector<double> xs = x.to_vector<double>(), relu, gelu, gelu_tanh, silu, tanh, sig;
  for (double v : xs) {
    relu.push_back(v > 0 ? v : 0);
    gelu.push_back(0.5 * v * (1 + std::erf(v / std::sqrt(2.0))));
    gelu_tanh.push_back(0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))));
    silu.push_back(v / (1 + std::exp(-v)));
    tanh.push_back(std::tanh(v));
    sig.push_back(1 / (1 + std::exp(-v)));
  }
  const mt::testing::Tolerance tol{1e-12, 1e-12};
  EXPECT_CLOSE(nn::ReLU()(x), mt::from_vector(relu), tol);
  EXPECT_CLOSE(nn::GELU()(x), mt::from_vector(gelu), tol);
  EXPECT_CLOSE(nn::GELU({.approximate = mt::GeluApproximation::kTanh})(x), mt::from_vector(gelu_tanh), tol);
  // TransformerBlock fuses its MLP only for the exact form; it asks the module which one it has.
  EXPECT_EQ(nn::GELU().approximate(), mt::GeluApproximation::kNone);
  EXPECT_EQ(nn::GELU({.approximate = mt::GeluApproximation::kTanh}).approximate(), mt::GeluApproximation::kTanh);
  EXPECT_CLOSE(nn::SiLU()(x), mt::from_vector(silu), tol);
  EXPECT_CLOSE(nn::Tanh()(x), mt::from_vector(tanh), tol);
  EXPECT_CLOSE(nn::Sigmoid()(x), mt::from_vector(sig), tol);
  EXPECT_EQ(nn::Identity()(x).is_same(x), true);
}

TEST(NnLayersTest, DropoutTrainingFlagAndReproducibility) {
  mt::Tensor x = mt::ones({100, 100});
  nn::Dropout drop(0.25, {.seed = 11});
  drop.eval();
  EXPECT_TRUE(drop(x).is_same(x));  // eval: the identity, no copy
  drop.train();
  std::array<uint64_t, 2> state = drop.generator().state();
  std::vector<float> y = drop(x).to_vector<float>();
  int zeros = 0;
  for (float v : y) {
    if (v == 0.0f)
      ++zeros;
    else
      ASSERT_FLOAT_EQ(v, 1.0f / 0.75f);
  }
  EXPECT_NEAR(zeros / 10000.0, 0.25, 0.02);
  // A second call draws a new mask; restoring the generator's state replays the first one.
  EXPECT_NE(drop(x).to_vector<float>(), y);
  drop.generator().set_state(state);
  EXPECT_EQ(drop(x).to_vector<float>(), y);
  // Same seed, same masks; an unseeded Dropout follows mt::manual_seed.
  nn::Dropout twin(0.25, {.seed = 11});
  EXPECT_EQ(twin(x).to_vector<float>(), y);
  mt::manual_seed(5);
  nn::Dropout a(0.5), b(0.5);
  mt::manual_seed(5);
  nn::Dropout a2(0.5);
  EXPECT_EQ(a(x).to_vector<float>(), a2(x).to_vector<float>());
  EXPECT_NE(a.generator().seed(), b.generator().seed());
  EXPECT_THROW(nn::Dropout(1.5), mt::Error);
}

TEST(NnLayersTest, LayerNormNormalisesAndApplies) {
  nn::LayerNorm ln(8);
  EXPECT_EQ(ln.weight().to_vector<float>(), std::vector<float>(8, 1.0f));
  EXPECT_EQ(ln.bias().to_vector<float>(), std::vector<float>(8, 0.0f));
  mt::Tensor x = mt::add(mt::mul(rnd({3, 4, 8}, 2), 3.0), 5.0);
  std::vector<float> y = ln(x).to_vector<float>();
  for (int r = 0; r < 12; ++r) {
    double m = 0, v = 0;
    for (int i = 0; i < 8; ++i) m += y[r * 8 + i];
    m /= 8;
    for (int i = 0; i < 8; ++i) v += (y[r * 8 + i] - m) * (y[r * 8 + i] - m);
    EXPECT_NEAR(m, 0.0, 1e-5);
    EXPECT_NEAR(v / 8, 1.0, 1e-3);  // eps = 1e-5 against a variance of ~9
  }
  // Affine part: y = x_hat * w + b on a row computed by hand.
  nn::LayerNorm ln2(4, {.eps = 0.0});
  set(ln2.weight(), {1, 2, 3, 4});
  set(ln2.bias(), {0, 0, 0, 1});
  // x = [1, 2, 3, 4]: mean 2.5, var 1.25.
  mt::Tensor xr = mt::from_vector<float>({1, 2, 3, 4}, {1, 4});
  double s = 1 / std::sqrt(1.25);
  EXPECT_CLOSE(ln2(xr), mt::from_vector<double>({-1.5 * s, -0.5 * 2 * s, 0.5 * 3 * s, 1.5 * 4 * s + 1}, {1, 4}),
               kFp32VsReference);
  nn::LayerNorm plain({2, 4}, {.elementwise_affine = false});
  EXPECT_EQ(plain.num_parameters(), 0);
  EXPECT_EQ(plain(mt::ones({3, 2, 4})).shape(), (mt::Shape{3, 2, 4}));
  EXPECT_THROW(ln(mt::ones({2, 7})), mt::Error);
}

TEST(NnLayersTest, EmbeddingLooksUpRows) {
  mt::Generator g(4);
  nn::Embedding emb(10, 3, {.generator = &g});
  EXPECT_EQ(emb.weight().shape(), (mt::Shape{10, 3}));
  mt::Tensor idx = mt::from_vector<int64_t>({7, 0, 7, 9}, {2, 2});
  mt::Tensor y = emb(idx);
  ASSERT_EQ(y.shape(), (mt::Shape{2, 2, 3}));
  std::vector<float> w = emb.weight().to_vector<float>(), yv = y.to_vector<float>();
  const int rows[] = {7, 0, 7, 9};
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) EXPECT_EQ(yv[i * 3 + j], w[rows[i] * 3 + j]);
  EXPECT_THROW(emb(mt::zeros({2})), mt::Error);  // float indices
}

namespace {

// Reference attention in double, straight from the weights: q/k/v rows of qkv.weight as documented.
std::vector<double> attention_reference(nn::MultiheadAttention& mha, const mt::Tensor& x, int64_t H, bool causal) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), D = C / H;
  std::vector<double> xv = x.to_vector<double>(), wq = mha.qkv()->weight().to_vector<double>(),
                      bq = mha.qkv()->bias().to_vector<double>(), wp = mha.proj()->weight().to_vector<double>(),
                      bp = mha.proj()->bias().to_vector<double>();
  std::vector<double> qkv(B * T * 3 * C), o(B * T * C), out(B * T * C);
  for (int64_t r = 0; r < B * T; ++r)
    for (int64_t j = 0; j < 3 * C; ++j) {
      double acc = bq[j];
      for (int64_t i = 0; i < C; ++i) acc += xv[r * C + i] * wq[j * C + i];
      qkv[r * 3 * C + j] = acc;
    }
  auto at = [&](int64_t b, int64_t t, int which, int64_t h, int64_t d) {
    return qkv[(b * T + t) * 3 * C + which * C + h * D + d];
  };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t) {
        std::vector<double> s(T, -INFINITY);
        double mx = -INFINITY, z = 0;
        for (int64_t u = 0; u < T; ++u) {
          if (causal && u > t) continue;
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += at(b, t, 0, h, d) * at(b, u, 1, h, d);
          s[u] = dot / std::sqrt(static_cast<double>(D));
          mx = std::max(mx, s[u]);
        }
        for (int64_t u = 0; u < T; ++u) z += std::exp(s[u] - mx);
        for (int64_t d = 0; d < D; ++d) {
          double acc = 0;
          for (int64_t u = 0; u < T; ++u) acc += std::exp(s[u] - mx) / z * at(b, u, 2, h, d);
          o[(b * T + t) * C + h * D + d] = acc;
        }
      }
  for (int64_t r = 0; r < B * T; ++r)
    for (int64_t j = 0; j < C; ++j) {
      double acc = bp[j];
      for (int64_t i = 0; i < C; ++i) acc += o[r * C + i] * wp[j * C + i];
      out[r * C + j] = acc;
    }
  return out;
}

}  // namespace

TEST(NnLayersTest, MultiheadAttentionMatchesReferenceAndIsCausal) {
  mt::Generator g(8);
  nn::MultiheadAttention mha(16, 4, {.generator = &g});
  EXPECT_EQ(mha.qkv()->weight().shape(), (mt::Shape{48, 16}));
  EXPECT_EQ(mha.state_dict().keys(), (std::vector<std::string>{"qkv.weight", "qkv.bias", "proj.weight", "proj.bias"}));
  mt::Tensor x = rnd({2, 5, 16}, 3);
  mt::Tensor y = mha(x);
  ASSERT_EQ(y.shape(), (mt::Shape{2, 5, 16}));
  EXPECT_CLOSE(y, f64(attention_reference(mha, x, 4, true), y.shape()), (mt::testing::Tolerance{1e-4, 1e-5}));
  nn::MultiheadAttention full(16, 4, {.causal = false, .generator = &g});
  mt::Tensor yf = full(x);
  EXPECT_CLOSE(yf, f64(attention_reference(full, x, 4, false), y.shape()), (mt::testing::Tolerance{1e-4, 1e-5}));

  // Causality: perturbing token 3 leaves positions 0..2 unchanged and changes position 3.
  std::vector<float> xv = x.to_vector<float>();
  for (int i = 0; i < 16; ++i) xv[3 * 16 + i] += 1.0f;  // batch 0, token 3
  std::vector<float> y0 = y.to_vector<float>(), y1 = mha(mt::from_vector(xv, x.shape())).to_vector<float>();
  for (int i = 0; i < 3 * 16; ++i) ASSERT_EQ(y0[i], y1[i]) << "position " << i / 16;
  bool changed = false;
  for (int i = 3 * 16; i < 4 * 16; ++i) changed |= y0[i] != y1[i];
  EXPECT_TRUE(changed);
  EXPECT_THROW(nn::MultiheadAttention(10, 4), mt::Error);
}

TEST(NnLayersTest, TransformerBlockIsPreNormResidual) {
  mt::Generator g(2);
  nn::TransformerBlock block(16, 2, {.generator = &g});
  EXPECT_EQ(block.state_dict().keys(),
            (std::vector<std::string>{"ln1.weight", "ln1.bias", "attn.qkv.weight", "attn.qkv.bias", "attn.proj.weight",
                                      "attn.proj.bias", "ln2.weight", "ln2.bias", "mlp.0.weight", "mlp.0.bias",
                                      "mlp.2.weight", "mlp.2.bias"}));
  EXPECT_EQ(block.mlp()->at<nn::Linear>(0)->weight().shape(), (mt::Shape{64, 16}));
  mt::Tensor x = rnd({2, 6, 16}, 1);
  mt::Tensor h = mt::add(x, block.attn()->forward(block.ln1()->forward(x)));
  mt::Tensor mlp = block.mlp()->at<nn::Linear>(2)->forward(
      mt::gelu(block.mlp()->at<nn::Linear>(0)->forward(block.ln2()->forward(h))));
  EXPECT_CLOSE(block(x), mt::add(h, mlp), kFp32VsReference);
}

TEST(NnLayersTest, ModulesInFloat64PassGradcheck) {
  // Whole modules converted with to(kFloat64): finite differences through the composition.
  mt::Generator g(12);
  nn::TransformerBlock block(8, 2, {.generator = &g});
  block.to(mt::kFloat64);
  EXPECT_EQ(block.attn()->qkv()->weight().dtype(), mt::kFloat64);
  EXPECT_EQ(mt::testing::gradcheck([&](const std::vector<mt::Tensor>& in) { return block(in[0]); },
                                   {mt::testing::rand_input({1, 3, 8}, -1, 1, 5)}),
            "");
  nn::Sequential cnn(nn::Conv2d(2, 3, 3, {.padding = 1, .generator = &g}), nn::BatchNorm2d(3), nn::Tanh(),
                     nn::AvgPool2d(2), nn::Flatten(), nn::Linear(12, 2, {.generator = &g}));
  cnn.to(mt::kFloat64);
  EXPECT_EQ(mt::testing::gradcheck([&](const std::vector<mt::Tensor>& in) { return cnn(in[0]); },
                                   {mt::testing::rand_input({2, 2, 4, 4}, -1, 1, 6)}),
            "");
}
