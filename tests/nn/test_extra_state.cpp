// Module extra state (nn::Module::extra_state): nn::Linear keeps its FP8 scaling there, so that a
// training checkpoint stores it without knowing which modules have any.
#include <gtest/gtest.h>

#include "mixtrain/mixtrain.h"
#include "support/expect_error.h"

namespace mt = mixtrain;

namespace {

// A Linear after a few forwards in an FP8 region (history of length 2).
std::unique_ptr<mt::nn::Linear> fp8_layer() {
  mt::manual_seed(3);
  auto layer = std::make_unique<mt::nn::Linear>(8, 4);
  mt::amp::Fp8Autocast fp8({.recipe = {.amax_history_len = 2}});
  for (double s : {1.0, 4.0, 2.0}) (void)(*layer)(mt::randn({5, 8}) * s);
  return layer;
}

}  // namespace

TEST(ExtraState, LinearRoundTripsItsFp8State) {
  auto layer = fp8_layer();
  EXPECT_EQ(mt::nn::Linear(8, 4).extra_state().size(), 0u) << "no state before an FP8 forward";
  const mt::nn::StateDict saved = layer->extra_state();
  ASSERT_EQ(saved.size(), 6u);
  for (const char* key : {"input.scale", "input.amax_history", "weight.scale", "weight.amax_history",
                          "grad_output.scale", "grad_output.amax_history"})
    EXPECT_NE(saved.find(key), nullptr) << key;
  mt::nn::Linear fresh(8, 4);
  fresh.load_extra_state(saved, /*after_fp8_steps=*/true);
  ASSERT_NE(fresh.fp8_state(), nullptr);
  EXPECT_EQ(fresh.fp8_state()->input.scale(), layer->fp8_state()->input.scale());
  EXPECT_EQ(fresh.fp8_state()->input.amax_history(), layer->fp8_state()->input.amax_history());
  EXPECT_EQ(fresh.fp8_state()->input.amax_history().size(), 2u);
  fresh.load_extra_state({}, /*after_fp8_steps=*/false);
  EXPECT_EQ(fresh.fp8_state(), nullptr) << "an empty state clears it";
}

TEST(ExtraState, IncompleteOrForeignStateIsRefusedWithoutChangingAnything) {
  auto layer = fp8_layer();
  const float scale = layer->fp8_state()->weight.scale();
  mt::nn::StateDict partial = layer->extra_state();
  mt::nn::StateDict missing;
  for (const auto& [key, t] : partial)
    if (key != "weight.scale") missing.insert(key, t);
  EXPECT_MT_ERROR(layer->load_extra_state(missing, false), "'weight.scale' is missing");
  EXPECT_EQ(layer->fp8_state()->weight.scale(), scale);
  EXPECT_MT_ERROR(mt::nn::Linear(8, 4).check_extra_state({}, /*after_fp8_steps=*/true), "'input.scale' is missing");
  mt::nn::Linear(8, 4, {.fp8 = false}).check_extra_state({}, /*after_fp8_steps=*/true);  // takes no part in FP8
  mt::nn::StateDict bad = layer->extra_state();
  bad.insert("input.scale", mt::full({1}, -1.0f));
  EXPECT_MT_ERROR(layer->check_extra_state(bad, false), "FP8 state (input)");
  mt::nn::StateDict wrong_dtype = layer->extra_state();
  wrong_dtype.insert("weight.amax_history", mt::ones({2}, {.dtype = mt::kFloat64}));
  EXPECT_MT_ERROR(layer->check_extra_state(wrong_dtype, false), "must be float32");
  mt::nn::StateDict extra = layer->extra_state();
  extra.insert("input.bias", mt::ones({1}));
  EXPECT_MT_ERROR(layer->check_extra_state(extra, false), "unexpected FP8 tensor \"input.bias\"");
  EXPECT_MT_ERROR(mt::nn::ReLU().check_extra_state(layer->extra_state(), false), "keeps none");
}
