// conv2d forward and backward: the oneDNN paths (fp32, bf16 native and via fp32, fp16 via fp32)
// against the fp64 reference loops for stride / padding / dilation / groups combinations, whole
// batches and batch chunks (a last, shorter chunk too), gradients of some inputs only, fp64
// finite-difference checks, 16-bit gradients against fp32 ones, the same bits on one and two threads
// when threads take whole chunks (a short last chunk too), and error messages.
#include <gtest/gtest.h>

#include "kernels/conv.h"
#include "mixtrain/autograd.h"
#include "mixtrain/nn/functional.h"
#include "ops/conv_cases.h"
#include "ops/test_linalg_util.h"
#include "ops/test_nn_helpers.h"

namespace mixtrain::testing {
namespace {

namespace F = nn::functional;
using TL = std::vector<Tensor>;

using ConvCase = testing::ConvCase;
const auto& kCases = conv_cases();

kernels::Conv2dGeometry geometry(const F::Conv2dOptions& o) {
  return {o.stride_h, o.stride_w, o.padding_h, o.padding_w, o.dilation_h, o.dilation_w, o.groups};
}

Shape out_shape(const ConvCase& c) {
  const auto& o = c.o;
  return {c.x[0], c.w[0], (c.x[2] + 2 * o.padding_h - o.dilation_h * (c.w[2] - 1) - 1) / o.stride_h + 1,
          (c.x[3] + 2 * o.padding_w - o.dilation_w * (c.w[3] - 1) - 1) / o.stride_w + 1};
}

// Runs once per GemmMode (fp32, bf16 native, bf16 via fp32, fp16); see test_linalg_util.h.
class ConvModes : public GemmModeTest {};
INSTANTIATE_TEST_SUITE_P(Modes, ConvModes, ::testing::ValuesIn(kGemmModes), gemm_mode_name);

// A tensor's values on the host (undefined stays undefined), for the reference loops.
Tensor on_host(const Tensor& t) { return t.defined() ? t.detach().to(Device{}) : Tensor(); }

// Sets the batch-chunk budget of the oneDNN kernels for one scope.
class ChunkBytesGuard {
 public:
  explicit ChunkBytesGuard(int64_t bytes) : previous_(kernels::set_conv2d_chunk_bytes(bytes)) {}
  ~ChunkBytesGuard() { kernels::set_conv2d_chunk_bytes(previous_); }

 private:
  int64_t previous_;
};

// Runs conv2d forward and backward for case c in mode m (whose bf16 path the caller has pinned) and
// checks y, gx, gw and gb against the fp64 reference loops (only the gradients of the inputs that
// require one).
void check_against_reference(const ConvCase& c, const GemmMode& m, bool with_bias, bool grad_x = true,
                             bool grad_w = true, bool grad_b = true) {
  Tensor x = uniform_input(c.x, m.dtype, 1).requires_grad_(grad_x);
  Tensor w = uniform_input(c.w, m.dtype, 2).requires_grad_(grad_w);
  Tensor b = with_bias ? uniform_input({c.w[0]}, m.dtype, 3).requires_grad_(grad_b) : Tensor();
  Tensor y = F::conv2d(x, w, b, c.o);
  ASSERT_EQ(y.shape(), out_shape(c));
  EXPECT_EQ(y.dtype(), m.dtype);
  const auto g = geometry(c.o);
  // The fp64 reference loops run on the host: device operands are copied there first.
  const Tensor hx = on_host(x), hw = on_host(w), hb = on_host(b);
  Tensor y_ref = Tensor::empty(y.shape(), kFloat64);
  kernels::ref::conv2d_forward(hx, hw, hb, y_ref, g);
  EXPECT_CLOSE(y, y_ref, gemm_tol(m.dtype));
  if (!y.requires_grad()) return;

  Tensor gy = uniform_input(y.shape(), m.dtype, 4);
  y.backward(gy);
  Tensor gx_ref = Tensor::empty(c.x, kFloat64), gw_ref = Tensor::empty(c.w, kFloat64);
  Tensor gb_ref = with_bias ? Tensor::empty({c.w[0]}, kFloat64) : Tensor();
  kernels::ref::conv2d_backward_data(on_host(gy), hw, gx_ref, g);
  kernels::ref::conv2d_backward_weights(on_host(gy), hx, gw_ref, gb_ref, g);
  EXPECT_EQ(x.grad().defined(), grad_x);
  EXPECT_EQ(w.grad().defined(), grad_w);
  if (grad_x) {
    EXPECT_EQ(x.grad().dtype(), m.dtype);
    EXPECT_CLOSE(x.grad(), gx_ref, gemm_tol(m.dtype));
  }
  if (grad_w) {
    EXPECT_EQ(w.grad().dtype(), m.dtype);
    EXPECT_CLOSE(w.grad(), gw_ref, gemm_tol(m.dtype));
  }
  if (with_bias) {
    EXPECT_EQ(b.grad().defined(), grad_b);
    if (grad_b) EXPECT_CLOSE(b.grad(), gb_ref, gemm_tol(m.dtype));
  }
}

TEST_P(ConvModes, BatchChunksAgainstReference) {
  // Five images in chunks of one, and of two (2 + 2 + 1: the last chunk runs its own primitives).
  for (int i : {3, 9}) {  // groups; every option at once
    ConvCase c = kCases[i];
    c.x[0] = 5;
    const int64_t image_bytes =
        4 * std::max(c.x[1] * c.x[2] * c.x[3], out_shape(c)[1] * out_shape(c)[2] * out_shape(c)[3]);
    for (int64_t budget : {int64_t{1}, 2 * image_bytes}) {
      ChunkBytesGuard chunks(budget);
      SCOPED_TRACE(::testing::Message() << c.name << ", chunk budget " << budget);
      check_against_reference(c, GetParam(), /*with_bias=*/true);
    }
  }
}

// y and the gradients of x, w and bias of conv2d(c) for seeded inputs in `dtype`, run with
// `threads` OpenMP threads.
TL conv_outputs_on_threads(const ConvCase& c, DType dtype, int threads) {
  return with_threads(threads, [&] {
    Tensor x = uniform_input(c.x, dtype, 1).requires_grad_();
    Tensor w = uniform_input(c.w, dtype, 2).requires_grad_();
    Tensor b = uniform_input({c.w[0]}, dtype, 3).requires_grad_();
    Tensor y = F::conv2d(x, w, b, c.o);
    y.backward(uniform_input(y.shape(), dtype, 4));
    return TL{y.detach(), x.grad(), w.grad(), b.grad()};
  });
}

void expect_same_bits_on_one_and_two_threads(const ConvCase& c) {
  for (DType dt : {kFloat32, kBFloat16, kFloat16}) {
    SCOPED_TRACE(to_string(dt));
    const TL one = conv_outputs_on_threads(c, dt, 1), two = conv_outputs_on_threads(c, dt, 2);
    for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(bitwise_equal(one[i], two[i])) << "output " << i;
  }
}

TEST(Conv2d, ChunksOnThreadsGiveTheSameBitsForAnyThreadCount) {
  // Eight one-image chunks: with two threads each thread takes whole chunks; the weight gradient
  // sums the chunks in chunk order either way.
  ChunkBytesGuard chunks(1);
  ConvCase c = kCases[0];
  c.x[0] = 8;
  expect_same_bits_on_one_and_two_threads(c);
}

TEST(Conv2d, ChunksOnThreadsWithAShortLastChunkGiveTheSameBitsForAnyThreadCount) {
  // Seven images in chunks of two (2 + 2 + 2 + 1): four chunks, so two threads take whole chunks,
  // and the last one runs its own primitives.
  ConvCase c = kCases[0];
  c.x[0] = 7;
  const int64_t image_bytes =
      4 * std::max(c.x[1] * c.x[2] * c.x[3], out_shape(c)[1] * out_shape(c)[2] * out_shape(c)[3]);
  ChunkBytesGuard chunks(2 * image_bytes);
  expect_same_bits_on_one_and_two_threads(c);
}

TEST_P(ConvModes, GradientsOfSomeInputsOnly) {
  const ConvCase& c = kCases[3];  // groups 2
  const GemmMode& m = GetParam();
  check_against_reference(c, m, true, /*grad_x=*/true, /*grad_w=*/false, /*grad_b=*/false);
  check_against_reference(c, m, true, /*grad_x=*/false, /*grad_w=*/true, /*grad_b=*/true);
  check_against_reference(c, m, true, /*grad_x=*/false, /*grad_w=*/false, /*grad_b=*/true);
  check_against_reference(c, m, false, /*grad_x=*/false, /*grad_w=*/true, /*grad_b=*/false);
}

TEST_P(ConvModes, ForwardAndBackwardAgainstReference) {
  for (const ConvCase& c : kCases) {
    for (bool with_bias : {true, false}) {
      SCOPED_TRACE(::testing::Message() << c.name << (with_bias ? ", bias" : ", no bias"));
      check_against_reference(c, GetParam(), with_bias);
    }
  }
}

TEST_P(ConvModes, NoReferenceKernelsForCommonShapes) {
  // oneDNN picks its JIT kernels (not "ref:any") for the blocked formats the primitives ask for, in
  // the dtype this mode's primitives compute in.
  const DType dt = GetParam().onednn_dtype();
  for (int i : {0, 1, 3, 5}) {
    const ConvCase& c = kCases[i];
    std::string impl = kernels::conv2d_impl_info(c.x, c.w, true, geometry(c.o), dt);
    EXPECT_EQ(impl.find("ref"), std::string::npos) << c.name << " " << to_string(dt) << ": " << impl;
  }
}

TEST(Conv2d, NonContiguousAndUnbatchedInputs) {
  Tensor base = uniform_input({2, 9, 9, 8}, kFloat32, 5);
  Tensor x = base.permute({0, 3, 1, 2});  // NHWC memory viewed as NCHW
  Tensor w = uniform_input({4, 8, 3, 3}, kFloat32, 6);
  F::Conv2dOptions o{.padding_h = 1, .padding_w = 1};
  Tensor expected = Tensor::empty({2, 4, 9, 9}, kFloat64);
  kernels::ref::conv2d_forward(on_host(x), on_host(w), Tensor(), expected, geometry(o));
  EXPECT_CLOSE(F::conv2d(x, w, Tensor(), o), expected, kGemmFp32);
  // [C, H, W] -> [O, Ho, Wo]
  Tensor y3 = F::conv2d(x.select(0, 1), w, Tensor(), o);
  EXPECT_EQ(y3.shape(), (Shape{4, 9, 9}));
  EXPECT_CLOSE(y3, expected.select(0, 1), kGemmFp32);
}

TEST(Conv2d, SameShapeReusesPrimitives) {
  Tensor x = uniform_input({1, 5, 13, 11}, kFloat32, 7).requires_grad_();
  Tensor w = uniform_input({7, 5, 3, 3}, kFloat32, 8).requires_grad_();
  auto step = [&] { F::conv2d(x, w, Tensor(), {}).backward(ones({1, 7, 11, 9})); };
  step();
  const auto before = kernels::primitive_cache_stats();
  step();
  step();
  EXPECT_EQ(kernels::primitive_cache_stats().created, before.created);
}

TEST(Conv2dGradcheck, Combinations) {
  struct G {
    const char* name;
    Shape x, w;
    F::Conv2dOptions o;
    bool bias;
  };
  const G cases[] = {
      {"plain + bias", {2, 2, 5, 5}, {3, 2, 3, 3}, {}, true},
      {"padding, no bias", {1, 2, 4, 5}, {2, 2, 3, 3}, {.padding_h = 1, .padding_w = 1}, false},
      {"stride", {1, 2, 7, 6}, {2, 2, 3, 2}, {.stride_h = 2, .stride_w = 3, .padding_h = 1}, true},
      {"dilation", {1, 1, 7, 7}, {2, 1, 3, 3}, {.padding_w = 1, .dilation_h = 2, .dilation_w = 3}, true},
      {"groups", {1, 4, 5, 4}, {4, 2, 2, 3}, {.stride_h = 2, .padding_h = 1, .padding_w = 1, .groups = 2}, true},
  };
  for (const G& c : cases) {
    SCOPED_TRACE(c.name);
    TL inputs{rand_input(c.x, -1, 1, 10), rand_input(c.w, -1, 1, 11)};
    if (c.bias) inputs.push_back(rand_input({c.w[0]}, -1, 1, 12));
    auto o = c.o;
    EXPECT_EQ(gradcheck([o](const TL& t) { return F::conv2d(t[0], t[1], t.size() > 2 ? t[2] : Tensor(), o); }, inputs),
              "");
  }
}

class ConvHalfModes : public GemmModeTest {};
INSTANTIATE_TEST_SUITE_P(Modes, ConvHalfModes, ::testing::ValuesIn(kHalfGemmModes), gemm_mode_name);

TEST_P(ConvHalfModes, GradsMatchFp32Gradients) {
  const ConvCase& c = kCases[9];  // every option at once
  const GemmMode& m = GetParam();
  TL in32, in16;
  uint64_t seed = 20;
  for (const Shape& s : {c.x, c.w, Shape{c.w[0]}}) {
    Tensor r = uniform_input(s, m.dtype, seed++);
    in32.push_back(r.to(kFloat32).requires_grad_());
    in16.push_back(r.requires_grad_());
  }
  Tensor y32 = F::conv2d(in32[0], in32[1], in32[2], c.o), y16 = F::conv2d(in16[0], in16[1], in16[2], c.o);
  Tensor gy = uniform_input(y16.shape(), m.dtype, 30);
  y32.backward(gy.to(kFloat32));
  y16.backward(gy);
  EXPECT_CLOSE(y16, y32, gemm_tol(m.dtype));
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(in16[i].grad().dtype(), m.dtype);
    EXPECT_CLOSE(in16[i].grad(), in32[i].grad(), gemm_tol(m.dtype)) << "input " << i;
  }
}

TEST(Conv2dErrors, MessagesNameTheOpAndShapes) {
  Tensor x = zeros({1, 4, 8, 8});
  expect_error(
      [&] {
        F::conv2d(x, zeros({6, 4, 3, 3}), Tensor(), {.groups = 3});
      },
      {"conv2d", "groups = 3", "C = 4", "[1, 4, 8, 8]"});
  expect_error(
      [&] {
        F::conv2d(x, zeros({5, 2, 3, 3}), Tensor(), {.groups = 2});
      },
      {"conv2d", "groups = 2", "output channels 5", "[5, 2, 3, 3]"});
  expect_error([&] { F::conv2d(x, zeros({6, 3, 3, 3})); }, {"conv2d", "[6, 3, 3, 3]", "[1, 4, 8, 8]"});
  expect_error([&] { F::conv2d(zeros({4, 8}), zeros({6, 4, 3, 3})); }, {"conv2d", "[4, 8]"});
  expect_error([&] { F::conv2d(x, zeros({6, 4, 3})); }, {"conv2d", "[6, 4, 3]"});
  expect_error([&] { F::conv2d(x, zeros({6, 4, 3, 3}, {.dtype = kBFloat16})); }, {"conv2d", "float32", "bfloat16"});
  expect_error([&] { F::conv2d(x, zeros({6, 4, 3, 3}), zeros({5})); }, {"conv2d", "bias", "[5]"});
  expect_error([&] { F::conv2d(x, zeros({6, 4, 9, 3})); }, {"conv2d", "smaller than the dilated kernel"});
  expect_error([&] { F::conv2d(x, zeros({6, 4, 3, 3}), Tensor(), {.stride_h = 0}); }, {"conv2d", "stride"});
}

}  // namespace
}  // namespace mixtrain::testing
