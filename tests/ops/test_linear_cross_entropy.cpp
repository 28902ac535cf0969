// linear_cross_entropy (src/ops/nn_linear_cross_entropy.cpp): the fused head and loss against the
// unfused cross_entropy(linear(x, w, b), y) in fp64 and fp32 (loss and every gradient, several
// blocks with a short last one, ignored rows, label smoothing, both reductions), fp64 finite
// differences, autocast on every 16-bit product path (logits kept in fp32, fp16 gradients neither
// flushed nor overflowed), its memory (no [N, V] tensor; no fp32 weight copy where bf16 products are
// native), the accumulating and widening products it runs its blocks with, and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

#include "kernels/linalg.h"
#include "mixtrain/amp/autocast.h"
#include "mixtrain/memory.h"
#include "mixtrain/nn/functional.h"
#include "mixtrain/ops/linalg.h"
#include "ops/test_linalg_util.h"
#include "ops/test_nn_helpers.h"
#include "support/checked_device.h"

namespace mixtrain::testing {
namespace {

namespace F = nn::functional;
using F::Reduction;

struct Case {
  int64_t rows = 23, C = 16, V = 37;
  bool bias = true;
  double label_smoothing = 0.0;
  Reduction reduction = Reduction::kMean;
  int64_t block_rows = 5;  // 23 rows: four blocks of 5 and one of 3
};

// Targets in [0, V) with every fifth one ignored (-100).
Tensor targets(int64_t rows, int64_t V, uint64_t seed, bool some_ignored = true) {
  std::vector<int64_t> t(static_cast<size_t>(rows));
  uint64_t s = seed * 2654435761u + 1;
  for (int64_t i = 0; i < rows; ++i) {
    s = s * 6364136223846793005u + 1442695040888963407u;
    t[i] = some_ignored && i % 5 == 3 ? -100 : static_cast<int64_t>((s >> 33) % static_cast<uint64_t>(V));
  }
  return from_vector(t);
}

struct Result {
  Tensor loss, gx, gw, gb;
};

// Loss and gradients (for a loss gradient g) of the fused op or of the composition, on fresh
// leaves of `dtype` holding x, w, b.
Result run(bool fused, const Case& c, DType dtype, const Tensor& x32, const Tensor& w32, const Tensor& b32,
           const Tensor& y, double g = 1.0) {
  Tensor x = x32.to(dtype).requires_grad_(), w = w32.to(dtype).requires_grad_();
  Tensor b = c.bias ? b32.to(dtype).requires_grad_() : Tensor();
  Tensor loss = fused ? F::linear_cross_entropy(x, w, b, y,
                                                {.reduction = c.reduction,
                                                 .label_smoothing = c.label_smoothing,
                                                 .block_rows = c.block_rows})
                      : F::cross_entropy(linear(x, w, b).reshape({-1, c.V}), y.reshape({-1}), c.reduction, -100,
                                         c.label_smoothing);
  loss.backward(full(Shape{}, g, {.dtype = loss.dtype(), .device = loss.device()}));
  return {loss, x.grad(), w.grad(), c.bias ? b.grad() : Tensor()};
}

void expect_same(const Result& fused, const Result& plain, const Tolerance& tol, const Tolerance& grad_tol) {
  EXPECT_EQ(fused.loss.dtype(), plain.loss.dtype());
  EXPECT_EQ(fused.loss.dim(), 0);
  EXPECT_CLOSE(fused.loss, plain.loss, tol);
  EXPECT_CLOSE(fused.gx, plain.gx, grad_tol);
  EXPECT_CLOSE(fused.gw, plain.gw, grad_tol);
  if (plain.gb.defined()) EXPECT_CLOSE(fused.gb, plain.gb, grad_tol);
}

std::vector<Case> cases() {
  std::vector<Case> all;
  all.push_back({});
  all.push_back({.bias = false});
  all.push_back({.label_smoothing = 0.1});
  all.push_back({.reduction = Reduction::kSum});
  all.push_back({.block_rows = 0});   // the default block: one block here
  all.push_back({.block_rows = 1});   // one row per block
  all.push_back({.block_rows = 23});  // exactly one block
  return all;
}

// Every case of cases() in `dtype`, fused against unfused, for a loss gradient g.
void expect_every_case_matches(DType dtype, uint64_t seed, double g, const Tolerance& tol, const Tolerance& grad_tol) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(::testing::Message() << "bias " << c.bias << " smoothing " << c.label_smoothing << " sum "
                                    << (c.reduction == Reduction::kSum) << " block " << c.block_rows);
    const Tensor x = randn32({c.rows, c.C}, seed), w = randn32({c.V, c.C}, seed + 1, 0.3), b = randn32({c.V}, seed + 2);
    const Tensor y = targets(c.rows, c.V, seed + 3);
    expect_same(run(true, c, dtype, x, w, b, y, g), run(false, c, dtype, x, w, b, y, g), tol, grad_tol);
  }
}

TEST(LinearCrossEntropy, EqualsTheUnfusedOpsInFp64) {
  expect_every_case_matches(kFloat64, 1, 0.75, kFp64VsReference, kFp64VsReference);
}

TEST(LinearCrossEntropy, EqualsTheUnfusedOpsInFp32) {
  // Only the order of the fp32 sums differs (the weight gradient sums the blocks' products).
  expect_every_case_matches(kFloat32, 5, 1.0, kFp32VsReference, kFp32SumVsReference);
}

TEST(LinearCrossEntropy, BatchedHiddenStatesAndInt32Targets) {
  const Tensor x = randn32({3, 4, 8}, 9), w = randn32({11, 8}, 10, 0.5);
  const Tensor y = targets(12, 11, 11).reshape({3, 4});
  Tensor xa = x.to(kFloat64).requires_grad_(), xb = x.to(kFloat64).requires_grad_();
  const Tensor wd = w.to(kFloat64);
  Tensor fused = F::linear_cross_entropy(xa, wd, Tensor(), y.to(kInt32), {.block_rows = 5});
  Tensor plain = F::cross_entropy(linear(xb, wd).reshape({12, 11}), y.reshape({12}));
  fused.backward();
  plain.backward();
  EXPECT_CLOSE(fused, plain, kFp64VsReference);
  EXPECT_EQ(xa.grad().shape(), x.shape());
  EXPECT_CLOSE(xa.grad(), xb.grad(), kFp64VsReference);
}

TEST(LinearCrossEntropy, Gradcheck) {
  const Tensor y = targets(7, 6, 12);
  for (double smoothing : {0.0, 0.2}) {
    EXPECT_EQ(gradcheck(
                  [&](const std::vector<Tensor>& in) {
                    return F::linear_cross_entropy(in[0], in[1], in[2], y,
                                                   {.label_smoothing = smoothing, .block_rows = 3});
                  },
                  {rand_input({7, 4}, -2, 2, 13), rand_input({6, 4}, -1, 1, 14), rand_input({6}, -1, 1, 15)}),
              "");
  }
}

TEST(LinearCrossEntropy, NoGradAndAllIgnored) {
  const Tensor x = randn32({6, 4}, 16), w = randn32({5, 4}, 17);
  const Tensor y = targets(6, 5, 18);
  Tensor with_grad_off;
  {
    NoGradGuard no_grad;
    with_grad_off = F::linear_cross_entropy(x, w, Tensor(), y);
  }
  EXPECT_FALSE(with_grad_off.requires_grad());
  EXPECT_CLOSE(with_grad_off, F::cross_entropy(linear(x, w), y), kFp32VsReference);

  // No valid row: the mean is NaN (as cross_entropy's) and the gradients are zero (as its gradients).
  const Tensor ignored = full({6}, -100.0, {.dtype = kInt64});
  Tensor xg = x.clone().requires_grad_(), wg = w.clone().requires_grad_();
  Tensor loss = F::linear_cross_entropy(xg, wg, Tensor(), ignored);
  EXPECT_TRUE(std::isnan(loss.item<double>()));
  loss.backward();
  for (float v : xg.grad().to_vector<float>()) EXPECT_EQ(v, 0.0f);
  for (float v : wg.grad().to_vector<float>()) EXPECT_EQ(v, 0.0f);
}

// Under autocast the logits stay fp32: the loss equals the fp64 loss of the 16-bit operands within
// fp32 rounding, where rounding the logits to bf16 (the unfused path) moves it by ~2^-9 relative.
// Each 16-bit product path (bf16 native, bf16 through fp32, fp16) is a GemmModeTest parameter.
using LinearCrossEntropyModes = GemmModeTest;

TEST_P(LinearCrossEntropyModes, AutocastKeepsTheLogitsInFp32) {
  const Device dev = mixtrain::testing::test_device();
  const Tensor x = randn32({64, 32}, 19), w = randn32({300, 32}, 20, 0.5);
  const Tensor y = targets(64, 300, 21, false);
  {
    const DType dt = GetParam().dtype;
    const Tensor reference = F::cross_entropy(linear(rounded(x, dt).to(kFloat64), rounded(w, dt).to(kFloat64)), y);
    Tensor fused, plain;
    {
      amp::Autocast ac(dev.type, dt);
      fused = F::linear_cross_entropy(x.to(dt), w, Tensor(), y);
      plain = F::cross_entropy(linear(x.to(dt), w), y);
    }
    EXPECT_EQ(fused.dtype(), kFloat32);
    const double ref = reference.item<double>();
    EXPECT_NEAR(fused.item<double>(), ref, 1e-6 * std::abs(ref));
    // The unfused loss, from 16-bit logits, is further away (a check that this test can tell them apart).
    EXPECT_GT(std::abs(plain.item<double>() - ref), 1e-6 * std::abs(ref));
  }
}

// The gradients under autocast against the fp64 gradients of the 16-bit operands. dx = dlogits W
// and dW = dlogits^T x read dlogits rounded to 16 bits (as the unfused path's 16-bit products do),
// so each entry may be off by one rounding unit times the sum of its terms' magnitudes
// (|dlogits| |W|, |dlogits|^T |x|), plus one rounding of the result. fp16: the probabilities of
// the unlikely classes here (~1e-11) are below fp16's smallest subnormal (6e-8); the op's
// pre-scale (2^14) lifts them, so only the subnormals' spacing divided by the pre-scale is lost per
// term (checked: with the pre-scale set to 1 this test fails), and a loss gradient of 2^16 (a loss
// scale) must not overflow.
TEST_P(LinearCrossEntropyModes, AutocastGradientsMatchFp64OfThe16BitOperands) {
  const Device dev = mixtrain::testing::test_device();
  const int64_t N = 2048, C = 8, V = 512;
  // The upper half of the classes: near-zero weights (logits ~0 against a largest logit ~25, so
  // p ~ 1e-11) and never a target, so their weight gradients are made of tiny terms only.
  std::vector<float> row_scale(V);
  for (int64_t v = 0; v < V; ++v) row_scale[v] = v < V / 2 ? 1.0f : 0.01f;
  const Tensor x = randn32({N, C}, 22, 3.0), w = randn32({V, C}, 23) * from_vector(row_scale).reshape({V, 1});
  const Tensor y = targets(N, V / 2, 24, false);
  {
    const DType dt = GetParam().dtype;
    // fp64 reference of the rounded operands: gradients and the magnitude bounds.
    const std::vector<double> xv = rounded(x, dt).to(kFloat64).to_vector<double>();
    const std::vector<double> wv = rounded(w, dt).to(kFloat64).to_vector<double>();
    const std::vector<int64_t> yv = y.to_vector<int64_t>();
    std::vector<double> gx(N * C, 0.0), gw(V * C, 0.0), bx(N * C, 0.0), bw(V * C, 0.0), row(V);
    // fp16's subnormal spacing (2^-24) over the pre-scale, on every term: its magnitude bound.
    const double spacing = dt == kFloat16 ? 0x1p-24 / 16384 / static_cast<double>(N) : 0.0;
    for (int64_t n = 0; n < N; ++n) {
      double mx = -INFINITY, z = 0;
      for (int64_t v = 0; v < V; ++v) {
        double l = 0;
        for (int64_t c = 0; c < C; ++c) l += xv[n * C + c] * wv[v * C + c];
        row[v] = l;
        mx = std::max(mx, l);
      }
      for (int64_t v = 0; v < V; ++v) z += std::exp(row[v] - mx);
      for (int64_t v = 0; v < V; ++v) {
        const double d = (std::exp(row[v] - mx) / z - (v == yv[n] ? 1.0 : 0.0)) / static_cast<double>(N);
        for (int64_t c = 0; c < C; ++c) {
          gx[n * C + c] += d * wv[v * C + c];
          bx[n * C + c] += std::abs(d * wv[v * C + c]) + spacing * std::abs(wv[v * C + c]) / (2 * 0x1p-12);
          gw[v * C + c] += d * xv[n * C + c];
          bw[v * C + c] += std::abs(d * xv[n * C + c]) + spacing * std::abs(xv[n * C + c]) / (2 * 0x1p-12);
        }
      }
    }
    const double unit = dt == kBFloat16 ? 0x1p-9 : 0x1p-12;  // half a 16-bit ulp, relative
    // g = 1: the results' own rounding (to fp16's subnormals for the smallest) dominates; g = 2^16
    // lifts them, so that the terms' rounding is what is checked.
    for (double g : {1.0, 65536.0}) {
      SCOPED_TRACE(::testing::Message() << to_string(dt) << " g " << g);
      Tensor xh = x.to(dt).requires_grad_(), wf = w.clone().requires_grad_();
      Tensor loss;
      {
        amp::Autocast ac(dev.type, dt);
        loss = F::linear_cross_entropy(xh, wf, Tensor(), y, {.block_rows = 300});
      }
      loss.backward(full(Shape{}, g, {.device = loss.device()}));
      ASSERT_EQ(xh.grad().dtype(), dt);
      ASSERT_EQ(wf.grad().dtype(), kFloat32);
      for (auto [got, want, bound] : {std::tuple{xh.grad(), &gx, &bx}, std::tuple{wf.grad(), &gw, &bw}}) {
        const std::vector<double> a = got.to(kFloat64).to_vector<double>();
        int bad = 0;
        for (size_t i = 0; i < a.size(); ++i) {
          const double err = std::abs(a[i] / g - (*want)[i]);
          // Terms, result and (fp16) the smallest subnormal of the result.
          const double allowed = 2 * unit * (*bound)[i] + 2 * unit * std::abs((*want)[i]) + (dt == kFloat16 ? 0x1p-25 / g : 0.0);
          if (err > allowed && bad++ < 3) ADD_FAILURE() << "entry " << i << ": " << a[i] / g << " vs " << (*want)[i];
        }
        EXPECT_EQ(bad, 0);
      }
    }
  }
}

// Memory: the fused op never holds [N, V]; the unfused ops hold the logits, their fp32 copy and
// gradients under autocast.
TEST(LinearCrossEntropy, PeakBytesStayBelowOneLogitsTensor) {
  const Device dev = mixtrain::testing::test_device();
  const int64_t N = 1024, C = 32, V = 2000;
  const Tensor x = randn32({N, C}, 25).to(kBFloat16), w = randn32({V, C}, 26, 0.2);
  const Tensor y = targets(N, V, 27);
  const int64_t logits_bytes = N * V * 4;
  auto peak_of = [&](bool fused) {
    Tensor xl = x.clone().requires_grad_(), wl = w.clone().requires_grad_();
    memory::reset_peak(dev);
    const int64_t base = memory::stats(dev).current_bytes;
    Tensor loss;
    {
      amp::Autocast ac(dev.type, kBFloat16);
      loss = fused ? F::linear_cross_entropy(xl, wl, Tensor(), y, {.block_rows = 128})
                   : F::cross_entropy(linear(xl, wl), y);
    }
    loss.backward();
    return memory::stats(dev).peak_bytes - base;
  };
  const int64_t fused = peak_of(true), plain = peak_of(false);
  // Two [128, V] fp32 blocks and a few [V, C] / [N, C] fp32 buffers.
  EXPECT_LT(fused, logits_bytes / 2) << "unfused " << plain;
  EXPECT_GT(plain, 2 * logits_bytes);
}

// The accumulating product that sums the weight gradient over blocks (kernels/linalg.h): out += a @ b
// for a transposed (strided) a, as the op passes dlogits^T, against the fp64 product.
TEST(LinearCrossEntropy, AccumulatingProductKernel) {
  const Device dev = mixtrain::testing::test_device();
  kernels::register_builtin_kernels();  // has() does not register: in a process of its own it would skip
  for (DType dt : {kFloat32, kFloat64}) {
    SCOPED_TRACE(std::string(to_string(dt)));
    ASSERT_TRUE(kernels::matmul_accumulate_table.has(dev.type, dt)) << "no accumulating product on " << dev;
    const Tensor a = randn32({37, 23}, 30).to(dt), b = randn32({37, 16}, 31).to(dt), c0 = randn32({23, 16}, 32).to(dt);
    Tensor out = c0.clone();
    kernels::matmul_accumulate_table(dev, dt)(a.t(), b, out);
    const Tensor want = c0.to(kFloat64) + matmul(a.to(kFloat64).t(), b.to(kFloat64));
    EXPECT_CLOSE(out.to(kFloat64), want, dt == kFloat32 ? kFp32VsReference : kFp64VsReference);
    // An empty inner dim adds nothing.
    Tensor same = c0.clone();
    kernels::matmul_accumulate_table(dev, dt)(zeros({23, 0}, {.dtype = dt}), zeros({0, 16}, {.dtype = dt}), same);
    EXPECT_CLOSE(same, c0, kFp64VsReference);
  }
}

// The widening product the blocks run where 16-bit products are native (kernels/linalg.h): 16-bit
// a and b, fp32 out, = (with a bias) and += (a transposed, strided, as the op passes dlogits^T),
// against the fp64 product of the same 16-bit values. The result is not rounded to 16 bits: it
// must equal the fp64 product within fp32 GEMM accuracy (kGemmFp32, 1e-4), which a 16-bit result
// (2^-9 relative for bf16) fails.
TEST_P(LinearCrossEntropyModes, WideningProductKernel) {
  const Device dev = mixtrain::testing::test_device();
  const DType dt = GetParam().dtype;
  // Optional per backend (the CPU, the checked device and CUDA have it). has() does not register.
  kernels::register_builtin_kernels();
  if (dev.type == kCPU || dev.type == kChecked) ASSERT_TRUE(kernels::matmul_widening_table.has(dev.type, dt));
  if (!kernels::matmul_widening_table.has(dev.type, dt)) GTEST_SKIP() << "no widening product on " << dev;
  auto& widening = *kernels::matmul_widening_table(dev, dt);
  const Tensor a = randn32({37, 23}, 36).to(dt), b = randn32({37, 16}, 37).to(dt), bias = randn32({16}, 38).to(dt);
  const Tensor c0 = randn32({23, 16}, 39);
  const Tensor product = matmul(a.to(kFloat64).t(), b.to(kFloat64));

  Tensor out = empty({23, 16});
  widening(a.t(), b, bias, out, false);
  EXPECT_CLOSE(out.to(kFloat64), product + bias.to(kFloat64), kGemmFp32);
  Tensor sum = c0.clone();
  widening(a.t(), b, Tensor(), sum, true);
  EXPECT_CLOSE(sum.to(kFloat64), c0.to(kFloat64) + product, kGemmFp32);
  // The fp32 result really is unrounded: some entry is not a 16-bit value.
  EXPECT_NE(out.to(dt).to(kFloat32).to_vector<float>(), out.to_vector<float>());
  // An empty inner dim: the bias alone, or nothing added.
  Tensor only_bias = empty({23, 16});
  widening(zeros({23, 0}, {.dtype = dt}), zeros({0, 16}, {.dtype = dt}), bias, only_bias, false);
  EXPECT_CLOSE(only_bias, zeros({23, 16}) + bias.to(kFloat32), kFp64VsReference);
  Tensor same = c0.clone();
  widening(zeros({23, 0}, {.dtype = dt}), zeros({0, 16}, {.dtype = dt}), Tensor(), same, true);
  EXPECT_CLOSE(same, c0, kFp64VsReference);
}

// Where bf16 products are native, the blocks read the bf16 weight that autocast made: the peak holds
// no fp32 [V, C] copy besides the weight gradient. The same step on the fp32 route (which rounds the
// fp32 weight into an fp32 copy) is over the bound: the test tells the paths apart.
TEST(LinearCrossEntropy, NativeBf16KeepsNoFp32WeightCopy) {
  const Device dev = mixtrain::testing::test_device();
  // The CPU's kernels (also behind the checked device); another backend runs its own products.
  if (dev.type != kCPU && dev.type != kChecked) GTEST_SKIP() << "the CPU's bf16 paths, not " << dev << "'s";
  const std::string why = kernels::native_bf16_unavailable_reason();
  if (!why.empty()) GTEST_SKIP() << "native bf16 path cannot run here: " << why;
  const int64_t N = 128, C = 512, V = 4096, rows = 64;
  const Tensor x = randn32({N, C}, 40).to(kBFloat16), w = randn32({V, C}, 41, 0.05);
  const Tensor y = targets(N, V, 42);
  auto peak_of = [&](kernels::Bf16Path path) {
    const Bf16PathGuard pinned(path);
    Tensor xl = x.clone().requires_grad_(), wl = w.clone().requires_grad_();
    memory::reset_peak(dev);
    const int64_t base = memory::stats(dev).current_bytes;
    {
      amp::Autocast ac(dev.type, kBFloat16);
      F::linear_cross_entropy(xl, wl, Tensor(), y, {.block_rows = rows}).backward();
    }
    return memory::stats(dev).peak_bytes - base;
  };
  // dW in fp32, autocast's bf16 weight, three [rows, V] block buffers (logits, dlogits, its 16-bit
  // copy: at most 12 bytes an element), dx and slack: 2 [N, C] fp32.
  const int64_t bound = 4 * V * C + 2 * V * C + 12 * rows * V + 8 * N * C;
  const int64_t native = peak_of(kernels::Bf16Path::kNative), fp32_route = peak_of(kernels::Bf16Path::kFp32);
  EXPECT_LT(native, bound) << "fp32 route " << fp32_route;
  EXPECT_GT(fp32_route, bound) << "native " << native;
}

// The gradients are made in the forward and consumed by the first backward.
TEST(LinearCrossEntropy, ASecondBackwardIsRefused) {
  Tensor x = randn32({6, 4}, 33).requires_grad_(), w = randn32({5, 4}, 34).requires_grad_();
  Tensor loss = F::linear_cross_entropy(x, w, Tensor(), targets(6, 5, 35));
  loss.backward(Tensor(), /*retain_graph=*/true);
  expect_error([&] { loss.backward(); }, {"linear_cross_entropy", "second backward", "run the forward again"});
}

TEST(LinearCrossEntropy, DefaultBlock) {
  EXPECT_EQ(F::linear_cross_entropy_block_rows(50257), 512);  // GPT-2's vocabulary: ~100 MiB of fp32 logits
  EXPECT_EQ(F::linear_cross_entropy_block_rows(int64_t{1} << 30), 64);  // at least 64 rows
  EXPECT_EQ(F::linear_cross_entropy_block_rows(256) % 64, 0);
  expect_error([] { F::linear_cross_entropy_block_rows(0); }, {"vocabulary size must be positive"});
}

TEST(LinearCrossEntropy, Errors) {
  const Tensor x = zeros({4, 3}), w = zeros({5, 3}), y = zeros({4}, {.dtype = kInt64});
  expect_error([&] { F::linear_cross_entropy(x, zeros({5, 2}), Tensor(), y); },
               {"linear_cross_entropy", "weight [V, 3]", "[5, 2]"});
  expect_error([&] { F::linear_cross_entropy(x, w, zeros({4}), y); }, {"linear_cross_entropy", "bias [5]"});
  expect_error([&] { F::linear_cross_entropy(x, w, Tensor(), zeros({4, 1}, {.dtype = kInt64})); },
               {"linear_cross_entropy", "target", "[4]"});
  expect_error([&] { F::linear_cross_entropy(x, w, Tensor(), zeros({4})); }, {"int64 or int32"});
  expect_error([&] { F::linear_cross_entropy(x, w.to(kFloat64), Tensor(), y); }, {"same dtype"});
  expect_error([&] { F::linear_cross_entropy(x, w, Tensor(), full({4}, 5.0, {.dtype = kInt64})); },
               {"target value 5", "out of range for 5 classes"});
  expect_error([&] { F::linear_cross_entropy(x, w, Tensor(), y, {.reduction = Reduction::kNone}); },
               {"reduction none"});
  expect_error([&] { F::linear_cross_entropy(x, w, Tensor(), y, {.label_smoothing = 1.5}); }, {"label_smoothing"});
  expect_error([&] { F::linear_cross_entropy(x, w, Tensor(), y, {.block_rows = -1}); }, {"block_rows"});
  expect_error([&] { F::linear_cross_entropy(zeros({4, 3}, {.dtype = kInt64}), w, Tensor(), y); }, {"floating"});
}

INSTANTIATE_TEST_SUITE_P(Modes, LinearCrossEntropyModes, ::testing::ValuesIn(kHalfGemmModes), gemm_mode_name);

}  // namespace
}  // namespace mixtrain::testing
