// The CUDA-on-host engine (src/backends/cuda/host/block_runner.h) on kernels written as the CUDA
// backend writes them: results under every schedule, and each undefined case it must report
// (divergent and skipped barriers, wrong shuffle masks and widths, launch limits, misaligned vector
// accesses). Each checker has a kernel that trips it and one that must pass.
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "backends/cuda/host/cuda_on_host.h"
#include "support/expect_error.h"

namespace ch = mixtrain::cuda_host;

namespace {

constexpr int kThreads = 128;

// A block reduction through shared memory, as reduce.cu writes it.
__global__ void block_sum(const float* in, float* out, int n) {
  __shared__ float partial[kThreads];
  const int t = static_cast<int>(threadIdx.x);
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  partial[t] = i < n ? in[i] : 0.0f;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (t < stride) partial[t] += partial[t + stride];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = partial[0];
}

// The same with the barrier after the loads removed (the acceptance's mutation).
__global__ void block_sum_missing_barrier(const float* in, float* out, int n) {
  __shared__ float partial[kThreads];
  const int t = static_cast<int>(threadIdx.x);
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  partial[t] = i < n ? in[i] : 0.0f;
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (t < stride) partial[t] += partial[t + stride];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = partial[0];
}

// A warp reduction with shuffles; `mask` and `width` as given.
__global__ void warp_sum(const float* in, float* out, unsigned mask, int width) {
  float v = in[threadIdx.x];
  for (int offset = width / 2; offset > 0; offset /= 2) v += __shfl_down_sync(mask, v, offset, width);
  if (threadIdx.x % width == 0) out[threadIdx.x / width] = v;
}

std::vector<float> iota_floats(int n) {
  std::vector<float> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 1.0f);
  return v;
}

std::vector<ch::ScheduleChoice> all_schedules() {
  return {{ch::Schedule::kInOrder, 0}, {ch::Schedule::kReverse, 0}, {ch::Schedule::kRandom, 1},
          {ch::Schedule::kRandom, 2}};
}

struct ScheduleGuard {
  ch::ScheduleChoice saved = ch::schedule();
  ~ScheduleGuard() { ch::set_schedule(saved); }
};

}  // namespace

TEST(CudaHost, ABlockReductionIsExactUnderEverySchedule) {
  ScheduleGuard guard;
  const int n = 3 * kThreads - 5;
  const std::vector<float> in = iota_floats(n);
  for (const ch::ScheduleChoice& s : all_schedules()) {
    ch::set_schedule(s);
    std::vector<float> out(3, -1.0f);
    ch::launch_kernel(block_sum, ch::Dim3(3), ch::Dim3(kThreads), 0, "block_sum", in.data(), out.data(), n);
    for (int b = 0; b < 3; ++b) {
      double want = 0;
      for (int i = b * kThreads; i < std::min(n, (b + 1) * kThreads); ++i) want += in[static_cast<size_t>(i)];
      EXPECT_EQ(out[static_cast<size_t>(b)], static_cast<float>(want)) << "block " << b;
    }
  }
}

TEST(CudaHost, AMissingBarrierChangesTheResultUnderSomeSchedule) {
  ScheduleGuard guard;
  const std::vector<float> in = iota_floats(kThreads);
  const float want = static_cast<float>(kThreads * (kThreads + 1) / 2);
  int wrong = 0;
  for (const ch::ScheduleChoice& s : all_schedules()) {
    ch::set_schedule(s);
    float out = -1.0f;
    ch::launch_kernel(block_sum_missing_barrier, ch::Dim3(1), ch::Dim3(kThreads), 0, "block_sum_missing_barrier",
                      in.data(), &out, kThreads);
    wrong += out != want;
  }
  EXPECT_GT(wrong, 0) << "the missing barrier went unnoticed under every schedule";
}

constexpr int kFirstBarrierLine = __LINE__ + 4;  // the two barriers of divergent_barriers
constexpr int kSecondBarrierLine = __LINE__ + 5;
__global__ void divergent_barriers(int* out) {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1;
}

constexpr int kEarlyBarrierLine = __LINE__ + 3;
__global__ void early_return_before_barrier(int* out, int n) {
  if (static_cast<int>(threadIdx.x) >= n) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}

TEST(CudaHost, DivergentOrSkippedBarriersAreReportedWithBothSites) {
  std::vector<int> out(64, 0);
  mixtrain::testing::expect_error(
      [&] { ch::launch_kernel(divergent_barriers, ch::Dim3(1), ch::Dim3(64), 0, "divergent_barriers", out.data()); },
      {"kernel divergent_barriers", "different __syncthreads",
       "test_block_runner.cpp:" + std::to_string(kFirstBarrierLine),
       "test_block_runner.cpp:" + std::to_string(kSecondBarrierLine)});
  mixtrain::testing::expect_error(
      [&] {
        ch::launch_kernel(early_return_before_barrier, ch::Dim3(1), ch::Dim3(64), 0, "early_return", out.data(), 40);
      },
      {"kernel early_return", "returned while", "waits at __syncthreads",
       "test_block_runner.cpp:" + std::to_string(kEarlyBarrierLine)});
  // Every thread at the barrier: fine.
  ch::launch_kernel(early_return_before_barrier, ch::Dim3(1), ch::Dim3(64), 0, "early_return", out.data(), 64);
  EXPECT_EQ(std::accumulate(out.begin(), out.end(), 0), 64);
}

TEST(CudaHost, WarpShufflesFollowCudasSemantics) {
  ScheduleGuard guard;
  const std::vector<float> in = iota_floats(64);
  for (const ch::ScheduleChoice& s : all_schedules()) {
    ch::set_schedule(s);
    std::vector<float> out(8, 0.0f);
    ch::launch_kernel(warp_sum, ch::Dim3(1), ch::Dim3(64), 0, "warp_sum", in.data(), out.data(), 0xffffffffu, 32);
    EXPECT_EQ(out[0], 528.0f);   // 1 + ... + 32
    EXPECT_EQ(out[1], 1552.0f);  // 33 + ... + 64
    // Width 8: eight segments, each reduced alone.
    ch::launch_kernel(warp_sum, ch::Dim3(1), ch::Dim3(64), 0, "warp_sum", in.data(), out.data(), 0xffffffffu, 8);
    for (int k = 0; k < 8; ++k) EXPECT_EQ(out[static_cast<size_t>(k)], static_cast<float>(64 * k + 36)) << k;
  }
}

__global__ void shuffle_kinds(int* out) {
  const int lane = static_cast<int>(threadIdx.x);
  out[lane] = __shfl_sync(0xffffffffu, lane * 10, 3);                // everyone reads lane 3
  out[32 + lane] = __shfl_up_sync(0xffffffffu, lane, 2);             // lanes 0, 1 keep their own
  out[64 + lane] = __shfl_xor_sync(0xffffffffu, lane, 1);            // pairs swap
  out[96 + lane] = static_cast<int>(__ballot_sync(0xffffffffu, lane % 2));
  out[128 + lane] = __all_sync(0xffffffffu, lane < 32) + 2 * __any_sync(0xffffffffu, lane == 7);
}

TEST(CudaHost, IndexUpXorAndBallot) {
  std::vector<int> out(160, -1);
  ch::launch_kernel(shuffle_kinds, ch::Dim3(1), ch::Dim3(32), 0, "shuffle_kinds", out.data());
  for (int lane = 0; lane < 32; ++lane) {
    EXPECT_EQ(out[static_cast<size_t>(lane)], 30);
    EXPECT_EQ(out[static_cast<size_t>(32 + lane)], lane < 2 ? lane : lane - 2);
    EXPECT_EQ(out[static_cast<size_t>(64 + lane)], lane ^ 1);
    EXPECT_EQ(static_cast<unsigned>(out[static_cast<size_t>(96 + lane)]), 0xaaaaaaaau);
    EXPECT_EQ(out[static_cast<size_t>(128 + lane)], 3);
  }
}

__global__ void half_warp_shuffle(const float* in, float* out, unsigned mask) {
  // Only the first 16 lanes take part.
  if (threadIdx.x < 16) out[threadIdx.x] = __shfl_down_sync(mask, in[threadIdx.x], 1);
}

TEST(CudaHost, AShuffleMaskMustNameExactlyTheLanesThatReachIt) {
  const std::vector<float> in = iota_floats(32);
  std::vector<float> out(32, 0.0f);
  // The full mask while half the warp is elsewhere: on a GPU, a hang or undefined values.
  mixtrain::testing::expect_error(
      [&] {
        ch::launch_kernel(half_warp_shuffle, ch::Dim3(1), ch::Dim3(32), 0, "half_warp", in.data(), out.data(),
                          0xffffffffu);
      },
      {"kernel half_warp", "mask 0xffffffff", "lanes that reached it are 0xffff"});
  // The right mask passes; the last lane of the 16 reads lane 16, outside it: reported.
  mixtrain::testing::expect_error(
      [&] {
        ch::launch_kernel(half_warp_shuffle, ch::Dim3(1), ch::Dim3(32), 0, "half_warp", in.data(), out.data(), 0xffffu);
      },
      {"lane 15", "reads lane 16", "not in the mask"});
  // A width that is not a power of two.
  mixtrain::testing::expect_error(
      [&] { ch::launch_kernel(warp_sum, ch::Dim3(1), ch::Dim3(32), 0, "warp_sum", in.data(), out.data(), 0xffffffffu, 12); },
      {"width 12 is not a power of two"});
}

__global__ void noop() {}

__global__ void uses_dynamic_shared(float* out) {
  MT_DYNAMIC_SHARED(float, buffer);
  buffer[threadIdx.x] = static_cast<float>(threadIdx.x);
  __syncthreads();
  out[threadIdx.x] = buffer[blockDim.x - 1 - threadIdx.x];
}

TEST(CudaHost, LaunchLimitsAreSm90s) {
  mixtrain::testing::expect_error([] { ch::launch_kernel(noop, ch::Dim3(1), ch::Dim3(1025), 0, "noop"); },
                                  {"kernel noop", "1025 threads", "1024"});
  mixtrain::testing::expect_error([] { ch::launch_kernel(noop, ch::Dim3(1), ch::Dim3(1, 1, 65), 0, "noop"); },
                                  {"(1024, 1024, 64)"});
  mixtrain::testing::expect_error([] { ch::launch_kernel(noop, ch::Dim3(1, 65536), ch::Dim3(1), 0, "noop"); },
                                  {"65535"});
  mixtrain::testing::expect_error([] { ch::launch_kernel(noop, ch::Dim3(0), ch::Dim3(1), 0, "noop"); },
                                  {"an empty launch"});
  // Dynamic shared memory: 48 KiB by default, more only after the attribute.
  std::vector<float> out(32);
  mixtrain::testing::expect_error(
      [&] { ch::launch_kernel(uses_dynamic_shared, ch::Dim3(1), ch::Dim3(32), 64 * 1024, "dyn", out.data()); },
      {"65536 bytes of dynamic shared memory", "cudaFuncSetAttribute"});
  ch::set_max_dynamic_shared_bytes(reinterpret_cast<const void*>(uses_dynamic_shared), 64 * 1024);
  ch::launch_kernel(uses_dynamic_shared, ch::Dim3(1), ch::Dim3(32), 64 * 1024, "dyn", out.data());
  EXPECT_EQ(out[0], 31.0f);
  EXPECT_EQ(out[31], 0.0f);
  mixtrain::testing::expect_error(
      [] { ch::set_max_dynamic_shared_bytes(reinterpret_cast<const void*>(uses_dynamic_shared), 300 * 1024); },
      {"above sm_90's 232448"});
}

__global__ void vector_load(const float* in, float* out) {
  ch::check_vector_access(in + threadIdx.x * 4, 16);
  out[threadIdx.x] = in[threadIdx.x * 4];
}

TEST(CudaHost, VectorAccessesMustBeAligned) {
  alignas(16) float data[36] = {};
  float out[2] = {};
  ch::launch_kernel(vector_load, ch::Dim3(1), ch::Dim3(2), 0, "vector_load", data, out);
  mixtrain::testing::expect_error(
      [&] { ch::launch_kernel(vector_load, ch::Dim3(1), ch::Dim3(2), 0, "vector_load", data + 1, out); },
      {"kernel vector_load", "16-byte vector access", "not aligned"});
}

__global__ void throws_in_thread(int which) {
  if (static_cast<int>(threadIdx.x) == which) MT_FAIL("bad index in the kernel");
  __syncthreads();
}

TEST(CudaHost, AnErrorInOneThreadStopsTheLaunchNamingTheThread) {
  mixtrain::testing::expect_error([] { ch::launch_kernel(throws_in_thread, ch::Dim3(1), ch::Dim3(8), 0, "thrower", 5); },
                                  {"kernel thrower", "thread (5,0,0)", "bad index in the kernel"});
  // The engine is usable afterwards (the waiting threads were unwound, not leaked).
  ch::launch_kernel(throws_in_thread, ch::Dim3(1), ch::Dim3(8), 0, "thrower", -1);
  mixtrain::testing::expect_error([] { (void)threadIdx.x; }, {"outside a kernel launch"});
}

TEST(CudaHost, SchedulesAreParsedStrictly) {
  EXPECT_EQ(ch::parse_schedule("reverse").schedule, ch::Schedule::kReverse);
  EXPECT_EQ(ch::parse_schedule("random:42").seed, 42u);
  mixtrain::testing::expect_error([] { ch::parse_schedule("backwards"); },
                                  {"MIXTRAIN_CUDA_HOST_SCHEDULE", "in-order, reverse, random"});
  mixtrain::testing::expect_error([] { ch::parse_schedule("random:-1"); }, {"decimal"});
  mixtrain::testing::expect_error([] { ch::parse_schedule("random:"); }, {"decimal"});
  mixtrain::testing::expect_error([] { ch::parse_schedule(""); }, {"is not a schedule"});
}

template <typename T, int N>
__global__ void fill_scaled(T* out, int scale) {
  if (static_cast<int>(threadIdx.x) < N) out[blockIdx.x * blockDim.x + threadIdx.x] = static_cast<T>(scale * N);
}

TEST(CudaHost, TheBackendsLaunchSpellingLaunches) {
  // As the .cu files write it: a template kernel (a comma in its name), arguments converted to the
  // parameters' types (int64_t -> int), a stream argument.
  std::vector<double> out(8, 0.0);
  const int64_t scale = 3;
  fill_scaled<double, 4> MT_LAUNCH(2, 4, 0, nullptr)(out.data(), scale);
  for (double v : out) EXPECT_EQ(v, 12.0);
  mixtrain::testing::expect_error([&] { fill_scaled<double, 4> MT_LAUNCH(1, 2048)(out.data(), scale); },
                                  {"launched at", "test_block_runner.cpp", "2048 threads"});
}
