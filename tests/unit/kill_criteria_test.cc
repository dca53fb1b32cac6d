// Kill criteria (KillCriteria): the loss above a limit, above a reference
// curve's band, loss shifts in a row. Negative controls first: a noisy
// healthy loss inside its band never fires, and a restart's steps (a new
// generation, steps without a loss) never do. The criteria take no time:
// they are judged on steps, which the tests feed in order.
#include "daemon/core/kill_criteria.h"

#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/healthy_loss.h"

namespace trainsup {
namespace {

constexpr int kWindow = 20;  // --loss-shift-window's default

using testing::HealthyLoss;

// The clean curve every 100 steps up to `last`: what an earlier good run left.
std::vector<CurvePoint> ReferenceCurve(int64_t last) {
  std::vector<CurvePoint> curve;
  for (int64_t s = 0; s <= last; s += 100) curve.push_back({s, HealthyLoss::Clean(s)});
  return curve;
}

// Feeds `loss(step)` for steps [from, to) of `generation`, checking after
// each; returns the first firing.
template <typename Fn>
std::optional<KillFiring> Feed(KillCriteria& k, uint64_t generation, int64_t from, int64_t to,
                               Fn loss) {
  for (int64_t step = from; step < to; ++step) {
    k.ObserveLoss(generation, step, loss(step));
    if (std::optional<KillFiring> f = k.Check()) return f;
  }
  return std::nullopt;
}

TEST(KillCriteriaTest, ANoisyHealthyLossInsideItsBandNeverFires) {
  KillCriteriaSpec spec;
  spec.curve = ReferenceCurve(5000);
  spec.band = 0.1;                 // 10 % above the curve
  spec.loss_above = 9.0;           // above the whole healthy curve ...
  spec.at_step = 0;
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    HealthyLoss run(seed);
    KillCriteria k(kWindow);
    k.SetScript(spec);
    EXPECT_EQ(Feed(k, 1, 0, 5000, [&](int64_t s) { return run.At(s); }), std::nullopt) << seed;
    for (const CriterionStatus& s : k.Status()) EXPECT_LT(s.ratio, 1.0) << seed;
  }
}

TEST(KillCriteriaTest, ARestartsStepsNeverFire) {
  KillCriteriaSpec spec;
  spec.loss_above = 3.0;
  KillCriteria k(kWindow);
  k.SetScript(spec);
  // Generation 1 runs well; generation 2 resumes at step 500 with a loss
  // above the limit for fewer steps than the window (a resume's bump).
  EXPECT_EQ(Feed(k, 1, 0, 500, [](int64_t) { return 2.0; }), std::nullopt);
  EXPECT_EQ(Feed(k, 2, 500, 500 + kWindow - 1, [](int64_t) { return 9.0; }), std::nullopt);
  // No new step (the restart's idle sweeps): nothing is judged again.
  for (int i = 0; i < 100; ++i) EXPECT_EQ(k.Check(), std::nullopt);
  // Generation 3 resumes at step 500 again: a bump shorter than half the
  // window, then the loss goes on below the limit: never.
  EXPECT_EQ(Feed(k, 3, 500, 1000, [](int64_t s) { return s < 500 + kWindow / 2 ? 9.0 : 2.0; }),
            std::nullopt);
  EXPECT_FALSE(k.fired());
}

TEST(KillCriteriaTest, LossAboveFiresOnTheSmoothedLossFromItsStep) {
  KillCriteriaSpec spec;
  spec.loss_above = 3.0;
  spec.at_step = 1000;
  KillCriteria k(kWindow);
  k.SetScript(spec);
  // Above the limit before step 1000: not judged.
  EXPECT_EQ(Feed(k, 1, 0, 1000, [](int64_t) { return 5.0; }), std::nullopt);
  // From step 1000 on, the window needs kWindow steps at or after it; the
  // loss is above the limit from 1000.
  std::optional<KillFiring> f = Feed(k, 1, 1000, 2000, [](int64_t) { return 3.5; });
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->kind, KillCriterionKind::kLossAbove);
  EXPECT_EQ(f->step, 1000 + kWindow - 1);
  EXPECT_EQ(f->onset_step, 1000);
  EXPECT_EQ(f->first_step, 1000);
  EXPECT_EQ(f->window, kWindow);
  EXPECT_DOUBLE_EQ(f->loss, 3.5);
  EXPECT_DOUBLE_EQ(f->limit, 3.0);
  EXPECT_TRUE(k.fired());
  // Once: no second firing until rearmed.
  EXPECT_EQ(Feed(k, 1, 2000, 2100, [](int64_t) { return 4.0; }), std::nullopt);
  k.Rearm();
  EXPECT_TRUE(Feed(k, 1, 2100, 2101, [](int64_t) { return 4.0; }).has_value());
}

TEST(KillCriteriaTest, OneSpikeOfTheWindowDoesNotMoveTheMedian) {
  KillCriteriaSpec spec;
  spec.loss_above = 3.0;
  KillCriteria k(kWindow);
  k.SetScript(spec);
  // Every 5th step at 100: the median stays at 2.
  EXPECT_EQ(Feed(k, 1, 0, 1000, [](int64_t s) { return s % 5 == 0 ? 100.0 : 2.0; }),
            std::nullopt);
}

TEST(KillCriteriaTest, ALossThatLeavesTheReferenceBandFiresWhereItBecameTrue) {
  KillCriteriaSpec spec;
  spec.curve = ReferenceCurve(3000);
  spec.band = 0.1;
  KillCriteria k(kWindow);
  k.SetScript(spec);
  HealthyLoss run(3);
  // From step 1500 the loss climbs 0.2 % a step above the clean curve: it
  // leaves the band (+10 %) at about step 1550.
  std::optional<KillFiring> f = Feed(k, 1, 0, 3000, [&](int64_t s) {
    const double rise = s < 1500 ? 1.0 : 1.0 + 0.002 * (s - 1500);
    return HealthyLoss::Clean(s) * rise;
  });
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->kind, KillCriterionKind::kReferenceCurve);
  EXPECT_EQ(f->onset_step, 1551);  // 1 + 0.002 x 51 > 1.1
  // The median of the window is above the band once half the window is.
  EXPECT_EQ(f->step, 1551 + kWindow / 2);
  EXPECT_GT(f->ratio, 1.0);
  EXPECT_NEAR(f->limit, HealthyLoss::Clean(f->step) * 1.1, 1e-2);
}

TEST(KillCriteriaTest, AnAbsoluteBandIsInLossUnitsAndStepsBeforeTheCurveAreNotJudged) {
  KillCriteriaSpec spec;
  spec.curve = {{100, 4.0}, {200, 2.0}};
  spec.band = 0.5;
  spec.band_absolute = true;
  KillCriteria k(kWindow);
  k.SetScript(spec);
  EXPECT_EQ(Feed(k, 1, 0, 100, [](int64_t) { return 50.0; }), std::nullopt);  // before it
  // At step 150 the curve says 3.0: 3.4 is inside 3.0 + 0.5; after 200 the
  // last point (2.0) holds: 2.6 is outside.
  EXPECT_EQ(Feed(k, 1, 100, 200, [](int64_t s) { return 4.0 - 0.02 * (s - 100) + 0.4; }),
            std::nullopt);
  std::optional<KillFiring> f = Feed(k, 1, 200, 400, [](int64_t) { return 2.6; });
  ASSERT_TRUE(f.has_value());
  EXPECT_DOUBLE_EQ(f->limit, 2.5);
}

TEST(KillCriteriaTest, LossShiftsInARowFireAndARecoveryStartsOver) {
  KillCriteriaSpec spec;  // spikes: 5 by default
  KillCriteria k(kWindow);
  k.SetScript(spec);
  int64_t step = 0;
  auto level = [&](double loss, int steps) {
    for (int i = 0; i < steps; ++i) k.ObserveLoss(1, step++, loss);
  };
  level(2.0, 200);
  // Four shifts up, then the loss comes back under the first's threshold.
  for (int i = 0; i < 4; ++i) {
    level(2.5 + i, 150);
    k.ObserveShift(step, step - 150, 2.5 + i, i == 0 ? 2.1 : 2.1 + i);
    EXPECT_EQ(k.Check(), std::nullopt);
  }
  ASSERT_EQ(k.Status().size(), 1u);
  EXPECT_EQ(k.Status()[0].spikes, 4u);
  EXPECT_DOUBLE_EQ(k.Status()[0].ratio, 0.8);
  level(2.0, kWindow);  // recovered
  EXPECT_EQ(k.Status()[0].spikes, 0u);
  // Five in a row with no recovery: fired, naming each shift.
  std::optional<KillFiring> f;
  for (int i = 0; i < 5 && !f; ++i) {
    level(2.5 + i, 150);
    k.ObserveShift(step, step - 150, 2.5 + i, 2.1 + i);
    f = k.Check();
  }
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->kind, KillCriterionKind::kLossSpikes);
  ASSERT_EQ(f->shifts.size(), 5u);
  EXPECT_EQ(f->onset_step, f->shifts.front().step);
  EXPECT_EQ(f->step, step);
}

TEST(KillCriteriaTest, TheOperatorsCriteriaAreInForceInsteadOfTheScripts) {
  KillCriteria k(kWindow);
  EXPECT_EQ(k.spec(), nullptr);
  EXPECT_EQ(k.source(), "");
  KillCriteriaSpec script;
  script.loss_above = 3.0;
  k.SetScript(script);
  EXPECT_EQ(k.source(), "script");
  KillCriteriaSpec op;
  op.loss_above = 10.0;
  op.observe_only = true;
  k.SetOperator(op);
  EXPECT_EQ(k.source(), "operator");
  EXPECT_EQ(Feed(k, 1, 0, 100, [](int64_t) { return 5.0; }), std::nullopt);
  k.SetOperator(std::nullopt);  // cleared: the script's again
  EXPECT_EQ(k.source(), "script");
  EXPECT_TRUE(Feed(k, 1, 100, 101, [](int64_t) { return 5.0; }).has_value());
}

TEST(KillCriteriaTest, StatusSaysHowCloseEachIs) {
  KillCriteriaSpec spec;
  spec.loss_above = 4.0;
  spec.curve = {{0, 2.0}};
  spec.band = 0.25;
  KillCriteria k(kWindow);
  k.SetScript(spec);
  std::vector<CriterionStatus> before = k.Status();
  ASSERT_EQ(before.size(), 3u);
  EXPECT_FALSE(before[0].judged);  // not enough steps yet
  EXPECT_EQ(Feed(k, 1, 0, kWindow, [](int64_t) { return 2.0; }), std::nullopt);
  std::vector<CriterionStatus> s = k.Status();
  EXPECT_EQ(s[0].kind, KillCriterionKind::kLossAbove);
  EXPECT_DOUBLE_EQ(s[0].ratio, 0.5);
  EXPECT_EQ(s[1].kind, KillCriterionKind::kReferenceCurve);
  EXPECT_DOUBLE_EQ(s[1].ratio, 0.8);  // 2.0 / (2.0 x 1.25)
  EXPECT_DOUBLE_EQ(s[1].limit, 2.5);
  EXPECT_EQ(s[2].kind, KillCriterionKind::kLossSpikes);
  EXPECT_DOUBLE_EQ(s[2].ratio, 0.0);
}

TEST(KillCriteriaTest, BadCriteriaAreRefused) {
  auto check = [](auto edit) {
    KillCriteriaSpec spec;
    edit(spec);
    return CheckKillCriteria(spec).ok();
  };
  EXPECT_TRUE(check([](KillCriteriaSpec&) {}));
  EXPECT_FALSE(check([](KillCriteriaSpec& s) { s.loss_above = NAN; }));
  EXPECT_FALSE(check([](KillCriteriaSpec& s) { s.at_step = -1; }));
  EXPECT_FALSE(check([](KillCriteriaSpec& s) { s.curve = {{10, 2.0}, {10, 1.0}}; }));
  EXPECT_FALSE(check([](KillCriteriaSpec& s) { s.curve = {{10, 0.0}}; }));  // relative
  EXPECT_TRUE(check([](KillCriteriaSpec& s) {
    s.curve = {{10, 0.0}};
    s.band_absolute = true;
  }));
  EXPECT_FALSE(check([](KillCriteriaSpec& s) { s.band = 0; }));
  EXPECT_FALSE(check([](KillCriteriaSpec& s) { s.band = INFINITY; }));
  EXPECT_FALSE(check([](KillCriteriaSpec& s) { s.curve.resize(kMaxCurvePoints + 1); }));
  EXPECT_FALSE(check([](KillCriteriaSpec& s) { s.spikes = kMaxSpikes + 1; }));
  EXPECT_FALSE(check([](KillCriteriaSpec& s) { s.total_steps = -1; }));
}

TEST(KillCriteriaTest, GpuSecondsSavedAreTheStepsLeftOnEveryRank) {
  EXPECT_DOUBLE_EQ(GpuSecondsSaved(10000, 2000, 0.5, 8), 8000 * 0.5 * 8);
  EXPECT_DOUBLE_EQ(GpuSecondsSaved(std::nullopt, 2000, 0.5, 8), 0);
  EXPECT_DOUBLE_EQ(GpuSecondsSaved(1000, 2000, 0.5, 8), 0);  // past the total
}

}  // namespace
}  // namespace trainsup
