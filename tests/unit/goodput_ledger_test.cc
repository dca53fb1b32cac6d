// The goodput ledger: where a job's wall time went, from the moves of its
// frontier. The identity it serves (docs/DESIGN.md):
//   wall = useful + starved + checkpoint_blocked + lost,  goodput = useful / wall
// checked on hand-made cases and on seeded random sequences.
#include "daemon/core/goodput_ledger.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/support/test_time.h"

namespace trainsup {
namespace {

constexpr double kEps = 1e-9;

using ::trainsup::testing::AtS;

FrontierStep Step(int64_t step, double duration, double data_wait = 0, double checkpoint = 0) {
  FrontierStep s;
  s.step = step;
  s.duration_s = duration;
  s.data_wait_s = data_wait;
  s.checkpoint_s = checkpoint;
  return s;
}

double Of(const LedgerTotals& t, Bucket b) { return t.seconds[static_cast<int>(b)]; }
double Useful(const LedgerTotals& t) { return Of(t, Bucket::kUseful); }
double Starved(const LedgerTotals& t) { return Of(t, Bucket::kStarved); }
double Blocked(const LedgerTotals& t) { return Of(t, Bucket::kCheckpointBlocked); }
double Lost(const LedgerTotals& t) { return Of(t, Bucket::kLost); }

// The identity, and that every bucket (job and generation) is >= 0 and the
// generations add up to the job.
void ExpectConsistent(const GoodputLedger& ledger) {
  const LedgerTotals& t = ledger.totals();
  const double wall = ledger.first_step_time() == absl::InfinitePast()
                          ? 0
                          : absl::ToDoubleSeconds(ledger.last_step_time() - ledger.first_step_time());
  EXPECT_NEAR(Useful(t) + Starved(t) + Blocked(t) + Lost(t), wall, kEps);
  EXPECT_NEAR(t.wall_seconds(), wall, kEps);
  LedgerTotals sum;
  for (const auto& [generation, g] : ledger.by_generation()) {
    for (int b = 0; b < kBucketCount; ++b) {
      EXPECT_GE(g.seconds[b], 0) << "generation " << generation << " bucket " << b;
      sum.seconds[b] += g.seconds[b];
    }
  }
  for (int b = 0; b < kBucketCount; ++b) {
    EXPECT_GE(t.seconds[b], 0) << "bucket " << b;
    EXPECT_NEAR(sum.seconds[b], t.seconds[b], kEps) << "bucket " << b;
  }
}

TEST(GoodputLedgerTest, BucketNames) {
  EXPECT_EQ(BucketName(Bucket::kUseful), "useful");
  EXPECT_EQ(BucketName(Bucket::kStarved), "starved");
  EXPECT_EQ(BucketName(Bucket::kCheckpointBlocked), "checkpoint_blocked");
  EXPECT_EQ(BucketName(Bucket::kLost), "lost");
}

TEST(GoodputLedgerTest, EmptyLedgerHasNoWallAndNoGoodput) {
  GoodputLedger ledger;
  EXPECT_EQ(ledger.first_step_time(), absl::InfinitePast());
  EXPECT_EQ(ledger.totals().wall_seconds(), 0);
  EXPECT_EQ(ledger.totals().goodput(), 0);
  EXPECT_TRUE(ledger.by_generation().empty());
}

TEST(GoodputLedgerTest, MoveWithoutStepsIsIgnored) {
  GoodputLedger ledger;
  ledger.Advance(AtS(1), 1, {});
  EXPECT_EQ(ledger.first_step_time(), absl::InfinitePast());
  ledger.Advance(AtS(2), 1, {Step(1, 1)});
  ledger.Advance(AtS(3), 1, {});
  EXPECT_EQ(ledger.last_step_time(), AtS(2));
  EXPECT_EQ(ledger.totals().wall_seconds(), 0);
}

TEST(GoodputLedgerTest, FirstMoveStartsTheLedgerAndAccountsNothing) {
  GoodputLedger ledger;
  // Whatever the first step measured (its time is before the ledger starts).
  ledger.Advance(AtS(10), 1, {Step(1, 4, 1, 2), Step(2, 4)});
  EXPECT_EQ(ledger.first_step_time(), AtS(10));
  EXPECT_EQ(ledger.last_step_time(), AtS(10));
  EXPECT_EQ(ledger.totals().wall_seconds(), 0);
  EXPECT_EQ(ledger.totals().goodput(), 0);
  ExpectConsistent(ledger);
}

TEST(GoodputLedgerTest, NewStepSplitsItsStretchByItsMeasuredFractions) {
  GoodputLedger ledger;
  ledger.Advance(AtS(10), 1, {Step(1, 4)});
  // 4s for step 2, of which 1s waiting on input and 0.5s blocked on a
  // checkpoint (taken after step 1).
  ledger.Advance(AtS(14), 1, {Step(2, 4, 1, 0.5)});
  const LedgerTotals& t = ledger.totals();
  EXPECT_NEAR(Starved(t), 1, kEps);
  EXPECT_NEAR(Blocked(t), 0.5, kEps);
  EXPECT_NEAR(Useful(t), 2.5, kEps);
  EXPECT_EQ(Lost(t), 0);
  EXPECT_NEAR(t.goodput(), 2.5 / 4, kEps);
  ExpectConsistent(ledger);
}

TEST(GoodputLedgerTest, FractionsScaleToTheSupervisorsStretch) {
  // The rank measured 2s; the frontier moved 8s later by the supervisor's
  // clock: the stretch is split in the same proportions.
  GoodputLedger ledger;
  ledger.Advance(AtS(0), 1, {Step(1, 2)});
  ledger.Advance(AtS(8), 1, {Step(2, 2, 0.5, 0.25)});
  EXPECT_NEAR(Starved(ledger.totals()), 2, kEps);
  EXPECT_NEAR(Blocked(ledger.totals()), 1, kEps);
  EXPECT_NEAR(Useful(ledger.totals()), 5, kEps);
  ExpectConsistent(ledger);
}

TEST(GoodputLedgerTest, SeveralStepsInOneMoveShareTheStretchByTheirDurations) {
  GoodputLedger ledger;
  ledger.Advance(AtS(0), 1, {Step(1, 1)});
  // Step 2 took 1s (all useful), step 3 took 3s (all waiting on input): of
  // 8s, 2 go to step 2 and 6 to step 3.
  ledger.Advance(AtS(8), 1, {Step(2, 1), Step(3, 3, 3)});
  EXPECT_NEAR(Useful(ledger.totals()), 2, kEps);
  EXPECT_NEAR(Starved(ledger.totals()), 6, kEps);
  ExpectConsistent(ledger);
}

TEST(GoodputLedgerTest, StepsWithoutMeasuredDurationsShareEqually) {
  GoodputLedger ledger;
  ledger.Advance(AtS(0), 1, {Step(1, 0)});
  ledger.Advance(AtS(6), 1, {Step(2, 0), Step(3, 0), Step(4, 0)});
  EXPECT_NEAR(Useful(ledger.totals()), 6, kEps);
  ExpectConsistent(ledger);
}

TEST(GoodputLedgerTest, StepsReDoneAfterAFailureAreLost) {
  GoodputLedger ledger;
  for (int s = 1; s <= 10; ++s) ledger.Advance(AtS(s), 1, {Step(s, 1)});
  EXPECT_NEAR(Useful(ledger.totals()), 9, kEps);
  // Generation 2 resumes from a checkpoint at step 5: its first step (6) is
  // 30s after step 10 (the failure, the restart); steps 7..10 are re-done,
  // step 11 is new.
  ledger.Advance(AtS(40), 2, {Step(6, 1)});
  EXPECT_NEAR(Lost(ledger.totals()), 30, kEps);
  for (int s = 7; s <= 10; ++s) ledger.Advance(AtS(40 + (s - 6)), 2, {Step(s, 1)});
  EXPECT_NEAR(Lost(ledger.totals()), 34, kEps);
  EXPECT_NEAR(Useful(ledger.totals()), 9, kEps);
  ledger.Advance(AtS(45), 2, {Step(11, 1)});
  EXPECT_NEAR(Useful(ledger.totals()), 10, kEps);
  EXPECT_NEAR(Lost(ledger.totals()), 34, kEps);
  EXPECT_NEAR(ledger.totals().goodput(), 10.0 / 44, kEps);
  ExpectConsistent(ledger);
}

TEST(GoodputLedgerTest, AResumeBehindTheLastCheckpointLosesEveryStepItRepeats) {
  // Checkpoints after steps 4 and 8, failure after 10; generation 2 loaded
  // step 4's, not 8's (resumed_behind): steps 6..8, which the checkpoint
  // it should have loaded held, are lost with the others it re-does.
  GoodputLedger ledger;
  for (int s = 1; s <= 10; ++s) ledger.Advance(AtS(s), 1, {Step(s, 1)});
  ledger.Advance(AtS(40), 2, {Step(5, 1)});
  for (int s = 6; s <= 12; ++s) ledger.Advance(AtS(40 + (s - 5)), 2, {Step(s, 1)});
  EXPECT_NEAR(Lost(ledger.totals()), 30 + 5, kEps);  // the restart, then 6..10
  EXPECT_NEAR(Useful(ledger.totals()), 9 + 2, kEps);
  ExpectConsistent(ledger);
}

TEST(GoodputLedgerTest, StepAtTheHighWaterMarkIsLostToo) {
  GoodputLedger ledger;
  ledger.Advance(AtS(0), 1, {Step(1, 1)});
  ledger.Advance(AtS(1), 1, {Step(2, 1)});
  ledger.Advance(AtS(11), 2, {Step(1, 1)});
  ledger.Advance(AtS(12), 2, {Step(2, 1)});  // == the high-water mark
  EXPECT_NEAR(Lost(ledger.totals()), 11, kEps);
  ledger.Advance(AtS(13), 2, {Step(3, 1)});
  EXPECT_NEAR(Useful(ledger.totals()), 2, kEps);
  ExpectConsistent(ledger);
}

TEST(GoodputLedgerTest, MoveMixingReDoneAndNewStepsSplitsThem) {
  GoodputLedger ledger;
  ledger.Advance(AtS(0), 1, {Step(4, 1)});
  ledger.Advance(AtS(10), 2, {Step(2, 1)});  // lost: 10
  // Steps 3, 4 re-done, 5 new, 1s each measured, in a 6s stretch.
  ledger.Advance(AtS(16), 2, {Step(3, 1), Step(4, 1), Step(5, 1, 0.5)});
  EXPECT_NEAR(Lost(ledger.totals()), 14, kEps);
  EXPECT_NEAR(Starved(ledger.totals()), 1, kEps);
  EXPECT_NEAR(Useful(ledger.totals()), 1, kEps);
  ExpectConsistent(ledger);
}

TEST(GoodputLedgerTest, StretchEndingInTheFirstMoveOfANewGenerationIsLostEntirely) {
  GoodputLedger ledger;
  ledger.Advance(AtS(0), 1, {Step(1, 1)});
  ledger.Advance(AtS(1), 1, {Step(2, 1)});
  // The new generation's first move brings new steps (3, 4), with waits
  // measured: the whole stretch is still the failure's.
  ledger.Advance(AtS(21), 2, {Step(3, 1, 0.5), Step(4, 1, 0, 0.5)});
  EXPECT_NEAR(Lost(ledger.totals()), 20, kEps);
  EXPECT_NEAR(Useful(ledger.totals()), 1, kEps);
  EXPECT_EQ(Starved(ledger.totals()), 0);
  EXPECT_EQ(Blocked(ledger.totals()), 0);
  // ... and they raised the high-water mark: 4 again is re-done, 5 is new.
  ledger.Advance(AtS(22), 2, {Step(4, 1)});
  ledger.Advance(AtS(23), 2, {Step(5, 1)});
  EXPECT_NEAR(Lost(ledger.totals()), 21, kEps);
  EXPECT_NEAR(Useful(ledger.totals()), 2, kEps);
  ExpectConsistent(ledger);
}

TEST(GoodputLedgerTest, PerGenerationTotalsSumToTheJobsTotals) {
  GoodputLedger ledger;
  ledger.Advance(AtS(0), 1, {Step(1, 1)});
  ledger.Advance(AtS(2), 1, {Step(2, 2, 1)});      // gen 1: starved 1, useful 1
  ledger.Advance(AtS(12), 2, {Step(1, 1)});        // gen 2: lost 10
  ledger.Advance(AtS(13), 2, {Step(2, 1)});        // gen 2: lost 1
  ledger.Advance(AtS(15), 2, {Step(3, 2, 0, 1)});  // gen 2: blocked 1, useful 1
  ledger.Advance(AtS(45), 3, {Step(3, 1)});        // gen 3: lost 30
  const auto& by = ledger.by_generation();
  ASSERT_EQ(by.count(1), 1u);
  ASSERT_EQ(by.count(2), 1u);
  ASSERT_EQ(by.count(3), 1u);
  EXPECT_NEAR(Useful(by.at(1)), 1, kEps);
  EXPECT_NEAR(Starved(by.at(1)), 1, kEps);
  EXPECT_EQ(Lost(by.at(1)), 0);
  EXPECT_NEAR(Lost(by.at(2)), 11, kEps);
  EXPECT_NEAR(Blocked(by.at(2)), 1, kEps);
  EXPECT_NEAR(Useful(by.at(2)), 1, kEps);
  EXPECT_NEAR(Lost(by.at(3)), 30, kEps);
  EXPECT_NEAR(by.at(3).wall_seconds(), 30, kEps);
  EXPECT_NEAR(ledger.totals().wall_seconds(), 45, kEps);
  EXPECT_NEAR(ledger.totals().goodput(), 2.0 / 45, kEps);
  ExpectConsistent(ledger);
}

TEST(GoodputLedgerTest, MovesAtTheSameInstantAddNothingButRaiseTheHighWaterMark) {
  GoodputLedger ledger;
  ledger.Advance(AtS(0), 1, {Step(1, 1)});
  ledger.Advance(AtS(1), 1, {Step(2, 1)});
  ledger.Advance(AtS(1), 1, {Step(3, 1)});
  EXPECT_NEAR(Useful(ledger.totals()), 1, kEps);
  ledger.Advance(AtS(5), 2, {Step(3, 1)});  // lost: 4
  ledger.Advance(AtS(6), 2, {Step(4, 1)});  // new
  EXPECT_NEAR(Lost(ledger.totals()), 4, kEps);
  EXPECT_NEAR(Useful(ledger.totals()), 2, kEps);
  ExpectConsistent(ledger);
}

TEST(GoodputLedgerTest, MoveEarlierThanTheLastAccountsNothingAndKeepsTheEnd) {
  GoodputLedger ledger;
  ledger.Advance(AtS(0), 1, {Step(1, 1)});
  ledger.Advance(AtS(10), 1, {Step(2, 1)});
  ledger.Advance(AtS(9), 1, {Step(3, 1)});
  EXPECT_EQ(ledger.last_step_time(), AtS(10));
  EXPECT_NEAR(ledger.totals().wall_seconds(), 10, kEps);
  ExpectConsistent(ledger);
}

TEST(GoodputLedgerTest, DataWaitLongerThanTheStepIsAllStarvedNeverNegative) {
  GoodputLedger ledger;
  ledger.Advance(AtS(0), 1, {Step(1, 1)});
  ledger.Advance(AtS(2), 1, {Step(2, 1, 3)});
  EXPECT_NEAR(Starved(ledger.totals()), 2, kEps);
  EXPECT_EQ(Useful(ledger.totals()), 0);
  ExpectConsistent(ledger);
}

TEST(GoodputLedgerTest, WaitsAddingUpToMoreThanTheStepSplitInProportion) {
  GoodputLedger ledger;
  ledger.Advance(AtS(0), 1, {Step(1, 1)});
  // 2s waiting + 2s blocked, in a step measured at 1s: 4s stretch, half each.
  ledger.Advance(AtS(4), 1, {Step(2, 1, 2, 2)});
  EXPECT_NEAR(Starved(ledger.totals()), 2, kEps);
  EXPECT_NEAR(Blocked(ledger.totals()), 2, kEps);
  EXPECT_EQ(Useful(ledger.totals()), 0);
  ExpectConsistent(ledger);
}

TEST(GoodputLedgerTest, ZeroDurationWithAWaitIsStarved) {
  GoodputLedger ledger;
  ledger.Advance(AtS(0), 1, {Step(1, 0)});
  ledger.Advance(AtS(3), 1, {Step(2, 0, 0.5)});
  EXPECT_NEAR(Starved(ledger.totals()), 3, kEps);
  ExpectConsistent(ledger);
}

TEST(GoodputLedgerTest, NegativeFiguresCountAsZero) {
  GoodputLedger ledger;
  ledger.Advance(AtS(0), 1, {Step(1, 1)});
  ledger.Advance(AtS(4), 1, {Step(2, -1, -2, -3), Step(3, 1)});
  // Step 2's duration counts as 0: step 3 takes the whole stretch.
  EXPECT_NEAR(Useful(ledger.totals()), 4, kEps);
  ExpectConsistent(ledger);
}

TEST(GoodputLedgerTest, NoFailuresAndNoWaitsMeansAllUseful) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int64_t> us(1, 10'000'000);
  std::uniform_real_distribution<double> duration(0, 5);
  GoodputLedger ledger;
  absl::Time t = AtS(0);
  ledger.Advance(t, 1, {Step(1, 1)});
  for (int s = 2; s <= 500; ++s) {
    t += absl::Microseconds(us(rng));
    ledger.Advance(t, 1, {Step(s, duration(rng))});
  }
  EXPECT_NEAR(Useful(ledger.totals()), absl::ToDoubleSeconds(t - AtS(0)), kEps);
  EXPECT_NEAR(ledger.totals().goodput(), 1, kEps);
  ExpectConsistent(ledger);
}

// Seeded random histories: step durations (some 0, some negative), data
// waits (some longer than the step), checkpoints, batches of several steps
// per move, moves at the same instant, generation changes that go back to an
// earlier step (or not). The identity holds after every move.
TEST(GoodputLedgerTest, IdentityHoldsExactlyUnderRandomHistories) {
  int generation_changes = 0;
  int redone_moves = 0;
  for (uint32_t seed = 1; seed <= 60; ++seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> percent(0, 99);
    std::uniform_int_distribution<int> batch(1, 5);
    std::uniform_int_distribution<int64_t> gap_us(1, 20'000'000);
    std::uniform_int_distribution<int64_t> back(0, 40);
    std::uniform_real_distribution<double> seconds(0, 6);
    GoodputLedger ledger;
    absl::Time t = AtS(0) + absl::Microseconds(seed);
    absl::Time first = absl::InfinitePast();
    uint64_t generation = 1;
    int64_t step = 0;
    int64_t high_water = 0;
    for (int move = 0; move < 400; ++move) {
      if (percent(rng) < 5) {
        ++generation;
        ++generation_changes;
        step = std::max<int64_t>(0, step - back(rng));
      }
      if (percent(rng) >= 10) t += absl::Microseconds(gap_us(rng));  // else: same instant
      std::vector<FrontierStep> steps;
      const int n = batch(rng);
      bool redone = false;
      for (int i = 0; i < n; ++i) {
        FrontierStep s;
        s.step = ++step;
        redone = redone || s.step <= high_water;
        const int kind = percent(rng);
        s.duration_s = kind < 10 ? 0 : kind < 13 ? -seconds(rng) : seconds(rng);
        s.data_wait_s = percent(rng) < 30 ? seconds(rng) : 0;  // may exceed the step
        s.checkpoint_s = percent(rng) < 10 ? 4 * seconds(rng) : 0;
        steps.push_back(s);
      }
      high_water = std::max(high_water, step);
      redone_moves += redone ? 1 : 0;
      ledger.Advance(t, generation, steps);
      if (move == 0) first = t;
      ASSERT_EQ(ledger.last_step_time(), t);
      ExpectConsistent(ledger);
      if (::testing::Test::HasFailure()) {
        FAIL() << "seed " << seed << " move " << move;
      }
    }
    EXPECT_EQ(ledger.first_step_time(), first);
    EXPECT_GT(Useful(ledger.totals()), 0);
    EXPECT_GT(Lost(ledger.totals()), 0);
    EXPECT_GT(Starved(ledger.totals()), 0);
    EXPECT_GT(Blocked(ledger.totals()), 0);
  }
  // Not vacuous.
  EXPECT_GT(generation_changes, 500);
  EXPECT_GT(redone_moves, 500);
}

}  // namespace
}  // namespace trainsup
