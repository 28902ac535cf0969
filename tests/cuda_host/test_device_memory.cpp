// Device memory of CUDA on the host (src/backends/cuda/host/device_memory.h): reachable by kernels,
// copies and library calls only; a host read or write at any other time stops the process naming
// device memory; under AddressSanitizer a kernel's access past an allocation or into a freed one is
// reported. Each check has its passing twin.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>

#include "backends/cuda/host/cuda_on_host.h"
#include "backends/cuda/host/device_memory.h"
#include "backends/cuda/host/sanitizer.h"


namespace ch = mixtrain::cuda_host;

namespace {

__global__ void fill(float* p, int n, float v) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) p[i] = v;
}
__global__ void read_one(const float* p, int i, float* out) { *out = p[i]; }

float* device_floats(int n) { return static_cast<float*>(ch::device_malloc(sizeof(float) * static_cast<size_t>(n))); }

TEST(CudaHostMemory, AllocationsAreAlignedDistinctAndReachableFromKernels) {
  std::set<uintptr_t> seen;
  for (int n : {1, 3, 64, 1000, 70000}) {
    float* p = device_floats(n);
    ASSERT_NE(p, nullptr);
    EXPECT_TRUE(ch::is_device_address(p));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u) << "cudaMalloc's alignment";
    EXPECT_TRUE(seen.insert(reinterpret_cast<uintptr_t>(p)).second);
    ch::launch_kernel(fill, ch::Dim3((n + 127) / 128), ch::Dim3(128), 0, "fill", p, n, 2.5f);
    float host = 0;
    {
      const ch::DeviceAccess access;  // what a copy to the host holds
      host = p[n - 1];
    }
    EXPECT_EQ(host, 2.5f);
    EXPECT_TRUE(ch::device_free(p));
    EXPECT_FALSE(ch::device_free(p)) << "a second free of the same pointer is refused";
  }
  float on_host = 0;
  EXPECT_FALSE(ch::device_free(&on_host)) << "host memory is not device memory";
  EXPECT_FALSE(ch::is_device_address(&on_host));
  EXPECT_EQ(ch::device_malloc(0), nullptr);
}

TEST(CudaHostMemory, AFreedBlockIsNotHandedOutAgainAtOnce) {
  float* a = device_floats(256);
  ASSERT_TRUE(ch::device_free(a));
  float* b = device_floats(256);
  EXPECT_NE(a, b) << "freed blocks wait in quarantine, so a stale pointer does not alias a new allocation";
  ch::device_free(b);
}

using CudaHostMemoryDeathTest = ::testing::Test;

TEST_F(CudaHostMemoryDeathTest, HostCodeTouchingDeviceMemoryStopsTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  float* p = device_floats(16);
  EXPECT_DEATH(
      {
        volatile float* v = p;
        v[3] = 1.0f;  // host code, no kernel, copy or library call running
      },
      "host code touched device memory");
  EXPECT_DEATH(
      {
        volatile float* v = p;
        const float x = v[0];
        (void)x;
      },
      "host code touched device memory");
  // The same accesses inside device work pass.
  {
    const ch::DeviceAccess access;
    volatile float* v = p;
    v[3] = 1.0f;
    EXPECT_EQ(v[3], 1.0f);
  }
  ch::device_free(p);
}

#if defined(MT_HOST_ASAN)
TEST_F(CudaHostMemoryDeathTest, AKernelReadingPastAnAllocationOrAfterFreeIsReported) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  float* p = device_floats(10);  // 40 bytes: the rest of its 256-byte unit is not part of it
  float* out = device_floats(1);
  ch::launch_kernel(read_one, ch::Dim3(1), ch::Dim3(1), 0, "read_one", static_cast<const float*>(p), 9, out);
  EXPECT_DEATH(ch::launch_kernel(read_one, ch::Dim3(1), ch::Dim3(1), 0, "read_one", static_cast<const float*>(p), 10, out),
               "use-after-poison");
  ch::device_free(p);
  EXPECT_DEATH(ch::launch_kernel(read_one, ch::Dim3(1), ch::Dim3(1), 0, "read_one", static_cast<const float*>(p), 0, out),
               "use-after-poison");
  ch::device_free(out);
}
#endif

}  // namespace
