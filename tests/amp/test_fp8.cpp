// FP8 training (amp/fp8.h): the quantisation kernels against the scalar casts of float8.h, delayed
// scaling against hand-computed histories, fp8_linear and its backward against a double-precision
// evaluation of the quantised operands, the region, and a small model learning in FP8.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/fp8.h"
#include "mixtrain/mixtrain.h"
#include "support/checked_device.h"
#include "support/expect_error.h"
#include "support/gradcheck.h"
#include "support/tolerances.h"

namespace mt = mixtrain;
using mt::Fp8Format;
using mt::Tensor;
using mt::amp::Fp8LinearState;
using mt::amp::Fp8Recipe;
using mt::amp::Fp8Scaling;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::nanf("");

// Values over the whole fp32 range that FP8 training meets: every binade from 2^-40 to 2^40 with
// random mantissas and signs, exact fp8 values and midpoints, zeros, and the non-finite ones.
std::vector<float> test_values(int64_t n, uint64_t seed) {
  std::vector<float> v;
  v.reserve(static_cast<size_t>(n));
  uint64_t s = seed;
  auto next = [&] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(s >> 32);
  };
  for (float special : {0.0f, -0.0f, 448.0f, 464.0f, 480.0f, 57344.0f, 61440.0f, 0x1p-9f, 0x1p-10f, 0x1p-16f,
                        0x1p-17f, 3.0e38f})
    v.push_back(special);
  while (static_cast<int64_t>(v.size()) < n) {
    const uint32_t r = next();
    const int exponent = static_cast<int>(r % 81) - 40;
    const float mant = 1.0f + static_cast<float>(next() >> 8) * 0x1p-24f;
    v.push_back((r & 0x80000000u ? -1.0f : 1.0f) * std::ldexp(mant, exponent));
  }
  return v;
}

float host_amax(const Tensor& t) {
  float m = 0.0f;
  for (float v : t.to(mt::kFloat32).to_vector<float>()) m = std::max(m, std::fabs(v));
  return m;
}

Tensor codes_like(const Tensor& t) { return Tensor::empty(t.shape(), mt::kUInt8, t.device()); }

std::vector<uint8_t> codes_of(const Tensor& t) { return t.to_vector<uint8_t>(); }

// The value of `x` after quantise-dequantise with `scale` (the double-precision reference's operand).
double qdq(float x, float scale, Fp8Format format) {
  const uint8_t bits = mt::fp8_training_bits(x * scale, std::isfinite(x), format);
  return static_cast<double>(mt::fp8_bits_to_float(bits, format) * (1.0f / scale));
}

// [rows, k] x [cols, k]^T in double, each operand quantise-dequantised with its scale.
std::vector<double> reference_linear(const std::vector<float>& x, float sx, const std::vector<float>& w, float sw,
                                     const std::vector<float>& b, int64_t rows, int64_t k, int64_t cols) {
  std::vector<double> y(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      double acc = b.empty() ? 0.0 : b[static_cast<size_t>(c)];
      for (int64_t i = 0; i < k; ++i)
        acc += qdq(x[static_cast<size_t>(r * k + i)], sx, Fp8Format::kE4M3) *
               qdq(w[static_cast<size_t>(c * k + i)], sw, Fp8Format::kE4M3);
      y[static_cast<size_t>(r * cols + c)] = acc;
    }
  return y;
}

Tensor as_tensor(const std::vector<double>& v, const mt::Shape& shape) {
  return mt::from_vector(v, shape).to(mt::kFloat32);
}

// A state whose three roles quantise with the given scales next (history empty).
std::shared_ptr<Fp8LinearState> state_with(float sx, float sw, float sg) {
  auto s = std::make_shared<Fp8LinearState>();
  s->input.restore(sx, {});
  s->weight.restore(sw, {});
  s->grad_output.restore(sg, {});
  return s;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Kernels

TEST(Fp8Kernels, QuantizeIsTheScalarTrainingCastOfEverySourceDtype) {
  const std::vector<float> values = test_values(100003, 7);  // > 2 grains: split across threads
  const int threads_before = mt::get_num_threads();
  for (mt::DType dtype : {mt::kFloat32, mt::kBFloat16, mt::kFloat16}) {
    const Tensor src = mt::from_vector(values, {static_cast<int64_t>(values.size())}).to(dtype);
    const std::vector<float> widened = src.to(mt::kFloat32).to_vector<float>();
    for (Fp8Format format : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
      for (float scale : {1.0f, 3.7f, 0x1p20f}) {
        SCOPED_TRACE(testing::Message() << dtype << " " << mt::to_string(format) << " scale " << scale);
        for (int threads : {1, 2}) {
          mt::set_num_threads(threads);
          Tensor q = codes_like(src);
          const float amax = mt::kernels::fp8_quantize(q, src, scale, format);
          const std::vector<uint8_t> codes = codes_of(q);
          float expected_amax = 0.0f;
          int64_t mismatches = 0;
          for (size_t i = 0; i < widened.size(); ++i) {
            const float x = widened[i];
            mismatches += codes[i] != mt::fp8_training_bits(x * scale, std::isfinite(x), format);
            expected_amax = std::max(expected_amax, std::fabs(x));
          }
          EXPECT_EQ(mismatches, 0);
          EXPECT_EQ(amax, expected_amax);
        }
      }
    }
  }
  mt::set_num_threads(threads_before);
}

TEST(Fp8Kernels, AmaxPropagatesInfinityAndNan) {
  for (int64_t n : {int64_t{5}, int64_t{100000}}) {
    std::vector<float> v(static_cast<size_t>(n), 0.5f);
    v[static_cast<size_t>(n - 2)] = -kInf;
    Tensor q = Tensor::empty({n}, mt::kUInt8);
    EXPECT_EQ(mt::kernels::fp8_quantize(q, mt::from_vector(v, {n}), 1.0f, Fp8Format::kE5M2), kInf);
    EXPECT_EQ(codes_of(q)[static_cast<size_t>(n - 2)], 0xfc) << "-inf stays -inf in E5M2";
    v[1] = kNaN;
    EXPECT_TRUE(std::isnan(mt::kernels::fp8_quantize(q, mt::from_vector(v, {n}), 1.0f, Fp8Format::kE4M3)));
    EXPECT_EQ(codes_of(q)[1] & 0x7f, 0x7f) << "NaN stays NaN";
    EXPECT_EQ(codes_of(q)[static_cast<size_t>(n - 2)], 0xff) << "-inf becomes E4M3's NaN: it has no inf";
  }
}

TEST(Fp8Kernels, TrainingCastSaturatesOnlyFiniteValues) {
  EXPECT_EQ(mt::fp8_training_bits(1000.0f, true, Fp8Format::kE4M3), 0x7e);   // +448
  EXPECT_EQ(mt::fp8_training_bits(-1e6f, true, Fp8Format::kE5M2), 0xfb);    // -57344
  EXPECT_EQ(mt::fp8_training_bits(kInf, true, Fp8Format::kE4M3), 0x7e);     // a finite value * scale overflowed fp32
  EXPECT_EQ(mt::fp8_training_bits(kInf, false, Fp8Format::kE4M3), 0x7f);    // a real inf: NaN
  EXPECT_EQ(mt::fp8_training_bits(-kInf, false, Fp8Format::kE5M2), 0xfc);   // a real -inf: -inf
  EXPECT_EQ(mt::fp8_training_bits(0x1p-10f, true, Fp8Format::kE4M3), 0x00);  // half the smallest subnormal: even
}

TEST(Fp8Kernels, DequantizeIsTheExactValueTimesTheInverseScale) {
  std::vector<uint8_t> all(256);
  for (int c = 0; c < 256; ++c) all[static_cast<size_t>(c)] = static_cast<uint8_t>(c);
  const Tensor codes = mt::from_vector(all, {256});
  for (Fp8Format format : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    Tensor out = Tensor::empty({256});
    mt::kernels::fp8_dequantize(out, codes, 0.375f, format);
    const std::vector<float> v = out.to_vector<float>();
    for (int c = 0; c < 256; ++c) {
      const float expected = mt::fp8_bits_to_float(static_cast<uint8_t>(c), format) * 0.375f;
      if (std::isnan(expected))
        EXPECT_TRUE(std::isnan(v[static_cast<size_t>(c)])) << c;
      else
        EXPECT_EQ(v[static_cast<size_t>(c)], expected) << c;
    }
  }
  EXPECT_MT_ERROR(mt::kernels::fp8_dequantize(Tensor::empty({3}), codes, 1.0f, Fp8Format::kE4M3), "fp8 dequantize");
  EXPECT_MT_ERROR(mt::kernels::fp8_quantize(Tensor::empty({4}), mt::zeros({4}), 1.0f, Fp8Format::kE4M3), "uint8");
  EXPECT_MT_ERROR(mt::kernels::fp8_quantize(Tensor::empty({4}, mt::kUInt8), mt::zeros({4}, {.dtype = mt::kFloat64}),
                                            1.0f, Fp8Format::kE4M3),
                  "fp8 quantize", "float64");
}

// ---------------------------------------------------------------------------------------------
// Delayed scaling

TEST(Fp8Scaling, TheScaleOfEachTensorComesFromTheHistoryBeforeIt) {
  Fp8Recipe recipe{.amax_history_len = 3};
  Fp8Scaling s;
  EXPECT_EQ(s.scale(), 1.0f) << "nothing seen yet";
  s.update(2.0f, recipe, Fp8Format::kE4M3);
  EXPECT_EQ(s.scale(), 224.0f);
  EXPECT_EQ(s.scale_inv(), 1.0f / 224.0f);
  s.update(1.0f, recipe, Fp8Format::kE4M3);
  s.update(0.5f, recipe, Fp8Format::kE4M3);
  EXPECT_EQ(s.scale(), 224.0f) << "max over [2, 1, 0.5]";
  s.update(0.25f, recipe, Fp8Format::kE4M3);
  EXPECT_EQ(s.amax_history(), (std::vector<float>{1.0f, 0.5f, 0.25f}));
  EXPECT_EQ(s.scale(), 448.0f) << "2 left the window of 3";
  s.update(kInf, recipe, Fp8Format::kE4M3);
  s.update(kNaN, recipe, Fp8Format::kE4M3);
  EXPECT_EQ(s.amax_history(), (std::vector<float>{1.0f, 0.5f, 0.25f})) << "non-finite amaxes are not recorded";
  EXPECT_EQ(s.scale(), 448.0f);

  Fp8Scaling recent;
  const Fp8Recipe most_recent{.margin = 2, .amax_compute = Fp8Recipe::AmaxCompute::kMostRecent};
  recent.update(8.0f, most_recent, Fp8Format::kE5M2);
  recent.update(0.5f, most_recent, Fp8Format::kE5M2);
  EXPECT_EQ(recent.scale(), 57344.0f / 0.5f / 4.0f) << "the most recent amax, E5M2's max, margin 2";

  Fp8Scaling zeros;
  zeros.update(0.0f, recipe, Fp8Format::kE4M3);
  EXPECT_EQ(zeros.scale(), 1.0f) << "an all-zero history keeps the scale";
  zeros.update(1e-45f, recipe, Fp8Format::kE4M3);
  EXPECT_EQ(zeros.scale(), 1.0f) << "448 / 1e-45 is not a finite fp32 scale";
  zeros.update(0x1p-100f, recipe, Fp8Format::kE4M3);
  EXPECT_EQ(zeros.scale(), 448.0f * 0x1p100f);
}

TEST(Fp8Scaling, RestoreAndRecipeValidation) {
  Fp8Scaling s;
  s.restore(4.0f, {1.0f, 2.0f});
  EXPECT_EQ(s.scale_inv(), 0.25f);
  EXPECT_MT_ERROR(s.restore(0.0f, {}), "scale", "finite and > 0");
  EXPECT_MT_ERROR(s.restore(kInf, {}), "scale");
  EXPECT_MT_ERROR(s.restore(1.0f, {kNaN}), "amax");
  EXPECT_MT_ERROR(s.restore(1.0f, {-1.0f}), "amax");
  EXPECT_MT_ERROR((Fp8Recipe{.amax_history_len = 0}.validate()), "amax_history_len", "1..65536");
  EXPECT_MT_ERROR((Fp8Recipe{.amax_history_len = 65537}.validate()), "amax_history_len");
  EXPECT_MT_ERROR((Fp8Recipe{.margin = -1}.validate()), "margin", "0..32");
  EXPECT_MT_ERROR((Fp8Recipe{.margin = 33}.validate()), "margin");
  EXPECT_MT_ERROR(mt::amp::Fp8Autocast({.recipe = {.margin = 40}}), "margin");
  EXPECT_EQ(mt::amp::parse_fp8_format("e4m3"), Fp8Recipe::Format::kAllE4M3);
  EXPECT_EQ(mt::amp::parse_amax_compute("most_recent"), Fp8Recipe::AmaxCompute::kMostRecent);
  EXPECT_MT_ERROR(mt::amp::parse_fp8_format("e5m2"), "hybrid, e4m3");
  EXPECT_MT_ERROR(mt::amp::parse_amax_compute("mean"), "max, most_recent");
}

// ---------------------------------------------------------------------------------------------
// fp8_linear

TEST(Fp8Linear, ForwardIsTheProductOfTheQuantisedOperands) {
  mt::manual_seed(11);
  const int64_t rows = 6, k = 16, cols = 5;
  const Tensor x = mt::randn({2, 3, k}) * 3.0;
  const Tensor w = mt::randn({cols, k}) * 0.2;
  const Tensor b = mt::randn({cols});
  auto state = state_with(16.0f, 256.0f, 1.0f);
  const Fp8Recipe recipe{.amax_history_len = 4};
  const Tensor y = mt::amp::fp8_linear(x, w, b, state, recipe);
  ASSERT_EQ(y.shape(), (mt::Shape{2, 3, cols}));
  ASSERT_EQ(y.dtype(), mt::kFloat32);
  const std::vector<double> expected = reference_linear(x.to_vector<float>(), 16.0f, w.to_vector<float>(), 256.0f,
                                                        b.to_vector<float>(), rows, k, cols);
  EXPECT_CLOSE(y.reshape({rows, cols}), as_tensor(expected, {rows, cols}), mt::testing::kFp32VsReference);
  // The operands really were coarsened: the plain product differs by far more than the tolerance.
  EXPECT_GT(mt::testing::max_scaled_error(y, mt::linear(x, w, b), mt::testing::kFp32VsReference), 100.0);
  // Each role recorded its amax and scales the next tensor by it.
  const float amax_x = host_amax(x);
  EXPECT_EQ(state->input.amax_history(), std::vector<float>{amax_x});
  EXPECT_EQ(state->input.scale(), 448.0f / amax_x);
  EXPECT_EQ(state->weight.amax_history(), std::vector<float>{host_amax(w)});
  EXPECT_TRUE(state->grad_output.amax_history().empty()) << "no backward yet";
}

TEST(Fp8Linear, BackwardQuantisesTheOutputGradientToE5M2AndSumsTheBiasUnquantised) {
  mt::manual_seed(12);
  const int64_t rows = 4, k = 8, cols = 3;
  const Tensor x = (mt::randn({rows, k}) * 2.0).requires_grad_();
  const Tensor w = (mt::randn({cols, k}) * 0.3).requires_grad_();
  const Tensor b = mt::randn({cols}).requires_grad_();
  const Tensor g = mt::randn({rows, cols}) * 0.01;  // far from E5M2's grid at this scale
  const float sx = 32.0f, sw = 512.0f, sg = 1000.0f;
  auto state = state_with(sx, sw, sg);
  mt::sum(mt::amp::fp8_linear(x, w, b, state, {}) * g).backward();

  const std::vector<float> xv = x.to_vector<float>(), wv = w.to_vector<float>(), gv = g.to_vector<float>();
  std::vector<double> dx(static_cast<size_t>(rows * k), 0.0), dw(static_cast<size_t>(cols * k), 0.0),
      db(static_cast<size_t>(cols), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float gi = gv[static_cast<size_t>(r * cols + c)];
      const double gq = qdq(gi, sg, Fp8Format::kE5M2);
      db[static_cast<size_t>(c)] += gi;
      for (int64_t i = 0; i < k; ++i) {
        dx[static_cast<size_t>(r * k + i)] += gq * qdq(wv[static_cast<size_t>(c * k + i)], sw, Fp8Format::kE4M3);
        dw[static_cast<size_t>(c * k + i)] += gq * qdq(xv[static_cast<size_t>(r * k + i)], sx, Fp8Format::kE4M3);
      }
    }
  EXPECT_CLOSE(x.grad(), as_tensor(dx, {rows, k}), mt::testing::kFp32VsReference);
  EXPECT_CLOSE(w.grad(), as_tensor(dw, {cols, k}), mt::testing::kFp32VsReference);
  EXPECT_CLOSE(b.grad(), as_tensor(db, {cols}), mt::testing::kFp32VsReference);
  // With E4M3 gradients (or none quantised) the input gradient would differ: the format matters.
  double dx_e4m3_error = 0.0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float gi = gv[static_cast<size_t>(r * cols + c)];
      dx_e4m3_error += std::fabs(qdq(gi, sg, Fp8Format::kE5M2) - qdq(gi, sg, Fp8Format::kE4M3));
    }
  EXPECT_GT(dx_e4m3_error, 0.0);
  EXPECT_EQ(state->grad_output.amax_history(), std::vector<float>{host_amax(g)});
  EXPECT_EQ(state->grad_output.scale(), 57344.0f / host_amax(g));
}

TEST(Fp8Linear, OperandsOnTheFp8GridGiveThePlainLinearAndItsGradients) {
  // Multiples of 1/4 in [-2, 2] are E4M3 values; with power-of-two scales nothing is rounded, so
  // fp8_linear must be linear exactly, forward and backward (also with the E4M3 gradient format).
  mt::manual_seed(13);
  auto grid = [](const mt::Shape& shape) { return mt::randint(-8, 9, shape).to(mt::kFloat32) * 0.25; };
  const Tensor x0 = grid({5, 7}), w0 = grid({4, 7}), b0 = grid({4}), g = grid({5, 4});
  for (Fp8Recipe::Format format : {Fp8Recipe::Format::kHybrid, Fp8Recipe::Format::kAllE4M3}) {
    Tensor x = x0.clone().requires_grad_(), w = w0.clone().requires_grad_(), b = b0.clone().requires_grad_();
    mt::sum(mt::amp::fp8_linear(x, w, b, state_with(64.0f, 64.0f, 8.0f), {.format = format}) * g).backward();
    Tensor xr = x0.clone().requires_grad_(), wr = w0.clone().requires_grad_(), br = b0.clone().requires_grad_();
    const Tensor yr = mt::linear(xr, wr, br);
    mt::sum(yr * g).backward();
    EXPECT_CLOSE(mt::amp::fp8_linear(x0, w0, b0, state_with(64.0f, 64.0f, 8.0f), {}), yr.detach(),
                 mt::testing::kFp32VsReference);
    EXPECT_CLOSE(x.grad(), xr.grad(), mt::testing::kFp32VsReference);
    EXPECT_CLOSE(w.grad(), wr.grad(), mt::testing::kFp32VsReference);
    EXPECT_CLOSE(b.grad(), br.grad(), mt::testing::kFp32VsReference);
  }
}

TEST(Fp8Linear, OutputAndGradientDtypesFollowAutocastAndTheOperands) {
  mt::manual_seed(14);
  const Tensor x = mt::randn({3, 8}).requires_grad_();
  const Tensor w = mt::randn({2, 8}).requires_grad_();
  auto state = std::make_shared<Fp8LinearState>();
  Tensor y;
  {
    mt::amp::Autocast autocast(mt::kCPU, mt::kBFloat16);
    y = mt::amp::fp8_linear(x, w, Tensor(), state, {});
  }
  EXPECT_EQ(y.dtype(), mt::kBFloat16);
  // The bf16 output is the fp32 product rounded once.
  EXPECT_EQ(mt::testing::max_scaled_error(y.to(mt::kFloat32),
                                 mt::amp::fp8_linear(x.detach(), w.detach(), Tensor(), state_with(1.0f, 1.0f, 1.0f), {})
                                     .to(mt::kBFloat16)
                                     .to(mt::kFloat32),
                                 {0.0, 0.0}),
            0.0);
  mt::sum(y.to(mt::kFloat32)).backward();
  EXPECT_EQ(x.grad().dtype(), mt::kFloat32);
  EXPECT_EQ(w.grad().dtype(), mt::kFloat32);
  const Tensor xb = mt::randn({3, 8}).to(mt::kBFloat16).requires_grad_();
  const Tensor y16 = mt::amp::fp8_linear(xb, w.detach(), Tensor(), std::make_shared<Fp8LinearState>(), {});
  EXPECT_EQ(y16.dtype(), mt::kBFloat16) << "outside autocast the input's dtype";
  mt::sum(y16.to(mt::kFloat32)).backward();
  EXPECT_EQ(xb.grad().dtype(), mt::kBFloat16);
}

TEST(Fp8Linear, NonFiniteInputsStayNonFiniteAndStaleScalesSaturate) {
  const Tensor w = mt::ones({1, 2});
  auto state = state_with(448.0f, 1.0f, 1.0f);  // the input scale expects |x| <= 1
  const Tensor y = mt::amp::fp8_linear(mt::from_vector<float>({10.0f, 0.5f}, {1, 2}), w, Tensor(), state, {});
  EXPECT_EQ(y.item<float>(), 1.5f) << "10 clips to 448 / 448 = 1";
  const float scale_after = state->input.scale();
  EXPECT_EQ(scale_after, 44.8f);
  const Tensor bad = mt::amp::fp8_linear(mt::from_vector<float>({kInf, 0.5f}, {1, 2}), w, Tensor(), state, {});
  EXPECT_TRUE(std::isnan(bad.item<float>()));
  EXPECT_EQ(state->input.scale(), scale_after) << "the inf amax was not recorded";
  EXPECT_EQ(state->input.amax_history().size(), 1u);
}

TEST(Fp8Linear, ForwardsWithoutGradModeUseTheScalesWithoutRecording) {
  // Evaluation must not change how a run trains: no-grad forwards quantise with the current scales.
  auto state = state_with(2.0f, 4.0f, 1.0f);
  const Tensor x = mt::from_vector<float>({0.3f, -1.7f}, {1, 2}), w = mt::from_vector<float>({0.9f, 0.2f}, {1, 2});
  Tensor y;
  {
    mt::NoGradGuard no_grad;
    y = mt::amp::fp8_linear(x, w, Tensor(), state, {});
  }
  EXPECT_TRUE(state->input.amax_history().empty());
  EXPECT_TRUE(state->weight.amax_history().empty());
  EXPECT_EQ(state->input.scale(), 2.0f);
  EXPECT_EQ(state->weight.scale(), 4.0f);
  const double expected = qdq(0.3f, 2.0f, Fp8Format::kE4M3) * qdq(0.9f, 4.0f, Fp8Format::kE4M3) +
                          qdq(-1.7f, 2.0f, Fp8Format::kE4M3) * qdq(0.2f, 4.0f, Fp8Format::kE4M3);
  EXPECT_FLOAT_EQ(y.item<float>(), static_cast<float>(expected));
  (void)mt::amp::fp8_linear(x, w, Tensor(), state, {});  // grad mode on: recorded
  EXPECT_EQ(state->input.amax_history(), std::vector<float>{1.7f});
}

TEST(Fp8Linear, ArgumentErrors) {
  auto state = std::make_shared<Fp8LinearState>();
  const Tensor x = mt::zeros({2, 4}), w = mt::zeros({3, 4});
  EXPECT_MT_ERROR(mt::amp::fp8_linear(x, w, Tensor(), nullptr, {}), "no scaling state");
  EXPECT_MT_ERROR(mt::amp::fp8_linear(x, mt::zeros({3, 5}), Tensor(), state, {}), "weight [out, 4]");
  EXPECT_MT_ERROR(mt::amp::fp8_linear(x.to(mt::kFloat64), w, Tensor(), state, {}), "fp32, bf16 or fp16 input");
  EXPECT_MT_ERROR(mt::amp::fp8_linear(x, w, mt::zeros({4}), state, {}), "bias [3]");
  EXPECT_MT_ERROR(mt::amp::fp8_linear(x, w, Tensor(), state, {.amax_history_len = -3}), "amax_history_len");
}

TEST(Fp8Linear, TheCheckedDeviceComputesWhatTheCpuDoes) {
  mt::manual_seed(15);
  const mt::Device dev = mt::testing::checked_device();
  const Tensor x = mt::randn({4, 6}), w = mt::randn({3, 6}), b = mt::randn({3});
  const Tensor y_cpu = mt::amp::fp8_linear(x, w, b, std::make_shared<Fp8LinearState>(), {});
  const Tensor y_dev =
      mt::amp::fp8_linear(x.to(dev), w.to(dev), b.to(dev), std::make_shared<Fp8LinearState>(), {}).to(mt::kCPU);
  EXPECT_EQ(mt::testing::max_scaled_error(y_dev, y_cpu, {0.0, 0.0}), 0.0);
}

// ---------------------------------------------------------------------------------------------
// The region and the modules

TEST(Fp8Autocast, LinearRunsInFp8OnlyInsideAnEnabledRegion) {
  mt::manual_seed(16);
  mt::nn::Linear layer(8, 4);
  mt::nn::Linear excluded(8, 4, {.fp8 = false});
  const Tensor x = mt::randn({5, 8}) * 4.0;
  const Tensor plain = layer(x);
  EXPECT_EQ(layer.fp8_state(), nullptr);
  EXPECT_FALSE(mt::amp::is_fp8_enabled());
  Tensor in_region, expected;
  {
    mt::amp::Fp8Autocast fp8({.recipe = {.amax_history_len = 2}});
    EXPECT_TRUE(mt::amp::is_fp8_enabled());
    EXPECT_EQ(mt::amp::fp8_recipe().amax_history_len, 2);
    in_region = layer(x);
    ASSERT_NE(layer.fp8_state(), nullptr);
    {
      mt::amp::Fp8Autocast off({.enabled = false});
      EXPECT_FALSE(mt::amp::is_fp8_enabled());
      EXPECT_EQ(mt::testing::max_scaled_error(layer(x), plain, {0.0, 0.0}), 0.0);
    }
    EXPECT_TRUE(mt::amp::is_fp8_enabled());
    EXPECT_EQ(mt::testing::max_scaled_error(excluded(x), mt::linear(x, excluded.weight(), excluded.bias()), {0.0, 0.0}),
              0.0);
    EXPECT_EQ(excluded.fp8_state(), nullptr);
    for (int i = 0; i < 3; ++i) (void)layer(x);
  }
  EXPECT_FALSE(mt::amp::is_fp8_enabled());
  expected = mt::amp::fp8_linear(x, layer.weight(), layer.bias(), std::make_shared<Fp8LinearState>(), {});
  EXPECT_EQ(mt::testing::max_scaled_error(in_region, expected, {0.0, 0.0}), 0.0);
  EXPECT_GT(mt::testing::max_scaled_error(in_region, plain, mt::testing::kFp32VsReference), 1.0);
  EXPECT_EQ(layer.fp8_state()->input.amax_history().size(), 2u) << "the region's history length";
}

TEST(Fp8Autocast, GptRunsItsBlocksInFp8AndKeepsItsHeadOut) {
  mt::manual_seed(17);
  mt::nn::GPT gpt({.vocab_size = 16, .context = 8, .embed_dim = 16, .num_layers = 1, .num_heads = 2});
  const Tensor tokens = mt::randint(0, 16, {2, 8});
  {
    mt::amp::Autocast autocast(mt::kCPU, mt::kBFloat16);
    mt::amp::Fp8Autocast fp8;
    mt::sum(gpt(tokens).to(mt::kFloat32)).backward();
  }
  int fp8_layers = 0, plain_layers = 0;
  for (const auto& [name, module] : gpt.named_modules()) {
    auto* linear = dynamic_cast<mt::nn::Linear*>(module);
    if (linear == nullptr) continue;
    if (linear->fp8_state() != nullptr) {
      ++fp8_layers;
      EXPECT_EQ(linear->fp8_state()->grad_output.amax_history().size(), 1u) << name << ": backward ran in FP8";
    } else {
      ++plain_layers;
      EXPECT_EQ(name, "head");
    }
  }
  EXPECT_EQ(fp8_layers, 4) << "qkv, proj and both MLP layers (the fused GELU + Linear is not used in FP8)";
  EXPECT_EQ(plain_layers, 1);
}

TEST(Fp8Autocast, ActivationCheckpointingRefusesFp8Regions) {
  mt::nn::Sequential seq(mt::nn::Linear(4, 4));
  const Tensor x = mt::randn({2, 4}).requires_grad_();
  mt::amp::Fp8Autocast fp8;
  EXPECT_MT_ERROR(mt::nn::checkpoint(seq.children(), x), "checkpointing", "FP8");
}

// A small classifier learns in FP8 about as well as in bf16: the same data, seed and steps.
TEST(Fp8Training, SmallClassifierLearnsAsInBf16) {
  auto train = [](bool fp8) {
    mt::manual_seed(21);
    mt::Generator data_gen(5);
    const Tensor centers = mt::randn({4, 16}, {}, &data_gen) * 2.0;
    mt::nn::Sequential model(mt::nn::Linear(16, 64), mt::nn::ReLU(), mt::nn::Linear(64, 4));
    mt::optim::AdamW opt(model.parameters(), {.lr = 3e-3});
    double first = 0.0, last = 0.0;
    for (int step = 0; step < 150; ++step) {
      const Tensor labels = mt::randint(0, 4, {64}, {.dtype = mt::kInt64}, &data_gen);
      const Tensor input = mt::index_select(centers, 0, labels) + mt::randn({64, 16}, {}, &data_gen);
      opt.zero_grad();
      Tensor loss;
      {
        mt::amp::Autocast autocast(mt::kCPU, mt::kBFloat16);
        mt::amp::Fp8Autocast region({.enabled = fp8});
        loss = mt::nn::functional::cross_entropy(model(input), labels);
      }
      loss.backward();
      opt.step();
      const double value = loss.item<float>();
      EXPECT_TRUE(std::isfinite(value));
      if (step < 10) first += value / 10;
      if (step >= 140) last += value / 10;
    }
    return std::pair{first, last};
  };
  const auto [bf16_first, bf16_last] = train(false);
  const auto [fp8_first, fp8_last] = train(true);
  EXPECT_LT(fp8_last, 0.25 * fp8_first) << "FP8 learns";
  EXPECT_NEAR(fp8_last, bf16_last, mt::testing::kFp8TrainingLoss.atol + mt::testing::kFp8TrainingLoss.rtol * bf16_last);
}
