// The loss rules: a level shift (LossShiftRule) and a loss flat from the
// start (LossFlatRule). Negative controls first: a noisy healthy curve with
// short spikes must never raise either.
#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "daemon/core/signals/loss_flat_rule.h"
#include "daemon/core/signals/loss_shift_rule.h"
#include "gtest/gtest.h"
#include "tests/support/healthy_loss.h"

namespace trainsup {
namespace {

using testing::HealthyLoss;

// Feeds `loss(step)` for steps [from, to) and asks after each step; returns
// the findings.
template <typename Fn>
std::vector<LossShiftFinding> Feed(LossShiftRule& rule, int64_t from, int64_t to, Fn loss) {
  std::vector<LossShiftFinding> found;
  for (int64_t step = from; step < to; ++step) {
    rule.Observe(step, loss(step));
    if (std::optional<LossShiftFinding> f = rule.Check()) found.push_back(*f);
  }
  return found;
}

TEST(LossShiftRuleTest, ANoisyHealthyCurveWithShortSpikesRaisesNothing) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    HealthyLoss curve(seed);
    LossShiftRule rule{LossShiftOptions()};
    EXPECT_TRUE(Feed(rule, 0, 5000, [&](int64_t s) { return curve.At(s); }).empty()) << seed;
  }
}

TEST(LossShiftRuleTest, ALevelThatStaysUpIsAShiftFromWhereItBegan) {
  std::mt19937 rng(7);
  std::normal_distribution<double> noise(0.0, 0.02);
  LossShiftRule rule{LossShiftOptions()};  // window 20, baseline 128, 6 sigma, floor 0.05
  std::vector<LossShiftFinding> found = Feed(rule, 0, 500, [&](int64_t step) {
    return (step < 400 ? 2.0 : 2.5) + noise(rng);
  });
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].onset_step, 400);
  EXPECT_EQ(found[0].step, 419);  // the whole window above the threshold
  EXPECT_NEAR(found[0].baseline_median, 2.0, 0.01);
  EXPECT_NEAR(found[0].threshold,
              found[0].baseline_median + std::max(0.05, 6 * found[0].baseline_sigma), 1e-9);
  EXPECT_GT(found[0].recent_min, found[0].threshold);
  EXPECT_TRUE(rule.shifted());
}

TEST(LossShiftRuleTest, ASpikeShorterThanTheWindowIsNotAShift) {
  LossShiftRule rule{LossShiftOptions()};
  EXPECT_TRUE(Feed(rule, 0, 600, [](int64_t step) {
                return step >= 300 && step < 319 ? 9.0 : 2.0;
              }).empty());
}

TEST(LossShiftRuleTest, ARiseBelowTheFloorIsNotAShift) {
  // Noise-free: sigma is 0, so the floor decides.
  LossShiftRule rule{LossShiftOptions()};
  EXPECT_TRUE(Feed(rule, 0, 600, [](int64_t step) { return step < 300 ? 2.0 : 2.04; }).empty());
  LossShiftRule other{LossShiftOptions()};
  EXPECT_EQ(Feed(other, 0, 600, [](int64_t step) { return step < 300 ? 2.0 : 2.06; }).size(), 1u);
}

TEST(LossShiftRuleTest, TheShiftEndsWhenTheLossComesBackAndANewOneIsFound) {
  LossShiftRule rule{LossShiftOptions()};
  auto loss = [](int64_t step) {
    if (step >= 300 && step < 340) return 3.0;  // up for 40 steps, then back
    if (step >= 700) return 3.0;                // up again, for good
    return 2.0;
  };
  std::vector<LossShiftFinding> found = Feed(rule, 0, 340, loss);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_TRUE(rule.shifted());
  found = Feed(rule, 340, 700, loss);
  EXPECT_TRUE(found.empty());
  EXPECT_FALSE(rule.shifted());
  found = Feed(rule, 700, 1000, loss);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].onset_step, 700);
}

TEST(LossShiftRuleTest, ANewLevelHeldForTheBaselineBecomesTheBaseline) {
  LossShiftRule rule{LossShiftOptions()};
  std::vector<LossShiftFinding> found =
      Feed(rule, 0, 2000, [](int64_t step) { return step < 300 ? 2.0 : 3.0; });
  EXPECT_EQ(found.size(), 1u);  // reported once, not again when the baseline catches up
  EXPECT_FALSE(rule.shifted());
}

TEST(LossShiftRuleTest, NothingIsJudgedBeforeTheBaselineAndWindowAreFull) {
  LossShiftRule rule{LossShiftOptions()};
  // A generation that resumed and runs a few steps at any level: nothing.
  EXPECT_TRUE(Feed(rule, 1000, 1147, [](int64_t step) { return step < 1100 ? 1.0 : 5.0; }).empty());
}

// ---- LossFlatRule ----

std::optional<LossFlatFinding> RunFlat(LossFlatRule& rule, int64_t from, int64_t to,
                                       double (*loss)(int64_t)) {
  std::optional<LossFlatFinding> found;
  for (int64_t step = from; step < to; ++step) {
    rule.Observe(step, loss(step));
    if (std::optional<LossFlatFinding> f = rule.Check()) {
      EXPECT_FALSE(found.has_value()) << "judged twice";
      found = f;
    }
  }
  return found;
}

TEST(LossFlatRuleTest, AFlatLossFromStepZeroIsFoundOnceAtTheEndOfTheWindow) {
  LossFlatRule rule{LossFlatOptions()};  // 200 steps, 1%
  std::optional<LossFlatFinding> f =
      RunFlat(rule, 0, 1000, [](int64_t step) { return 10.8 + 0.05 * std::sin(step * 1.7); });
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->first_step, 0);
  EXPECT_EQ(f->step, 199);
  EXPECT_EQ(f->steps, 200);
  EXPECT_NEAR(f->first_loss, 10.8, 0.02);
  EXPECT_NEAR(f->last_loss, 10.8, 0.02);
  EXPECT_LT(f->drop, 0.01);
  EXPECT_TRUE(rule.flat());
}

TEST(LossFlatRuleTest, ALossThatGoesDownIsNotFlat) {
  for (uint32_t seed = 1; seed <= 10; ++seed) {
    HealthyLoss curve(seed);
    LossFlatRule rule{LossFlatOptions()};
    for (int64_t step = 0; step < 1000; ++step) rule.Observe(step, curve.At(step));
    EXPECT_EQ(rule.Check(), std::nullopt) << seed;
    EXPECT_FALSE(rule.flat());
  }
}

TEST(LossFlatRuleTest, AResumeLateInTrainingIsNotJudged) {
  LossFlatRule rule{LossFlatOptions()};
  EXPECT_EQ(RunFlat(rule, 5000, 6000, [](int64_t) { return 2.1; }), std::nullopt);
}

TEST(LossFlatRuleTest, ARiseIsFlatToo) {
  LossFlatRule rule{LossFlatOptions()};
  std::optional<LossFlatFinding> f =
      RunFlat(rule, 3, 400, [](int64_t step) { return 5.0 + 0.001 * step; });
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->first_step, 3);
  EXPECT_LT(f->drop, 0);
}

}  // namespace
}  // namespace trainsup
