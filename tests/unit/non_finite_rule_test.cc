#include "daemon/core/signals/non_finite_rule.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/support/test_time.h"

namespace trainsup {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

using ::trainsup::testing::AtS;

// A step's record: `ranks` ranks, `bad_grads` of them with a non-finite
// gradient norm (the first rank 2 on node 1), `bad_losses` with a
// non-finite loss.
StepSignals Step(int64_t step, uint32_t bad_grads, uint32_t bad_losses = 0) {
  StepSignals s;
  s.step = step;
  s.time = AtS(step);
  s.ranks = 8;
  s.loss = 2.0;
  s.loss_nonfinite = bad_losses;
  s.grad_nonfinite = bad_grads;
  if (bad_grads > 0) s.grad_nonfinite_at = {2, 1};
  return s;
}

TEST(NonFiniteRuleTest, ANaNLossIsReportedOnceAfterTheSettleNamingItsRankAndStep) {
  NonFiniteRule rule{NonFiniteOptions()};
  rule.ObserveLoss(AtS(0), 57, {3, 1}, kNaN);
  EXPECT_EQ(rule.Check(AtS(0.5)), std::nullopt);  // a peer's report may still be on its way

  std::optional<NonFiniteFinding> f = rule.Check(AtS(1));
  ASSERT_TRUE(f.has_value());
  EXPECT_FALSE(f->grad_norm);
  EXPECT_EQ(f->step, 57);
  ASSERT_EQ(f->ranks.size(), 1u);
  EXPECT_EQ(f->ranks[0].rank, 3u);
  EXPECT_EQ(f->ranks[0].node, 1u);
  EXPECT_EQ(f->ranks_at_step, 1u);
  EXPECT_TRUE(std::isnan(f->value));
  EXPECT_EQ(f->seen, AtS(0));
  EXPECT_EQ(rule.Check(AtS(5)), std::nullopt);  // once per generation
}

TEST(NonFiniteRuleTest, ARankAtAnEarlierStepHeardLaterIsNamedFirst) {
  NonFiniteRule rule{NonFiniteOptions()};
  rule.ObserveLoss(AtS(0), 58, {3, 1}, kInf);
  rule.ObserveLoss(AtS(0.6), 57, {1, 0}, kNaN);
  rule.ObserveLoss(AtS(0.7), 57, {0, 0}, -kInf);
  std::optional<NonFiniteFinding> f = rule.Check(AtS(1.6));
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->step, 57);
  EXPECT_EQ(f->ranks_at_step, 2u);
  ASSERT_EQ(f->ranks.size(), 2u);
  EXPECT_EQ(f->ranks[0].rank, 1u);
  EXPECT_EQ(f->ranks[1].rank, 0u);
}

TEST(NonFiniteRuleTest, AtMostFourRanksAreNamedAndAllAreCounted) {
  NonFiniteRule rule{NonFiniteOptions()};
  for (uint32_t r = 0; r < 7; ++r) rule.ObserveLoss(AtS(0), 9, {r, r / 4}, kNaN);
  std::optional<NonFiniteFinding> f = rule.Check(AtS(2));
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->ranks.size(), NonFiniteRule::kNamed);
  EXPECT_EQ(f->ranks_at_step, 7u);
}

TEST(NonFiniteRuleTest, FiniteLossesRaiseNothing) {
  NonFiniteRule rule{NonFiniteOptions()};
  for (int64_t step = 0; step < 1000; ++step) {
    rule.ObserveLoss(AtS(step), step, {0, 0}, 1e30);
    rule.ObserveLoss(AtS(step), step, {1, 0}, -5.0);
    rule.ObserveStep(Step(step, 0));
  }
  EXPECT_EQ(rule.Check(AtS(2000)), std::nullopt);
  EXPECT_EQ(rule.loss_steps(), 0u);
}

TEST(NonFiniteRuleTest, Fp16OverflowStepsAreCountedNotReported) {
  NonFiniteOptions options;
  options.grad_steps = 20;
  NonFiniteRule rule{options};
  // GradScaler at start: its scale falls through a run of overflows; later,
  // one now and then. Never 20 in a row.
  int64_t step = 0;
  for (; step < 15; ++step) rule.ObserveStep(Step(step, 8));
  for (; step < 2000; ++step) {
    const bool overflow = step % 97 == 0 || (step >= 500 && step < 519);
    rule.ObserveStep(Step(step, overflow ? 8 : 0));
  }
  EXPECT_EQ(rule.Check(AtS(3000)), std::nullopt);
  EXPECT_EQ(rule.overflow_steps(), 15u + 20u + 19u);  // at start, one in a while, the run
}

TEST(NonFiniteRuleTest, AGradNormNonFiniteForGradStepsInARowIsNonFinite) {
  NonFiniteOptions options;
  options.grad_steps = 20;
  NonFiniteRule rule{options};
  for (int64_t step = 0; step < 100; ++step) rule.ObserveStep(Step(step, 0));
  for (int64_t step = 100; step < 119; ++step) rule.ObserveStep(Step(step, 8));
  EXPECT_EQ(rule.Check(AtS(200)), std::nullopt);
  rule.ObserveStep(Step(119, 8));
  std::optional<NonFiniteFinding> f = rule.Check(AtS(200));
  ASSERT_TRUE(f.has_value());
  EXPECT_TRUE(f->grad_norm);
  EXPECT_EQ(f->first_step, 100);
  EXPECT_EQ(f->step, 119);
  EXPECT_EQ(f->consecutive_steps, 20);
  ASSERT_EQ(f->ranks.size(), 1u);
  EXPECT_EQ(f->ranks[0].rank, 2u);
  EXPECT_EQ(f->ranks_at_step, 8u);
}

TEST(NonFiniteRuleTest, AGapInTheStepsBreaksARun) {
  NonFiniteOptions options;
  options.grad_steps = 5;
  NonFiniteRule rule{options};
  for (int64_t step : {10, 11, 12, 14, 15, 16, 17}) rule.ObserveStep(Step(step, 1));
  EXPECT_EQ(rule.Check(AtS(100)), std::nullopt);
  rule.ObserveStep(Step(18, 1));
  EXPECT_TRUE(rule.Check(AtS(100)).has_value());
}

TEST(NonFiniteRuleTest, ANonFiniteGradWithANonFiniteLossIsTheLossRule) {
  NonFiniteRule rule{NonFiniteOptions()};
  for (int64_t step = 0; step < 50; ++step) rule.ObserveStep(Step(step, 8, 8));
  EXPECT_EQ(rule.overflow_steps(), 0u);
  EXPECT_EQ(rule.loss_steps(), 50u);
  EXPECT_EQ(rule.Check(AtS(100)), std::nullopt);  // no loss was observed: nothing to name
}

TEST(NonFiniteRuleTest, OffJudgesNothing) {
  NonFiniteOptions options;
  options.action = NonFiniteAction::kOff;
  NonFiniteRule rule{options};
  rule.ObserveLoss(AtS(0), 3, {0, 0}, kNaN);
  EXPECT_EQ(rule.Check(AtS(10)), std::nullopt);
}

}  // namespace
}  // namespace trainsup
