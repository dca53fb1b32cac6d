#include "daemon/core/signals/grad_norm_rule.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace trainsup {
namespace {

// Feeds `norm(step)` for steps [from, to); returns the findings.
template <typename Fn>
std::vector<GradNormFinding> Feed(GradNormRule& rule, int64_t from, int64_t to, Fn norm) {
  std::vector<GradNormFinding> found;
  for (int64_t step = from; step < to; ++step) {
    rule.Observe(step, norm(step), {static_cast<uint32_t>(step % 8), 0});
    for (const GradNormFinding& f : rule.Take()) found.push_back(f);
  }
  return found;
}

TEST(GradNormRuleTest, AHealthyRunRaisesNothing) {
  // Large and falling in the first steps, then log-normal noise (sigma 0.3)
  // around a slowly falling level, with an occasional 3x step: seeded.
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<double> noise(0.0, 0.3);
    GradNormRule rule{GradNormOptions()};
    std::vector<GradNormFinding> found = Feed(rule, 0, 5000, [&](int64_t step) {
      const double level = 1.0 + 50.0 * std::exp(-step / 30.0) + 0.5 * std::exp(-step / 2000.0);
      return level * std::exp(noise(rng)) * (step % 301 == 0 ? 3.0 : 1.0);
    });
    EXPECT_TRUE(found.empty()) << "seed " << seed << ": step " << found[0].step;
  }
}

TEST(GradNormRuleTest, ASpikeIsReportedOnceUntilTheNormRunsNormalAgain) {
  GradNormRule rule{GradNormOptions()};  // baseline 128, factor 10
  auto norm = [](int64_t step) {
    if (step == 300 || step == 305) return 25.0;
    if (step == 400) return 30.0;
    return 2.0;
  };
  std::vector<GradNormFinding> found = Feed(rule, 0, 500, norm);
  ASSERT_EQ(found.size(), 2u);
  EXPECT_FALSE(found[0].collapse);
  EXPECT_EQ(found[0].step, 300);
  EXPECT_DOUBLE_EQ(found[0].grad_norm, 25.0);
  EXPECT_DOUBLE_EQ(found[0].baseline_median, 2.0);
  EXPECT_DOUBLE_EQ(found[0].ratio, 12.5);
  EXPECT_EQ(found[0].at.rank, 300u % 8);
  EXPECT_EQ(found[1].step, 400);  // 305 came before 20 normal steps
}

TEST(GradNormRuleTest, NothingIsJudgedBeforeHalfTheBaseline) {
  GradNormRule rule{GradNormOptions()};
  EXPECT_TRUE(Feed(rule, 0, 63, [](int64_t step) { return step == 62 ? 1000.0 : 1.0; }).empty());
}

TEST(GradNormRuleTest, CollapsedStepsInARowAreACollapse) {
  GradNormRule rule{GradNormOptions()};  // ratio 1e-3, 20 steps
  std::vector<GradNormFinding> found =
      Feed(rule, 0, 400, [](int64_t step) { return step >= 200 ? 1e-5 : 1.0; });
  ASSERT_EQ(found.size(), 1u);
  EXPECT_TRUE(found[0].collapse);
  EXPECT_EQ(found[0].first_step, 200);
  EXPECT_EQ(found[0].step, 219);
  EXPECT_EQ(found[0].steps, 20);
  EXPECT_DOUBLE_EQ(found[0].baseline_median, 1.0);
}

TEST(GradNormRuleTest, AShortDipIsNotACollapse) {
  GradNormRule rule{GradNormOptions()};
  EXPECT_TRUE(Feed(rule, 0, 400, [](int64_t step) {
                return step >= 200 && step < 219 ? 1e-5 : 1.0;
              }).empty());
}

TEST(GradNormRuleTest, ExactZerosFromTheStartAreACollapse) {
  GradNormRule rule{GradNormOptions()};
  std::vector<GradNormFinding> found = Feed(rule, 0, 100, [](int64_t) { return 0.0; });
  ASSERT_EQ(found.size(), 1u);
  EXPECT_TRUE(found[0].collapse);
  EXPECT_EQ(found[0].step, 19);
}

TEST(GradNormRuleTest, ConvergenceIsNotACollapse) {
  // A model that fits its data: the norm falls 2% a step, steadily.
  GradNormRule rule{GradNormOptions()};
  EXPECT_TRUE(Feed(rule, 0, 3000, [](int64_t step) { return 10.0 * std::pow(0.98, step); }).empty());
}

TEST(GradNormRuleTest, SwitchedOffRulesReportNothing) {
  GradNormOptions options;
  options.spike = false;
  options.collapse = false;
  GradNormRule rule{options};
  EXPECT_TRUE(Feed(rule, 0, 400, [](int64_t step) {
                return step == 300 ? 100.0 : (step > 320 ? 0.0 : 1.0);
              }).empty());
}

}  // namespace
}  // namespace trainsup
