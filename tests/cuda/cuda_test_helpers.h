// Helpers of the CUDA-vs-CPU tests (tests/cuda): the two devices, a tensor's bytes, an element-wise
// closeness check, and the skip for machines without a GPU.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "mixtrain/cuda.h"
#include "mixtrain/mixtrain.h"
#include "support/tolerances.h"

// Skips the test, with the driver's reason, where no GPU can be used.
#define MT_REQUIRE_GPU() \
  if (!mixtrain::cuda::is_available()) GTEST_SKIP() << "no GPU: " << mixtrain::cuda::unavailable_reason()

namespace mixtrain::testing::gpu {

inline const Device kHost{};
inline const Device kGpu{kCUDA, 0};

// The bytes of t's values (row-major), read on the host.
inline std::vector<uint8_t> bytes_of(const Tensor& t) {
  const Tensor h = t.to(kHost).contiguous();
  const auto* p = static_cast<const uint8_t*>(h.raw_data());
  return std::vector<uint8_t>(p, p + h.nbytes());
}

// |gpu - cpu| <= atol + rtol * |cpu| element by element, NaN only where the CPU has NaN.
inline void expect_close(const Tensor& gpu, const Tensor& cpu, Tolerance tol, const char* what) {
  ASSERT_EQ(gpu.shape(), cpu.shape()) << what;
  const std::vector<double> g = gpu.to(kHost).to_vector<double>(), c = cpu.to(kHost).to_vector<double>();
  int64_t bad = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    const bool ok = std::isnan(c[i]) ? std::isnan(g[i]) : std::abs(g[i] - c[i]) <= tol.atol + tol.rtol * std::abs(c[i]);
    if (!ok && bad++ < 5) ADD_FAILURE() << what << ": element " << i << " gpu " << g[i] << " cpu " << c[i];
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << c.size() << " elements differ";
}

}  // namespace mixtrain::testing::gpu
