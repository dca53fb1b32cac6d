#include "daemon/core/stall_detector.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "daemon/core/heartbeat.h"
#include "daemon/core/job.h"
#include "gtest/gtest.h"
#include "tests/support/core_builders.h"
#include "tests/support/test_time.h"

namespace trainsup {
namespace {

using ::trainsup::testing::AliveProcess;
using ::trainsup::testing::DeadProcess;
using ::trainsup::testing::MakeHeartbeat;

constexpr NodeIndex kNodeA = 0;
constexpr NodeIndex kNodeB = 1;
constexpr size_t kStepWindow = 16;
constexpr size_t kComputeWindow = 16;

using ::trainsup::testing::At;
using ::trainsup::testing::AtS;
using ::trainsup::testing::TestEpoch;

// The options of these tests, spelled out rather than taken from the defaults.
StallOptions Options() {
  StallOptions o;
  o.floor = absl::Seconds(20);
  o.factor = 10;
  o.startup_grace = absl::Minutes(5);
  o.checkpoint_grace = absl::Minutes(15);
  o.exit_grace = absl::Minutes(2);
  return o;
}

// Ranks 0..world/2-1 live on node A, the rest on node B.
NodeIndex NodeOf(uint32_t rank, uint32_t world) { return rank < world / 2 ? kNodeA : kNodeB; }

void Apply(Job& job, absl::Time now, const Heartbeat& hb) {
  ASSERT_EQ(job.Apply(now, NodeOf(hb.rank, hb.world_size), hb), std::nullopt)
      << "rank " << hb.rank << " step " << hb.step;
}

void ApplyStep(Job& job, absl::Time now, uint32_t rank, int64_t step, uint32_t world,
               double duration_s) {
  Heartbeat hb = MakeHeartbeat(HeartbeatKind::kStep, rank, step, world);
  hb.step_duration_s = duration_s;
  Apply(job, now, hb);
}

// A rank that exited (at the report's time), its exit status known or not.
RankProcessInfo Exited(uint32_t rank, bool exit_known, int32_t exit_code) {
  RankProcessInfo p = DeadProcess(rank, /*ago=*/0, exit_code);
  p.exit_known = exit_known;
  return p;
}

void ReportAllAlive(Job& job, absl::Time now) {
  for (uint32_t r = 0; r < job.world_size(); ++r) {
    job.ApplyProcess(now, NodeOf(r, job.world_size()), AliveProcess(r));
  }
}

// A job of `world` live ranks that completed steps 1..steps, one every
// `step`: step k at T0 + k * step. Its last progress is T0 + steps * step.
void RunSteps(Job& job, uint32_t world, int64_t steps, absl::Duration step) {
  for (int64_t s = 1; s <= steps; ++s) {
    for (uint32_t r = 0; r < world; ++r) {
      ApplyStep(job, At(s * step), r, s, world, absl::ToDoubleSeconds(step));
    }
  }
  ReportAllAlive(job, At(steps * step));
}

// ---------------------------------------------------------------------------
// StallDetector::Check: the threshold

TEST(StallDetectorTest, SilentExactlyAtTheFloorIsNotStalled) {
  Job job("job", kStepWindow, kComputeWindow);
  RunSteps(job, 4, 10, absl::Seconds(1));  // p99 1s: 10 x 1s < the 20s floor
  const absl::Time last = AtS(10);
  ASSERT_EQ(job.last_progress(), last);

  StallVerdict v = StallDetector(Options()).Check(job, last + absl::Seconds(20));

  EXPECT_FALSE(v.stalled);
  EXPECT_FALSE(v.startup);
  EXPECT_EQ(v.threshold, absl::Seconds(20));
  EXPECT_EQ(v.silent, absl::Seconds(20));
}

TEST(StallDetectorTest, SilentANanosecondPastTheFloorIsStalled) {
  Job job("job", kStepWindow, kComputeWindow);
  RunSteps(job, 4, 10, absl::Seconds(1));
  const absl::Time last = AtS(10);
  StallDetector detector(Options());

  StallVerdict v = detector.Check(job, last + absl::Seconds(20) + absl::Nanoseconds(1));

  EXPECT_TRUE(v.stalled);
  EXPECT_EQ(v.threshold, absl::Seconds(20));
  EXPECT_EQ(v.silent, absl::Seconds(20) + absl::Nanoseconds(1));
  EXPECT_TRUE(detector.Check(job, last + absl::Seconds(20) + absl::Milliseconds(1)).stalled);
}

TEST(StallDetectorTest, FactorTimesP99WinsOverTheFloorWhenLarger) {
  Job job("job", kStepWindow, kComputeWindow);
  RunSteps(job, 4, 10, absl::Seconds(5));  // p99 5s: 10 x 5s = 50s > 20s
  const absl::Time last = AtS(50);
  StallDetector detector(Options());

  StallVerdict at_floor = detector.Check(job, last + absl::Seconds(21));
  StallVerdict at_threshold = detector.Check(job, last + absl::Seconds(50));
  StallVerdict past = detector.Check(job, last + absl::Seconds(50) + absl::Milliseconds(1));

  EXPECT_FALSE(at_floor.stalled);
  EXPECT_EQ(at_floor.threshold, absl::Seconds(50));
  EXPECT_FALSE(at_threshold.stalled);
  EXPECT_TRUE(past.stalled);
  EXPECT_EQ(past.threshold, absl::Seconds(50));
}

TEST(StallDetectorTest, SilenceIsMeasuredFromTheLastStepOfAnyRank) {
  Job job("job", kStepWindow, kComputeWindow);
  RunSteps(job, 4, 10, absl::Seconds(1));
  // Only rank 3 advances, later: the job is not silent since T0 + 10s.
  ApplyStep(job, AtS(25), 3, 11, 4, 1.0);
  StallDetector detector(Options());

  EXPECT_FALSE(detector.Check(job, AtS(45)).stalled);
  EXPECT_TRUE(detector.Check(job, AtS(45) + absl::Nanoseconds(1)).stalled);
}

// ---------------------------------------------------------------------------
// StallDetector::Check: start-up

// A generation whose ranks said START and are alive, but took no step yet.
void StartedNoStep(Job& job, absl::Time generation_start, absl::Time start_heartbeats) {
  ASSERT_TRUE(job.ObserveGeneration(generation_start, 1));
  for (uint32_t r = 0; r < 4; ++r) {
    Heartbeat hb = MakeHeartbeat(HeartbeatKind::kStart, r, 0, 4);
    hb.generation = 1;
    Apply(job, start_heartbeats, hb);
  }
  ReportAllAlive(job, start_heartbeats);
}

// Two ranks step every 0.5 s from t=0 until their last step at `last_step_s`;
// their agent reports every `interval` (first at `first_report_s`), carrying
// the steps since its last report, dated by the report's arrival. Returns the
// first time (checked every 100 ms up to `until_s`) the job is judged
// stalled, or nullopt.
std::optional<double> FirstStall(const StallDetector& detector, absl::Duration interval,
                                 double first_report_s, double last_step_s, double until_s) {
  Job job("j", kStepWindow, kComputeWindow);
  const double interval_s = absl::ToDoubleSeconds(interval);
  double next_report = first_report_s;
  int64_t reported = 0;  // steps already delivered
  for (int tick = 0; tick * 0.1 <= until_s; ++tick) {
    const double t = tick * 0.1;
    if (t + 1e-9 >= next_report) {
      const int64_t done = static_cast<int64_t>(std::min(t, last_step_s) / 0.5 + 1e-9);
      for (int64_t step = reported + 1; step <= done; ++step) {
        for (uint32_t rank = 0; rank < 2; ++rank) ApplyStep(job, AtS(t), rank, step, 2, 0.5);
      }
      reported = std::max(reported, done);
      next_report += interval_s;
    }
    if (reported > 0 && detector.Check(job, AtS(t), interval).stalled) return t;
  }
  return std::nullopt;
}

TEST(StallDetectorTest, ASlowReportIntervalCausesNoFalseStall) {
  StallOptions o = Options();
  o.floor = absl::Seconds(2);  // shorter than the interval below
  StallDetector detector(o);
  // Steps every 0.5 s for two minutes, but heard of only every 5 s.
  EXPECT_EQ(FirstStall(detector, absl::Seconds(5), 0.3, 1e9, 120), std::nullopt);
}

TEST(StallDetectorTest, TheThresholdIsAtLeastOneAndAHalfReportIntervals) {
  StallOptions o = Options();
  o.floor = absl::Seconds(2);
  StallDetector detector(o);
  Job job("j", kStepWindow, kComputeWindow);
  ApplyStep(job, AtS(0), 0, 1, 1, 0.1);
  EXPECT_EQ(detector.Check(job, AtS(1)).threshold, absl::Seconds(2));
  EXPECT_EQ(detector.Check(job, AtS(1), absl::Seconds(4)).threshold, absl::Seconds(6));
  EXPECT_FALSE(detector.Check(job, AtS(6), absl::Seconds(4)).stalled);
  EXPECT_TRUE(detector.Check(job, AtS(6.1), absl::Seconds(4)).stalled);
}

TEST(StallDetectorTest, AHangIsSeenWithinTheThresholdPlusTwoReportIntervals) {
  StallDetector detector(Options());  // floor 20 s
  for (const absl::Duration interval :
       {absl::Milliseconds(200), absl::Seconds(1), absl::Seconds(2.5), absl::Seconds(5)}) {
    for (const double first_report : {0.05, 0.3, 0.45}) {
      SCOPED_TRACE(absl::StrCat("interval ", absl::FormatDuration(interval), ", first report ",
                                first_report));
      // The last step at t=60: hung from then on.
      const std::optional<double> seen = FirstStall(detector, interval, first_report, 60, 200);
      ASSERT_TRUE(seen.has_value());
      EXPECT_GT(*seen, 60 + 20);
      EXPECT_LE(*seen, 60 + 20 + 2 * absl::ToDoubleSeconds(interval) + 0.1);
    }
  }
}

TEST(StallDetectorTest, BeforeTheFirstStepTheFloorDoesNotApply) {
  Job job("job", kStepWindow, kComputeWindow);
  StartedNoStep(job, AtS(0), AtS(30));

  StallVerdict v = StallDetector(Options()).Check(job, AtS(200));

  EXPECT_FALSE(v.stalled);
  EXPECT_TRUE(v.startup);
  EXPECT_EQ(v.threshold, absl::Minutes(5));
}

TEST(StallDetectorTest, StartupGraceIsMeasuredFromTheGenerationStart) {
  Job job("job", kStepWindow, kComputeWindow);
  // The generation began at T0; the ranks said START 30s later.
  StartedNoStep(job, AtS(0), AtS(30));
  StallDetector detector(Options());

  StallVerdict at_grace = detector.Check(job, At(absl::Minutes(5)));
  StallVerdict past_grace = detector.Check(job, At(absl::Minutes(5) + absl::Nanoseconds(1)));

  EXPECT_FALSE(at_grace.stalled);
  EXPECT_EQ(at_grace.silent, absl::Minutes(5));
  EXPECT_TRUE(past_grace.stalled);
  EXPECT_TRUE(past_grace.startup);
  EXPECT_EQ(past_grace.silent, absl::Minutes(5) + absl::Nanoseconds(1));
}

TEST(StallDetectorTest, FirstStepEndsTheStartupGrace) {
  Job job("job", kStepWindow, kComputeWindow);
  StartedNoStep(job, AtS(0), AtS(30));
  Heartbeat hb = MakeHeartbeat(HeartbeatKind::kStep, 0, 1, 4);
  hb.generation = 1;
  hb.step_duration_s = 1;
  Apply(job, AtS(60), hb);

  StallVerdict v = StallDetector(Options()).Check(job, AtS(81));

  EXPECT_FALSE(v.startup);
  EXPECT_EQ(v.threshold, absl::Seconds(20));
  EXPECT_TRUE(v.stalled);
}

// ---------------------------------------------------------------------------
// StallDetector::Check: jobs that are not running

TEST(StallDetectorTest, JobWithNoRanksIsNotStalled) {
  Job job("job", kStepWindow, kComputeWindow);
  StallDetector detector(Options());
  EXPECT_FALSE(detector.Check(job, AtS(100000)).stalled);

  ASSERT_TRUE(job.ObserveGeneration(AtS(0), 3));  // a generation no rank spoke in
  EXPECT_FALSE(detector.Check(job, AtS(100000)).stalled);
}

TEST(StallDetectorTest, JobWhoseProcessesAreDeadIsNeverStalled) {
  Job job("job", kStepWindow, kComputeWindow);
  RunSteps(job, 4, 10, absl::Seconds(1));
  for (uint32_t r = 0; r < 4; ++r) {
    job.ApplyProcess(AtS(11), NodeOf(r, 4), Exited(r, /*exit_known=*/false, 0));
  }

  EXPECT_FALSE(StallDetector(Options()).Check(job, At(absl::Hours(24))).stalled);
}

TEST(StallDetectorTest, OneDeadRankIsACrashNotAStall) {
  Job job("job", kStepWindow, kComputeWindow);
  RunSteps(job, 4, 10, absl::Seconds(1));
  job.ApplyProcess(AtS(11), kNodeB, Exited(2, /*exit_known=*/true, 1));

  EXPECT_FALSE(StallDetector(Options()).Check(job, At(absl::Hours(1))).stalled);
}

TEST(StallDetectorTest, FinishedJobWhoseRanksExitedZeroIsNeverStalled) {
  Job job("job", kStepWindow, kComputeWindow);
  RunSteps(job, 4, 10, absl::Seconds(1));
  for (uint32_t r = 0; r < 4; ++r) {
    job.ApplyProcess(AtS(11), NodeOf(r, 4), Exited(r, /*exit_known=*/true, 0));
  }

  EXPECT_FALSE(StallDetector(Options()).Check(job, At(absl::Hours(24))).stalled);
}

TEST(StallDetectorTest, RanksOfUnknownLivenessDoNotSwitchTheRuleOff) {
  // Ranks whose process no agent reported (or whose agent went silent) are
  // unknown, not dead: the rule judges the progress it sees.
  Job job("job", kStepWindow, kComputeWindow);
  for (uint32_t r = 0; r < 2; ++r) ApplyStep(job, AtS(1), r, 1, 2, 1.0);
  ASSERT_EQ(job.rank(0).liveness, Liveness::kUnknown);

  EXPECT_TRUE(StallDetector(Options()).Check(job, At(absl::Hours(1))).stalled);
}

TEST(StallDetectorTest, RanksOfAForgottenNodeDoNotSwitchTheRuleOff) {
  Job job("job", kStepWindow, kComputeWindow);
  RunSteps(job, 4, 10, absl::Seconds(1));
  job.ForgetLiveness(NodeOf(3, 4));  // its agent is gone
  ASSERT_EQ(job.rank(3).liveness, Liveness::kUnknown);

  StallVerdict v = StallDetector(Options()).Check(job, AtS(31));

  EXPECT_TRUE(v.stalled);
  EXPECT_EQ(v.silent, absl::Seconds(21));
  EXPECT_EQ(v.threshold, absl::Seconds(20));
}

// ---------------------------------------------------------------------------
// StallDetector::Check: checkpoints

TEST(StallDetectorTest, RankInsideACheckpointRaisesTheThresholdToCheckpointGrace) {
  Job job("job", kStepWindow, kComputeWindow);
  RunSteps(job, 4, 10, absl::Seconds(1));
  Apply(job, AtS(10), MakeHeartbeat(HeartbeatKind::kCheckpointBegin, 2, 10, 4));
  const absl::Time last = AtS(10);
  StallDetector detector(Options());

  StallVerdict at_floor = detector.Check(job, last + absl::Minutes(1));
  StallVerdict at_grace = detector.Check(job, last + absl::Minutes(15));
  StallVerdict past = detector.Check(job, last + absl::Minutes(15) + absl::Nanoseconds(1));

  EXPECT_FALSE(at_floor.stalled);
  EXPECT_EQ(at_floor.threshold, absl::Minutes(15));
  EXPECT_FALSE(at_grace.stalled);
  EXPECT_TRUE(past.stalled);
}

TEST(StallDetectorTest, EndedCheckpointNoLongerRaisesTheThreshold) {
  Job job("job", kStepWindow, kComputeWindow);
  RunSteps(job, 4, 10, absl::Seconds(1));
  Apply(job, AtS(10), MakeHeartbeat(HeartbeatKind::kCheckpointBegin, 2, 10, 4));
  Apply(job, AtS(12), MakeHeartbeat(HeartbeatKind::kCheckpointEnd, 2, 10, 4));

  StallVerdict v = StallDetector(Options()).Check(job, AtS(31));

  EXPECT_EQ(v.threshold, absl::Seconds(20));
  EXPECT_TRUE(v.stalled);
}

// ---------------------------------------------------------------------------
// StallDetector::Check: ranks that said they are exiting

// Every rank of a job that completed steps 1..10 says EXIT with `code` at 10s.
void ExitAll(Job& job, std::optional<int32_t> code) {
  for (uint32_t r = 0; r < job.world_size(); ++r) {
    Heartbeat hb = MakeHeartbeat(HeartbeatKind::kExit, r, 10, job.world_size());
    hb.exit_code = code;
    Apply(job, AtS(10), hb);
  }
}

TEST(StallDetectorTest, ATeardownAfterTheLastStepIsNotAHangWithinExitGrace) {
  // The end of a job: every rank did its last step and called sys.exit(0);
  // the interpreter's teardown (a process group's threads, CUDA) takes
  // longer than the floor on a loaded machine.
  Job job("job", kStepWindow, kComputeWindow);
  RunSteps(job, 4, 10, absl::Seconds(1));
  ExitAll(job, 0);
  ASSERT_TRUE(job.any_exiting());
  const absl::Time last = AtS(10);
  StallDetector detector(Options());

  StallVerdict past_floor = detector.Check(job, last + absl::Seconds(21));
  StallVerdict at_grace = detector.Check(job, last + absl::Minutes(2));
  StallVerdict past = detector.Check(job, last + absl::Minutes(2) + absl::Nanoseconds(1));

  EXPECT_FALSE(past_floor.stalled);
  EXPECT_EQ(past_floor.threshold, absl::Minutes(2));
  EXPECT_FALSE(at_grace.stalled);
  EXPECT_TRUE(past.stalled) << "a teardown that never ends is still a hang";
}

TEST(StallDetectorTest, OneRankExitingIsEnoughAndAnExitWithoutACodeCounts) {
  // The helper's atexit handler says EXIT without a code (the script's end).
  Job job("job", kStepWindow, kComputeWindow);
  RunSteps(job, 4, 10, absl::Seconds(1));
  Heartbeat hb = MakeHeartbeat(HeartbeatKind::kExit, 3, 10, 4);
  Apply(job, AtS(10), hb);

  EXPECT_FALSE(StallDetector(Options()).Check(job, AtS(31)).stalled);
}

TEST(StallDetectorTest, AnExitOfAnEarlierGenerationDoesNotRaiseTheNextOnesThreshold) {
  Job job("job", kStepWindow, kComputeWindow);
  RunSteps(job, 4, 10, absl::Seconds(1));
  ExitAll(job, 0);
  for (uint32_t r = 0; r < 4; ++r) {
    Heartbeat hb = MakeHeartbeat(HeartbeatKind::kStep, r, 11, 4, /*generation=*/2);
    hb.step_duration_s = 1.0;
    Apply(job, AtS(40), hb);
  }
  ASSERT_FALSE(job.any_exiting());

  StallVerdict v = StallDetector(Options()).Check(job, AtS(61));

  EXPECT_EQ(v.threshold, absl::Seconds(20));
  EXPECT_TRUE(v.stalled);
}

TEST(StallDetectorTest, AnExitingRankSeenDeadNoLongerCountsAsExiting) {
  Job job("job", kStepWindow, kComputeWindow);
  RunSteps(job, 4, 10, absl::Seconds(1));
  ExitAll(job, 0);
  for (uint32_t r = 0; r < 4; ++r) {
    job.ApplyProcess(AtS(12), NodeOf(r, 4), Exited(r, /*exit_known=*/true, 0));
  }

  EXPECT_FALSE(job.any_exiting());
  EXPECT_FALSE(StallDetector(Options()).Check(job, At(absl::Hours(24))).stalled);
}

// ---------------------------------------------------------------------------
// FindCulprit

// Four live ranks that completed steps 1..10 at T0 + 1s .. T0 + 10s.
class CulpritTest : public ::testing::Test {
 protected:
  void SetUp() override { RunSteps(job_, 4, 10, absl::Seconds(1)); }

  void ComputeBegin(uint32_t rank, int64_t step, absl::Time now) {
    Apply(job_, now, MakeHeartbeat(HeartbeatKind::kComputeBegin, rank, step, 4));
  }
  void ComputeEnd(uint32_t rank, int64_t step, absl::Time now) {
    Apply(job_, now, MakeHeartbeat(HeartbeatKind::kComputeEnd, rank, step, 4));
  }
  // Computed step `step` and now waits in its collective.
  void ComputeDone(uint32_t rank, int64_t step, absl::Time now) {
    ComputeBegin(rank, step, now);
    ComputeEnd(rank, step, now);
  }

  Job job_{"job", kStepWindow, kComputeWindow};
};

TEST_F(CulpritTest, RankStillComputingWhileOthersWaitIsNamed) {
  ComputeDone(0, 11, AtS(11));
  ComputeDone(1, 11, AtS(11));
  ComputeBegin(2, 11, AtS(11));
  ComputeDone(3, 11, AtS(11));

  Culprit c = FindCulprit(job_);

  EXPECT_EQ(c.rank, 2u);
  EXPECT_EQ(c.behind_step, 10);
  EXPECT_EQ(c.behind_phase, StepPhase::kComputing);
  EXPECT_EQ(c.behind_ranks, 1u);
  EXPECT_EQ(c.seen_ranks, 4u);
}

TEST_F(CulpritTest, RankAWholeStepBehindIsNamedOverRanksInLaterPhases) {
  // Ranks 0, 1 and 3 completed step 11 (rank 0 is already computing 12);
  // rank 2 finished computing step 11 but has not completed it.
  ApplyStep(job_, AtS(11), 0, 11, 4, 1.0);
  ApplyStep(job_, AtS(11), 1, 11, 4, 1.0);
  ApplyStep(job_, AtS(11), 3, 11, 4, 1.0);
  ComputeBegin(0, 12, AtS(12));
  ComputeDone(2, 11, AtS(12));

  Culprit c = FindCulprit(job_);

  EXPECT_EQ(c.rank, 2u);
  EXPECT_EQ(c.behind_step, 10);
  EXPECT_EQ(c.behind_phase, StepPhase::kComputeDone);
}

TEST_F(CulpritTest, BetweenStepsIsBehindComputingWhichIsBehindComputeDone) {
  ComputeBegin(0, 11, AtS(11));
  ComputeDone(1, 11, AtS(11));
  ComputeDone(2, 11, AtS(11));
  // Rank 3 has not begun step 11.

  EXPECT_EQ(FindCulprit(job_).rank, 3u);

  ComputeBegin(3, 11, AtS(12));
  EXPECT_EQ(FindCulprit(job_).rank, 0u);
}

TEST_F(CulpritTest, AmongRanksTiedBehindTheOneSilentLongestIsNamed) {
  ComputeDone(0, 11, AtS(11));
  ComputeDone(2, 11, AtS(11));
  ComputeBegin(1, 11, AtS(14));
  ComputeBegin(3, 11, AtS(12));  // tied with rank 1, heard of 2s earlier

  Culprit c = FindCulprit(job_);

  EXPECT_EQ(c.rank, 3u);
  EXPECT_EQ(c.behind_ranks, 2u);
}

TEST_F(CulpritTest, AmongTiedRanksWithEqualLastHeartbeatTheLowestRankIsNamed) {
  // Documented choice: on equal (step, phase) and equal last heartbeat time,
  // the rank with the lowest index wins (ranks are scanned in order and only
  // a strictly older heartbeat replaces the current choice).
  ComputeDone(0, 11, AtS(11));
  ComputeDone(2, 11, AtS(11));
  ComputeBegin(3, 11, AtS(12));
  ComputeBegin(1, 11, AtS(12));

  EXPECT_EQ(FindCulprit(job_).rank, 1u);
}

TEST_F(CulpritTest, AllRanksAtTheSamePlaceIsUndetermined) {
  for (uint32_t r = 0; r < 4; ++r) ComputeDone(r, 11, AtS(11 + r));

  Culprit c = FindCulprit(job_);

  EXPECT_EQ(c.rank, std::nullopt);
  EXPECT_EQ(c.seen_ranks, 4u);
  EXPECT_EQ(c.behind_ranks, 4u);
  EXPECT_EQ(c.behind_step, 10);
  EXPECT_EQ(c.behind_phase, StepPhase::kComputeDone);
}

TEST_F(CulpritTest, RanksOfASilentNodeAreNoEvidenceAndNeverNamed) {
  // node-b (ranks 2, 3) went silent while computing step 11; node-a's
  // rank 0 still computes while rank 1 waits: rank 0 is named, not the
  // silent ranks whose stale phase looks further behind.
  ComputeBegin(2, 11, AtS(10.1));
  ComputeBegin(3, 11, AtS(10.1));
  ComputeBegin(0, 11, AtS(10.2));
  ComputeDone(1, 11, AtS(10.3));

  Culprit c = FindCulprit(job_, {kNodeB});

  EXPECT_EQ(c.rank, 0u);
  EXPECT_EQ(c.unseen_ranks, 2u);
}

TEST_F(CulpritTest, EveryRankSeenWaitingWhileOthersCannotBeSeenNamesNone) {
  for (uint32_t r : {0u, 1u}) ComputeDone(r, 11, AtS(10.3));

  Culprit c = FindCulprit(job_, {kNodeB});

  EXPECT_EQ(c.rank, std::nullopt);
  EXPECT_EQ(c.unseen_ranks, 2u);
  EXPECT_EQ(c.seen_ranks, 2u);
  EXPECT_EQ(c.behind_ranks, 2u);
  EXPECT_EQ(c.behind_step, 10);
  EXPECT_EQ(c.behind_phase, StepPhase::kComputeDone);
}

TEST_F(CulpritTest, RankWhosePhaseMayBeStaleIsNotNamedForItsPhase) {
  // Rank 2's helper gave up on a datagram (its COMPUTE_END, say): it looks
  // as if still computing, but may be waiting like the others.
  for (uint32_t r : {0u, 1u, 3u}) ComputeDone(r, 11, AtS(10.3));
  ComputeBegin(2, 11, AtS(10.2));
  Heartbeat lost = MakeHeartbeat(HeartbeatKind::kCheckpointEnd, 2, 10, 4);
  lost.datagrams_dropped = 1;
  Apply(job_, AtS(10.4), lost);
  ASSERT_TRUE(job_.rank(2).phase_uncertain);

  Culprit c = FindCulprit(job_);

  EXPECT_EQ(c.rank, std::nullopt);
}

TEST_F(CulpritTest, RankWhosePhaseMayBeStaleIsStillNamedWhenItsStepIsBehind) {
  for (uint32_t r : {0u, 1u, 3u}) {
    ComputeDone(r, 11, AtS(10.3));
    ApplyStep(job_, AtS(11), r, 11, 4, 1.0);
  }
  Heartbeat lost = MakeHeartbeat(HeartbeatKind::kCheckpointEnd, 2, 10, 4);
  lost.datagrams_dropped = 1;
  Apply(job_, AtS(11.5), lost);

  EXPECT_EQ(FindCulprit(job_).rank, 2u);
}

TEST_F(CulpritTest, StepOrPhaseHeartbeatIsTheRanksLatestPlaceDespiteDrops) {
  Heartbeat begin = MakeHeartbeat(HeartbeatKind::kComputeBegin, 2, 11, 4);
  begin.datagrams_dropped = 3;
  Apply(job_, AtS(10.2), begin);
  EXPECT_FALSE(job_.rank(2).phase_uncertain);
  for (uint32_t r : {0u, 1u, 3u}) ComputeDone(r, 11, AtS(10.3));

  EXPECT_EQ(FindCulprit(job_).rank, 2u);
}

// Seen in CI with 8 ranks a node: rank 2's STEP 11 waited in its helper's
// outbox behind a full agent queue, and its COMPUTE_END of step 12, of the
// same slot, replaced it. Rank 2 waits in step 12's all-reduce like the
// others; rank 1, still computing step 12, is the one they wait for.
TEST_F(CulpritTest, ARankWhoseStepWasReplacedByItsNextComputeIsNotNamed) {
  for (uint32_t r : {0u, 1u, 2u, 3u}) ComputeDone(r, 11, AtS(10.3));
  for (uint32_t r : {0u, 1u, 3u}) ApplyStep(job_, AtS(11), r, 11, 4, 1.0);
  for (uint32_t r : {0u, 3u}) ComputeDone(r, 12, AtS(11.3));
  ComputeBegin(1, 12, AtS(11.1));
  Heartbeat replaced = MakeHeartbeat(HeartbeatKind::kComputeEnd, 2, 12, 4);
  replaced.datagrams_dropped = 1;
  Apply(job_, AtS(11.4), replaced);

  Culprit c = FindCulprit(job_);

  EXPECT_EQ(job_.rank(2).step, 11);
  EXPECT_EQ(c.rank, 1u);
  EXPECT_EQ(c.behind_step, 11);
  EXPECT_EQ(c.behind_phase, StepPhase::kComputing);
}

TEST_F(CulpritTest, RanksThatNeverBracketComputeAreUndetermined) {
  // Only STEP heartbeats: every rank is between steps 10 and 11.
  Culprit c = FindCulprit(job_);

  EXPECT_EQ(c.rank, std::nullopt);
  EXPECT_EQ(c.behind_ranks, 4u);
  EXPECT_EQ(c.behind_phase, StepPhase::kBetweenSteps);
}

TEST(FindCulpritTest, SingleRankJobIsUndetermined) {
  Job job("job", kStepWindow, kComputeWindow);
  RunSteps(job, 1, 10, absl::Seconds(1));
  Apply(job, AtS(11), MakeHeartbeat(HeartbeatKind::kComputeBegin, 0, 11, 1));

  Culprit c = FindCulprit(job);

  EXPECT_EQ(c.rank, std::nullopt);
  EXPECT_EQ(c.seen_ranks, 1u);
  EXPECT_EQ(c.behind_ranks, 1u);
}

TEST(FindCulpritTest, JobWithNoRankIsUndetermined) {
  Job job("job", kStepWindow, kComputeWindow);

  Culprit c = FindCulprit(job);

  EXPECT_EQ(c.rank, std::nullopt);
  EXPECT_EQ(c.seen_ranks, 0u);
  EXPECT_EQ(c.unseen_ranks, 0u);
}

TEST(FindCulpritTest, RanksNotHeardFromAreNotCandidates) {
  Job job("job", kStepWindow, kComputeWindow);
  // World of 4; only ranks 1 and 2 reported, rank 2 is behind.
  ApplyStep(job, AtS(1), 1, 5, 4, 1.0);
  ApplyStep(job, AtS(1), 2, 4, 4, 1.0);

  Culprit c = FindCulprit(job);

  EXPECT_EQ(c.rank, 2u);
  EXPECT_EQ(c.seen_ranks, 2u);  // the two that reported, not the world of 4
  EXPECT_EQ(c.behind_ranks, 1u);
}

}  // namespace
}  // namespace trainsup
