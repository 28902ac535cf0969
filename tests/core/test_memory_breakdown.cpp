// The memory breakdown (include/mixtrain/memory.h, src/core/memory_ledger.cpp): every live byte in
// exactly one category, scopes that set the category, set_category moving bytes, the running op's
// temporaries, and the breakdown at the peak naming the op and module that made it. Real ops and
// a real backward: the autocast hook opens the op scopes, the engine labels gradients.
//
// The allocator is process-wide, so every check is relative to the breakdown read just before.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <thread>

#include "mixtrain/mixtrain.h"
#include "support/checked_device.h"

namespace mt = mixtrain;
using mt::memory::Category;

namespace {

mt::Device device() { return mixtrain::testing::test_device(); }
mt::memory::Breakdown now() { return mt::memory::current_breakdown(device()); }
int64_t in(const mt::memory::Breakdown& b, Category c) { return b[c]; }

// Every byte in one place: the categories and the running ops' temporaries add up to the total, and
// the total is the allocator's own count.
void expect_consistent(const mt::memory::Breakdown& b, int64_t allocator_bytes) {
  int64_t sum = b.op_temporary_bytes;
  for (int64_t v : b.bytes) sum += v;
  EXPECT_EQ(sum, b.total_bytes);
  EXPECT_EQ(b.total_bytes, allocator_bytes);
  EXPECT_GE(b.op_temporary_bytes, 0);
}

TEST(MemoryBreakdown, AllocationsTakeTheThreadsCategory) {
  const mt::memory::Breakdown before = now();
  EXPECT_EQ(mt::memory::current_category(), Category::kOther);
  mt::Tensor other = mt::empty({1000}, {.device = device()});
  mt::Tensor saved, grad;
  {
    const mt::memory::CategoryScope forward(Category::kActivations);
    saved = mt::empty({300}, {.dtype = mt::kBFloat16, .device = device()});
    {
      const mt::memory::CategoryScope inner(Category::kActivationGradients);  // the innermost wins
      grad = mt::empty({70}, {.dtype = mt::kFloat64, .device = device()});
    }
    EXPECT_EQ(mt::memory::current_category(), Category::kActivations);
  }
  EXPECT_EQ(mt::memory::current_category(), Category::kOther);
  const mt::memory::Breakdown after = now();
  EXPECT_EQ(in(after, Category::kOther) - in(before, Category::kOther), 4000);
  EXPECT_EQ(in(after, Category::kActivations) - in(before, Category::kActivations), 600);
  EXPECT_EQ(in(after, Category::kActivationGradients) - in(before, Category::kActivationGradients), 560);
  EXPECT_EQ(other.storage()->category(), Category::kOther);
  EXPECT_EQ(saved.storage()->category(), Category::kActivations);
  expect_consistent(after, mt::memory::stats(device()).current_bytes);
  saved = grad = other = mt::Tensor();
  const mt::memory::Breakdown freed = now();
  EXPECT_EQ(freed.bytes, before.bytes);  // freed from the categories they were counted in
}

TEST(MemoryBreakdown, SetCategoryMovesTheWholeStorage) {
  mt::Tensor t = mt::empty({10, 100}, {.device = device()});
  const mt::memory::Breakdown before = now();
  mt::memory::set_category(t.slice(0, 0, 1), Category::kParameters);  // a view moves its whole storage
  const mt::memory::Breakdown after = now();
  EXPECT_EQ(in(after, Category::kParameters) - in(before, Category::kParameters), 4000);
  EXPECT_EQ(in(before, Category::kOther) - in(after, Category::kOther), 4000);
  EXPECT_EQ(after.total_bytes, before.total_bytes);
  mt::memory::set_category(mt::Tensor(), Category::kGradients);  // ignored
  t = mt::Tensor();  // freed from the category it was moved to
  auto expected = before.bytes;
  expected[static_cast<size_t>(Category::kOther)] -= 4000;
  EXPECT_EQ(now().bytes, expected);
}

TEST(MemoryBreakdown, PeakNamesTheRunningOpAndItsTemporaries) {
  const std::string module = "blocks.3.mlp";
  mt::Tensor kept;
  mt::memory::reset_peak(device());
  const int64_t base = mt::memory::stats(device()).current_bytes;
  {
    const mt::memory::CategoryScope forward(Category::kActivations);
    const mt::memory::OpScope op("fused_thing", &module);
    {
      const mt::memory::OpScope inner("helper", nullptr);  // an op inside an op belongs to the outer one
      kept = mt::empty({1 << 16}, {.device = device()});  // 256 KiB, survives the op
      mt::Tensor scratch = mt::empty({1 << 18}, {.device = device()});  // 1 MiB, freed inside
      const mt::memory::Breakdown during = now();
      EXPECT_EQ(during.op, "fused_thing");
      EXPECT_EQ(during.module, module);
      EXPECT_EQ(during.op_temporary_bytes, (1 << 18) * 4 + (1 << 16) * 4);
    }
  }
  const mt::memory::Breakdown peak = mt::memory::peak_breakdown(device());
  EXPECT_EQ(peak.total_bytes, mt::memory::stats(device()).peak_bytes);
  EXPECT_EQ(peak.total_bytes, base + (1 << 18) * 4 + (1 << 16) * 4);
  EXPECT_EQ(peak.op, "fused_thing");
  EXPECT_EQ(peak.module, module);
  EXPECT_EQ(peak.phase, Category::kActivations);
  EXPECT_EQ(mt::memory::phase_name(peak.phase), "forward");
  EXPECT_EQ(peak.op_temporary_bytes, (1 << 18) * 4 + (1 << 16) * 4);
  expect_consistent(peak, peak.total_bytes);
  // After the op: what survived it is an activation, nothing is a temporary.
  const mt::memory::Breakdown after = now();
  EXPECT_EQ(after.op_temporary_bytes, 0);
  EXPECT_EQ(after.op, "");
  EXPECT_EQ(kept.storage()->category(), Category::kActivations);
  EXPECT_EQ(in(after, Category::kActivations) - in(peak, Category::kActivations), (1 << 16) * 4);
  // A new op gets a new scope: the old one's survivors do not come back as its temporaries.
  {
    const mt::memory::OpScope op("next", nullptr);
    EXPECT_EQ(now().op_temporary_bytes, 0);
  }
  kept = mt::Tensor();
  mt::memory::reset_peak(device());
  EXPECT_EQ(mt::memory::peak_breakdown(device()).total_bytes, mt::memory::stats(device()).current_bytes);
}

TEST(MemoryBreakdown, AnotherThreadsOpIsNotThisThreads) {
  const mt::memory::OpScope op("main_op", nullptr);
  std::thread([] {
    EXPECT_EQ(now().op, "");  // no op scope on this thread
    const mt::memory::CategoryScope backward(Category::kActivationGradients);
    mt::Tensor t = mt::empty({128}, {.device = device()});
    EXPECT_EQ(t.storage()->category(), Category::kActivationGradients);
  }).join();
  EXPECT_EQ(now().op, "main_op");
  EXPECT_EQ(mt::memory::current_category(), Category::kOther);
}

TEST(MemoryBreakdown, RelabellingARunningOpsBlockEndsItsTemporaryStatus) {
  const mt::memory::OpScope op("accumulate", nullptr);
  mt::Tensor t = mt::empty({256}, {.device = device()});
  EXPECT_EQ(now().op_temporary_bytes, 1024);
  mt::memory::set_category(t, Category::kGradients);
  EXPECT_EQ(now().op_temporary_bytes, 0);
  t = mt::Tensor();
  EXPECT_EQ(now().op_temporary_bytes, 0);
}

// Real ops: the autocast hook names them; the engine's backward labels its gradients.
TEST(MemoryBreakdown, OpsAndBackwardAreNamedAndLabelled) {
  mt::Generator g(3);
  mt::Tensor w = mt::randn({64, 128}, {.device = device()}, &g).requires_grad_();
  mt::Tensor x = mt::randn({32, 128}, {.device = device()}, &g);
  mt::memory::set_category(w, Category::kParameters);
  mt::Tensor loss;
  mt::memory::reset_peak(device());
  {
    const mt::memory::CategoryScope forward(Category::kActivations);
    loss = mt::sum(mt::tanh(mt::linear(x, w)));
  }
  const mt::memory::Breakdown forward_peak = mt::memory::peak_breakdown(device());
  EXPECT_EQ(forward_peak.phase, Category::kActivations);
  EXPECT_FALSE(forward_peak.op.empty());
  EXPECT_EQ(loss.storage()->category(), Category::kActivations);
  // Backward: the peak is inside a node, and the new .grad is a gradient.
  const int64_t before_grads = in(now(), Category::kGradients);
  mt::memory::reset_peak(device());
  loss.backward();
  const mt::memory::Breakdown backward_peak = mt::memory::peak_breakdown(device());
  EXPECT_EQ(backward_peak.phase, Category::kActivationGradients);
  EXPECT_EQ(mt::memory::phase_name(backward_peak.phase), "backward");
  EXPECT_FALSE(backward_peak.op.empty());
  expect_consistent(backward_peak, mt::memory::stats(device()).peak_bytes);
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().storage()->category(), Category::kGradients);
  EXPECT_EQ(in(now(), Category::kGradients) - before_grads, 64 * 128 * 4);
  EXPECT_EQ(now().op_temporary_bytes, 0);  // every scope closed
}

}  // namespace
