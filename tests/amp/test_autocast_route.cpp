// Note [Parameters on the fp32 route] (docs/notes/conversions.md): where 16-bit matmuls take the
// fp32 route, autocast hands linear and gelu_linear their fp32 weight and bias rounded in fp32
// (ops::round_through) instead of cast to 16 bits. round_through must give the bits of the two
// casts it replaces, at every ISA level, forward and backward; the layers must give the bits of the
// cast composition in their output and every gradient, and must really take the rounded path.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/copy.h"
#include "kernels/linalg.h"
#include "mixtrain/amp/autocast.h"
#include "mixtrain/autograd.h"
#include "mixtrain/mixtrain.h"
#include "ops/round_through.h"
#include "support/bits.h"
#include "support/checked_device.h"

namespace mixtrain::testing {
namespace {

namespace F = nn::functional;

// fp32 values that exercise the rounding: random normals over many binades, ties to even at both
// precisions, fp32 denormals, values that overflow 16 bits, infinities, NaNs with payloads in the
// kept and in the dropped bits. Long enough to cross the kernel's pieces and parallel chunks.
Tensor hard_values(int64_t n) {
  std::vector<float> v;
  v.reserve(n);
  const uint32_t specials[] = {0x00000000, 0x80000000, 0x00000001, 0x807fffff, 0x3f808000, 0x3f818000, 0x3f800001,
                               0x477ff000, 0x477fefff, 0x7f7f8000, 0x7f7f7fff, 0x7f800000, 0xff800000, 0x7fc00001,
                               0x7f800001, 0xffa00000, 0x33000000, 0x33000001, 0x387fc000, 0x38800000};
  for (uint32_t s : specials) v.push_back(float_of(s));
  uint64_t state = 0x9e3779b97f4a7c15ull;
  while (static_cast<int64_t>(v.size()) < n) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    const float mantissa = static_cast<float>(state % 1000003) / 1000003.0f * 2.0f - 1.0f;
    const int exponent = static_cast<int>((state >> 32) % 80) - 40;
    v.push_back(std::ldexp(mantissa, exponent));
  }
  return from_vector(v);
}

void expect_same_bits(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const Tensor a = got.to(Device{}).contiguous(), b = want.to(Device{}).contiguous();
  const auto* pa = static_cast<const unsigned char*>(a.raw_data());
  const auto* pb = static_cast<const unsigned char*>(b.raw_data());
  int64_t first = -1, wrong = 0;
  const int64_t es = static_cast<int64_t>(a.element_size());
  for (int64_t i = 0; i < a.numel(); ++i) {
    if (std::memcmp(pa + i * es, pb + i * es, es) != 0) {
      if (first < 0) first = i;
      ++wrong;
    }
  }
  EXPECT_EQ(wrong, 0) << what << ": first difference at element " << first;
}

TEST(RoundThrough, GivesTheBitsOfTheTwoCastsAtEveryIsa) {
  const Tensor x = hard_values(70001);
  for (cpu::Isa level : {cpu::Isa::kGeneric, cpu::Isa::kAvx2, cpu::Isa::kAvx512, cpu::Isa::kAvx512Bf16}) {
    if (level > cpu::isa()) continue;
    cpu::MaxIsaGuard cap(level);
    for (DType p : {kBFloat16, kFloat16}) {
      const std::string what = std::string(cpu::to_string(level)) + " " + std::string(to_string(p));
      const Tensor want = x.to(p).to(kFloat32);
      expect_same_bits(ops::round_through(x, p), want, what);
      // In place, as the kernel allows.
      Tensor inplace = x.clone();
      kernels::round_through_table(inplace.device(), p)(inplace, inplace);
      expect_same_bits(inplace, want, what + " in place");
      // A strided view is made contiguous first.
      const Tensor strided = x.narrow(0, 0, 70000).view({350, 200}).t();
      expect_same_bits(ops::round_through(strided, p), strided.to(p).to(kFloat32), what + " strided");
    }
  }
}

TEST(RoundThrough, GradientIsRoundedThroughTheSamePrecision) {
  for (DType p : {kBFloat16, kFloat16}) {
    Tensor x = hard_values(300).narrow(0, 20, 280).clone().requires_grad_();
    const Tensor g = hard_values(400).narrow(0, 100, 280).clone();
    ops::round_through(x, p).backward(g);
    expect_same_bits(x.grad(), g.to(p).to(kFloat32), std::string(to_string(p)));
  }
}

TEST(RoundThrough, RefusesWhatItCannotRound) {
  EXPECT_THROW(ops::round_through(from_vector(std::vector<double>{1.0}), kBFloat16), Error);
  EXPECT_THROW(ops::round_through(from_vector(std::vector<float>{1.0f}), kFloat32), Error);
}

// Pins bf16 matmuls to the fp32 route for a scope (fp16 is always on it on the CPU).
struct Fp32Route {
  Fp32Route() { kernels::set_bf16_path(kernels::Bf16Path::kFp32); }
  ~Fp32Route() { kernels::set_bf16_path(kernels::Bf16Path::kAuto); }
};

// Forward op names recorded while alive.
struct RecordedOps {
  std::vector<std::string> names;
  uint64_t id = autograd::add_op_observer([this](const autograd::OpEvent& e) {
    if (!e.backward) names.push_back(e.op);
  });
  ~RecordedOps() { autograd::remove_op_observer(id); }
  int64_t count(const std::string& op) const { return std::count(names.begin(), names.end(), op); }
};

struct LayerRun {
  std::vector<Tensor> results;  // y, x.grad, w.grad, b.grad
  int64_t rounded = 0;          // round_through ops recorded
  int64_t casts = 0;            // "to" ops recorded (casts of tensors that require grad)
};

// y = layer(x, w, b) for fp32 leaves, then backward of a fixed output gradient. autocast: in a
// region of `dt`; else on inputs cast by hand to `dt` (the composition the region stands for).
LayerRun run_layer(bool gelu_first, DType dt, bool autocast, bool bias) {
  Generator gen(7);
  Tensor x = randn({3, 5, 48}, {}, &gen).requires_grad_();
  Tensor w = mul(randn({40, 48}, {}, &gen), 0.2).detach().requires_grad_();
  Tensor b = bias ? randn({40}, {}, &gen).requires_grad_() : Tensor();
  const Tensor gy = randn({3, 5, 40}, {}, &gen).to(dt);
  LayerRun r;
  Tensor y;
  {
    RecordedOps ops;
    if (autocast) {
      amp::Autocast ac(test_device().type, dt);
      y = gelu_first ? F::gelu_linear(x, w, b) : linear(x, w, b);
      // A second use in the region is served from the cast cache: no new rounding.
      (gelu_first ? F::gelu_linear(x, w, b) : linear(x, w, b));
    } else {
      const Tensor bc = bias ? b.to(dt) : Tensor();
      y = gelu_first ? linear(gelu(x).to(dt), w.to(dt), bc) : linear(x.to(dt), w.to(dt), bc);
    }
    r.rounded = ops.count("round_through");
    r.casts = ops.count("to");
  }
  y.backward(gy);
  r.results = {y, x.grad(), w.grad()};
  if (bias) r.results.push_back(b.grad());
  return r;
}

TEST(AutocastRoute, LinearLayersRoundTheirParametersAndKeepTheCastsBits) {
  Fp32Route route;
  for (DType dt : {kBFloat16, kFloat16}) {
    ASSERT_TRUE(kernels::uses_fp32_route(test_device(), dt)) << to_string(dt);
    for (bool gelu_first : {false, true}) {
      for (bool bias : {true, false}) {
        const std::string what =
            std::string(to_string(dt)) + std::string(gelu_first ? " gelu_linear" : " linear") + (bias ? " with bias" : "");
        const LayerRun got = run_layer(gelu_first, dt, true, bias);
        const LayerRun want = run_layer(gelu_first, dt, false, bias);
        EXPECT_EQ(got.rounded, bias ? 2 : 1) << what << ": the parameters were not rounded in fp32";
        // linear casts its input (a leaf: cached, one cast); gelu_linear's input is gelu(x), made
        // without a graph, whose cast records nothing. Neither casts a parameter.
        EXPECT_EQ(got.casts, gelu_first ? 0 : 1) << what;
        ASSERT_EQ(got.results.size(), want.results.size());
        EXPECT_EQ(got.results[0].dtype(), dt) << what;
        EXPECT_EQ(got.results[2].dtype(), kFloat32) << what << ": the weight gradient reaches the fp32 leaf";
        const char* names[] = {"output", "input gradient", "weight gradient", "bias gradient"};
        for (size_t i = 0; i < got.results.size(); ++i)
          expect_same_bits(got.results[i], want.results[i], what + " " + names[i]);
      }
    }
  }
}

TEST(AutocastRoute, NativeBf16PathCastsAsBefore) {
  if (!kernels::native_bf16_unavailable_reason().empty())
    GTEST_SKIP() << kernels::native_bf16_unavailable_reason();
  kernels::set_bf16_path(kernels::Bf16Path::kNative);
  const LayerRun got = run_layer(false, kBFloat16, true, true);
  kernels::set_bf16_path(kernels::Bf16Path::kAuto);
  EXPECT_EQ(got.rounded, 0);
  EXPECT_EQ(got.casts, 3) << "input, weight and bias cast to bf16";
}

TEST(AutocastRoute, ParametersAreRoundedOncePerRegion) {
  Fp32Route route;
  Tensor w = randn({16, 16}).requires_grad_();
  const Tensor x = randn({4, 16});
  amp::reset_cast_cache_stats();
  RecordedOps ops;
  {
    amp::Autocast ac(test_device().type, kBFloat16);
    for (int i = 0; i < 3; ++i) linear(x, w);
    EXPECT_EQ(amp::cast_cache_stats().entries, 1);
    // A plain bf16 use of the same weight (matmul) gets a cast of its own.
    matmul(x, w);
    EXPECT_EQ(amp::cast_cache_stats().entries, 2);
  }
  EXPECT_EQ(ops.count("round_through"), 1);
  EXPECT_EQ(amp::cast_cache_stats().hits, 2);
  EXPECT_EQ(amp::cast_cache_stats().entries, 0);
}

TEST(AutocastRoute, OtherDtypeMixesSeeTheCasts) {
  Fp32Route route;
  const Tensor w = randn({4, 8}).requires_grad_();
  const Tensor b = randn({4}).requires_grad_();
  const Tensor x = randn({2, 8});
  amp::Autocast ac(test_device().type, kBFloat16);
  // An fp64 input is not autocast-eligible and keeps its dtype: refused as without rounding.
  EXPECT_THROW(linear(x.to(kFloat64), w), Error);
  // A bf16 weight with an fp32 bias: the bias is cast, as it would be without rounding.
  const Tensor w16 = w.detach().to(kBFloat16);
  Tensor y = linear(x, w16, b);
  ASSERT_EQ(y.dtype(), kBFloat16);
  amp::Autocast off(test_device().type, kBFloat16, false);
  expect_same_bits(y, linear(x.to(kBFloat16), w16, b.to(kBFloat16)), "bf16 weight, fp32 bias");
}

}  // namespace
}  // namespace mixtrain::testing
