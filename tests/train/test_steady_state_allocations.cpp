// Steady-state training steps reach the system allocator zero times: after a few warm-up steps
// (optimizer state, cast cache, oneDNN primitives and scratchpads), every tensor a step needs comes
// from the caching allocator's free lists (docs/performance.md). Real steps of a small MLP with
// AdamW in every precision mode: fp32; bf16 and fp16 autocast with fp32 parameters; fp16 with the
// GradScaler; bf16 and fp16 parameters with fp32 master weights; bf16 parameters with compact state
// (packed masters and a bf16 first moment).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <ostream>
#include <string>

#include "mixtrain/amp/autocast.h"
#include "mixtrain/mixtrain.h"
#include "mixtrain/nn/modules.h"
#include "mixtrain/train/trainer.h"
#include "support/checked_device.h"

namespace mt = mixtrain;
namespace tr = mixtrain::train;

namespace {

struct Mode {
  const char* name;
  tr::Precision precision;
  mt::DType param_dtype;
  bool scaler;
  bool compact_state = false;
};

void PrintTo(const Mode& mode, std::ostream* os) { *os << mode.name; }

class SteadyStateAllocations : public ::testing::TestWithParam<Mode> {};

}  // namespace

TEST_P(SteadyStateAllocations, NoSystemAllocationAfterWarmUp) {
  const Mode& mode = GetParam();
  mt::manual_seed(7);
  auto model = std::make_shared<mt::nn::Sequential>(mt::nn::Flatten(), mt::nn::Linear(48, 64), mt::nn::ReLU(),
                                                    mt::nn::Linear(64, 32), mt::nn::ReLU(), mt::nn::Linear(32, 5));
  tr::PrecisionConfig config;
  config.precision = mode.precision;
  config.param_dtype = mode.param_dtype;
  config.scaler = mode.scaler ? tr::ScalerMode::kOn : tr::ScalerMode::kOff;
  config.compact_state = mode.compact_state;
  tr::prepare_model(*model, config);
  std::vector<mt::optim::NamedParameter> params;
  for (auto& [name, p] : model->named_parameters()) params.push_back({name, p});
  std::unique_ptr<mt::optim::Optimizer> opt = tr::adamw(1e-3, 0.01)(std::move(params));
  tr::prepare_optimizer(*opt, config);
  mt::amp::GradScaler scaler(mt::amp::GradScalerOptions{.enabled = mode.scaler});

  const mt::Tensor input = mt::randn({32, 3, 4, 4});
  const mt::Tensor target = mt::randint(0, 5, {32});
  const std::optional<mt::DType> dtype = tr::autocast_dtype(mode.precision);

  auto step = [&] {
    opt->zero_grad();
    mt::Tensor loss;
    {
      mt::amp::Autocast autocast(mt::testing::test_device().type, dtype, dtype.has_value());
      loss = tr::default_loss(model->forward(input), target);
    }
    if (mode.scaler) {
      scaler.scale(loss).backward();
      EXPECT_TRUE(scaler.step(*opt));
      scaler.update();
    } else {
      loss.backward();
      opt->step();
    }
    return loss.item<double>();
  };

  for (int i = 0; i < 3; ++i) step();
  const mt::memory::Stats before = mt::memory::stats();
  double last_loss = 0;
  for (int i = 0; i < 10; ++i) last_loss = step();
  const mt::memory::Stats after = mt::memory::stats();
  EXPECT_TRUE(std::isfinite(last_loss));
  // The steps do allocate (activations, gradients): the counter below would move if they missed.
  EXPECT_GT(after.allocations - before.allocations, 10 * 10) << mode.name;
  EXPECT_EQ(after.system_allocations, before.system_allocations)
      << mode.name << ": " << (after.system_allocations - before.system_allocations)
      << " system allocations in 10 steady-state steps";
  EXPECT_EQ(after.current_bytes, before.current_bytes) << mode.name << ": live bytes grow from step to step";
}

INSTANTIATE_TEST_SUITE_P(Modes, SteadyStateAllocations,
                         ::testing::Values(Mode{"fp32", tr::Precision::kFp32, mt::kFloat32, false},
                                           Mode{"bf16", tr::Precision::kBf16, mt::kFloat32, false},
                                           Mode{"fp16", tr::Precision::kFp16, mt::kFloat32, false},
                                           Mode{"fp16_scaler", tr::Precision::kFp16, mt::kFloat32, true},
                                           Mode{"bf16_master", tr::Precision::kBf16, mt::kBFloat16, false},
                                           Mode{"fp16_master_scaler", tr::Precision::kFp16, mt::kFloat16, true},
                                           Mode{"bf16_compact_state", tr::Precision::kBf16, mt::kBFloat16, false, true}),
                         [](const ::testing::TestParamInfo<Mode>& info) { return std::string(info.param.name); });
