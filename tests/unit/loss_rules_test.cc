// The loss rules: a level shift (LossShiftRule) and a loss flat from the
// start (LossFlatRule). Negative controls first: a noisy healthy curve with
// short spikes must never raise either.
#include <algorithm>
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
  EXPECT_NEAR(found[0].baseline_level, 2.0, 0.01);
  EXPECT_NEAR(found[0].baseline_slope, 0.0, 0.001);
  EXPECT_NEAR(found[0].threshold,
              found[0].baseline_level + std::max(0.05, 6 * found[0].baseline_sigma), 1e-9);
  EXPECT_GT(found[0].recent_min, found[0].threshold);
  EXPECT_TRUE(rule.shifted());
}

// A sweep asks after several steps at once (a 250 ms sweep, steps of 50
// ms). A 5-step spike whose loss stays high after it (tests/e2e's
// --bad-batches) fills the window at step 109 and from about step 113 is in
// the baseline's last part, raising the level it is judged against: judged
// only when asked, the four steps between were missed 2 runs in 3 (issue 28
// CI run). Judged at each step, it is found whatever the asking.
TEST(LossShiftRuleTest, AShiftIsFoundThoughAskedOnlyEveryFiveSteps) {
  LossShiftOptions options;
  options.window = 10;
  options.baseline = 30;
  auto loss = [](int64_t step) {
    if (step < 100) return 3.0 - 0.02 * static_cast<double>(step) + 0.1 * ((step % 3) - 1);
    if (step < 105) return 300000.0;
    return 2000.0 - 10.0 * static_cast<double>(step - 105);
  };
  for (int64_t offset = 0; offset < 5; ++offset) {
    LossShiftRule rule{options};
    std::vector<LossShiftFinding> found;
    for (int64_t step = 0; step < 160; ++step) {
      rule.Observe(step, loss(step));
      if ((step + offset) % 5 != 0) continue;
      if (std::optional<LossShiftFinding> f = rule.Check()) found.push_back(*f);
    }
    ASSERT_EQ(found.size(), 1u) << "asked at steps = " << offset << " mod 5";
    EXPECT_EQ(found[0].onset_step, 100);
    EXPECT_EQ(found[0].step, 109);  // when it was judged, not when asked
  }
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

// ---- A shift while the loss still falls (issue 28, section 2) ----

// Seeded normal noise: `Relative(f)` is 1 + f x N(0, 1).
class Noise {
 public:
  explicit Noise(uint32_t seed) : rng_(seed) {}
  double Relative(double fraction) { return 1.0 + fraction * gauss_(rng_); }

 private:
  std::mt19937 rng_;
  std::normal_distribution<double> gauss_{0.0, 1.0};
};

// Early training: 1 + 5 exp(-step / 50), with 3 % noise (seeded). Over
// steps 32..159 its median is 1.74 and its MAD 0.42: judged against the
// whole early window, a loss tripled from step 160 stayed under a
// threshold of 5.5.
class EarlyFall {
 public:
  explicit EarlyFall(uint32_t seed, double noise = 0.03, double tau = 50)
      : rng_(seed), noise_(noise), tau_(tau) {}
  double At(int64_t step) {
    return (1.0 + 5.0 * std::exp(-static_cast<double>(step) / tau_)) * rng_.Relative(noise_);
  }

 private:
  Noise rng_;
  double noise_;
  double tau_;
};

TEST(LossShiftRuleTest, ALevelShiftWhileTheLossStillFallsIsFound) {
  for (double factor : {3.0, 2.0}) {
    for (uint32_t seed = 1; seed <= 20; ++seed) {
      EarlyFall curve(seed);
      LossShiftRule rule{LossShiftOptions()};
      std::vector<LossShiftFinding> found = Feed(rule, 0, 220, [&](int64_t step) {
        const double loss = curve.At(step);
        return step >= 160 ? factor * loss : loss;
      });
      ASSERT_EQ(found.size(), 1u) << "x" << factor << " seed " << seed;
      const LossShiftFinding& f = found[0];
      EXPECT_EQ(f.onset_step, 160) << seed;
      EXPECT_EQ(f.step, 179) << seed;  // as soon as the window is all above
      // Against where the fall had got to (1.2 at step 159), still falling.
      EXPECT_NEAR(f.baseline_level, 1.21, 0.05) << seed;
      EXPECT_LT(f.baseline_slope, -0.004) << seed;
      EXPECT_LT(f.threshold, 1.8) << seed;  // the whole early window said 5.5
    }
  }
}

TEST(LossShiftRuleTest, NegativeControlAHealthyFallFastOrSlowRaisesNothing) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    EarlyFall fall(seed);
    LossShiftRule rule{LossShiftOptions()};
    EXPECT_TRUE(Feed(rule, 0, 1000, [&](int64_t s) { return fall.At(s); }).empty()) << seed;
    EarlyFall steep(seed, 0.05, 10);  // from 6 to 1 in 50 steps
    LossShiftRule other{LossShiftOptions()};
    EXPECT_TRUE(Feed(other, 0, 500, [&](int64_t s) { return steep.At(s); }).empty()) << seed;
  }
  // Noise-free: the floor decides.
  LossShiftRule clean{LossShiftOptions()};
  EXPECT_TRUE(Feed(clean, 0, 1000, [](int64_t s) {
                return 1.0 + 5.0 * std::exp(-static_cast<double>(s) / 50);
              }).empty());
}

TEST(LossShiftRuleTest, NegativeControlAWarmUpRaisesNothing) {
  // The learning rate rises linearly over 300 steps: the loss stays near
  // its start (10.8, ln of a 50k vocabulary), then falls ever faster, then
  // slows.
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    Noise noise(seed);
    LossShiftRule rule{LossShiftOptions()};
    double progress = 0;
    EXPECT_TRUE(Feed(rule, 0, 1500, [&](int64_t step) {
                  progress += std::min(1.0, static_cast<double>(step) / 300);
                  return (3.0 + 7.8 * std::exp(-progress / 60)) * noise.Relative(0.02);
                }).empty())
        << seed;
  }
}

TEST(LossShiftRuleTest, NegativeControlASchedulesDecayRaisesNothing) {
  constexpr int64_t kSteps = 3000;
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    Noise noise(seed);
    // Cosine decay to 0: the loss falls further as the rate goes down.
    LossShiftRule cosine{LossShiftOptions()};
    EXPECT_TRUE(Feed(cosine, 0, kSteps, [&](int64_t step) {
                  const double t = static_cast<double>(step);
                  const double lr = 0.5 * (1 + std::cos(M_PI * t / kSteps));
                  return (2 + 3 * std::exp(-t / 300) - 0.4 * (1 - lr)) * noise.Relative(0.02);
                }).empty())
        << seed;
    // Step decay (x0.1 at 1000 and 2000): a drop, then a loss that levels off.
    LossShiftRule steps{LossShiftOptions()};
    EXPECT_TRUE(Feed(steps, 0, kSteps, [&](int64_t step) {
                  const double t = static_cast<double>(step);
                  double loss = 2 + 3 * std::exp(-t / 300);
                  if (t >= 1000) loss -= 0.3 * (1 - std::exp(-(t - 1000) / 10));
                  if (t >= 2000) loss -= 0.15 * (1 - std::exp(-(t - 2000) / 10));
                  return loss * noise.Relative(0.02);
                }).empty())
        << seed;
  }
}

TEST(LossShiftRuleTest, NegativeControlASmoothedLossThatWandersRaisesNothing) {
  // A script that reports an exponential moving average of a noisy loss:
  // its level wanders for tens of steps at a time.
  for (double alpha : {0.02, 0.05, 0.1}) {
    for (uint32_t seed = 1; seed <= 20; ++seed) {
      Noise noise(seed);
      LossShiftRule rule{LossShiftOptions()};
      double smoothed = 0;
      EXPECT_TRUE(Feed(rule, 0, 3000, [&](int64_t step) {
                    const double t = static_cast<double>(step);
                    const double raw = (2 + 3 * std::exp(-t / 300)) * noise.Relative(0.1);
                    smoothed = step == 0 ? raw : (1 - alpha) * smoothed + alpha * raw;
                    return smoothed;
                  }).empty())
          << "alpha " << alpha << " seed " << seed;
    }
  }
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
