#include "daemon/core/straggler_detector.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include "absl/time/time.h"
#include "daemon/core/heartbeat.h"
#include "daemon/core/job.h"
#include "gtest/gtest.h"

namespace trainsup {
namespace {

absl::Time At(int64_t step) { return absl::FromUnixSeconds(1000) + absl::Seconds(step); }

// Compute seconds of `rank` at `step`; nullopt: the heartbeat carries none.
using ComputeFn = std::function<std::optional<double>(uint32_t rank, int64_t step)>;

// A change and the job step after which Evaluate returned it.
struct Seen {
  int64_t step;
  StragglerChange change;
};

// Small windows so that the persistence rules are quick to walk through.
StragglerOptions SmallOptions() {
  StragglerOptions o;
  o.window = 10;
  o.ratio = 1.5;
  o.mad_factor = 3;
  o.persistence = 3;
  return o;
}

// The defaults, spelled out.
StragglerOptions DefaultOptions() {
  StragglerOptions o;
  o.window = 50;
  o.ratio = 1.5;
  o.mad_factor = 3;
  o.persistence = 3;
  return o;
}

// A job of `world` ranks (half per node) and a detector, driven the way the
// supervisor does: every rank completes a step, then a sweep evaluates.
class Harness {
 public:
  Harness(uint32_t world, StragglerOptions options)
      : world_(world), options_(options), job_("job", /*step_window=*/16, options.window),
        detector_(options) {}

  // Steps from..to (inclusive), each followed by an Evaluate; returns the
  // changes seen.
  std::vector<Seen> Run(int64_t from, int64_t to, const ComputeFn& compute) {
    std::vector<Seen> seen;
    for (int64_t step = from; step <= to; ++step) {
      Advance(step, step, compute);
      for (const StragglerChange& c : Evaluate()) seen.push_back({step, c});
    }
    return seen;
  }

  // Steps from..to (inclusive) with no Evaluate between them.
  void Advance(int64_t from, int64_t to, const ComputeFn& compute) {
    for (int64_t step = from; step <= to; ++step) {
      for (uint32_t r = 0; r < world_; ++r) {
        Heartbeat hb;
        hb.kind = HeartbeatKind::kStep;
        hb.job = "job";
        hb.rank = r;
        hb.world_size = world_;
        hb.step = step;
        hb.step_duration_s = 1.0;  // equal on all ranks of a synchronous job
        hb.compute_s = compute(r, step);
        EXPECT_EQ(job_.Apply(At(step), r < world_ / 2 ? 0 : 1, hb), std::nullopt);
      }
    }
  }

  // One evaluation, as a sweep makes it.
  std::vector<StragglerChange> Evaluate() { return detector_.Evaluate(job_, &flagged_); }

  Job& job() { return job_; }
  // The ranks flagged now (the verdict the supervisor keeps per generation).
  const StragglerSet& flagged() const { return flagged_; }
  bool IsFlagged(uint32_t rank) const { return flagged_.contains(rank); }
  // A fresh detector and verdict, as the supervisor makes for each new
  // generation.
  void NewDetector() {
    detector_ = StragglerDetector(options_);
    flagged_.clear();
  }

 private:
  const uint32_t world_;
  const StragglerOptions options_;
  Job job_;
  StragglerDetector detector_;
  StragglerSet flagged_;
};

// 0.1s on every rank but `slow` (0.3s) while `slow_when(step)`.
ComputeFn OneSlow(uint32_t slow, std::function<bool(int64_t)> slow_when) {
  return [slow, slow_when](uint32_t rank, int64_t step) -> std::optional<double> {
    return rank == slow && slow_when(step) ? 0.3 : 0.1;
  };
}

bool Always(int64_t) { return true; }

// With SmallOptions and steps from 0: the first Evaluate (step 0) arms the
// detector, and windows are judged after steps 10, 20, 30, ...; the window
// judged after step 10k holds the samples of steps 10k-9 .. 10k.
int64_t WindowOf(int64_t step) { return (step - 1) / 10; }

TEST(StragglerDetectorTest, PersistentlySlowRankIsFlaggedOnlyAtThePersistenceThWindow) {
  Harness h(4, SmallOptions());

  std::vector<Seen> before = h.Run(0, 29, OneSlow(2, Always));
  EXPECT_TRUE(before.empty());
  EXPECT_FALSE(h.IsFlagged(2));

  std::vector<Seen> third = h.Run(30, 30, OneSlow(2, Always));
  ASSERT_EQ(third.size(), 1u);
  EXPECT_EQ(third[0].change.rank, 2u);
  EXPECT_TRUE(third[0].change.flagged);
  EXPECT_NEAR(third[0].change.rank_p99_s, 0.3, 1e-6);
  EXPECT_NEAR(third[0].change.job_median_p99_s, 0.1, 1e-6);
  EXPECT_TRUE(h.IsFlagged(2));
  EXPECT_EQ(h.flagged().size(), 1u);
}

TEST(StragglerDetectorTest, StragglerIsFlaggedExactlyOnce) {
  Harness h(4, SmallOptions());

  std::vector<Seen> seen = h.Run(0, 200, OneSlow(2, Always));

  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].step, 30);
  EXPECT_EQ(h.flagged().size(), 1u);
  for (uint32_t r : {0u, 1u, 3u}) EXPECT_FALSE(h.IsFlagged(r)) << r;
}

TEST(StragglerDetectorTest, StragglerBackInLineIsClearedAfterPersistenceGoodWindows) {
  Harness h(4, SmallOptions());
  // Slow through step 30 (flagged there), in line from step 31.
  auto slow_until_30 = [](int64_t step) { return step <= 30; };

  std::vector<Seen> seen = h.Run(0, 59, OneSlow(2, slow_until_30));
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_TRUE(h.IsFlagged(2));  // two good windows (40, 50): not yet

  std::vector<Seen> cleared = h.Run(60, 60, OneSlow(2, slow_until_30));
  ASSERT_EQ(cleared.size(), 1u);
  EXPECT_EQ(cleared[0].change.rank, 2u);
  EXPECT_FALSE(cleared[0].change.flagged);
  EXPECT_NEAR(cleared[0].change.rank_p99_s, 0.1, 1e-6);
  EXPECT_FALSE(h.IsFlagged(2));
  EXPECT_EQ(h.flagged().size(), 0u);

  EXPECT_TRUE(h.Run(61, 200, OneSlow(2, slow_until_30)).empty());
}

TEST(StragglerDetectorTest, SlowWindowsThatAreNotConsecutiveNeverFlag) {
  Harness h(4, SmallOptions());
  // Windows: slow, slow, good, slow, slow, good, ...: the streak never
  // reaches 3.
  auto two_of_three = [](int64_t step) { return step >= 1 && WindowOf(step) % 3 != 2; };

  std::vector<Seen> seen = h.Run(0, 300, OneSlow(2, two_of_three));

  EXPECT_TRUE(seen.empty());
  EXPECT_FALSE(h.IsFlagged(2));
}

TEST(StragglerDetectorTest, SingleSlowWindowBetweenGoodOnesNeverFlags) {
  Harness h(4, SmallOptions());
  auto one_of_two = [](int64_t step) { return step >= 1 && WindowOf(step) % 2 == 0; };

  EXPECT_TRUE(h.Run(0, 300, OneSlow(2, one_of_two)).empty());
}

TEST(StragglerDetectorTest, SingleGoodWindowDoesNotClearAStraggler) {
  Harness h(4, SmallOptions());
  // Slow in windows 0..2 (flagged at step 30), then good, slow, good, slow...
  auto flagged_then_flapping = [](int64_t step) {
    return step >= 1 && (WindowOf(step) < 3 || WindowOf(step) % 2 == 0);
  };

  std::vector<Seen> seen = h.Run(0, 300, OneSlow(2, flagged_then_flapping));

  ASSERT_EQ(seen.size(), 1u);
  EXPECT_TRUE(seen[0].change.flagged);
  EXPECT_TRUE(h.IsFlagged(2));
}

// ---------------------------------------------------------------------------
// A realistic job: every rank draws its compute time from the same noisy
// distribution (lognormal, median 0.1s, sigma 0.2), with a fixed seed.

ComputeFn Noisy(uint32_t seed, std::optional<uint32_t> slow_rank, double slow_factor) {
  auto gen = std::make_shared<std::mt19937>(seed);
  auto dist = std::make_shared<std::lognormal_distribution<double>>(std::log(0.1), 0.2);
  return [=](uint32_t rank, int64_t) -> std::optional<double> {
    double v = (*dist)(*gen);
    return slow_rank && rank == *slow_rank ? v * slow_factor : v;
  };
}

TEST(StragglerDetectorTest, RanksSharingOneNoisyDistributionAreNeverFlagged) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    Harness h(8, DefaultOptions());

    std::vector<Seen> seen = h.Run(0, 5000, Noisy(seed, std::nullopt, 1));

    EXPECT_TRUE(seen.empty()) << "seed " << seed << ": rank " << seen[0].change.rank
                              << " flagged at step " << seen[0].step;
    EXPECT_EQ(h.flagged().size(), 0u) << "seed " << seed;
  }
}

TEST(StragglerDetectorTest, NoisyRankThreeTimesSlowerIsFlaggedAndOnlyIt) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    Harness h(8, DefaultOptions());

    std::vector<Seen> seen = h.Run(0, 5000, Noisy(seed, /*slow_rank=*/5, 3.0));

    ASSERT_EQ(seen.size(), 1u) << "seed " << seed;
    EXPECT_EQ(seen[0].change.rank, 5u);
    EXPECT_TRUE(seen[0].change.flagged);
    // Armed at step 0, judged at 50, 100, 150: flagged at the third window.
    EXPECT_EQ(seen[0].step, 150);
    EXPECT_GT(seen[0].change.rank_p99_s, 1.5 * seen[0].change.job_median_p99_s);
    EXPECT_EQ(h.flagged().size(), 1u);
    EXPECT_TRUE(h.IsFlagged(5));
  }
}

// ---------------------------------------------------------------------------
// Who is judged, and when

TEST(StragglerDetectorTest, RankWithoutAFullWindowOfComputeSamplesIsLeftOut) {
  Harness h(4, SmallOptions());
  // Rank 3 is very slow, but only brackets its compute in steps 0..5: six
  // samples, fewer than the window of 10.
  ComputeFn compute = [](uint32_t rank, int64_t step) -> std::optional<double> {
    if (rank == 3) return step <= 5 ? std::optional<double>(1.0) : std::nullopt;
    return 0.1;
  };

  EXPECT_TRUE(h.Run(0, 200, compute).empty());
  EXPECT_EQ(h.job().rank(3).compute_durations.size(), 6u);
  EXPECT_FALSE(h.IsFlagged(3));
}

TEST(StragglerDetectorTest, FewerThanTwoRanksJudgedIsNoJudgement) {
  Harness h(2, SmallOptions());
  // Rank 0 is slow throughout. Rank 1 brackets its compute only from step
  // 41, so it has a full window from step 50: windows 10..40 judge rank 0
  // alone, which is no judgement (and starts no streak).
  ComputeFn compute = [](uint32_t rank, int64_t step) -> std::optional<double> {
    if (rank == 0) return 0.3;
    return step >= 41 ? std::optional<double>(0.1) : std::nullopt;
  };

  std::vector<Seen> seen = h.Run(0, 100, compute);

  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].change.rank, 0u);
  EXPECT_EQ(seen[0].step, 70);  // the third window with two ranks: 50, 60, 70
}

TEST(StragglerDetectorTest, SingleRankJobIsNeverJudged) {
  Harness h(1, SmallOptions());

  EXPECT_TRUE(h.Run(0, 200, [](uint32_t, int64_t) { return 5.0; }).empty());
  EXPECT_FALSE(h.IsFlagged(0));
}

TEST(StragglerDetectorTest, WindowsAreJudgedEveryWindowStepsOfTheJobsMaxStep) {
  StragglerOptions o = SmallOptions();
  o.persistence = 1;  // every judged window shows
  Harness h(4, o);

  // Armed at step 0: steps 1..9 judge nothing, step 10 judges the first window.
  EXPECT_TRUE(h.Run(0, 9, OneSlow(1, Always)).empty());
  std::vector<Seen> seen = h.Run(10, 10, OneSlow(1, Always));
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].change.rank, 1u);
}

TEST(StragglerDetectorTest, FirstEvaluateOnlyArms) {
  StragglerOptions o = SmallOptions();
  o.persistence = 1;  // every judged window shows
  Harness h(4, o);
  // Steps 0..99 without a sweep: every rank has a full window, rank 1 slow.
  h.Advance(0, 99, OneSlow(1, Always));

  EXPECT_TRUE(h.Evaluate().empty());  // arms: next at 109
  EXPECT_TRUE(h.Run(100, 108, OneSlow(1, Always)).empty());
  std::vector<Seen> seen = h.Run(109, 109, OneSlow(1, Always));
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].change.rank, 1u);
}

TEST(StragglerDetectorTest, EvaluateBeforeAnyStepDoesNotArm) {
  StragglerOptions o = SmallOptions();
  o.persistence = 1;
  Harness h(4, o);
  Heartbeat start;
  start.kind = HeartbeatKind::kStart;
  start.job = "job";
  start.world_size = 4;
  ASSERT_EQ(h.job().Apply(At(0), 0, start), std::nullopt);
  ASSERT_EQ(h.job().max_step(), -1);
  EXPECT_TRUE(h.Evaluate().empty());
  h.Advance(0, 15, OneSlow(1, Always));

  // Had the first call armed (for step -1 + 10 = 9), this one would judge.
  EXPECT_TRUE(h.Evaluate().empty());  // arms: next at 25

  EXPECT_TRUE(h.Run(16, 24, OneSlow(1, Always)).empty());
  EXPECT_EQ(h.Run(25, 25, OneSlow(1, Always)).size(), 1u);
}

TEST(StragglerDetectorTest, JudgementFollowsTheMaxStepNotTheNumberOfCalls) {
  StragglerOptions o = SmallOptions();
  o.persistence = 1;
  Harness h(4, o);
  h.Advance(0, 0, OneSlow(1, Always));
  ASSERT_TRUE(h.Evaluate().empty());  // arms: next at 10

  // Many sweeps without progress judge nothing.
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(h.Evaluate().empty());
  // A jump past the boundary judges once, and re-arms from the step reached.
  h.Advance(1, 17, OneSlow(1, Always));
  EXPECT_EQ(h.Evaluate().size(), 1u);  // next at 27
  EXPECT_TRUE(h.Run(18, 26, OneSlow(1, Always)).empty());
}

TEST(StragglerDetectorTest, FreshDetectorForgetsStreaksAndRearms) {
  Harness h(4, SmallOptions());
  // Two slow windows (10, 20), then a new generation's detector state.
  ASSERT_TRUE(h.Run(0, 20, OneSlow(2, Always)).empty());

  h.NewDetector();

  // Re-armed at step 21: judged at 31, 41, 51; a carried streak would flag at 31.
  std::vector<Seen> seen = h.Run(21, 60, OneSlow(2, Always));
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].step, 51);
}

}  // namespace
}  // namespace trainsup
