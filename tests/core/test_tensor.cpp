// Tensors: metadata, views sharing storage, copies and conversions, element access, printing and
// factories (include/mixtrain/tensor.h, factory.h; src/core/tensor.cpp, src/ops/views.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "mixtrain/mixtrain.h"
#include "support/expect_error.h"
#include "support/checked_device.h"

namespace mt = mixtrain;

namespace {

using V = std::vector<double>;

// 0, 1, ..., n-1 as float32 in `shape`: distinct values, so a view's values show which elements it sees.
mt::Tensor iota(const mt::Shape& shape) {
  return mt::arange(0.0, static_cast<double>(shape.numel()), 1.0, {.dtype = mt::kFloat32}).reshape(shape);
}
V values(const mt::Tensor& t) { return t.to_vector<double>(); }

TEST(Tensor, ShapeStridesAndSizes) {
  mt::Tensor t = mt::empty({2, 3, 4}, {.dtype = mt::kBFloat16});
  EXPECT_EQ(t.dim(), 3);
  EXPECT_EQ(t.shape(), (mt::Shape{2, 3, 4}));
  EXPECT_EQ(t.strides(), (mt::Shape{12, 4, 1}));
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_EQ(t.stride(0), 12);
  EXPECT_EQ(t.element_size(), 2u);
  EXPECT_EQ(t.nbytes(), 48u);
  EXPECT_EQ(t.storage_offset(), 0);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_TRUE(t.is_floating_point());
  EXPECT_EQ(t.device(), mixtrain::testing::test_device());  // the default device

  mt::Tensor s = mt::scalar_tensor(2.5);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.numel(), 1);
  EXPECT_EQ(s.item<float>(), 2.5f);

  mt::Tensor e = mt::zeros({0, 5});
  EXPECT_EQ(e.numel(), 0);
  EXPECT_TRUE(e.to_vector<float>().empty());
}

TEST(Tensor, ViewInfersMinusOneAndSharesStorage) {
  mt::Tensor a = iota({2, 3, 4});
  mt::Tensor v = a.view({-1, 4});
  EXPECT_EQ(v.shape(), (mt::Shape{6, 4}));
  EXPECT_TRUE(v.shares_storage(a));
  EXPECT_EQ(values(v), values(a));
  v.select(0, 5).fill_(-1.0);  // the last row of v is a[1][2]
  EXPECT_EQ(a.to_vector<float>()[20], -1.0f);
  EXPECT_EQ(a.to_vector<float>()[23], -1.0f);
  EXPECT_EQ(a.to_vector<float>()[19], 19.0f);
  EXPECT_EQ(a.view({2, -1}).shape(), (mt::Shape{2, 12}));
}

TEST(Tensor, ViewOfNonContiguousThrowsAndSuggestsReshape) {
  mt::Tensor t = iota({2, 3}).t();
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_MT_ERROR(t.view({6}), "view", "reshape", "[3, 2]");
}

TEST(Tensor, ReshapeViewsWhenPossibleAndCopiesWhenNeeded) {
  mt::Tensor a = iota({2, 3});
  mt::Tensor r = a.reshape({3, 2});
  EXPECT_TRUE(r.shares_storage(a));

  mt::Tensor t = a.t();  // [3, 2]: 0 3 / 1 4 / 2 5
  mt::Tensor c = t.reshape({6});
  EXPECT_FALSE(c.shares_storage(a));
  EXPECT_EQ(values(c), (V{0, 3, 1, 4, 2, 5}));
  // A copy: writing to it leaves the original alone.
  c.fill_(9.0);
  EXPECT_EQ(values(a), (V{0, 1, 2, 3, 4, 5}));
  // Splitting a dim of a transposed tensor needs no copy.
  mt::Tensor base = iota({4, 3});
  mt::Tensor s = base.t().reshape({3, 2, 2});
  EXPECT_TRUE(s.shares_storage(base));
  EXPECT_EQ(values(s), (V{0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11}));
}

TEST(Tensor, TransposeAndPermute) {
  mt::Tensor a = iota({2, 3, 4});
  mt::Tensor t = a.transpose(0, 2);
  EXPECT_EQ(t.shape(), (mt::Shape{4, 3, 2}));
  EXPECT_EQ(t.strides(), (mt::Shape{1, 4, 12}));
  EXPECT_TRUE(t.shares_storage(a));
  mt::Tensor p = a.permute({2, 0, 1});
  EXPECT_EQ(p.shape(), (mt::Shape{4, 2, 3}));
  EXPECT_EQ(p.strides(), (mt::Shape{1, 12, 4}));
  std::vector<float> pv = p.to_vector<float>();
  for (int k = 0; k < 4; ++k)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j) EXPECT_EQ(pv[k * 6 + i * 3 + j], i * 12 + j * 4 + k);
  EXPECT_EQ(values(a.permute({-1, 0, 1})), values(p));  // negative dims wrap
  p.select(0, 3).fill_(100.0);                          // every element with k == 3
  std::vector<float> av = a.to_vector<float>();
  for (int i = 0; i < 24; ++i) EXPECT_EQ(av[i], i % 4 == 3 ? 100.0f : i) << i;
}

TEST(Tensor, SliceWithStepsAndNegativeIndices) {
  mt::Tensor a = iota({10});
  EXPECT_EQ(values(a.slice(0, 2, 8, 3)), (V{2, 5}));
  EXPECT_EQ(values(a.slice(0, -4, 10, 2)), (V{6, 8}));
  EXPECT_EQ(values(a.slice(0, 1, -1, 3)), (V{1, 4, 7}));
  EXPECT_EQ(values(a.slice(0, 7, 100)), (V{7, 8, 9}));  // the end is clamped
  EXPECT_EQ(a.slice(0, 5, 2).numel(), 0);               // empty, not an error
  EXPECT_EQ(values(a.narrow(0, 3, 2)), (V{3, 4}));

  mt::Tensor m = iota({3, 4});
  mt::Tensor cols = m.slice(1, 0, 4, 2);  // columns 0 and 2
  EXPECT_EQ(cols.shape(), (mt::Shape{3, 2}));
  EXPECT_EQ(cols.strides(), (mt::Shape{4, 2}));
  EXPECT_EQ(values(cols), (V{0, 2, 4, 6, 8, 10}));
  cols.fill_(-1.0);
  EXPECT_EQ(values(m), (V{-1, 1, -1, 3, -1, 5, -1, 7, -1, 9, -1, 11}));
  EXPECT_MT_ERROR(a.slice(0, 0, 5, 0), "slice", "step");
}

TEST(Tensor, Select) {
  mt::Tensor m = iota({3, 4});
  EXPECT_EQ(values(m.select(0, 1)), (V{4, 5, 6, 7}));
  EXPECT_EQ(values(m.select(0, -1)), (V{8, 9, 10, 11}));
  EXPECT_EQ(values(m.select(1, -2)), (V{2, 6, 10}));
  EXPECT_EQ(m.select(1, 0).shape(), (mt::Shape{3}));
  mt::Tensor e = m.select(0, 2).select(0, 3);
  EXPECT_EQ(e.dim(), 0);
  EXPECT_EQ(e.item<float>(), 11.0f);
  EXPECT_TRUE(e.shares_storage(m));
  EXPECT_MT_ERROR(m.select(0, 3), "select", "out of range", "[3, 4]");
  EXPECT_MT_ERROR(m.select(0, -4), "select");
}

TEST(Tensor, ExpandBroadcastsWithStrideZero) {
  mt::Tensor c = iota({3, 1});
  mt::Tensor e = c.expand({2, 3, 4});
  EXPECT_EQ(e.shape(), (mt::Shape{2, 3, 4}));
  EXPECT_EQ(e.strides(), (mt::Shape{0, 1, 0}));
  EXPECT_TRUE(e.shares_storage(c));
  std::vector<float> ev = e.to_vector<float>();
  for (int i = 0; i < 24; ++i) EXPECT_EQ(ev[i], (i / 4) % 3);
  EXPECT_EQ(c.expand({-1, 2}).shape(), (mt::Shape{3, 2}));  // -1 keeps a dim
  c.select(0, 1).fill_(7.0);                                // a write to the base is seen through every broadcast copy
  EXPECT_EQ(e.to_vector<float>()[5], 7.0f);
  EXPECT_EQ(e.to_vector<float>()[17], 7.0f);
  EXPECT_MT_ERROR(c.expand({3, 4, 2}), "expand", "[3, 1]");
  EXPECT_MT_ERROR(iota({2, 3}).expand({4, 3}), "expand", "[2, 3]", "[4, 3]");
}

TEST(Tensor, SqueezeUnsqueezeFlatten) {
  mt::Tensor a = iota({1, 3, 1});
  EXPECT_EQ(a.squeeze().shape(), (mt::Shape{3}));
  EXPECT_EQ(a.squeeze(0).shape(), (mt::Shape{3, 1}));
  EXPECT_EQ(a.squeeze(-1).shape(), (mt::Shape{1, 3}));
  EXPECT_EQ(a.squeeze(1).shape(), (mt::Shape{1, 3, 1}));  // size 3: unchanged
  EXPECT_TRUE(a.squeeze().shares_storage(a));

  mt::Tensor b = iota({2, 3});
  EXPECT_EQ(b.unsqueeze(0).shape(), (mt::Shape{1, 2, 3}));
  EXPECT_EQ(b.unsqueeze(1).shape(), (mt::Shape{2, 1, 3}));
  EXPECT_EQ(b.unsqueeze(-1).shape(), (mt::Shape{2, 3, 1}));
  EXPECT_EQ(values(b.unsqueeze(1)), values(b));
  EXPECT_MT_ERROR(b.unsqueeze(3), "unsqueeze", "out of range");

  mt::Tensor c = iota({2, 3, 4});
  EXPECT_EQ(c.flatten().shape(), (mt::Shape{24}));
  EXPECT_EQ(c.flatten(1).shape(), (mt::Shape{2, 12}));
  EXPECT_EQ(c.flatten(0, 1).shape(), (mt::Shape{6, 4}));
  EXPECT_TRUE(c.flatten(1).shares_storage(c));
  mt::Tensor ft = c.transpose(1, 2).flatten(1);  // not viewable: a copy
  EXPECT_FALSE(ft.shares_storage(c));
  EXPECT_EQ(ft.to_vector<float>()[1], 4.0f);
  EXPECT_EQ(mt::scalar_tensor(3.0).flatten().shape(), (mt::Shape{1}));
}

TEST(Tensor, ContiguousAndClone) {
  mt::Tensor a = iota({2, 3});
  EXPECT_TRUE(a.contiguous().is_same(a));  // already contiguous: the same tensor
  mt::Tensor t = a.t();
  mt::Tensor c = t.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_FALSE(c.shares_storage(a));
  EXPECT_EQ(c.strides(), (mt::Shape{2, 1}));
  EXPECT_EQ(values(c), (V{0, 3, 1, 4, 2, 5}));

  mt::Tensor k = a.clone();
  EXPECT_FALSE(k.shares_storage(a));
  EXPECT_EQ(k.dtype(), a.dtype());
  EXPECT_EQ(values(k), values(a));
  k.fill_(0.0);
  EXPECT_EQ(values(a), (V{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(values(t.clone()), (V{0, 3, 1, 4, 2, 5}));  // clone of a strided view
}

TEST(Tensor, CopyBroadcastsAndConverts) {
  mt::Tensor a = mt::zeros({2, 3});
  a.copy_(mt::from_vector(std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(values(a), (V{1, 2, 3, 1, 2, 3}));
  a.t().copy_(iota({3, 2}));  // into a strided destination
  EXPECT_EQ(values(a), (V{0, 2, 4, 1, 3, 5}));
}

constexpr mt::DType kAllDTypes[] = {mt::kFloat32, mt::kFloat16, mt::kBFloat16, mt::kFloat64,
                                    mt::kInt32,   mt::kInt64,   mt::kUInt8,    mt::kBool};

TEST(TensorTo, EveryPairOfDTypes) {
  // Values every dtype holds exactly, apart from bool, which keeps only "non-zero".
  const V input{0, 1, 2, 5, 100};
  for (mt::DType from : kAllDTypes) {
    mt::Tensor src = mt::from_vector(input, {5}, {.dtype = from});
    for (mt::DType to : kAllDTypes) {
      SCOPED_TRACE(::testing::Message() << from << " -> " << to);
      mt::Tensor dst = src.to(to);
      EXPECT_EQ(dst.dtype(), to);
      EXPECT_EQ(dst.shape(), src.shape());
      V expected = (from == mt::kBool || to == mt::kBool) ? V{0, 1, 1, 1, 1} : input;
      EXPECT_EQ(values(dst), expected);
      if (from == to) {
        EXPECT_TRUE(dst.is_same(src));  // no copy, like PyTorch
      } else {
        EXPECT_FALSE(dst.shares_storage(src));
      }
      // A strided source converts too.
      EXPECT_EQ(values(src.slice(0, 0, 5, 2).to(to)), (V{expected[0], expected[2], expected[4]}));
    }
  }
}

TEST(TensorTo, RoundsToNearestEvenIn16Bits) {
  mt::Tensor x = mt::from_vector(std::vector<float>{1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-11f,
                                                    1.0f + 3 * 0x1p-11f, 65519.0f, 65520.0f, -1e-8f});
  // bfloat16 keeps 8 significant bits: 1 + 2^-8 is a tie that goes to the even 1; 1 + 3*2^-8 to 1 + 2^-6.
  std::vector<float> b = x.to(mt::kBFloat16).to_vector<float>();
  EXPECT_EQ(b[0], 1.0f);
  EXPECT_EQ(b[1], 1.0f + 0x1p-6f);
  EXPECT_EQ(b[2], 1.0f);
  EXPECT_EQ(b[4], 65536.0f);
  // float16 keeps 11: the same ties one level down, and 65520 is the first value that overflows.
  std::vector<float> h = x.to(mt::kFloat16).to_vector<float>();
  EXPECT_EQ(h[0], 1.0f + 0x1p-8f);
  EXPECT_EQ(h[2], 1.0f);
  EXPECT_EQ(h[3], 1.0f + 0x1p-9f);
  EXPECT_EQ(h[4], 65504.0f);
  EXPECT_TRUE(std::isinf(h[5]));
  EXPECT_TRUE(std::signbit(h[6]));  // tiny negatives keep their sign
  // Widening back is exact, and 16 -> 16 bits goes through fp32.
  EXPECT_EQ(x.to(mt::kBFloat16).to(mt::kFloat32).to(mt::kBFloat16).to_vector<float>(), b);
  EXPECT_EQ(mt::from_vector(std::vector<float>{1.0f + 0x1p-10f}).to(mt::kFloat16).to(mt::kBFloat16).item<float>(),
            1.0f);
  // int -> float rounds too: 2^24 + 1 has no fp32, 257 no bf16 representation.
  EXPECT_EQ(mt::from_vector(std::vector<int64_t>{16777217}).to(mt::kFloat32).item<float>(), 16777216.0f);
  EXPECT_EQ(mt::from_vector(std::vector<int32_t>{257}).to(mt::kBFloat16).item<float>(), 256.0f);
}

TEST(TensorTo, FloatToIntegerTruncatesTowardZero) {
  const std::vector<float> x{2.7f, -2.7f, 0.5f, -0.5f, 9.9f};
  for (mt::DType from : {mt::kFloat32, mt::kFloat64, mt::kBFloat16, mt::kFloat16}) {
    mt::Tensor t = mt::from_vector(x, {5}, {.dtype = from});
    EXPECT_EQ(t.to(mt::kInt32).to_vector<int32_t>(), (std::vector<int32_t>{2, -2, 0, 0, 9})) << from;
    EXPECT_EQ(t.to(mt::kInt64).to_vector<int64_t>(), (std::vector<int64_t>{2, -2, 0, 0, 9})) << from;
    EXPECT_EQ(t.to(mt::kBool).to_vector<bool>(), (std::vector<bool>{true, true, true, true, true})) << from;
  }
  EXPECT_EQ(mt::from_vector(std::vector<float>{255.9f, 3.2f}).to(mt::kUInt8).to_vector<uint8_t>(),
            (std::vector<uint8_t>{255, 3}));
  EXPECT_EQ(mt::from_vector(std::vector<float>{0.0f, -0.0f, NAN}).to(mt::kBool).to_vector<bool>(),
            (std::vector<bool>{false, false, true}));
}

TEST(Tensor, ItemAndToVector) {
  mt::Tensor s = mt::full({1, 1}, 3.75, {.dtype = mt::kBFloat16});
  EXPECT_EQ(s.item<float>(), 3.75f);
  EXPECT_EQ(s.item<double>(), 3.75);
  EXPECT_EQ(s.item<int64_t>(), 3);
  EXPECT_EQ(s.item<mt::bfloat16>().bits(), mt::bfloat16(3.75f).bits());
  EXPECT_TRUE(s.item<bool>());
  EXPECT_EQ(mt::scalar_tensor(-7, {.dtype = mt::kInt32}).item<float>(), -7.0f);
  EXPECT_MT_ERROR(mt::zeros({2, 2}).item<float>(), "item", "[2, 2]");

  mt::Tensor t = iota({2, 3}).t();  // non-contiguous: values come out in row-major order of the view
  EXPECT_EQ(t.to_vector<int32_t>(), (std::vector<int32_t>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(t.to_vector<mt::float16>()[1].bits(), mt::float16(3.0f).bits());
}

TEST(Tensor, DataPtrChecksTheType) {
  mt::Tensor t = iota({2, 3}).to(mt::Device{});  // data_ptr is host memory only on the CPU
  EXPECT_EQ(t.data_ptr<float>()[4], 4.0f);
  EXPECT_EQ(t.slice(1, 1, 3).data_ptr<float>()[0], 1.0f);  // the storage offset is applied
  EXPECT_MT_ERROR(t.data_ptr<double>(), "data_ptr", "float32", "float64");
  EXPECT_MT_ERROR(t.to(mt::kBFloat16).data_ptr<mt::float16>(), "data_ptr", "bfloat16", "float16");
}

TEST(Tensor, PrintingShowsValuesShapeAndDType) {
  std::ostringstream os;
  os << mt::from_vector(std::vector<float>{1.5f, -2.0f, 3.0f, 4.25f}, {2, 2}, {.dtype = mt::kBFloat16});
  const std::string s = os.str();
  for (const char* part : {"1.5", "-2", "4.25", "shape=[2, 2]", "dtype=bfloat16"})
    EXPECT_NE(s.find(part), std::string::npos) << s << " lacks " << part;
  EXPECT_EQ(s, mt::from_vector(std::vector<float>{1.5f, -2.0f, 3.0f, 4.25f}, {2, 2}, {.dtype = mt::kBFloat16}).str());

  std::string i = mt::arange(5).str();
  EXPECT_NE(i.find("[0, 1, 2, 3, 4]"), std::string::npos) << i;
  EXPECT_NE(i.find("int64"), std::string::npos) << i;
  std::string scalar = mt::scalar_tensor(2.5).str();
  EXPECT_NE(scalar.find("2.5"), std::string::npos) << scalar;
  std::string big = mt::arange(5000).str();  // long tensors are summarised
  EXPECT_NE(big.find("..."), std::string::npos);
  EXPECT_NE(big.find("4999"), std::string::npos);
  EXPECT_LT(big.size(), 200u);
  std::string g = mt::zeros({2}, {.requires_grad = true}).str();
  EXPECT_NE(g.find("requires_grad"), std::string::npos) << g;
}

TEST(Factory, ZerosOnesFull) {
  for (mt::DType dt : kAllDTypes) {
    SCOPED_TRACE(mt::to_string(dt));
    mt::Tensor z = mt::zeros({2, 3}, {.dtype = dt});
    EXPECT_EQ(z.dtype(), dt);
    EXPECT_EQ(values(z), V(6, 0.0));
    EXPECT_EQ(values(mt::ones({4}, {.dtype = dt})), V(4, 1.0));
    EXPECT_EQ(values(mt::ones_like(z)), V(6, 1.0));
    EXPECT_EQ(mt::zeros_like(z).dtype(), dt);
  }
  EXPECT_EQ(values(mt::full({3}, 2.5)), (V{2.5, 2.5, 2.5}));
  EXPECT_EQ(values(mt::full({2}, 2.5, {.dtype = mt::kInt32})), (V{2, 2}));
  EXPECT_EQ(values(mt::full_like(mt::zeros({2}, {.dtype = mt::kFloat16}), 0.1)),
            V(2, static_cast<float>(mt::float16(0.1f))));
  EXPECT_TRUE(mt::zeros({2}, {.requires_grad = true}).requires_grad());
  EXPECT_FALSE(mt::zeros({2}).requires_grad());
}

TEST(Factory, Arange) {
  mt::Tensor a = mt::arange(5);
  EXPECT_EQ(a.dtype(), mt::kInt64);
  EXPECT_EQ(a.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(values(mt::arange(1.0, 2.0, 0.25, {.dtype = mt::kFloat32})), (V{1.0, 1.25, 1.5, 1.75}));
  EXPECT_EQ(values(mt::arange(5.0, 0.0, -2.0)), (V{5, 3, 1}));
  EXPECT_EQ(mt::arange(3.0, 3.0).numel(), 0);
  EXPECT_MT_ERROR(mt::arange(0.0, 5.0, 0.0), "arange", "step");
  EXPECT_MT_ERROR(mt::arange(5.0, 0.0, 1.0), "arange");
}

TEST(Factory, FromVector) {
  mt::Tensor f = mt::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(f.dtype(), mt::kFloat32);
  EXPECT_EQ(f.shape(), (mt::Shape{2, 3}));
  EXPECT_EQ(values(f), (V{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(mt::from_vector(std::vector<int32_t>{7, -8}).dtype(), mt::kInt32);
  EXPECT_EQ(mt::from_vector(std::vector<double>{0.1}).item<double>(), 0.1);
  mt::Tensor h = mt::from_vector(std::vector<double>{0.1, 1.0}, {2}, {.dtype = mt::kBFloat16});
  EXPECT_EQ(h.dtype(), mt::kBFloat16);
  EXPECT_EQ(h.to_vector<mt::bfloat16>()[0].bits(), mt::bfloat16(0.1f).bits());

  mt::Tensor b = mt::from_vector(std::vector<bool>{true, false, true});
  EXPECT_EQ(b.dtype(), mt::kBool);
  EXPECT_EQ(b.element_size(), 1u);
  EXPECT_EQ(b.to_vector<bool>(), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(values(b), (V{1, 0, 1}));
  EXPECT_NE(b.str().find("dtype=bool"), std::string::npos);
  EXPECT_MT_ERROR(mt::from_vector(std::vector<float>{1, 2, 3}, {2, 2}), "from_vector", "3", "[2, 2]");
}

TEST(Tensor, ErrorsNameTheOp) {
  mt::Tensor a = iota({2, 3});
  EXPECT_MT_ERROR(a.view({4, 2}), "view", "[4, 2]", "[2, 3]");
  EXPECT_MT_ERROR(a.reshape({-1, -1}), "reshape", "-1");
  EXPECT_MT_ERROR(a.reshape({5}), "reshape", "[5]", "[2, 3]");
  EXPECT_MT_ERROR(mt::empty({2, -1}), "empty", "negative");
  EXPECT_MT_ERROR(a.transpose(0, 2), "transpose", "out of range", "2");
  EXPECT_MT_ERROR(a.size(-3), "size", "out of range");
  EXPECT_MT_ERROR(a.permute({0}), "permute", "[2, 3]");
  EXPECT_MT_ERROR(a.permute({0, 0}), "permute", "repeated");
  EXPECT_MT_ERROR(a.flatten(1, 0), "flatten");
  EXPECT_MT_ERROR(a.squeeze(5), "squeeze", "out of range");
  EXPECT_MT_ERROR(mt::Tensor().shape(), "undefined");
}

TEST(Tensor, ShapesWhoseStridesOrBytesOverflowAreRefused) {
  // No element, but the strides of [2^62, 2^62, 0] would overflow int64; so would the bytes of 2^61
  // doubles. Both used to be undefined behaviour; now they are errors before any allocation.
  constexpr int64_t k62 = int64_t{1} << 62;
  EXPECT_MT_ERROR(mt::empty({k62, k62, 0}), "empty", "more elements than a 64-bit index can address");
  EXPECT_MT_ERROR(mt::empty({int64_t{1} << 61}, {.dtype = mt::kFloat64}), "empty", "more bytes");
  EXPECT_EQ(mt::empty({k62, 0}).numel(), 0);  // addressable: fine
}

}  // namespace
