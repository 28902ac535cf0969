// The autograd engine (include/mixtrain/autograd.h, src/autograd/engine.cpp) exercised through the
// ops that live in the core: views, to(), clone(), and nodes recorded by the test itself. The
// tests that need arithmetic ops (sums of gradients, mul's saved tensors) are in
// test_autograd_ops.cpp.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "mixtrain/mixtrain.h"
#include "support/expect_error.h"

namespace mt = mixtrain;

namespace {

using V = std::vector<double>;
using mt::autograd::TensorList;

V values(const mt::Tensor& t) { return t.to_vector<double>(); }

// A leaf holding 0, 1, ..., n-1 (distinct, so each view element tells which leaf element it is).
mt::Tensor iota_leaf(const mt::Shape& shape, mt::DType dtype = mt::kFloat32) {
  mt::Tensor t = mt::arange(0.0, static_cast<double>(shape.numel()), 1.0, {.dtype = dtype}).reshape(shape);
  return t.detach().requires_grad_();
}

// A fixed, position-dependent upstream gradient: 1, 2, 3, ... (exact in every float dtype used).
mt::Tensor upstream(const mt::Tensor& y) {
  return mt::arange(1.0, static_cast<double>(y.numel()) + 1, 1.0, {.dtype = y.dtype()}).reshape(y.shape());
}

// For y a rearrangement of (some elements of) x: d<g, y>/dx[i] is the g of the element of y that
// is x[i], or 0. Computed from the values, independently of the view code.
V expected_view_grad(const mt::Tensor& x, const mt::Tensor& y, const mt::Tensor& g) {
  V grad(x.numel(), 0.0);
  V yv = values(y), gv = values(g);
  for (size_t j = 0; j < yv.size(); ++j) grad[static_cast<size_t>(yv[j])] += gv[j];
  return grad;
}

TEST(Autograd, BackwardThroughViewChains) {
  using Chain = mt::Tensor (*)(const mt::Tensor&);
  const std::map<std::string, Chain> chains = {
      {"reshape",
       [](const mt::Tensor& x) {
         return x.reshape({4, 6});
       }},
      {"view", [](const mt::Tensor& x) { return x.view({-1}); }},
      {"transpose", [](const mt::Tensor& x) { return x.transpose(0, 2); }},
      {"permute",
       [](const mt::Tensor& x) {
         return x.permute({1, 2, 0});
       }},
      {"slice", [](const mt::Tensor& x) { return x.slice(2, 1, 4, 2); }},
      {"slice negative", [](const mt::Tensor& x) { return x.slice(1, -2, 3); }},
      {"select", [](const mt::Tensor& x) { return x.select(1, -1); }},
      {"squeeze/unsqueeze", [](const mt::Tensor& x) { return x.unsqueeze(1).unsqueeze(-1).squeeze(); }},
      {"flatten", [](const mt::Tensor& x) { return x.flatten(1); }},
      {"clone", [](const mt::Tensor& x) { return x.clone(); }},
      {"long chain",
       [](const mt::Tensor& x) {
         // transpose makes it non-contiguous, so the reshape copies (a contiguous() node) before the
         // slice with a step, then a select and a squeeze.
         return x.transpose(1, 2).reshape({2, 12}).slice(1, 1, 12, 3).unsqueeze(0).select(2, 1).clone();
       }},
      {"via float64", [](const mt::Tensor& x) { return x.to(mt::kFloat64).t().to(mt::kFloat32); }},
  };
  for (const auto& [name, chain] : chains) {
    SCOPED_TRACE(name);
    mt::Tensor x = iota_leaf({2, 3, 4});
    mt::Tensor y = chain(x);
    ASSERT_TRUE(y.requires_grad());
    ASSERT_FALSE(y.is_leaf());
    mt::Tensor g = upstream(y);
    y.backward(g);
    ASSERT_TRUE(x.grad().defined());
    EXPECT_EQ(x.grad().shape(), x.shape());
    EXPECT_EQ(x.grad().dtype(), mt::kFloat32);
    EXPECT_EQ(values(x.grad()), expected_view_grad(x, y, g));
  }
}

TEST(Autograd, GradFnNamesTheOp) {
  mt::Tensor x = iota_leaf({2, 3});
  EXPECT_TRUE(x.is_leaf());
  EXPECT_EQ(x.grad_fn(), nullptr);
  EXPECT_EQ(x.t().grad_fn()->name(), "transpose");
  EXPECT_EQ(x.reshape({6}).grad_fn()->name(), "reshape");
  EXPECT_EQ(x.to(mt::kBFloat16).grad_fn()->name(), "to");
  EXPECT_EQ(x.slice(0, 0, 1).grad_fn()->name(), "slice");
}

TEST(Autograd, SecondBackwardNeedsRetainGraph) {
  mt::Tensor x = iota_leaf({2, 3});
  mt::Tensor y = x.t().reshape({6});
  mt::Tensor g = upstream(y);
  y.backward(g);
  EXPECT_MT_ERROR(y.backward(g), "retain_graph", "second time");

  // With retain_graph the graph survives and a second pass gives the same gradient again.
  mt::Tensor x2 = iota_leaf({2, 3});
  mt::Tensor y2 = x2.t().reshape({6});
  y2.backward(g, /*retain_graph=*/true);
  const V first = values(x2.grad());
  x2.set_grad(mt::Tensor());
  y2.backward(g, /*retain_graph=*/true);
  EXPECT_EQ(values(x2.grad()), first);
  x2.set_grad(mt::Tensor());
  y2.backward(g);  // the last pass may free it
  EXPECT_EQ(values(x2.grad()), first);
  x2.set_grad(mt::Tensor());
  EXPECT_MT_ERROR(y2.backward(g), "retain_graph");
}

TEST(Autograd, NoGradGuardRecordsNothing) {
  mt::Tensor x = iota_leaf({2, 3});
  ASSERT_TRUE(mt::GradMode::is_enabled());
  {
    mt::NoGradGuard no_grad;
    EXPECT_FALSE(mt::GradMode::is_enabled());
    for (const mt::Tensor& y : {x.t(), x.reshape({3, 2}), x.to(mt::kBFloat16), x.clone(), x.slice(1, 0, 2)}) {
      EXPECT_FALSE(y.requires_grad());
      EXPECT_TRUE(y.is_leaf());
      EXPECT_EQ(y.grad_fn(), nullptr);
    }
    {
      mt::EnableGradGuard enable;  // re-enables recording inside
      EXPECT_TRUE(x.t().requires_grad());
      {
        mt::NoGradGuard nested;
        EXPECT_FALSE(x.t().requires_grad());
      }
      EXPECT_TRUE(mt::GradMode::is_enabled());
    }
    EXPECT_FALSE(mt::GradMode::is_enabled());
    mt::Tensor y = x.t();
    EXPECT_MT_ERROR(y.backward(upstream(y)), "backward", "does not require grad");
  }
  EXPECT_TRUE(mt::GradMode::is_enabled());  // restored
  EXPECT_TRUE(x.t().requires_grad());
  EXPECT_FALSE(x.grad().defined());
}

TEST(Autograd, DetachCutsTheGraphButSharesStorage) {
  mt::Tensor x = iota_leaf({2, 3});
  mt::Tensor y = x.t();
  mt::Tensor d = y.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.is_leaf());
  EXPECT_TRUE(d.shares_storage(x));
  EXPECT_EQ(d.shape(), (mt::Shape{3, 2}));
  EXPECT_TRUE(y.requires_grad());  // the original is untouched
  const uint64_t v = x.version();
  d.select(0, 0).fill_(-1.0);  // allowed: d does not require grad; x sees the write
  EXPECT_EQ(values(x), (V{-1, 1, 2, -1, 4, 5}));
  EXPECT_GT(x.version(), v);  // one version counter per storage
  EXPECT_FALSE(d.t().requires_grad());
}

TEST(Autograd, LeafGradientKeepsTheLeafDType) {
  // An fp32 parameter used through a bf16 cast gets an fp32 gradient.
  mt::Tensor w = iota_leaf({2, 3});
  mt::Tensor w16 = w.to(mt::kBFloat16);
  EXPECT_EQ(w16.dtype(), mt::kBFloat16);
  EXPECT_TRUE(w16.requires_grad());
  mt::Tensor y = w16.t();
  mt::Tensor g = upstream(y);
  y.backward(g);
  EXPECT_EQ(w.grad().dtype(), mt::kFloat32);
  EXPECT_EQ(values(w.grad()), expected_view_grad(w, y, g));

  // The same through fp16 from an fp64 leaf; a root gradient of another dtype is converted.
  mt::Tensor x = iota_leaf({4}, mt::kFloat64);
  mt::Tensor h = x.to(mt::kFloat16);
  h.backward(mt::from_vector(std::vector<float>{0.5f, 1.0f, 1.5f, 2.0f}));
  EXPECT_EQ(x.grad().dtype(), mt::kFloat64);
  EXPECT_EQ(values(x.grad()), (V{0.5, 1.0, 1.5, 2.0}));

  // Casting to an integer type ends the graph.
  EXPECT_FALSE(w.to(mt::kInt32).requires_grad());
  EXPECT_MT_ERROR(mt::zeros({2}, {.dtype = mt::kInt64}).requires_grad_(), "requires_grad_", "int64");
}

TEST(Autograd, GradReturnsGradientsWithoutTouchingDotGrad) {
  mt::Tensor a = iota_leaf({2, 3});
  mt::Tensor b = iota_leaf({4});
  mt::Tensor ya = a.t();
  mt::Tensor ga = upstream(ya);
  TensorList grads = mt::autograd::grad({ya}, {a}, {ga});
  ASSERT_EQ(grads.size(), 1u);
  EXPECT_EQ(values(grads[0]), expected_view_grad(a, ya, ga));
  EXPECT_FALSE(a.grad().defined());

  // A scalar output needs no grad_outputs; an input that the output does not depend on gets none.
  mt::Tensor s = a.select(0, 1).select(0, 2);
  TensorList gs = mt::autograd::grad({s}, {a, b}, {}, /*retain_graph=*/true);
  ASSERT_EQ(gs.size(), 2u);
  EXPECT_EQ(values(gs[0]), (V{0, 0, 0, 0, 0, 1}));
  EXPECT_FALSE(gs[1].defined());
  EXPECT_FALSE(a.grad().defined());
  EXPECT_FALSE(b.grad().defined());
  // retain_graph kept it: backward still works and now fills .grad.
  s.backward();
  EXPECT_EQ(values(a.grad()), (V{0, 0, 0, 0, 0, 1}));

  EXPECT_MT_ERROR(mt::autograd::grad({a.t()}, {a}), "grad", "grad_outputs");
  EXPECT_MT_ERROR(mt::autograd::grad({a.t()}, {mt::zeros({2})}, {upstream(a.t())}), "grad", "does not require grad");
}

TEST(Autograd, InPlaceWriteToALeafThatRequiresGrad) {
  mt::Tensor w = iota_leaf({3});
  EXPECT_MT_ERROR(w.fill_(1.0), "fill_", "leaf", "NoGradGuard");
  EXPECT_MT_ERROR(w.zero_(), "leaf");
  EXPECT_MT_ERROR(w.copy_(mt::ones({3})), "copy_", "leaf");
  EXPECT_EQ(values(w), (V{0, 1, 2}));  // nothing was written
  const uint64_t v = w.version();
  {
    mt::NoGradGuard no_grad;  // how an optimizer updates parameters
    w.fill_(4.0);
    w.slice(0, 0, 1).copy_(mt::full({1}, 7.0));
  }
  EXPECT_EQ(values(w), (V{7, 4, 4}));
  EXPECT_EQ(w.version(), v + 2);
  EXPECT_TRUE(w.requires_grad());
  // A non-leaf in a graph cannot be written in place either.
  mt::Tensor y = w.reshape({1, 3}).squeeze(0);
  EXPECT_MT_ERROR(y.fill_(0.0), "fill_", "in-place");
}

TEST(Autograd, NodeWithTwoOutputsGetsUndefinedGradForTheUnusedOne) {
  mt::Tensor x = iota_leaf({3});
  mt::Tensor a = x.detach().clone(), b = x.detach().clone();
  std::vector<bool> seen;
  mt::autograd::record("two_outputs", {x}, {a, b}, [&seen](const TensorList& g) {
    seen = {g[0].defined(), g[1].defined()};
    return TensorList{g[0].defined() ? g[0] : g[1]};
  });
  EXPECT_EQ(a.output_nr(), 0u);
  EXPECT_EQ(b.output_nr(), 1u);
  EXPECT_EQ(a.grad_fn(), b.grad_fn());
  b.backward(mt::from_vector(std::vector<float>{1, 2, 3}));
  EXPECT_EQ(seen, (std::vector<bool>{false, true}));
  EXPECT_EQ(values(x.grad()), (V{1, 2, 3}));
}

// A test-defined op that saves its input, as real ops do (Note [Saved tensor versions]).
mt::Tensor save_and_copy(const mt::Tensor& x) {
  mt::Tensor out = x.detach().clone();
  if (mt::autograd::needs_grad({&x})) {
    mt::autograd::SavedTensor saved(x);
    mt::autograd::record("save_and_copy", {x}, out, [saved](const TensorList& g) {
      saved.unpack("save_and_copy");
      return TensorList{g[0]};
    });
  }
  return out;
}

TEST(Autograd, SavedTensorModifiedInPlaceIsAnError) {
  mt::Tensor x = iota_leaf({3});
  mt::Tensor y = save_and_copy(x);
  {
    mt::NoGradGuard no_grad;
    x.fill_(1.0);  // bumps the version that save_and_copy recorded
  }
  EXPECT_MT_ERROR(y.backward(upstream(y)), "save_and_copy", "modified by an in-place operation", "version");
  EXPECT_FALSE(x.grad().defined());

  // Writing through a view of the saved tensor is caught too (the counter belongs to the storage).
  mt::Tensor x2 = iota_leaf({2, 2});
  mt::Tensor base = x2.detach();
  mt::Tensor y2 = save_and_copy(x2.select(0, 1));
  base.select(0, 0).fill_(5.0);
  EXPECT_MT_ERROR(y2.backward(mt::ones({2})), "save_and_copy");

  // Unmodified, the same op works.
  mt::Tensor x3 = iota_leaf({3});
  mt::Tensor y3 = save_and_copy(x3);
  y3.backward(upstream(y3));
  EXPECT_EQ(values(x3.grad()), (V{1, 2, 3}));
}

TEST(Autograd, SavedTensorUnpackDirectly) {
  mt::Tensor t = mt::zeros({2});
  mt::autograd::SavedTensor s(t);
  EXPECT_TRUE(s.defined());
  EXPECT_TRUE(s.unpack("my_op").shares_storage(t));
  t.fill_(1.0);
  EXPECT_MT_ERROR(s.unpack("my_op"), "my_op", "[2] float32");
  EXPECT_FALSE(mt::autograd::SavedTensor().defined());
}

TEST(Autograd, BackwardArgumentErrors) {
  mt::Tensor x = iota_leaf({2, 3});
  EXPECT_MT_ERROR(x.t().backward(), "backward", "non-scalar", "[3, 2]");
  EXPECT_MT_ERROR(x.t().backward(mt::ones({2, 3})), "backward", "[2, 3]", "[3, 2]");
  EXPECT_MT_ERROR(mt::zeros({1}).backward(), "backward", "does not require grad");
  EXPECT_MT_ERROR(x.set_grad(mt::zeros({3})), "set_grad", "[3]", "[2, 3]");
  EXPECT_MT_ERROR(x.t().requires_grad_(false), "requires_grad_", "non-leaf");
}

}  // namespace
