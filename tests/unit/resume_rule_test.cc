// Resume verification (ResumeRule): a generation's first steps against the
// same steps of the generation before and the last checkpoint seen
// complete. Negative controls first: a fresh start, a correct resume and a
// noisy healthy loss must never raise anything.
#include "daemon/core/signals/resume_rule.h"

#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <random>

#include "gtest/gtest.h"

namespace trainsup {
namespace {

// A healthy run's step: a pretraining loss curve with `noise` (relative),
// a learning rate decaying per step, 8 ranks x 8 samples, tokens that vary
// with the batch (the same at the same step).
StepSummary Healthy(int64_t step, std::mt19937& rng, double noise = 0.03) {
  std::normal_distribution<double> n(0.0, 1.0);
  StepSummary s;
  s.step = step;
  s.loss = (2.0 + 6.0 * std::exp(-static_cast<double>(step) / 400.0)) * (1 + noise * n(rng));
  s.learning_rate = 3e-4 * std::pow(0.999, static_cast<double>(step));
  s.samples = 64;
  s.tokens = 64 * 2048 - static_cast<uint64_t>((step * 7919) % 1000);
  s.ranks = 8;
  return s;
}

// Generation 1 did [0, failed_at]; generation 2 runs from `first` on
// (`tweak` changes its steps) with the last checkpoint at `checkpoint`.
// Returns what the rule found over `steps` steps of generation 2; the step
// after which it first found something is `found_at`.
struct Resume {
  int64_t failed_at = 999;
  int64_t checkpoint = 799;
  int64_t first = 800;
  int steps = 30;
  uint32_t seed = 1;
  double noise = 0.03;
  ResumeOptions options;
  std::function<void(StepSummary&)> tweak;
  mutable std::optional<int64_t> found_at;

  ResumeFindings Run() const {
    found_at.reset();
    std::mt19937 rng(seed);
    GenerationRecord before(1);
    for (int64_t step = 0; step <= failed_at; ++step) before.Add(Healthy(step, rng, noise));
    ResumeRule rule(options, 2, &before, checkpoint);
    ResumeFindings all;
    for (int64_t step = first; step < first + steps; ++step) {
      StepSummary s = Healthy(step, rng, noise);
      if (tweak) tweak(s);
      rule.Observe(s);
      ResumeFindings f = rule.Take();
      if (f.any() && !found_at) found_at = step;
      if (f.behind) all.behind = f.behind;
      if (f.lr) all.lr = f.lr;
      if (f.data) all.data = f.data;
      if (f.spike) all.spike = f.spike;
    }
    return all;
  }
};

// ---- Negative controls ----

TEST(ResumeRuleTest, AFreshStartRaisesNothing) {
  std::mt19937 rng(1);
  GenerationRecord none;
  ResumeRule rule(ResumeOptions(), 1, &none, -1);
  for (int64_t step = 0; step < 100; ++step) rule.Observe(Healthy(step, rng));
  EXPECT_FALSE(rule.Take().any());
  EXPECT_TRUE(rule.done());
}

TEST(ResumeRuleTest, ACorrectResumeWithANoisyLossRaisesNothing) {
  // The loss at a repeated step is another noisy sample (dropout, a
  // non-deterministic reduction): 100 seeds, 3% and 10% noise.
  for (double noise : {0.03, 0.10}) {
    for (uint32_t seed = 1; seed <= 100; ++seed) {
      Resume r;
      r.seed = seed;
      r.noise = noise;
      EXPECT_FALSE(r.Run().any()) << "seed " << seed << " noise " << noise;
    }
  }
}

TEST(ResumeRuleTest, OneNoisyStepAtTheResumeIsNotASpike) {
  Resume r;
  r.tweak = [](StepSummary& s) {
    if (s.step == 801) *s.loss *= 1.8;
  };
  EXPECT_FALSE(r.Run().any());
}

TEST(ResumeRuleTest, AResumeFromTheLastCheckpointAfterTheLastStepRaisesNothing) {
  // Checkpointed at the last step: no step is done twice, nothing to compare.
  Resume r;
  r.checkpoint = 999;
  r.first = 1000;
  r.tweak = [](StepSummary& s) { *s.loss += 3; };
  EXPECT_FALSE(r.Run().any());
}

// ---- Resumed behind the last checkpoint ----

TEST(ResumeRuleTest, AResumeBeforeTheLastCheckpointIsBehindAndCountsTheRepeatedSteps) {
  Resume r;
  r.first = 600;  // loaded the checkpoint of step 599, not 799's
  const ResumeFindings f = r.Run();
  EXPECT_EQ(r.found_at, 600);  // found at the generation's first step
  ASSERT_TRUE(f.behind);
  EXPECT_EQ(f.behind->first_step, 600);
  EXPECT_EQ(f.behind->resumed_step, 599);
  EXPECT_EQ(f.behind->checkpoint_step, 799);
  EXPECT_EQ(f.behind->repeated_steps, 200);
  EXPECT_FALSE(f.lr || f.data || f.spike);  // the same steps, correctly restored
}

TEST(ResumeRuleTest, AStartFromStepZeroWithACheckpointOnRecordIsBehind) {
  Resume r;
  r.failed_at = 150;
  r.checkpoint = 99;
  r.first = 0;
  const ResumeFindings f = r.Run();
  ASSERT_TRUE(f.behind);
  EXPECT_EQ(f.behind->resumed_step, -1);
  EXPECT_EQ(f.behind->repeated_steps, 100);
}

TEST(ResumeRuleTest, BehindIsSwitchable) {
  Resume r;
  r.first = 600;
  r.options.behind = false;
  EXPECT_FALSE(r.Run().any());
}

// ---- Learning rate ----

TEST(ResumeRuleTest, ASchedulerThatStartedOverIsAnLrMismatch) {
  Resume r;
  r.tweak = [](StepSummary& s) { s.learning_rate = 3e-4 * std::pow(0.999, s.step - 800.0); };
  const ResumeFindings f = r.Run();
  ASSERT_TRUE(f.lr);
  EXPECT_EQ(r.found_at, 807);  // judged at the generation's 8th step
  EXPECT_EQ(f.lr->judged_step, 807);
  EXPECT_EQ(f.lr->step, 800);
  EXPECT_DOUBLE_EQ(f.lr->lr_after, 3e-4);
  EXPECT_NEAR(f.lr->lr_before, 3e-4 * std::pow(0.999, 800), 1e-12);
  EXPECT_NEAR(f.lr->relative, 1 / std::pow(0.999, 800) - 1, 1e-6);
  EXPECT_EQ(f.lr->compared, 8u);
  EXPECT_EQ(f.lr->differing, 8u);
  EXPECT_FALSE(f.behind || f.data || f.spike);
}

TEST(ResumeRuleTest, AnLrWithinTheToleranceOrOnOneStepOnlyIsNoMismatch) {
  Resume r;
  r.tweak = [](StepSummary& s) {
    *s.learning_rate *= 1.0005;  // within 1e-3
    if (s.step == 803) *s.learning_rate *= 2;
  };
  EXPECT_FALSE(r.Run().lr);
  r.options.lr_tolerance = 1e-4;
  EXPECT_TRUE(r.Run().lr);
  r.options.lr = false;
  EXPECT_FALSE(r.Run().lr);
}

// ---- Data position ----

TEST(ResumeRuleTest, OtherTokensAtTheSameStepsAreADataPositionMismatch) {
  // The loader started its epoch over: other batches, other token counts.
  Resume r;
  r.tweak = [](StepSummary& s) { s.tokens = 64 * 2048 - static_cast<uint64_t>((s.step * 31) % 997); };
  const ResumeFindings f = r.Run();
  ASSERT_TRUE(f.data);
  EXPECT_EQ(f.data->step, 800);
  EXPECT_EQ(f.data->samples_before, 64u);
  EXPECT_EQ(f.data->samples_after, 64u);
  EXPECT_NE(f.data->tokens_before, f.data->tokens_after);
  EXPECT_EQ(f.data->compared, 8u);
  EXPECT_FALSE(f.lr || f.spike);
}

TEST(ResumeRuleTest, ASmallerGlobalBatchIsADataPositionMismatch) {
  Resume r;
  r.tweak = [](StepSummary& s) { s.samples = 32; };
  const ResumeFindings f = r.Run();
  ASSERT_TRUE(f.data);
  EXPECT_EQ(f.data->samples_after, 32u);
}

TEST(ResumeRuleTest, StepsSummedOverFewerRanksAreNotCompared) {
  // A step handed over without some rank's STEP sums fewer ranks' counts.
  Resume r;
  r.tweak = [](StepSummary& s) {
    s.ranks = 7;
    s.samples = 56;
  };
  EXPECT_FALSE(r.Run().any());
}

TEST(ResumeRuleTest, CountsNotSentAreNotCompared) {
  Resume r;
  r.tweak = [](StepSummary& s) { s.samples = s.tokens = 0; };
  EXPECT_FALSE(r.Run().any());
}

// ---- Loss spike at the resume ----

TEST(ResumeRuleTest, ALossFarAboveTheSameStepsBeforeIsAResumeSpike) {
  // The optimizer state did not load: the loss jumps from the second step
  // (the first one's loss is the restored model's) and comes down slowly.
  Resume r;
  r.tweak = [](StepSummary& s) {
    if (s.step > 800) *s.loss += 1.5 * std::exp(-(s.step - 801) / 20.0);
  };
  const ResumeFindings f = r.Run();
  ASSERT_TRUE(f.spike);
  EXPECT_EQ(r.found_at, 807);
  EXPECT_EQ(f.spike->generation, 2u);
  EXPECT_EQ(f.spike->resumed_step, 799);
  EXPECT_EQ(f.spike->first_step, 800);
  EXPECT_EQ(f.spike->step, 807);
  EXPECT_GE(f.spike->peak_step, 801);  // the noise decides which of the first
  EXPECT_LE(f.spike->peak_step, 804);
  EXPECT_GE(f.spike->peak_excess, f.spike->excess);
  EXPECT_EQ(f.spike->compared, 8u);
  EXPECT_NEAR(f.spike->excess, 1.5 * std::exp(-3.5 / 20.0), 0.2);
  EXPECT_GT(f.spike->excess, f.spike->threshold);
  EXPECT_GT(f.spike->sigma, 0);
  EXPECT_NEAR(f.spike->loss_before, 2.0 + 6.0 * std::exp(-803.5 / 400.0), 0.15);
  EXPECT_FALSE(f.behind || f.lr || f.data);
}

TEST(ResumeRuleTest, ARiseBelowTheFloorOrTheNoiseIsNoSpike) {
  Resume r;
  r.tweak = [](StepSummary& s) { *s.loss += 0.04; };  // under the 0.05 floor, over sigma
  r.noise = 0.001;
  EXPECT_FALSE(r.Run().spike);
  r.options.spike_floor = 0.01;
  EXPECT_TRUE(r.Run().spike);
  r.options.spike = false;
  EXPECT_FALSE(r.Run().spike);
}

TEST(ResumeRuleTest, FewerThanThreeStepsDoneTwiceAreNotJudgedForASpike) {
  Resume r;
  r.checkpoint = 997;
  r.first = 998;
  r.tweak = [](StepSummary& s) { *s.loss += 3; };
  EXPECT_FALSE(r.Run().spike);
  r.first = 997;  // three: 997, 998, 999
  r.checkpoint = 996;
  EXPECT_TRUE(r.Run().spike);
}

TEST(ResumeRuleTest, JudgedEarlyWhenTheStepsDoneBeforeRunOut) {
  // The generation before reached step 803 only: judged at 803, with 4.
  Resume r;
  r.failed_at = 803;
  r.checkpoint = 799;
  r.tweak = [](StepSummary& s) { s.learning_rate = 1e-3; };
  const ResumeFindings f = r.Run();
  ASSERT_TRUE(f.lr);
  EXPECT_EQ(r.found_at, 803);
  EXPECT_EQ(f.lr->compared, 4u);
}

}  // namespace
}  // namespace trainsup
