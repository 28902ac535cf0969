// What the data-parallel suites share (test_ddp.cpp, test_ddp_device.cpp, test_zero.cpp): a small
// seeded model, one seeded batch and a rank's shard of it, and an AMP training loop whose weights
// come back to the host for bit comparisons.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "mixtrain/mixtrain.h"

namespace mixtrain::testing {

// Skips a test that needs several processes (it runs under mpirun through CTest's mpi:* entries).
#define MT_REQUIRE_SEVERAL_RANKS(ctest_name)                                                              \
  if (::mixtrain::dist::world().size() < 2)                                                               \
  GTEST_SKIP() << "needs several processes: mpirun -np 2 mixtrain_tests --gtest_filter=... (CTest: " \
               << (ctest_name) << ")"

// Linear(6, hidden), ReLU, Linear(hidden, 3), initialised from `seed`.
inline std::shared_ptr<nn::Sequential> small_mlp(uint64_t seed, int64_t hidden = 16) {
  manual_seed(seed);
  return std::make_shared<nn::Sequential>(nn::Linear(6, hidden), nn::ReLU(), nn::Linear(hidden, 3));
}

struct DistBatch {
  Tensor x, y;
};

// n seeded samples (6 features, 3 classes) on the CPU: the same on every rank.
inline DistBatch full_batch(int64_t n) {
  Generator g(21);
  return {randn({n, 6}, {.device = kCPU}, &g), randint(0, 3, {n}, {.dtype = kInt64, .device = kCPU}, &g)};
}

// Rows rank, rank + W, ... : the DataLoader's shard of one batch.
inline DistBatch shard(const DistBatch& d, int rank, int world) {
  std::vector<int64_t> rows;
  for (int64_t i = rank; i < d.x.size(0); i += world) rows.push_back(i);
  const Tensor idx = from_vector(rows, {static_cast<int64_t>(rows.size())}, {.dtype = kInt64, .device = kCPU});
  return {index_select(d.x, 0, idx), index_select(d.y, 0, idx)};
}

// `steps` steps of cross-entropy on (x, y) moved to `where`: forward under autocast `amp` (none: fp32),
// backward through the scaler, step, update. Returns the weights, copied to the host, after checking
// that each is still on `where`.
inline std::vector<std::vector<float>> train_amp_steps(nn::Module& model, optim::Optimizer& opt,
                                                       amp::GradScaler& scaler, const DistBatch& d, Device where,
                                                       std::optional<DType> amp, int steps) {
  const Tensor x = d.x.to(where), y = d.y.to(where);
  for (int step = 0; step < steps; ++step) {
    opt.zero_grad();
    Tensor loss;
    {
      amp::Autocast ac(where.type, amp.value_or(kBFloat16), amp.has_value());
      loss = nn::functional::cross_entropy(model(x), y);
    }
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
  }
  std::vector<std::vector<float>> out;
  for (const Tensor& p : model.parameters()) {
    EXPECT_EQ(p.device(), where);
    out.push_back(p.to(kCPU).to_vector<float>());
  }
  return out;
}

}  // namespace mixtrain::testing
