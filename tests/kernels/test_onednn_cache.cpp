// The oneDNN primitive cache: LRU eviction, hit/miss counting, concurrent use; and the shared
// engine and bf16 path switch.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "kernels/linalg.h"
#include "backends/cpu/kernels/onednn/common.h"
#include "backends/cpu/kernels/onednn/primitive_cache.h"
#include "mixtrain/cpu.h"
#include "mixtrain/error.h"
#include "mixtrain/factory.h"
#include "mixtrain/ops/linalg.h"

namespace mixtrain::kernels::onednn {
namespace {

struct TestKey {
  int64_t a, b;
};

TEST(PrimitiveCacheLru, EvictsTheLeastRecentlyUsedEntry) {
  PrimitiveCache<TestKey, int> cache(2);
  int made = 0;
  auto get = [&](int64_t a) { return cache.get({a, 7}, [&] {
      ++made;
      return static_cast<int>(a * 10);
    }); };
  EXPECT_EQ(get(1), 10);
  EXPECT_EQ(get(2), 20);
  EXPECT_EQ(made, 2);
  EXPECT_EQ(get(1), 10);  // hit; 1 is now the most recent
  EXPECT_EQ(made, 2);
  get(3);  // evicts 2
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(made, 3);
  get(1);  // still cached
  EXPECT_EQ(made, 3);
  get(2);  // was evicted: created again
  EXPECT_EQ(made, 4);
}

TEST(PrimitiveCacheLru, CountsCreationsAndHits) {
  PrimitiveCache<TestKey, int> cache(8);
  const auto before = primitive_cache_stats();
  cache.get({1, 1}, [] { return 1; });
  cache.get({1, 1}, [] { return 2; });
  cache.get({1, 2}, [] { return 3; });
  const auto after = primitive_cache_stats();
  EXPECT_EQ(after.created - before.created, 2);
  EXPECT_EQ(after.hits - before.hits, 1);
}

TEST(PrimitiveCacheLru, ConcurrentLookupsAgree) {
  PrimitiveCache<TestKey, int64_t> cache(4);
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        const int64_t k = (i * 7 + t) % 6;  // more keys than capacity: constant eviction
        if (cache.get({k, k}, [k] { return k * k; }) != k * k) ++wrong;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_LE(cache.size(), 4u);
}

TEST(OneDnn, MatmulFromSeveralThreads) {
  // Each thread runs the same cached primitive on its own data (user scratchpads make that safe).
  Tensor b = full({32, 16}, 0.5);
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        Tensor a = full({8, 32}, t + 1.0);
        std::vector<float> c = matmul(a, b).to_vector<float>();
        for (float v : c)
          if (v != 16.0f * (t + 1)) ++wrong;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST(OneDnn, AvxTwoGemmCopiesOperandsStridedByFourKibAlongK) {
  // oneDNN's AVX2 GEMM is about twice as slow on these layouts (backends/cpu/kernels/onednn/matmul.cpp): they are
  // copied with a padded stride there, and only there.
  const bool avx2_gemm = has_isa(dnnl::cpu_isa::avx2) && !has_isa(dnnl::cpu_isa::avx512_core);
  auto info = [](const Tensor& a, const Tensor& b) {
    return matmul_impl_info(a, b, Tensor(), Tensor::empty({a.size(0), b.size(1)}, kFloat32));
  };
  auto padded = [&](const Tensor& a, const Tensor& b, const char* which) {
    return info(a, b).find(std::string(which) + " copied with a padded stride") != std::string::npos;
  };
  const Tensor a_cols = zeros({64, 1024}).t();  // [1024, 64], column stride 1024 floats
  const Tensor b_rows = zeros({64, 1024});      // row stride 1024 floats
  EXPECT_EQ(padded(a_cols, zeros({64, 128}), "A"), avx2_gemm) << info(a_cols, zeros({64, 128}));
  EXPECT_EQ(padded(zeros({128, 64}), b_rows, "B"), avx2_gemm) << info(zeros({128, 64}), b_rows);
  // Outside the measured bands: a wide product, a stride that is not a multiple of 4 KiB, row-major A.
  EXPECT_FALSE(padded(a_cols, zeros({64, 512}), "A")) << info(a_cols, zeros({64, 512}));
  EXPECT_FALSE(padded(zeros({64, 768}).t(), zeros({64, 128}), "A"));
  EXPECT_FALSE(padded(zeros({1024, 1024}), zeros({1024, 128}), "A"));
  EXPECT_FALSE(padded(zeros({1024, 64}), b_rows, "B"));
}

// The rule of linalg.h restated from its parts: AVX512-BF16 on an AMD core, under the cap and
// oneDNN's level (AMX is the other case).
bool amd_bf16_native_expected() {
  return cpu::features().amd && cpu::isa() >= cpu::Isa::kAvx512Bf16 && has_isa(dnnl::cpu_isa::avx512_core_bf16);
}

TEST(OneDnn, Bf16PathResolvesAndCanBePinned) {
  set_bf16_path(Bf16Path::kNative);
  EXPECT_EQ(bf16_path(), Bf16Path::kNative);
  set_bf16_path(Bf16Path::kFp32);
  EXPECT_EQ(bf16_path(), Bf16Path::kFp32);
  set_bf16_path(Bf16Path::kAuto);
  EXPECT_NE(bf16_path(), Bf16Path::kAuto);
  if (std::getenv("MIXTRAIN_BF16_PATH") == nullptr) {
    // Automatic: native exactly where oneDNN may use AMX, or AVX512-BF16 on an AMD core, under the cap.
    const bool amd_bf16 = amd_bf16_native_expected();
    EXPECT_EQ(bf16_path() == Bf16Path::kNative, cpu_has_amx() || amd_bf16);
    EXPECT_EQ(native_bf16_is_faster(), cpu_has_amx() || amd_bf16);
    EXPECT_EQ(cpu_has_amx(), cpu::isa() >= cpu::Isa::kAmx && has_isa(dnnl::cpu_isa::avx512_core_amx));
  }
}

TEST(OneDnn, AutomaticBf16PathFollowsTheIsaCap) {
  if (std::getenv("MIXTRAIN_BF16_PATH") != nullptr) GTEST_SKIP() << "MIXTRAIN_BF16_PATH pins the path";
  {
    // Below AVX512-BF16 the automatic path is the fp32 route whatever the CPU.
    cpu::MaxIsaGuard cap(cpu::Isa::kAvx512);
    EXPECT_EQ(bf16_path(), Bf16Path::kFp32);
    EXPECT_TRUE(uses_fp32_route(kBFloat16));
  }
  {
    // Below AMX it is the fp32 route on Intel cores and native on AMD's where oneDNN has the level.
    cpu::MaxIsaGuard cap(cpu::Isa::kAvx512Bf16);
    const bool native = amd_bf16_native_expected();
    EXPECT_EQ(bf16_path(), native ? Bf16Path::kNative : Bf16Path::kFp32);
    EXPECT_EQ(uses_fp32_route(kBFloat16), !native);
  }
}

TEST(OneDnn, NativeBf16IsAvailableExactlyFromAvx512Up) {
  const std::string why = native_bf16_unavailable_reason();
  EXPECT_EQ(why.empty(), cpu::isa() >= cpu::Isa::kAvx512 && has_isa(dnnl::cpu_isa::avx512_core)) << why;
  // Below AVX-512 (a CPU without it, or a cap) the reason names the missing feature and the level.
  cpu::MaxIsaGuard cap(cpu::Isa::kAvx2);
  const std::string capped = native_bf16_unavailable_reason();
  EXPECT_NE(capped.find("AVX-512"), std::string::npos) << capped;
  EXPECT_NE(capped.find(cpu::to_string(cpu::isa())), std::string::npos) << capped;
}

TEST(OneDnn, PinnedNativeBf16RunsOrFailsWithAClearError) {
  Tensor a = ones({8, 8}, {.dtype = kBFloat16}), b = ones({8, 8}, {.dtype = kBFloat16});
  set_bf16_path(Bf16Path::kNative);
  const std::string why = native_bf16_unavailable_reason();
  if (why.empty()) {
    // oneDNN's bf16 kernel runs (not the fp32 route): exact for these values.
    EXPECT_EQ(matmul(a, b).to_vector<float>(), std::vector<float>(64, 8.0f));
    EXPECT_EQ(matmul_impl_info(a, b, Tensor(), Tensor::empty({8, 8}, kBFloat16)).rfind("ref", 0), std::string::npos);
  } else {
    try {
      matmul(a, b);
      ADD_FAILURE() << "a pinned native bf16 matmul ran where " << why;
    } catch (const Error& e) {
      const std::string msg = e.what();
      for (const char* part : {"matmul", "bfloat16", "AVX-512", "set_bf16_path", "fp32"})
        EXPECT_NE(msg.find(part), std::string::npos) << "missing '" << part << "' in: " << msg;
      EXPECT_EQ(msg.find("could not create"), std::string::npos) << msg;  // not oneDNN's bare message
    }
  }
  set_bf16_path(Bf16Path::kAuto);
}

TEST(OneDnn, Float16MatmulIsNotNativeInThisOneDnn) {
  // oneDNN 2.6 has no f16 matmul on CPUs, hence the fp32 route. Assumption: no
  // CPU this runs on gives oneDNN 2.6 an f16 kernel; AVX512-FP16 CPUs (Sapphire Rapids) are the only
  // candidates, so there the claim is checked only with the cap below AMX, where oneDNN cannot use it.
  if (cpu::features().avx512_fp16 && has_isa(dnnl::cpu_isa::avx512_core_amx))
    GTEST_SKIP() << "AVX512-FP16 CPU with oneDNN at its AMX level: an f16 kernel may exist (run with "
                    "MIXTRAIN_MAX_ISA=avx512_bf16 to check the claim)";
  // If a oneDNN upgrade adds one, this fails as a reminder to measure it against the fp32 route.
  using dnnl::memory;
  memory::desc md({64, 64}, memory::data_type::f16, memory::format_tag::ab);
  EXPECT_THROW(dnnl::matmul::primitive_desc(dnnl::matmul::desc(md, md, md), engine()), dnnl::error);
}

}  // namespace
}  // namespace mixtrain::kernels::onednn
