// Bad input throws mt::Error (never aborts or exits), and the message names the op, the shapes and
// dtypes involved and what would be valid (the error rules of mixtrain/error.h). Covers the core API; each op
// family's own tests check its error paths.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "mixtrain/mixtrain.h"
#include "support/expect_error.h"

namespace mt = mixtrain;

namespace {

struct BadInput {
  const char* what;
  std::function<void()> run;
  std::vector<const char*> message_parts;  // each must appear in the message
};

TEST(Errors, BadInputsThrowMtErrorNamingTheOpAndShapes) {
  const mt::Tensor a = mt::zeros({2, 3});
  const mt::Tensor i = mt::zeros({4}, {.dtype = mt::kInt64});
  const std::vector<BadInput> cases = {
      {"view to a wrong element count",
       [&] {
         a.view({4, 2});
       },
       {"view", "[4, 2]", "[2, 3] float32", "6 elements"}},
      {"view of a transposed tensor", [&] { a.t().view({6}); }, {"view", "[3, 2]", "reshape"}},
      {"reshape with two -1",
       [&] {
         a.reshape({-1, -1});
       },
       {"reshape", "[-1, -1]", "only one"}},
      {"transpose out of range", [&] { a.transpose(0, 2); }, {"transpose", "dimension 2", "2 dims", "[-2, 1]"}},
      {"permute with too few dims", [&] { a.permute({1}); }, {"permute", "[1]", "[2, 3] float32"}},
      {"expand a non-1 dim",
       [&] {
         a.expand({4, 3});
       },
       {"expand", "[2, 3] float32", "[4, 3]", "not 1"}},
      {"select out of range", [&] { a.select(1, 3); }, {"select", "index 3", "dim 1", "[2, 3] float32"}},
      {"slice with step 0", [&] { a.slice(0, 0, 2, 0); }, {"slice", "step", "0"}},
      {"flatten with start after end", [&] { a.flatten(1, 0); }, {"flatten", "start_dim", "[2, 3] float32"}},
      {"negative dimension",
       [] {
         mt::zeros({3, -2});
       },
       {"empty", "negative", "[3, -2]"}},
      {"too many dims",
       [] {
         mt::zeros({1, 1, 1, 1, 1, 1, 1, 1, 1});
       },
       {"at most 8 dimensions"}},
      {"item of many elements", [&] { a.item<float>(); }, {"item", "one element", "[2, 3] float32"}},
      {"data_ptr of the wrong type", [&] { i.data_ptr<float>(); }, {"data_ptr", "int64", "float32"}},
      {"from_vector count mismatch",
       [] {
         mt::from_vector(std::vector<float>{1, 2}, {3});
       },
       {"from_vector", "2", "[3]"}},
      {"arange step 0", [] { mt::arange(0.0, 1.0, 0.0); }, {"arange", "step"}},
      {"randint empty range", [] { mt::randint(3, 3, {2}); }, {"randint", "[3, 3)"}},
      {"uniform_ on integers",
       [&] {
         mt::Tensor t = i.clone();
         mt::uniform_(t, 0, 1);
       },
       {"uniform_", "[4] int64"}},
      {"requires_grad on integers", [&] { i.clone().requires_grad_(); }, {"requires_grad_", "[4] int64"}},
      {"backward without grad", [&] { a.backward(); }, {"backward", "[2, 3] float32", "does not require grad"}},
      {"copy_ of a shape that does not broadcast", [&] { a.clone().copy_(mt::zeros({4})); }, {"[4]", "[2, 3]"}},
      {"undefined tensor", [] { mt::Tensor().numel(); }, {"undefined"}},
      {"memory stats of an absent device", [] { mt::memory::stats(mt::Device(mt::kCUDA, 63)); }, {"memory", "cuda"}},
  };
  for (const BadInput& c : cases) {
    SCOPED_TRACE(c.what);
    const mt::testing::Caught caught = mt::testing::catch_error(c.run);
    if (!caught.is_mt_error) {
      ADD_FAILURE() << "expected an mt::Error; got " << caught.message;
      continue;
    }
    const std::string& message = caught.message;
    for (const char* part : c.message_parts)
      EXPECT_NE(message.find(part), std::string::npos) << "\"" << message << "\" lacks \"" << part << "\"";
    // A user error is not reported as a bug in mixtrain.
    EXPECT_EQ(message.find("internal error"), std::string::npos) << message;
  }
}

TEST(Errors, MtErrorIsAStdRuntimeError) {
  // Callers that catch std::exception (or std::runtime_error) see mixtrain's errors too.
  EXPECT_THROW(mt::zeros({2}).item<float>(), std::runtime_error);
  EXPECT_THROW(mt::zeros({2}).item<float>(), std::exception);
}

TEST(Errors, InternalAssertThrowsAndSaysItIsABug) {
  try {
    MT_INTERNAL_ASSERT(1 + 1 == 3, "arithmetic is broken");
    FAIL() << "no exception";
  } catch (const mt::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("internal error"), std::string::npos) << m;
    EXPECT_NE(m.find("1 + 1 == 3"), std::string::npos) << m;
    EXPECT_NE(m.find("arithmetic is broken"), std::string::npos) << m;
  }
}

TEST(Errors, TheObjectIsUsableAfterAnError) {
  // A failed call leaves the tensor and the allocator as they were.
  mt::Tensor a = mt::arange(0.0, 6.0, 1.0, {.dtype = mt::kFloat32});
  const int64_t bytes = mt::memory::stats().current_bytes;
  EXPECT_THROW(a.view({4}), mt::Error);
  EXPECT_THROW(mt::from_vector(std::vector<float>(5), {2, 3}), mt::Error);
  EXPECT_EQ(mt::memory::stats().current_bytes, bytes);
  EXPECT_EQ(a.reshape({2, 3}).select(1, 2).to_vector<float>(), (std::vector<float>{2, 5}));
}

}  // namespace
