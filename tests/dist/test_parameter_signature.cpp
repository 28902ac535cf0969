// The ranks' same-model check (src/dist/parameter_signature.h): names, dtypes, shapes and the
// device type, not its index, so that one process per GPU (rank r on cuda:r) passes.
#include <gtest/gtest.h>

#include "dist/parameter_signature.h"
#include "mixtrain/mixtrain.h"

namespace mt = mixtrain;
namespace detail = mixtrain::dist::detail;

TEST(ParameterSignature, NamesDtypeShapeAndDeviceTypeOnly) {
  const std::string line = detail::parameter_line("h.0.attn.weight", mt::kBFloat16, {768, 2304}, mt::kCUDA);
  EXPECT_NE(line.find("h.0.attn.weight"), std::string::npos) << line;
  EXPECT_NE(line.find("bfloat16"), std::string::npos) << line;
  EXPECT_NE(line.find("768"), std::string::npos) << line;
  EXPECT_NE(line.find("2304"), std::string::npos) << line;
  EXPECT_NE(line.find("on cuda"), std::string::npos) << line;
  EXPECT_EQ(line.find("cuda:"), std::string::npos) << line;  // no index
  EXPECT_NE(line, detail::parameter_line("h.0.attn.weight", mt::kFloat32, {768, 2304}, mt::kCUDA));
  EXPECT_NE(line, detail::parameter_line("h.0.attn.weight", mt::kBFloat16, {2304, 768}, mt::kCUDA));
  EXPECT_NE(line, detail::parameter_line("h.1.attn.weight", mt::kBFloat16, {768, 2304}, mt::kCUDA));
  EXPECT_NE(line, detail::parameter_line("h.0.attn.weight", mt::kBFloat16, {768, 2304}, mt::kCPU));
}

TEST(ParameterSignature, OneLinePerParameterInOrder) {
  const std::vector<mt::Tensor> params = {mt::zeros({2, 3}), mt::zeros({4}, {.dtype = mt::kFloat16})};
  const std::string s = detail::parameter_signature({"a", "b"}, params);
  EXPECT_EQ(s, detail::parameter_line("a", mt::kFloat32, {2, 3}, mt::kCPU) +
                   detail::parameter_line("b", mt::kFloat16, {4}, mt::kCPU));
}
