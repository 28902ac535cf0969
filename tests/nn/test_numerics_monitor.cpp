// NumericsMonitor (nn/numerics_monitor.h): the per-format counts on known values (flush, subnormal,
// overflow at their exact rounding boundaries, per-tensor FP8 scaling, rounding errors), the
// recommendations, and a monitored model: sampled steps only, every site, the report files.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <vector>

#include "mixtrain/mixtrain.h"
#include "mixtrain/nn/modules.h"
#include "mixtrain/nn/numerics_monitor.h"
#include "support/expect_error.h"

namespace mt = mixtrain;
namespace nn = mixtrain::nn;
using N = nn::TensorNumerics;

TEST(TensorNumerics, CountsKnownValues) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> v = {0.0f, 1e-8f, -1e-6f, 1.0f, -70000.0f, nan};
  N n;
  n.add(v.data(), static_cast<int64_t>(v.size()));
  EXPECT_EQ(n.samples, 1);
  EXPECT_EQ(n.elements, 6);
  EXPECT_EQ(n.zeros, 1);
  EXPECT_EQ(n.nonfinite, 1);
  EXPECT_EQ(n.nonzero_finite(), 4);
  EXPECT_EQ(n.amax, 70000.0);
  EXPECT_EQ(n.amin_nonzero, static_cast<double>(1e-8f));
  // fp16: 1e-8 < 2^-25 flushes, 1e-6 is subnormal (< 2^-14), 70000 >= 65520 overflows.
  EXPECT_EQ(n.flush[N::kFp16], 1);
  EXPECT_EQ(n.subnormal[N::kFp16], 1);
  EXPECT_EQ(n.overflow[N::kFp16], 1);
  // bf16 holds them all as normals.
  EXPECT_EQ(n.flush[N::kBf16] + n.subnormal[N::kBf16] + n.overflow[N::kBf16], 0);
  // E4M3 as is: 1e-8 and 1e-6 below 2^-10 flush, 70000 > 464 overflows. Scaled by 448 / 70000 the
  // small ones still flush, 1.0 (-> 0.0064 > 2^-10) survives.
  EXPECT_EQ(n.flush[N::kE4M3], 2);
  EXPECT_EQ(n.overflow[N::kE4M3], 1);
  EXPECT_EQ(n.scaled_flush[N::kE4M3], 2);
  EXPECT_EQ(n.scaled_flush[N::kE5M2], 2);
  EXPECT_EQ(n.scaled_flush[N::kFp16], 0);  // the scaled counts are FP8's only
  EXPECT_DOUBLE_EQ(n.fraction(n.flush[N::kFp16]), 0.25);
  // Rounding errors: bf16 at most 2^-9 relative, some non-zero; fp16 leaves out the overflow.
  EXPECT_GT(n.mean_rel_error(N::kBf16), 0.0);
  EXPECT_LE(n.mean_rel_error(N::kBf16), 0x1p-9);
  EXPECT_EQ(n.rel_error_count[0], 4);
  EXPECT_EQ(n.rel_error_count[1], 3);
  EXPECT_EQ(n.recommendation(), "bf16/fp32 (fp16 overflows)");
}

TEST(TensorNumerics, BoundariesFollowRoundToNearestEven) {
  auto counts = [](float x) {
    N n;
    n.add(&x, 1);
    return n;
  };
  EXPECT_EQ(counts(0x1p-25f).flush[N::kFp16], 1);  // the tie rounds to the even zero
  EXPECT_EQ(counts(0x1.000002p-25f).flush[N::kFp16], 0);
  EXPECT_EQ(counts(0x1.000002p-25f).subnormal[N::kFp16], 1);
  EXPECT_EQ(counts(65520.0f).overflow[N::kFp16], 1);  // the tie rounds to inf
  EXPECT_EQ(counts(65519.0f).overflow[N::kFp16], 0);
  EXPECT_EQ(counts(464.0f).overflow[N::kE4M3], 0);  // E4M3FN: the tie rounds down to 448
  EXPECT_EQ(counts(464.03125f).overflow[N::kE4M3], 1);
  EXPECT_EQ(counts(61440.0f).overflow[N::kE5M2], 1);
  EXPECT_EQ(counts(0x1p-17f).flush[N::kE5M2], 1);
  EXPECT_EQ(counts(0x1p-14f).subnormal[N::kFp16], 0);  // the smallest normal
}

TEST(TensorNumerics, Recommendations) {
  N empty;
  EXPECT_EQ(empty.recommendation(), "no data");
  std::vector<float> small(1000, 0.5f);
  N ok;
  ok.add(small.data(), 1000);
  EXPECT_EQ(ok.recommendation(), "fp16 ok");
  small[0] = small[1] = 1e-9f;  // 0.2% flush in fp16
  N scaled;
  scaled.add(small.data(), 1000);
  EXPECT_EQ(scaled.recommendation(), "fp16 with loss scaling");
  EXPECT_EQ(scaled.recommendation(/*gradient=*/false), "bf16/fp32 (too small for fp16)");
  std::fill(small.begin(), small.end(), 0.5f);
  for (int i = 0; i < 20; ++i) small[static_cast<size_t>(i)] = 1e-6f;  // 2% subnormal in fp16
  N sub;
  sub.add(small.data(), 1000);
  EXPECT_EQ(sub.recommendation(), "fp16 with loss scaling");
}

TEST(NumericsMonitor, SamplesEveryNthStepAtEverySite) {
  mt::manual_seed(3);
  auto model = std::make_shared<nn::Sequential>(nn::Linear(4, 8), nn::ReLU(), nn::Linear(8, 2));
  nn::NumericsMonitor monitor(*model, {.every = 2});
  for (int step = 1; step <= 4; ++step) {
    EXPECT_EQ(monitor.begin_step(step), step % 2 == 1);
    const mt::Tensor y = (*model)(mt::randn({5, 4}));
    mt::Tensor loss = mt::mean(y * y);
    loss.backward();
    monitor.record_parameters();
    monitor.end_step();
    EXPECT_FALSE(monitor.sampling());
    model->zero_grad();
  }
  EXPECT_EQ(monitor.sampled_steps(), 2);
  const auto sites = monitor.sites();
  // Steps 1 and 3 only: one tensor per step and site, except the linears' backward, which returns
  // the weight's and the bias's gradient (and, for the second linear, its input's).
  const std::pair<const char*, int> expected[] = {{"forward 0/linear", 2},  {"forward 1/relu", 2},
                                                  {"forward 2/linear", 2},  {"backward 0/linear", 4},
                                                  {"backward 2/linear", 6}, {"param 0.weight", 2},
                                                  {"grad 2.bias", 2}};
  for (const auto& [key, samples] : expected) {
    ASSERT_TRUE(sites.contains(key)) << key;
    EXPECT_EQ(sites.at(key).samples, samples) << key;
  }
  EXPECT_EQ(sites.at("forward 0/linear").elements, 2 * 5 * 8);
  const std::string md = monitor.report_markdown("test");
  EXPECT_NE(md.find("## Activations (op outputs, forward)"), std::string::npos);
  EXPECT_NE(md.find("| `0/linear` |"), std::string::npos) << md;
  EXPECT_NE(md.find("Sampled steps: 2, loss scale 1."), std::string::npos) << md.substr(0, 200);

  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "mixtrain_numerics_test";
  std::filesystem::remove_all(dir);
  monitor.write_report(dir.string(), "test");
  std::ifstream dat(dir / "numerics.dat");
  std::string header, row;
  std::getline(dat, header);
  int rows = 0;
  while (std::getline(dat, row)) ++rows;
  EXPECT_EQ(rows, static_cast<int>(sites.size()));
  EXPECT_TRUE(std::filesystem::exists(dir / "report.md"));
  std::filesystem::remove_all(dir);
}

TEST(NumericsMonitor, RejectsAZeroInterval) {
  nn::Linear lin(2, 2);
  EXPECT_MT_ERROR(nn::NumericsMonitor(lin, {.every = 0}), "every must be >= 1");
}
