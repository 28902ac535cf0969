// Elementwise kernels' numerics: every op in bf16 and fp16 against the same math in fp32 on inputs
// pre-rounded to the 16-bit type (forward and backward), the fp32 fast paths against fp64, every ISA
// variant of the compute loop against the generic one, strided and broadcast operands against
// contiguous ones, and results that do not depend on the thread count.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "kernels/elementwise.h"
#include "mixtrain/mixtrain.h"
#include "ops/test_nn_helpers.h"
#include "support/gradcheck.h"
#include "support/tolerances.h"

namespace mt = mixtrain;
namespace kn = mixtrain::kernels;
using mt::testing::bitwise_equal;
using mt::testing::rounded;
using mt::testing::vs_fp32;

namespace {

// Values uniform in [lo, hi) as fp32 (seeded).
mt::Tensor uniform(const mt::Shape& shape, double lo, double hi, uint64_t seed) {
  return mt::testing::rand_input(shape, lo, hi, seed).detach().to(mt::kFloat32);
}

struct UnaryCase {
  const char* name;
  std::function<mt::Tensor(const mt::Tensor&)> f;
  kn::UnaryOp kernel;
  bool saves_output;  // backward kernel reads y (else x)
  double lo, hi;
  kn::Scalars scalars = {};
};

std::vector<UnaryCase> unary_cases() {
  using U = kn::UnaryOp;
  return {
      {"exp", [](auto& x) { return mt::exp(x); }, U::kExp, true, -4, 4},
      {"log", [](auto& x) { return mt::log(x); }, U::kLog, false, 0.1, 8},
      {"sqrt", [](auto& x) { return mt::sqrt(x); }, U::kSqrt, true, 0.1, 8},
      {"rsqrt", [](auto& x) { return mt::rsqrt(x); }, U::kRsqrt, true, 0.1, 8},
      {"tanh", [](auto& x) { return mt::tanh(x); }, U::kTanh, true, -3, 3},
      {"sigmoid", [](auto& x) { return mt::sigmoid(x); }, U::kSigmoid, true, -6, 6},
      {"relu", [](auto& x) { return mt::relu(x); }, U::kRelu, true, -3, 3},
      {"gelu", [](auto& x) { return mt::gelu(x); }, U::kGelu, false, -5, 5},
      {"gelu_tanh", [](auto& x) { return mt::gelu(x, mt::GeluApproximation::kTanh); }, U::kGeluTanh, false, -5, 5},
      {"silu", [](auto& x) { return mt::silu(x); }, U::kSilu, false, -6, 6},
      {"clamp", [](auto& x) { return mt::clamp(x, -0.5, 0.75); }, U::kClamp, false, -1, 1, {-0.5, 0.75}},
      {"square", [](auto& x) { return mt::pow(x, 2.0); }, U::kSquare, false, -3, 3},
      {"pow", [](auto& x) { return mt::pow(x, 1.7); }, U::kPowScalar, false, 0.1, 3, {1.7}},
  };
}

TEST(ElementwisePrecision, UnaryOps16BitMatchFp32) {
  for (const UnaryCase& c : unary_cases()) {
    for (mt::DType dt : mt::testing::kHalfDTypes) {
      SCOPED_TRACE(std::string(c.name) + " " + std::string(mt::to_string(dt)));
      const mt::Tensor x32 = rounded(uniform({1000}, c.lo, c.hi, 11), dt);
      const mt::Tensor g32 = rounded(uniform({1000}, -2, 2, 12), dt);
      // Forward: one rounding of the fp32 result.
      mt::Tensor x16 = x32.to(dt).requires_grad_();
      mt::Tensor y16 = c.f(x16);
      ASSERT_EQ(y16.dtype(), dt);
      EXPECT_CLOSE(y16, c.f(x32), vs_fp32(dt));
      // Backward: the fp32 kernel on the same (16-bit) saved tensor; only the final rounding differs.
      y16.backward(g32.to(dt));
      ASSERT_EQ(x16.grad().dtype(), dt);
      const mt::Tensor saved = (c.saves_output ? y16.detach() : x32).to(mt::kFloat32);
      mt::Tensor expected = mt::empty({1000});
      kn::unary_backward_kernel(c.kernel)(mt::Device{}, mt::kFloat32)(expected, g32, saved, c.scalars);
      EXPECT_CLOSE(x16.grad(), expected, vs_fp32(dt));
    }
  }
}

TEST(ElementwisePrecision, BinaryOps16BitMatchFp32) {
  using BinFn = std::function<mt::Tensor(const mt::Tensor&, const mt::Tensor&)>;
  const std::vector<std::pair<const char*, BinFn>> ops = {
      {"add", [](auto& a, auto& b) { return mt::add(a, b, 0.5); }},
      {"sub", [](auto& a, auto& b) { return mt::sub(a, b); }},
      {"mul", [](auto& a, auto& b) { return mt::mul(a, b); }},
      {"div", [](auto& a, auto& b) { return mt::div(a, b); }},
      {"pow", [](auto& a, auto& b) { return mt::pow(a, b); }},
      {"add_scalar", [](auto& a, auto&) { return mt::add(a, 0.3); }},
      {"mul_scalar", [](auto& a, auto&) { return mt::mul(a, 0.3); }},
  };
  for (const auto& [name, f] : ops) {
    for (mt::DType dt : mt::testing::kHalfDTypes) {
      SCOPED_TRACE(std::string(name) + " " + std::string(mt::to_string(dt)));
      const mt::Tensor a32 = rounded(uniform({16, 40}, 0.5, 2.5, 21), dt);
      const mt::Tensor b32 = rounded(uniform({40}, 0.5, 2, 22), dt);  // broadcast over rows
      EXPECT_CLOSE(f(a32.to(dt), b32.to(dt)), f(a32, b32), vs_fp32(dt));
    }
  }
}

// Backward in 16 bits against fp32. The add case reduces a broadcast gradient (sum_to, fp32
// accumulation, one rounding); mul and div use same-shaped operands so that each gradient element
// is at most three roundings (div: g/b, a/b and their product, 1.5 ulp) from fp32, inside the
// tolerance. (A 16-bit product summed over a broadcast dim carries one rounding per term, as in
// PyTorch, which no fixed relative tolerance bounds when the sum cancels.)
TEST(ElementwisePrecision, BinaryBackward16BitMatchFp32) {
  for (mt::DType dt : mt::testing::kHalfDTypes) {
    SCOPED_TRACE(std::string(mt::to_string(dt)));
    const mt::Tensor a32 = rounded(uniform({16, 40}, -2, 2, 31), dt);
    const mt::Tensor b_row = rounded(uniform({40}, 0.5, 2, 32), dt);
    const mt::Tensor b_full = rounded(uniform({16, 40}, 0.5, 2, 34), dt);
    const mt::Tensor g32 = rounded(uniform({16, 40}, -1, 1, 33), dt);
    for (int op = 0; op < 3; ++op) {
      auto run = [&](mt::DType t) {
        mt::Tensor a = a32.to(t).detach().requires_grad_();
        mt::Tensor b = (op == 0 ? b_row : b_full).to(t).detach().requires_grad_();
        mt::Tensor y = op == 0 ? mt::add(a, b, 0.5) : op == 1 ? mt::mul(a, b) : mt::div(a, b);
        y.backward(g32.to(t));
        return std::make_pair(a.grad(), b.grad());
      };
      auto [ga16, gb16] = run(dt);
      auto [ga32, gb32] = run(mt::kFloat32);
      EXPECT_CLOSE(ga16, ga32, vs_fp32(dt)) << "op " << op;
      EXPECT_CLOSE(gb16, gb32, vs_fp32(dt)) << "op " << op;
    }
  }
}

TEST(ElementwisePrecision, Fp32FastPathsMatchFp64) {
  for (const UnaryCase& c : unary_cases()) {
    SCOPED_TRACE(c.name);
    // Wider ranges than above: the polynomial exp/tanh/erf must hold over the whole useful range.
    const double lo = c.lo < 0 ? 4 * c.lo : c.lo, hi = 4 * c.hi;
    const mt::Tensor x32 = uniform({4096}, lo, hi, 41);
    EXPECT_CLOSE(c.f(x32), c.f(x32.to(mt::kFloat64)), mt::testing::kFp32VsReference);
  }
}

TEST(ElementwisePrecision, EveryIsaVariantMatchesGeneric) {
  const std::vector<mt::cpu::Isa> levels = mt::testing::kernel_isa_levels();
  if (levels.size() < 2)
    GTEST_SKIP() << "only the generic loop runs at " << mt::cpu::describe() << ": no vector variant to compare";
  const mt::Tensor x = uniform({3000}, -6, 6, 51);
  const mt::Tensor g = uniform({3000}, -1, 1, 52);
  std::vector<mt::Tensor> reference;
  for (mt::cpu::Isa level : levels) {
    mt::cpu::MaxIsaGuard cap(level);
    ASSERT_EQ(mt::cpu::isa(), level);
    std::vector<mt::Tensor> results;
    for (const UnaryCase& c : unary_cases()) {
      mt::Tensor in = mt::clamp(x, c.lo, c.hi).detach().requires_grad_();
      mt::Tensor y = c.f(in);
      y.backward(g);
      results.push_back(y.detach());
      results.push_back(in.grad());
      results.push_back(c.f(in.detach().to(mt::kBFloat16)).to(mt::kFloat32));
    }
    if (reference.empty()) {
      reference = results;
      continue;
    }
    for (size_t i = 0; i < results.size(); ++i) {
      // FMA contraction in the vector variants may change the last bits only.
      const bool bf16 = i % 3 == 2;
      EXPECT_CLOSE(results[i], reference[i], bf16 ? mt::testing::kBf16VsFp32 : mt::testing::kFp32VsReference)
          << "ISA " << mt::cpu::to_string(level) << ", op " << unary_cases()[i / 3].name << ", result " << i % 3;
    }
  }
}

TEST(ElementwisePrecision, StridedAndBroadcastOperandsMatchContiguous) {
  for (mt::DType dt : {mt::kFloat32, mt::kBFloat16, mt::kFloat16, mt::kFloat64}) {
    SCOPED_TRACE(std::string(mt::to_string(dt)));
    const mt::Tensor a = uniform({37, 300}, -2, 2, 61).to(dt);
    const mt::Tensor at = a.t();  // non-contiguous
    const mt::Tensor at_copy = at.contiguous();
    const mt::Tensor b = uniform({37}, 0.5, 2, 62).to(dt);
    const mt::Tensor b_rows = b.unsqueeze(1).expand({37, 300}).contiguous();
    EXPECT_TRUE(bitwise_equal(mt::gelu(at), mt::gelu(at_copy)));
    EXPECT_TRUE(bitwise_equal(mt::mul(at, b), mt::mul(at_copy, b)));
    EXPECT_TRUE(bitwise_equal(mt::add(a, b.unsqueeze(1)), mt::add(a, b_rows)));  // stride-0 inner broadcast
    EXPECT_TRUE(bitwise_equal(mt::div(a, mt::full({}, 3.0, {.dtype = dt})),
                              mt::div(a, mt::full({37, 300}, 3.0, {.dtype = dt}))));
    EXPECT_TRUE(bitwise_equal(mt::sigmoid(a.slice(1, 1, 300, 3)), mt::sigmoid(a.slice(1, 1, 300, 3).contiguous())));
  }
}

TEST(ElementwisePrecision, ResultsDoNotDependOnThreadCount) {
  const mt::Tensor x = uniform({1 << 20}, -5, 5, 71);
  const mt::Tensor y = uniform({1 << 10}, -5, 5, 72);
  auto run = [&](int threads) {
    return mt::testing::with_threads(threads, [&] {
      return std::vector<mt::Tensor>{mt::gelu(x), mt::gelu(x.to(mt::kBFloat16)), mt::add(x.reshape({1024, 1024}), y),
                                     mt::tanh(x.reshape({1024, 1024}).t())};
    });
  };
  const std::vector<mt::Tensor> one = run(1), two = run(2), three = run(3);
  for (size_t i = 0; i < one.size(); ++i) {
    EXPECT_TRUE(bitwise_equal(one[i], two[i])) << i;
    EXPECT_TRUE(bitwise_equal(one[i], three[i])) << i;
  }
}

}  // namespace
