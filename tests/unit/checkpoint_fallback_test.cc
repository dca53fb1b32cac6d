#include "daemon/core/checkpoint_fallback.h"

#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace trainsup {
namespace {

using Kind = FallbackDecision::Kind;

// A generation that resumed from `checkpoint` (its first step the next) and
// reported up to `last`.
void RunGeneration(CheckpointFallback& f, uint64_t generation, int64_t checkpoint, int64_t last) {
  for (int64_t step = checkpoint + 1; step <= last; ++step) f.OnStep(generation, step);
}

class CheckpointFallbackTest : public ::testing::Test {
 protected:
  CheckpointFallbackTest() {
    // Generation 1 trains from scratch and saves at 9, 19, 29, 39.
    RunGeneration(f_, 1, -1, 45);
    for (int64_t s : {9, 19, 29, 39}) f_.OnCheckpoint(1, s);
  }
  CheckpointFallback f_;
  FallbackOptions options_;
};

TEST_F(CheckpointFallbackTest, TwoLoadsInARowOfTheSameCheckpointFallBackToTheOneBefore) {
  // Megatron-LM#5281: NaN three steps after every load of 39.
  RunGeneration(f_, 2, 39, 42);
  FallbackDecision first = f_.OnLoadFailure(2, 42, LoadFailureKind::kNonFinite, options_);
  EXPECT_EQ(first.kind, Kind::kRetry);
  EXPECT_EQ(first.checkpoint, 39);
  EXPECT_TRUE(f_.advice().empty());

  RunGeneration(f_, 3, 39, 42);
  FallbackDecision second = f_.OnLoadFailure(3, 42, LoadFailureKind::kNonFinite, options_);
  EXPECT_EQ(second.kind, Kind::kFallBack);
  EXPECT_EQ(second.checkpoint, 39);
  EXPECT_EQ(second.advice.limit, 38);
  EXPECT_EQ(second.resume_at, 29);
  EXPECT_EQ(second.rollbacks, 1);
  EXPECT_EQ(f_.advice().limit, 38);
  EXPECT_EQ(f_.state().suspects, std::vector<int64_t>{39});
  EXPECT_NE(second.reason.find("checkpoint step 39"), std::string::npos) << second.reason;

  // Generation 4 loads 29 and trains past 39: a new checkpoint there lifts
  // the limit; the next generation resumes as it likes.
  RunGeneration(f_, 4, 29, 50);
  EXPECT_FALSE(f_.OnCheckpoint(4, 29 + 0));  // seen before: nothing new
  EXPECT_EQ(f_.advice().limit, 38);
  EXPECT_TRUE(f_.OnCheckpoint(4, 39));
  EXPECT_TRUE(f_.advice().empty());
}

TEST_F(CheckpointFallbackTest, PastTheCapTheJobIsHeldNamingTheCheckpoint) {
  options_.max_rollbacks = 1;
  RunGeneration(f_, 2, 39, 42);
  f_.OnLoadFailure(2, 42, LoadFailureKind::kNonFinite, options_);
  RunGeneration(f_, 3, 39, 42);
  EXPECT_EQ(f_.OnLoadFailure(3, 42, LoadFailureKind::kNonFinite, options_).kind, Kind::kFallBack);
  // 29 is bad too.
  RunGeneration(f_, 4, 29, 31);
  EXPECT_EQ(f_.OnLoadFailure(4, 31, LoadFailureKind::kResumeSpike, options_).kind, Kind::kRetry);
  RunGeneration(f_, 5, 29, 31);
  FallbackDecision held = f_.OnLoadFailure(5, 31, LoadFailureKind::kResumeSpike, options_);
  EXPECT_EQ(held.kind, Kind::kHold);
  EXPECT_EQ(held.checkpoint, 29);
  EXPECT_NE(held.reason.find("checkpoint step 29"), std::string::npos) << held.reason;
  EXPECT_NE(held.reason.find("resume spike"), std::string::npos) << held.reason;
  EXPECT_EQ(f_.state().suspects, (std::vector<int64_t>{39, 29}));
}

TEST_F(CheckpointFallbackTest, NegativeControls) {
  // A fresh start is no checkpoint's.
  CheckpointFallback fresh;
  RunGeneration(fresh, 1, -1, 3);
  EXPECT_EQ(fresh.OnLoadFailure(1, 3, LoadFailureKind::kNonFinite, options_).kind, Kind::kNone);
  // A failure long after the load is not the checkpoint's.
  RunGeneration(f_, 2, 39, 80);
  EXPECT_EQ(f_.OnLoadFailure(2, 80, LoadFailureKind::kNonFinite, options_).kind, Kind::kNone);
  // Failures after loading different checkpoints, or not in a row.
  RunGeneration(f_, 3, 39, 41);
  EXPECT_EQ(f_.OnLoadFailure(3, 41, LoadFailureKind::kNonFinite, options_).kind, Kind::kRetry);
  RunGeneration(f_, 4, 29, 31);
  EXPECT_EQ(f_.OnLoadFailure(4, 31, LoadFailureKind::kNonFinite, options_).kind, Kind::kRetry);
  RunGeneration(f_, 5, 29, 60);  // a generation that failed otherwise
  RunGeneration(f_, 6, 29, 31);
  EXPECT_EQ(f_.OnLoadFailure(6, 31, LoadFailureKind::kNonFinite, options_).kind, Kind::kRetry);
  EXPECT_TRUE(f_.advice().empty());
  EXPECT_TRUE(f_.state().suspects.empty());
  // A failure of a generation whose first step was never seen.
  EXPECT_EQ(f_.OnLoadFailure(7, 31, LoadFailureKind::kNonFinite, options_).kind, Kind::kNone);
}

TEST_F(CheckpointFallbackTest, SpikeRollsBackBeforeItsOnsetAndSkipsItsBatches) {
  options_.spike_skip_steps = 5;
  RunGeneration(f_, 2, 39, 70);
  f_.OnCheckpoint(2, 49);
  FallbackDecision d = f_.OnLossSpike(2, /*onset_step=*/52, /*step=*/60, options_);
  EXPECT_EQ(d.kind, Kind::kRollBack);
  EXPECT_EQ(d.checkpoint, 49);
  EXPECT_EQ(d.advice.limit, 51);
  EXPECT_EQ(d.advice.skip_first, 50);  // not before the checkpoint
  EXPECT_EQ(d.advice.skip_last, 60);
  EXPECT_EQ(f_.advice(), d.advice);

  // Checkpoints of the spiking generation itself lift nothing.
  f_.OnCheckpoint(2, 59);
  EXPECT_EQ(f_.advice(), d.advice);
  // The next generation saves inside the skipped range: the limit is
  // lifted, the range still skipped; past it, both.
  RunGeneration(f_, 3, 49, 75);
  f_.OnCheckpoint(3, 54);
  EXPECT_FALSE(f_.advice().limit);
  EXPECT_EQ(f_.advice().skip_first, 50);
  f_.OnCheckpoint(3, 69);
  EXPECT_TRUE(f_.advice().empty());
  EXPECT_EQ(f_.state().spike_rollbacks, 0);
}

TEST_F(CheckpointFallbackTest, SpikesInARowHoldTheJob) {
  options_.max_spike_rollbacks = 2;
  options_.spike_skip_steps = 100;
  EXPECT_EQ(f_.OnLossSpike(1, 42, 44, options_).kind, Kind::kRollBack);
  EXPECT_EQ(f_.advice().skip_first, 40);
  RunGeneration(f_, 2, 39, 50);
  EXPECT_EQ(f_.OnLossSpike(2, 48, 50, options_).kind, Kind::kRollBack);
  RunGeneration(f_, 3, 39, 60);
  FallbackDecision held = f_.OnLossSpike(3, 55, 58, options_);
  EXPECT_EQ(held.kind, Kind::kHold);
  EXPECT_NE(held.reason.find("2 spike rollback(s) in a row"), std::string::npos) << held.reason;
  // No checkpoint before the onset: reported only.
  CheckpointFallback none;
  RunGeneration(none, 1, -1, 30);
  EXPECT_EQ(none.OnLossSpike(1, 20, 30, options_).kind, Kind::kNone);
}

TEST_F(CheckpointFallbackTest, KeepsTheNewestCheckpointsOnly) {
  for (int64_t s = 100; s < 100 + 2 * static_cast<int64_t>(CheckpointFallback::kMaxCheckpoints);
       ++s) {
    f_.OnCheckpoint(1, s);
  }
  EXPECT_EQ(f_.state().checkpoints.size(), CheckpointFallback::kMaxCheckpoints);
  EXPECT_EQ(f_.state().checkpoints.front(),
            100 + static_cast<int64_t>(CheckpointFallback::kMaxCheckpoints));
}

TEST_F(CheckpointFallbackTest, RestoredStateGoesOn) {
  RunGeneration(f_, 2, 39, 42);
  f_.OnLoadFailure(2, 42, LoadFailureKind::kNonFinite, options_);
  CheckpointFallback restored;
  restored.Restore(f_.state());
  RunGeneration(restored, 3, 39, 42);
  EXPECT_EQ(restored.OnLoadFailure(3, 42, LoadFailureKind::kNonFinite, options_).kind,
            Kind::kFallBack);
}


// ---- A generation stopped for a non-finite loss (issue 28, section 2) ----

TEST(CheckpointFallbackCutTest, ACheckpointCommittedAfterTheFirstNaNIsSuspectFromTheStart) {
  // Generation 1: a NaN at step 60, checkpoints every 20 steps; 79 is
  // written in the second between the NaN and the stop, with NaN weights.
  CheckpointFallback f;
  RunGeneration(f, 1, -1, 85);
  for (int64_t s : {19, 39, 59, 79}) f.OnCheckpoint(1, s);
  FallbackDecision cut = f.OnNonFinite(1, 60);
  EXPECT_EQ(cut.kind, Kind::kCut);
  EXPECT_EQ(cut.non_finite_step, 60);
  EXPECT_EQ(cut.poisoned, std::vector<int64_t>{79});
  EXPECT_EQ(cut.checkpoint, 79);
  EXPECT_EQ(cut.advice.limit, 59);
  EXPECT_EQ(cut.resume_at, 59);
  EXPECT_EQ(cut.rollbacks, 0);  // nothing failed after a load: no fallback counted
  EXPECT_EQ(f.advice().limit, 59);
  EXPECT_EQ(f.state().suspects, std::vector<int64_t>{79});
  EXPECT_NE(cut.reason.find("checkpoint step 79 was committed after it"), std::string::npos)
      << cut.reason;
  EXPECT_NE(cut.reason.find("at or below step 59 (step 59)"), std::string::npos) << cut.reason;

  // 99 ends while generation 1 stops: suspect too, and it lifts nothing.
  EXPECT_TRUE(f.OnCheckpoint(1, 99));
  EXPECT_EQ(f.state().suspects, (std::vector<int64_t>{79, 99}));
  EXPECT_EQ(f.advice().limit, 59);

  // Generation 2 loads 59 and trains past it: 79 saved anew lifts the limit.
  RunGeneration(f, 2, 59, 80);
  EXPECT_EQ(f.advice().limit, 59);
  EXPECT_TRUE(f.OnCheckpoint(2, 79));
  EXPECT_TRUE(f.advice().empty());
  EXPECT_EQ(f.state().suspects, (std::vector<int64_t>{79, 99}));  // the record stays
}

TEST(CheckpointFallbackCutTest, WithNothingCommittedAfterItTheLimitStillGuardsTheStop) {
  // The stop came before the next checkpoint: none is named, but one that
  // completes later (a slow rank's CHECKPOINT_END) is excluded all the same.
  CheckpointFallback f;
  RunGeneration(f, 1, -1, 62);
  for (int64_t s : {19, 39, 59}) f.OnCheckpoint(1, s);
  FallbackDecision cut = f.OnNonFinite(1, 61);
  EXPECT_EQ(cut.kind, Kind::kCut);
  EXPECT_TRUE(cut.poisoned.empty());
  EXPECT_EQ(cut.checkpoint, -1);
  EXPECT_EQ(cut.advice.limit, 60);
  EXPECT_EQ(cut.resume_at, 59);
  EXPECT_NE(cut.reason.find("a checkpoint committed from that step on may hold it"),
            std::string::npos)
      << cut.reason;
  // A checkpoint at step 0: the limit is below every step, a fresh start.
  CheckpointFallback early;
  RunGeneration(early, 1, -1, 2);
  FallbackDecision at_zero = early.OnNonFinite(1, 0);
  EXPECT_EQ(at_zero.advice.limit, -1);
  EXPECT_EQ(at_zero.resume_at, std::nullopt);
}

TEST(CheckpointFallbackCutTest, KeepsAStricterLimitAndOnlyCutsTheCurrentGeneration) {
  CheckpointFallback f;
  RunGeneration(f, 1, -1, 45);
  for (int64_t s : {9, 19, 29, 39}) f.OnCheckpoint(1, s);
  FallbackOptions options;
  RunGeneration(f, 2, 39, 42);
  f.OnLoadFailure(2, 42, LoadFailureKind::kCrash, options);
  RunGeneration(f, 3, 39, 42);
  ASSERT_EQ(f.OnLoadFailure(3, 42, LoadFailureKind::kNonFinite, options).kind, Kind::kFallBack);
  EXPECT_EQ(f.OnNonFinite(3, 42).advice.limit, 38);  // the fallback's, below the NaN's
  EXPECT_EQ(f.advice().limit, 38);
  // Not the current generation: nothing.
  EXPECT_EQ(f.OnNonFinite(2, 42).kind, Kind::kNone);
  EXPECT_EQ(f.OnNonFinite(9, 42).kind, Kind::kNone);
}

TEST(CheckpointFallbackCutTest, ARestoredStateKeepsTheLimit) {
  CheckpointFallback f;
  RunGeneration(f, 1, -1, 85);
  for (int64_t s : {19, 39, 59, 79}) f.OnCheckpoint(1, s);
  f.OnNonFinite(1, 60);
  CheckpointFallback restored;
  restored.Restore(f.state());
  EXPECT_EQ(restored.advice().limit, 59);
  EXPECT_EQ(restored.state().suspects, std::vector<int64_t>{79});
}

// The next generation saves past the limit within a sweep of its first step
// (checkpoints every 5 steps): the advice lifts, and what it was told stays.
TEST(CheckpointFallbackCutTest, TheLimitAGenerationStartedUnderOutlivesTheAdviceLifting) {
  CheckpointFallback f;
  RunGeneration(f, 1, -1, 90);
  for (int64_t s : {54, 59, 64, 69}) f.OnCheckpoint(1, s);
  f.OnNonFinite(1, 60);
  EXPECT_EQ(f.limit_at_start(), std::nullopt);  // generation 1 was told nothing
  RunGeneration(f, 2, 59, 65);
  f.OnCheckpoint(2, 64);
  EXPECT_EQ(f.advice().limit, std::nullopt);  // lifted: saved past it
  EXPECT_EQ(f.limit_at_start(), 59);
  EXPECT_EQ(f.NewestAtOrBelow(*f.limit_at_start()), 59);
  RunGeneration(f, 3, 64, 66);  // told nothing more
  EXPECT_EQ(f.limit_at_start(), std::nullopt);
}

// ---- A failure soon after a load, whatever its form (issue 28, section 2) ----

TEST_F(CheckpointFallbackTest, ACrashSoonAfterALoadCountsAsANonFiniteLossDoes) {
  // Megatron-LM's check: the rank reports the NaN and raises. Which of the
  // two the supervisor hears first varies; both count toward the checkpoint.
  const LoadFailureKind orders[][2] = {
      {LoadFailureKind::kCrash, LoadFailureKind::kCrash},
      {LoadFailureKind::kNonFinite, LoadFailureKind::kCrash},
      {LoadFailureKind::kCrash, LoadFailureKind::kNonFinite},
  };
  for (const auto& order : orders) {
    CheckpointFallback f;
    RunGeneration(f, 1, -1, 45);
    for (int64_t s : {9, 19, 29, 39}) f.OnCheckpoint(1, s);
    RunGeneration(f, 2, 39, 42);
    FallbackDecision first = f.OnLoadFailure(2, 42, order[0], options_);
    EXPECT_EQ(first.kind, Kind::kRetry);
    RunGeneration(f, 3, 39, 42);
    FallbackDecision second = f.OnLoadFailure(3, 42, order[1], options_);
    EXPECT_EQ(second.kind, Kind::kFallBack);
    EXPECT_EQ(second.advice.limit, 38);
    EXPECT_EQ(second.resume_at, 29);
    if (order[1] == LoadFailureKind::kCrash) {
      EXPECT_NE(second.reason.find("a rank failing at step 42"), std::string::npos)
          << second.reason;
    }
  }
}

}  // namespace
}  // namespace trainsup
