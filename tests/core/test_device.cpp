// The device seam (src/core/backend.h, kernels/dispatch.h) on the checked device (mixtrain/device.h,
// kChecked): moves between devices, host access only through copies, modules and optimizers that
// follow their parameters, the checked device catching a host dereference and a tensor from another
// device, device names, and the host waits it counts.
#include <gtest/gtest.h>

#include <cstdint>
#include <sstream>
#include <vector>

#include "core/backend.h"
#include "kernels/dispatch.h"
#include "mixtrain/mixtrain.h"
#include "support/checked_device.h"
#include "support/expect_error.h"

namespace mt = mixtrain;

namespace {

const mt::Device kHost{};

std::vector<uint8_t> bytes_of(const mt::Tensor& t) {
  const mt::Tensor h = t.to(kHost).contiguous();
  const auto* p = static_cast<const uint8_t*>(h.raw_data());
  return std::vector<uint8_t>(p, p + h.nbytes());
}

TEST(Device, ToAndBackKeepsEveryBitOfEveryDtype) {
  const mt::Device dev = mt::testing::checked_device();
  for (mt::DType dt : {mt::kFloat32, mt::kFloat16, mt::kBFloat16, mt::kFloat64, mt::kInt32, mt::kInt64, mt::kUInt8,
                       mt::kBool}) {
    SCOPED_TRACE(mt::to_string(dt));
    mt::Generator g(7);
    const mt::Tensor x = mt::randint(0, 2, {3, 5}, {.dtype = dt, .device = kHost}, &g);
    const mt::Tensor moved = x.to(dev);
    EXPECT_EQ(moved.device(), dev);
    EXPECT_EQ(moved.dtype(), dt);
    EXPECT_EQ(bytes_of(moved), bytes_of(x));
    EXPECT_TRUE(x.to(kHost).is_same(x)) << "to(the same device) is the tensor itself";
  }
  // NaN payloads, -0 and subnormals survive both ways (a byte copy, never a conversion).
  const std::vector<float> odd{-0.0f, 1e-45f, std::numeric_limits<float>::quiet_NaN(), -1e38f};
  const mt::Tensor a = mt::from_vector(odd, {4}, {.device = kHost});
  EXPECT_EQ(bytes_of(a.to(dev)), bytes_of(a));
  // A strided view is moved as its values.
  const mt::Tensor m = mt::arange(12, {.dtype = mt::kFloat32, .device = kHost}).reshape({3, 4});
  EXPECT_EQ(m.t().to(dev).to_vector<float>(), m.t().to_vector<float>());
}

TEST(Device, ValuesReachTheHostOnlyThroughCopies) {
  const mt::Device dev = mt::testing::checked_device();
  const mt::Tensor t = mt::arange(6, {.dtype = mt::kFloat32, .device = dev}).reshape({2, 3});
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(t.select(0, 1).select(0, 2).item<float>(), 5.0f);
  EXPECT_EQ(t.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
  std::ostringstream os;
  os << t << ' ' << mt::describe(t);
  EXPECT_NE(os.str().find("[[0, 1, 2],"), std::string::npos) << os.str();
  EXPECT_NE(os.str().find("on checked:0"), std::string::npos) << os.str();
}

TEST(Device, CopyFromAnotherDeviceAndGradientsFlowBack) {
  const mt::Device dev = mt::testing::checked_device();
  mt::Tensor dst = mt::zeros({4}, {.device = dev});
  dst.copy_(mt::from_vector(std::vector<float>{1, 2, 3, 4}, {4}, {.device = kHost}));
  EXPECT_EQ(dst.to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));

  mt::Tensor x = mt::from_vector(std::vector<float>{1, -2, 3}, {3}, {.device = kHost, .requires_grad = true});
  mt::Tensor y = mt::mul(x.to(dev), 3.0);
  EXPECT_EQ(y.device(), dev);
  mt::sum(y).backward();
  ASSERT_TRUE(x.grad().defined());
  EXPECT_EQ(x.grad().device(), kHost);
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{3, 3, 3}));
}

TEST(Device, MixingDevicesInOneOpIsAClearError) {
  const mt::Tensor a = mt::ones({2}, {.device = kHost});
  const mt::Tensor b = mt::ones({2}, {.device = mt::testing::checked_device()});
  EXPECT_MT_ERROR(mt::add(a, b), "cpu", "checked:0");
  EXPECT_MT_ERROR(mt::matmul(a.reshape({1, 2}), b.reshape({2, 1})), "cpu", "checked:0");
  mt::Tensor dst = mt::zeros({2}, {.device = kHost});
  EXPECT_NO_THROW(dst.copy_(b)) << "copy_ moves between devices";
}

TEST(Device, MemoryIsCountedPerDevice) {
  const mt::Device dev = mt::testing::checked_device();
  const int64_t host_before = mt::memory::stats(kHost).current_bytes;
  const int64_t dev_before = mt::memory::stats(dev).current_bytes;
  {
    mt::Tensor t = mt::empty({1000}, {.dtype = mt::kBFloat16, .device = dev});
    EXPECT_EQ(mt::memory::stats(dev).current_bytes - dev_before, 2000);
    EXPECT_EQ(mt::memory::stats(kHost).current_bytes - host_before, 0);
  }
  EXPECT_EQ(mt::memory::stats(dev).current_bytes, dev_before);
}

TEST(Device, AbsentDevicesAndDoubleRegistrationsAreRefused) {
  // An index past the last GPU (or any GPU where there is none, or no CUDA in this build).
  const mt::Device absent(mt::kCUDA, static_cast<int16_t>(mt::device_count(mt::kCUDA)));
  EXPECT_MT_ERROR(mt::zeros({2}, {.device = absent}), "cuda:", "not available");
  EXPECT_MT_ERROR(mt::set_default_device(absent), "cuda:", "not available");
  mt::testing::checked_device();
  EXPECT_MT_ERROR(mt::register_backend(mt::kChecked, &mt::backend_for(mt::testing::checked_device())),
                  "already registered", "checked");
  EXPECT_MT_ERROR(mt::register_backend(mt::kCPU, &mt::backend_for(kHost)), "built in");
  EXPECT_MT_ERROR(mt::kernels::register_kernels(mt::kCPU, [](mt::kernels::Registry&) {}), "built in");
  EXPECT_EQ(mt::to_string(mt::kChecked), "checked");
}

TEST(Device, EveryTableHasTheSameKernelsOnTheCheckedDeviceAsOnTheCpu) {
  mt::kernels::register_builtin_kernels();
  struct Count {
    int tables = 0, cpu = 0, mismatched = 0;
  } count;
  mt::kernels::for_each_table(
      [](mt::kernels::DispatchTableBase& t, void* c) {
        auto& n = *static_cast<Count*>(c);
        ++n.tables;
        for (int d = 0; d < mt::kNumDTypes; ++d) {
          const auto dt = static_cast<mt::DType>(d);
          n.cpu += t.has(mt::kCPU, dt);
          n.mismatched += t.has(mt::kCPU, dt) != t.has(mt::kChecked, dt);
        }
      },
      &count);
  EXPECT_GT(count.tables, 60);
  EXPECT_GT(count.cpu, 200);
  EXPECT_EQ(count.mismatched, 0);
}

// A model moved to the checked device trains to the same bits as on the CPU: the moves, the
// optimizer state that follows its parameters and the scaler touch nothing numerically.
TEST(Device, ModuleToDeviceTrainsToTheSameBits) {
  auto train = [](bool move_midway) {
    mt::manual_seed(3);
    const mt::Device previous = mt::default_device();
    mt::set_default_device(kHost);  // the model starts on the CPU in both runs
    mt::nn::Sequential model(mt::nn::Linear(6, 8), mt::nn::ReLU(), mt::nn::Linear(8, 3));
    mt::set_default_device(previous);
    mt::optim::AdamW opt(model.parameters(), {.lr = 0.01});
    mt::amp::GradScaler scaler({.init_scale = 1024.0});
    mt::Generator g(11);
    const mt::Tensor x = mt::randn({16, 6}, {.device = kHost}, &g);
    const mt::Tensor target = mt::randint(0, 3, {16}, {.dtype = mt::kInt64, .device = kHost}, &g);
    for (int step = 0; step < 4; ++step) {
      if (move_midway && step == 2) model.to(mt::testing::checked_device());
      const mt::Device dev = model.parameters().front().device();
      opt.zero_grad();
      mt::Tensor loss;
      {
        mt::amp::Autocast ac(dev.type, mt::kBFloat16);
        loss = mt::nn::functional::cross_entropy(model(x.to(dev)), target.to(dev));
      }
      scaler.scale(loss).backward();
      scaler.step(opt);
      scaler.update();
    }
    std::vector<std::vector<uint8_t>> out;
    for (const mt::Tensor& p : model.parameters()) out.push_back(bytes_of(p));
    return out;
  };
  EXPECT_EQ(train(true), train(false));
}

// The acceptance check of the seam: front-end code that reads device memory directly, instead of
// through a kernel or a copy, dies on the checked device.
TEST(DeviceDeathTest, AHostDereferenceOfCheckedMemoryIsCaught) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const mt::Tensor t = mt::ones({4}, {.device = mt::testing::checked_device()});
  EXPECT_DEATH(
      {
        volatile float v = *t.data_ptr<float>();
        (void)v;
      },
      "");
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 1, 1, 1})) << "the sanctioned path reads it";
}

}  // namespace
