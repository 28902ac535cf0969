// The ISA cap of mixtrain/cpu.h and the thread count of mixtrain/parallel.h: parsing, the levels,
// and that lowering the cap reaches every run-time choice of mixtrain's own kernels (the 16-bit
// converters here; the elementwise, pooling, attention and optimizer kernels in their own tests).
// The environment variables are covered end to end by the CLI tests (tests/cli).
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "core/half_convert.h"
#include "mixtrain/cpu.h"
#include "mixtrain/parallel.h"
#include "support/cpu_env.h"
#include "support/expect_error.h"

namespace mixtrain::testing {
namespace {

using cpu::Isa;
using detail::HalfConversion;
using detail::HalfImpl;

TEST(CpuIsa, NamesParseBack) {
  for (Isa level : cpu::kAllIsas) {
    SCOPED_TRACE(cpu::to_string(level));
    const std::optional<Isa> parsed = cpu::parse_isa(cpu::to_string(level), "test");
    ASSERT_TRUE(parsed.has_value());
    EXPECT_EQ(*parsed, level);
  }
  EXPECT_EQ(cpu::parse_isa("native", "test"), std::nullopt);
  EXPECT_EQ(cpu::to_string(Isa::kAvx512Bf16), "avx512_bf16");
}

TEST(CpuIsa, InvalidNamesNameTheSourceAndTheAcceptedValues) {
  for (const char* bad : {"", "AVX2", "avx2 ", "sse4", "avx512bf16"}) {
    SCOPED_TRACE(bad);
    expect_error([&] { cpu::parse_isa(bad, "MIXTRAIN_MAX_ISA"); },
                 {"MIXTRAIN_MAX_ISA", "generic, avx2, avx512, avx512_bf16, amx, native"});
  }
  // Bytes from the environment are quoted and escaped, and a long value is cut.
  const std::string msg =
      error_message([] { cpu::parse_isa(std::string("a\nb\x1b[31m") + std::string(500, 'x'), "V"); });
  EXPECT_NE(msg.find("\"a\\nb\\x1b[31m"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\x1b'), std::string::npos) << msg;
  EXPECT_LT(msg.size(), 300u) << msg;
}

TEST(CpuIsa, DetectedLevelAgreesWithTheFeatures) {
  const cpu::Features& f = cpu::features();
  const Isa d = cpu::detected_isa();
  EXPECT_EQ(d >= Isa::kAvx2, f.avx2 && f.fma && f.f16c);
  EXPECT_EQ(d >= Isa::kAvx512, d >= Isa::kAvx2 && f.avx512);
  EXPECT_EQ(d >= Isa::kAvx512Bf16, d >= Isa::kAvx512 && f.avx512_bf16);
  EXPECT_EQ(d >= Isa::kAmx, d >= Isa::kAvx512Bf16 && f.amx);
  EXPECT_FALSE(cpu::cpu_name().empty());
}

TEST(CpuIsa, VendorAgreesWithTheKernel) {
  // Linux reads the same cpuid leaf; its "vendor_id" line is an independent reading of it.
  std::ifstream in("/proc/cpuinfo");
  std::string line, vendor;
  while (vendor.empty() && std::getline(in, line)) {
    const size_t colon = line.find(':');
    if (line.rfind("vendor_id", 0) != 0 || colon == std::string::npos) continue;
    vendor = line.substr(colon + 1);
    vendor.erase(0, vendor.find_first_not_of(" \t"));  // npos erases all: an empty value
  }
  if (vendor.empty()) GTEST_SKIP() << "no vendor_id in /proc/cpuinfo";
  EXPECT_EQ(cpu::features().amd, vendor == "AuthenticAMD") << vendor;
}

TEST(CpuIsa, EffectiveLevelIsTheDetectedOneUnderTheCap) {
  EXPECT_EQ(cpu::isa(), std::min(cpu::detected_isa(), cpu::max_isa()));
  const Isa before = cpu::max_isa();
  {
    cpu::MaxIsaGuard cap(Isa::kGeneric);
    EXPECT_EQ(cpu::max_isa(), Isa::kGeneric);
    EXPECT_EQ(cpu::isa(), Isa::kGeneric);
    EXPECT_TRUE(cpu::max_isa_is_set());
    const std::string d = cpu::describe();
    EXPECT_NE(d.find(cpu::cpu_name()), std::string::npos) << d;
    EXPECT_NE(d.find(": generic"), std::string::npos) << d;
    if (cpu::detected_isa() > Isa::kGeneric) EXPECT_NE(d.find("capped"), std::string::npos) << d;
  }
  EXPECT_EQ(cpu::max_isa(), before);
  // A cap above what the CPU has changes nothing.
  cpu::MaxIsaGuard cap(Isa::kAmx);
  EXPECT_EQ(cpu::isa(), cpu::detected_isa());
}

TEST(CpuIsa, CapLowersTheConverterChoice) {
  // Generic: every conversion runs the scalar code. Each level up may only use kernels of its level.
  for (Isa level : {Isa::kGeneric, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16}) {
    if (level > cpu::isa()) break;
    SCOPED_TRACE(cpu::to_string(level));
    cpu::MaxIsaGuard cap(level);
    for (HalfConversion c : detail::kAllHalfConversions) {
      const HalfImpl impl = detail::selected_half_impl(c);
      if (level == Isa::kGeneric) EXPECT_EQ(impl, HalfImpl::kScalar) << detail::to_string(c);
      if (level < Isa::kAvx512) EXPECT_NE(impl, HalfImpl::kAvx512) << detail::to_string(c);
      if (level < Isa::kAvx512Bf16) EXPECT_NE(impl, HalfImpl::kAvx512Bf16) << detail::to_string(c);
      for (HalfImpl usable : detail::supported_half_impls(c))
        EXPECT_TRUE(detail::cpu_supports(usable)) << detail::to_string(usable);
    }
    // And the result stays exact: 1/3 rounds to the same bits at every level.
    float src[20], back[20];
    bfloat16 b16[20];
    for (int i = 0; i < 20; ++i) src[i] = 1.0f / static_cast<float>(i + 3);
    convert_fp32_to_bf16(src, b16, 20);
    convert_bf16_to_fp32(b16, back, 20);
    for (int i = 0; i < 20; ++i) EXPECT_EQ(back[i], static_cast<float>(bfloat16(src[i]))) << i;
  }
  // At the AVX2 level (where the CPU has it) the vector converters run, not the scalar ones.
  if (cpu::isa() >= Isa::kAvx2) {
    cpu::MaxIsaGuard cap(Isa::kAvx2);
    EXPECT_EQ(detail::selected_half_impl(HalfConversion::kFp32ToFp16), HalfImpl::kF16C);
    EXPECT_EQ(detail::selected_half_impl(HalfConversion::kBf16ToFp32), HalfImpl::kAvx2);
  }
}

TEST(Threads, SetAndGetTheCount) {
  with_threads(3, [] { EXPECT_EQ(get_num_threads(), 3); });
  with_threads(1, [] { EXPECT_EQ(get_num_threads(), 1); });
  EXPECT_GE(num_processors(), 1);
  for (int bad : {0, -1, kMaxThreads + 1}) {
    SCOPED_TRACE(bad);
    const int before = get_num_threads();
    expect_error([&] { set_num_threads(bad); }, {"set_num_threads", std::to_string(bad)});
    EXPECT_EQ(get_num_threads(), before);
  }
}

}  // namespace
}  // namespace mixtrain::testing
