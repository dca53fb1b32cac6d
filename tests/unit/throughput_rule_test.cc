#include "daemon/core/signals/throughput_rule.h"

#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/support/test_time.h"

namespace trainsup {
namespace {

using ::trainsup::testing::AtS;

// Steps [from, to) of `seconds(step)` each, the clock moving by them, a
// Check after each; returns the findings. `t` is the clock.
template <typename Fn>
std::vector<ThroughputFinding> Feed(ThroughputRule& rule, int64_t from, int64_t to, double& t,
                                   Fn seconds) {
  std::vector<ThroughputFinding> found;
  for (int64_t step = from; step < to; ++step) {
    const double s = seconds(step);
    t += s;
    rule.Observe(step, AtS(t), s);
    if (std::optional<ThroughputFinding> f = rule.Check(AtS(t))) found.push_back(*f);
  }
  return found;
}

// 0.5s steps with `sigma` relative noise, seeded.
class Noisy {
 public:
  Noisy(uint32_t seed, double sigma) : rng_(seed), noise_(0.0, sigma) {}
  double operator()(double level) { return level * std::max(0.05, 1.0 + noise_(rng_)); }

 private:
  std::mt19937 rng_;
  std::normal_distribution<double> noise_;
};

TEST(ThroughputRuleTest, ANoisyHealthyRunRaisesNothing) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    Noisy noisy(seed, 0.05);
    ThroughputRule rule{ThroughputOptions()};
    double t = 0;
    EXPECT_TRUE(Feed(rule, 0, 10000, t, [&](int64_t) { return noisy(0.5); }).empty()) << seed;
  }
}

TEST(ThroughputRuleTest, OutliersWarmUpAndCheckpointLikePausesRaiseNothing) {
  ThroughputRule rule{ThroughputOptions()};
  double t = 0;
  EXPECT_TRUE(Feed(rule, 0, 5000, t, [](int64_t step) {
                if (step < 20) return 3.0;             // start-up, compilation
                if (step % 100 == 0) return 30.0;      // an evaluation every 100 steps
                if (step % 37 == 0) return 2.0;        // a GC pause now and then
                return 0.5;
              }).empty());
}

TEST(ThroughputRuleTest, AStepChangeOf20PercentIsFoundWhereItBegan) {
  Noisy noisy(3, 0.02);
  ThroughputRule rule{ThroughputOptions()};  // 10%, 20 steps and 1m, warm-up 20, baseline 50
  double t = 0;
  std::vector<ThroughputFinding> found =
      Feed(rule, 0, 1000, t, [&](int64_t step) { return noisy(step < 400 ? 0.5 : 0.6); });
  ASSERT_EQ(found.size(), 1u);
  const ThroughputFinding& f = found[0];
  EXPECT_FALSE(f.decay);
  EXPECT_NEAR(f.onset_step, 400, 3);
  EXPECT_NEAR(f.before_s, 0.5, 0.01);
  EXPECT_NEAR(f.after_s, 0.6, 0.01);
  EXPECT_NEAR(f.ratio, 1.2, 0.03);
  // Held for the confirmation time: 1 minute of 0.6s steps.
  EXPECT_GE(f.held, absl::Minutes(1));
  EXPECT_LE(f.step, 400 + 110);
  EXPECT_NEAR(*rule.Ratio(), 1.2, 0.03);
}

TEST(ThroughputRuleTest, AChangeBelowTheThresholdIsNotReported) {
  Noisy noisy(4, 0.01);
  ThroughputRule rule{ThroughputOptions()};
  double t = 0;
  EXPECT_TRUE(Feed(rule, 0, 3000, t, [&](int64_t step) {
                return noisy(step < 400 ? 0.5 : 0.54);
              }).empty());
}

TEST(ThroughputRuleTest, AChangeShorterThanTheConfirmationTimeIsNotReported) {
  ThroughputRule rule{ThroughputOptions()};
  double t = 0;
  // 50 s at +30%, well past 20 steps but short of a minute.
  EXPECT_TRUE(Feed(rule, 0, 2000, t, [](int64_t step) {
                return step >= 400 && step < 400 + 77 ? 0.65 : 0.5;
              }).empty());
}

TEST(ThroughputRuleTest, ASlowDriftIsADecay) {
  Noisy noisy(5, 0.01);
  ThroughputRule rule{ThroughputOptions()};
  double t = 0;
  // +0.05% a step from step 300: +10% after 200 steps, +25% after 500.
  std::vector<ThroughputFinding> found = Feed(rule, 0, 1200, t, [&](int64_t step) {
    return noisy(0.5 * (1.0 + 0.0005 * std::max<int64_t>(0, step - 300)));
  });
  ASSERT_FALSE(found.empty());
  EXPECT_TRUE(found[0].decay);
  EXPECT_GE(found[0].ratio, 1.1);
  EXPECT_GT(found[0].onset_step, 300);
}

TEST(ThroughputRuleTest, ASpeedupIsTakenWithoutAFindingAndBecomesTheReference) {
  ThroughputRule rule{ThroughputOptions()};
  double t = 0;
  EXPECT_TRUE(Feed(rule, 0, 1000, t, [](int64_t step) { return step < 400 ? 0.5 : 0.4; }).empty());
  EXPECT_NEAR(*rule.Ratio(), 0.8, 1e-9);
  // Back to the old pace is a slowdown against the new reference.
  std::vector<ThroughputFinding> found = Feed(rule, 1000, 1500, t, [](int64_t) { return 0.5; });
  ASSERT_EQ(found.size(), 1u);
  EXPECT_NEAR(found[0].before_s, 0.4, 1e-9);
}

TEST(ThroughputRuleTest, ANoisierSeriesMustMoveFurther) {
  // 12% noise: its CUSUM crosses now and then, but a move must be 5 x 0.12 /
  // sqrt(20) = 13.4%: nothing is found in noise alone, a 30% change is.
  for (auto [level, expect] : {std::pair<double, bool>{0.5, false}, {0.65, true}}) {
    Noisy noisy(6, 0.12);
    ThroughputRule rule{ThroughputOptions()};
    double t = 0;
    const bool found = !Feed(rule, 0, 10000, t, [&](int64_t step) {
                          return noisy(step < 500 ? 0.5 : level);
                        }).empty();
    EXPECT_EQ(found, expect) << level;
  }
}

TEST(ThroughputRuleTest, MovingSaysWhileAChangeBuilds) {
  ThroughputRule rule{ThroughputOptions()};
  double t = 0;
  Feed(rule, 0, 400, t, [](int64_t) { return 0.5; });
  EXPECT_EQ(rule.Moving(), 0);
  Feed(rule, 400, 420, t, [](int64_t) { return 0.7; });
  EXPECT_EQ(rule.Moving(), 1);
}

}  // namespace
}  // namespace trainsup
