#include "daemon/core/job.h"

#include <cstdint>
#include <optional>

#include "absl/time/time.h"
#include "daemon/core/heartbeat.h"
#include "daemon/core/reject_reason.h"
#include "gtest/gtest.h"
#include "tests/support/core_builders.h"
#include "tests/unit/reject_reason_printer.h"

namespace trainsup {
namespace {

using ::trainsup::testing::MakeHeartbeat;

constexpr NodeIndex kNodeA = 0;
constexpr NodeIndex kNodeB = 1;
constexpr size_t kStepWindow = 8;
constexpr size_t kComputeWindow = 8;

absl::Time At(int64_t ms) { return absl::FromUnixSeconds(1000) + absl::Milliseconds(ms); }

// A heartbeat of the shared conventions but for the pid: here 1000 + rank,
// told apart from the processes' 2000 + rank.
Heartbeat Hb(HeartbeatKind kind, uint32_t rank, int64_t step, uint32_t world_size = 4,
             uint64_t generation = 0) {
  Heartbeat hb = MakeHeartbeat(kind, rank, step, world_size, generation);
  hb.pid = 1000 + rank;
  return hb;
}

Heartbeat Step(uint32_t rank, int64_t step, double duration_s = 0.5, uint32_t world_size = 4,
               uint64_t generation = 0) {
  Heartbeat hb = Hb(HeartbeatKind::kStep, rank, step, world_size, generation);
  hb.step_duration_s = duration_s;
  return hb;
}

RankProcessInfo Process(uint32_t rank, bool alive, uint64_t generation = 0) {
  RankProcessInfo p;
  p.rank = rank;
  p.pid = 2000 + rank;
  p.generation = generation;
  p.alive = alive;
  return p;
}

TEST(JobTest, NewJobIsEmpty) {
  Job job("job", kStepWindow, kComputeWindow);
  EXPECT_EQ(job.id(), "job");
  EXPECT_EQ(job.generation(), 0u);
  EXPECT_EQ(job.world_size(), 0u);
  EXPECT_TRUE(job.ranks().empty());
  EXPECT_EQ(job.max_step(), -1);
  EXPECT_EQ(job.last_progress(), absl::InfinitePast());
  EXPECT_EQ(job.heartbeats_received(), 0u);
  EXPECT_EQ(job.ranks_reporting(), 0u);
}

TEST(JobTest, FirstHeartbeatSetsWorldSize) {
  Job job("job", kStepWindow, kComputeWindow);
  EXPECT_EQ(job.Apply(At(0), kNodeA, Hb(HeartbeatKind::kStart, 2, 0, /*world_size=*/6)),
            std::nullopt);

  EXPECT_EQ(job.world_size(), 6u);
  ASSERT_EQ(job.ranks().size(), 1u);  // state only for the rank that spoke
  const RankState& r = job.rank(2);
  EXPECT_TRUE(r.seen);
  EXPECT_EQ(r.node, kNodeA);
  EXPECT_EQ(r.pid, 1002u);
  EXPECT_EQ(r.local_rank, 0u);
  EXPECT_EQ(r.last_heartbeat, At(0));
  EXPECT_EQ(r.step, -1);
  EXPECT_FALSE(job.rank(0).seen);
}

TEST(JobTest, ClaimedWorldSizeCostsNothingUntilRanksReport) {
  Job job("job", kStepWindow, kComputeWindow);
  ASSERT_EQ(job.Apply(At(0), kNodeA, Hb(HeartbeatKind::kStart, 1048575, 0, /*world_size=*/1u << 20)),
            std::nullopt);
  ASSERT_EQ(job.Apply(At(1), kNodeA, Hb(HeartbeatKind::kStart, 7, 0, /*world_size=*/1u << 20)),
            std::nullopt);

  EXPECT_EQ(job.world_size(), 1u << 20);
  EXPECT_EQ(job.ranks_reporting(), 2u);
  ASSERT_EQ(job.ranks().size(), 2u);
  // By rank, whatever order they spoke in.
  EXPECT_EQ(job.ranks().begin()->first, 7u);
  EXPECT_EQ(job.ranks().begin()->second.rank, 7u);
  EXPECT_TRUE(job.rank(1048575).seen);
  EXPECT_FALSE(job.rank(3).seen);
}

TEST(JobTest, StepAdvancesStepProgressAndMaxStep) {
  Job job("job", kStepWindow, kComputeWindow);
  ASSERT_EQ(job.Apply(At(10), kNodeA, Step(0, 5, 0.25)), std::nullopt);

  EXPECT_EQ(job.rank(0).step, 5);
  EXPECT_EQ(job.rank(0).last_progress, At(10));
  EXPECT_EQ(job.last_progress(), At(10));
  EXPECT_EQ(job.max_step(), 5);
  EXPECT_EQ(job.rank(0).step_durations.size(), 1u);
  EXPECT_EQ(job.rank(0).step_durations.Percentile(0.5), 0.25);

  ASSERT_EQ(job.Apply(At(20), kNodeA, Step(1, 3)), std::nullopt);
  EXPECT_EQ(job.max_step(), 5);  // rank 1 is behind
  EXPECT_EQ(job.last_progress(), At(20));

  ASSERT_EQ(job.Apply(At(30), kNodeA, Step(1, 7)), std::nullopt);
  EXPECT_EQ(job.max_step(), 7);
  EXPECT_EQ(job.rank(1).last_progress, At(30));
  EXPECT_EQ(job.rank(0).last_progress, At(10));
}

// Its agent held the heartbeat for a report interval: the step was made then,
// and a stall is timed from it, not from the report's arrival.
TEST(JobTest, StepIsDatedWhenItsAgentReadIt) {
  Job job("job", kStepWindow, kComputeWindow);
  Heartbeat early = Step(0, 1);
  early.queued_s = 0.9;
  ASSERT_EQ(job.Apply(At(10'000), kNodeA, early), std::nullopt);
  EXPECT_EQ(job.rank(0).last_progress, At(9'100));
  EXPECT_EQ(job.last_progress(), At(9'100));
  EXPECT_EQ(job.rank(0).last_heartbeat, At(10'000));  // the node was heard now

  // A heartbeat that waited out a broken stream is credited 10 s at most.
  Heartbeat stale = Step(1, 1);
  stale.queued_s = 300;
  ASSERT_EQ(job.Apply(At(20'000), kNodeA, stale), std::nullopt);
  EXPECT_EQ(job.rank(1).last_progress, At(10'000));

  // Progress never goes back: a later step that waited longer than an
  // earlier one leaves the job's progress where it was.
  Heartbeat later = Step(0, 2);
  later.queued_s = 5;
  ASSERT_EQ(job.Apply(At(14'000), kNodeA, later), std::nullopt);
  EXPECT_EQ(job.rank(0).last_progress, At(9'100));
  EXPECT_EQ(job.last_progress(), At(10'000));
}

TEST(JobTest, StepRecordsLossAndLearningRate) {
  Job job("job", kStepWindow, kComputeWindow);
  Heartbeat hb = Step(0, 1);
  hb.loss = 2.5;
  hb.learning_rate = 1e-3;
  ASSERT_EQ(job.Apply(At(0), kNodeA, hb), std::nullopt);

  EXPECT_EQ(job.rank(0).loss, 2.5);
  EXPECT_EQ(job.rank(0).learning_rate, 1e-3);
}

TEST(JobTest, DuplicateStepIsAcceptedButChangesNoProgress) {
  Job job("job", kStepWindow, kComputeWindow);
  ASSERT_EQ(job.Apply(At(10), kNodeA, Step(0, 5, 0.5)), std::nullopt);

  EXPECT_EQ(job.Apply(At(20), kNodeA, Step(0, 5, 0.9)), std::nullopt);

  const RankState& r = job.rank(0);
  EXPECT_EQ(r.step, 5);
  EXPECT_EQ(r.step_durations.total_added(), 1u);
  EXPECT_EQ(r.last_progress, At(10));
  EXPECT_EQ(job.last_progress(), At(10));
  EXPECT_EQ(r.last_heartbeat, At(20));
  EXPECT_EQ(r.heartbeats, 2u);
}

TEST(JobTest, LowerStepInSameGenerationIsStepRegressed) {
  Job job("job", kStepWindow, kComputeWindow);
  ASSERT_EQ(job.Apply(At(10), kNodeA, Step(0, 5)), std::nullopt);

  EXPECT_EQ(job.Apply(At(20), kNodeA, Step(0, 4)), RejectReason::kStepRegressed);

  EXPECT_EQ(job.rank(0).step, 5);
  EXPECT_EQ(job.rank(0).last_heartbeat, At(10));
  EXPECT_EQ(job.rank(0).heartbeats, 1u);
  EXPECT_EQ(job.heartbeats_received(), 1u);
}

TEST(JobTest, NonStepKindBelowRankStepIsStepRegressed) {
  Job job("job", kStepWindow, kComputeWindow);
  ASSERT_EQ(job.Apply(At(10), kNodeA, Step(0, 5)), std::nullopt);

  EXPECT_EQ(job.Apply(At(20), kNodeA, Hb(HeartbeatKind::kComputeBegin, 0, 3)),
            RejectReason::kStepRegressed);
}

TEST(JobTest, NonStepKindsDoNotAdvanceTheStep) {
  Job job("job", kStepWindow, kComputeWindow);
  ASSERT_EQ(job.Apply(At(10), kNodeA, Step(0, 5)), std::nullopt);

  ASSERT_EQ(job.Apply(At(20), kNodeA, Hb(HeartbeatKind::kComputeBegin, 0, 6)), std::nullopt);
  ASSERT_EQ(job.Apply(At(30), kNodeA, Hb(HeartbeatKind::kCheckpointEnd, 0, 6)), std::nullopt);

  EXPECT_EQ(job.rank(0).step, 5);
  EXPECT_EQ(job.max_step(), 5);
  EXPECT_EQ(job.rank(0).last_progress, At(10));
  EXPECT_EQ(job.rank(0).last_heartbeat, At(30));
}

TEST(JobTest, StartDoesNotAdvanceTheStep) {
  Job job("job", kStepWindow, kComputeWindow);
  ASSERT_EQ(job.Apply(At(10), kNodeA, Hb(HeartbeatKind::kStart, 0, 100)), std::nullopt);

  EXPECT_EQ(job.rank(0).step, -1);
  EXPECT_EQ(job.max_step(), -1);
  EXPECT_EQ(job.last_progress(), absl::InfinitePast());
}

TEST(JobTest, StartIsNotCheckedForRegression) {
  Job job("job", kStepWindow, kComputeWindow);
  ASSERT_EQ(job.Apply(At(10), kNodeA, Step(0, 50)), std::nullopt);

  EXPECT_EQ(job.Apply(At(20), kNodeA, Hb(HeartbeatKind::kStart, 0, 10)), std::nullopt);

  EXPECT_EQ(job.rank(0).step, 50);
  EXPECT_EQ(job.rank(0).last_heartbeat, At(20));
}

TEST(JobTest, ExceptionRecordsTypeAndMessageWithoutAdvancing) {
  Job job("job", kStepWindow, kComputeWindow);
  ASSERT_EQ(job.Apply(At(0), kNodeA, Step(0, 1)), std::nullopt);
  Heartbeat hb = Hb(HeartbeatKind::kException, 0, 1);
  hb.exception_type = "RuntimeError";
  hb.exception_message = "CUDA out of memory";

  ASSERT_EQ(job.Apply(At(10), kNodeA, hb), std::nullopt);

  EXPECT_EQ(job.rank(0).exception_type, "RuntimeError");
  EXPECT_EQ(job.rank(0).exception_message, "CUDA out of memory");
  EXPECT_EQ(job.rank(0).step, 1);
  EXPECT_EQ(job.rank(0).last_progress, At(0));
}

TEST(JobTest, AnExitWithAFailingCodeCarriesTheExceptionItsScriptCaught) {
  Job job("job", kStepWindow, kComputeWindow);
  Heartbeat hb = Hb(HeartbeatKind::kExit, 0, 0);
  hb.exit_code = 1;
  hb.exception_type = "RuntimeError";
  hb.exception_message = "CUDA error: unspecified launch failure";

  ASSERT_EQ(job.Apply(At(0), kNodeA, hb), std::nullopt);

  EXPECT_EQ(job.rank(0).exiting_code, 1);
  EXPECT_EQ(job.rank(0).exception_type, "RuntimeError");
  EXPECT_TRUE(job.rank(0).exception_caught);
}

TEST(JobTest, AClean0ExitKeepsNoCauseAndAnUncaughtExceptionStaysAsItWas) {
  Job job("job", kStepWindow, kComputeWindow);
  Heartbeat clean = Hb(HeartbeatKind::kExit, 0, 0);
  clean.exit_code = 0;
  clean.exception_type = "StopIteration";  // a helper would not send it; the core ignores it
  ASSERT_EQ(job.Apply(At(0), kNodeA, clean), std::nullopt);
  EXPECT_EQ(job.rank(0).exception_type, "");

  Heartbeat raised = Hb(HeartbeatKind::kException, 1, 0);
  raised.exception_type = "ValueError";
  ASSERT_EQ(job.Apply(At(0), kNodeA, raised), std::nullopt);
  Heartbeat exit = Hb(HeartbeatKind::kExit, 1, 0);
  exit.exit_code = 1;
  exit.exception_type = "RuntimeError";
  ASSERT_EQ(job.Apply(At(1), kNodeA, exit), std::nullopt);
  EXPECT_EQ(job.rank(1).exception_type, "ValueError");
  EXPECT_FALSE(job.rank(1).exception_caught);
}

TEST(JobTest, AVerdictIsTheRanksLatestWord) {
  Job job("job", kStepWindow, kComputeWindow);
  Heartbeat hb = Hb(HeartbeatKind::kVerdict, 0, 0);
  hb.verdict = VerdictAction::kStop;
  hb.verdict_reason = "loss\tspiked\n";
  ASSERT_EQ(job.Apply(At(0), kNodeA, hb), std::nullopt);
  EXPECT_EQ(job.rank(0).verdict, VerdictAction::kStop);
  EXPECT_EQ(job.rank(0).verdict_reason, "loss spiked");  // on one line

  hb.verdict = VerdictAction::kDefault;
  ASSERT_EQ(job.Apply(At(1), kNodeA, hb), std::nullopt);
  EXPECT_EQ(job.rank(0).verdict, VerdictAction::kDefault);
}

TEST(JobTest, ADeadRanksStderrLineIsKeptOnceAndCut) {
  Job job("job", kStepWindow, kComputeWindow);
  ASSERT_EQ(job.Apply(At(0), kNodeA, Step(0, 1)), std::nullopt);
  RankProcessInfo dead = Process(0, false);
  dead.stderr_line = "Xid 79: " + std::string(400, 'x');
  job.ApplyProcess(At(1), kNodeA, dead);
  EXPECT_EQ(job.rank(0).stderr_line.size(), 256u);
  dead.stderr_line = "another";
  job.ApplyProcess(At(2), kNodeA, dead);
  EXPECT_EQ(job.rank(0).stderr_line.substr(0, 8), "Xid 79: ");
}

TEST(JobTest, OtherWorldSizeAfterARankReportedIsWorldSizeMismatch) {
  Job job("job", kStepWindow, kComputeWindow);
  ASSERT_EQ(job.Apply(At(0), kNodeA, Step(0, 1, 0.5, /*world_size=*/4)), std::nullopt);

  EXPECT_EQ(job.Apply(At(10), kNodeA, Step(1, 1, 0.5, /*world_size=*/8)),
            RejectReason::kWorldSizeMismatch);

  EXPECT_EQ(job.world_size(), 4u);
  EXPECT_EQ(job.ranks_reporting(), 1u);
  EXPECT_EQ(job.rank(0).step, 1);
}

TEST(JobTest, NewerGenerationResetsRanks) {
  Job job("job", kStepWindow, kComputeWindow);
  ASSERT_EQ(job.Apply(At(0), kNodeA, Step(0, 40, 0.5, 4, /*generation=*/1)), std::nullopt);
  ASSERT_EQ(job.Apply(At(0), kNodeA, Step(1, 40, 0.5, 4, /*generation=*/1)), std::nullopt);
  ASSERT_EQ(job.generation(), 1u);

  // Generation 2 has another world size and starts over from step 0.
  EXPECT_EQ(job.Apply(At(10), kNodeB, Step(0, 0, 0.5, /*world_size=*/2, /*generation=*/2)),
            std::nullopt);

  EXPECT_EQ(job.generation(), 2u);
  EXPECT_EQ(job.world_size(), 2u);
  // Only the rank that reported is held: memory follows reports, not claims.
  ASSERT_EQ(job.ranks().size(), 1u);
  EXPECT_EQ(job.rank(0).step, 0);
  EXPECT_EQ(job.rank(0).node, kNodeB);
  EXPECT_EQ(job.rank(0).step_durations.size(), 1u);
  EXPECT_FALSE(job.rank(1).seen);
  EXPECT_EQ(job.ranks_reporting(), 1u);
  EXPECT_EQ(job.max_step(), 0);
  // Steps below the old generation's are no regression in the new one.
  EXPECT_EQ(job.Apply(At(20), kNodeB, Step(1, 1, 0.5, 2, 2)), std::nullopt);
}

TEST(JobTest, OlderGenerationIsStaleGeneration) {
  Job job("job", kStepWindow, kComputeWindow);
  ASSERT_EQ(job.Apply(At(0), kNodeA, Step(0, 5, 0.5, 4, /*generation=*/3)), std::nullopt);

  EXPECT_EQ(job.Apply(At(10), kNodeA, Step(0, 6, 0.5, 4, /*generation=*/2)),
            RejectReason::kStaleGeneration);

  EXPECT_EQ(job.generation(), 3u);
  EXPECT_EQ(job.rank(0).step, 5);
}

TEST(JobTest, GenerationZeroCountsAsCurrent) {
  Job job("job", kStepWindow, kComputeWindow);
  ASSERT_EQ(job.Apply(At(0), kNodeA, Step(0, 5, 0.5, 4, /*generation=*/3)), std::nullopt);

  EXPECT_EQ(job.Apply(At(10), kNodeA, Step(0, 6, 0.5, 4, /*generation=*/0)), std::nullopt);

  EXPECT_EQ(job.generation(), 3u);
  EXPECT_EQ(job.rank(0).step, 6);
  // Still checked against the current generation's state.
  EXPECT_EQ(job.Apply(At(20), kNodeA, Step(0, 2, 0.5, 4, 0)), RejectReason::kStepRegressed);
}

TEST(JobTest, ObserveGenerationResetsOnlyWhenNewer) {
  Job job("job", kStepWindow, kComputeWindow);
  ASSERT_EQ(job.Apply(At(0), kNodeA, Step(0, 5, 0.5, 4, 2)), std::nullopt);

  EXPECT_FALSE(job.ObserveGeneration(At(10), 1));
  EXPECT_FALSE(job.ObserveGeneration(At(10), 2));
  EXPECT_EQ(job.generation(), 2u);
  EXPECT_EQ(job.world_size(), 4u);
  EXPECT_EQ(job.rank(0).step, 5);

  EXPECT_TRUE(job.ObserveGeneration(At(20), 3));
  EXPECT_EQ(job.generation(), 3u);
  EXPECT_EQ(job.generation_start(), At(20));
  EXPECT_EQ(job.last_progress(), absl::InfinitePast());
  EXPECT_EQ(job.world_size(), 0u);
  EXPECT_EQ(job.ranks_reporting(), 0u);
  EXPECT_EQ(job.max_step(), -1);
}

TEST(JobTest, ZeroDurationAddsNoSample) {
  Job job("job", kStepWindow, kComputeWindow);
  ASSERT_EQ(job.Apply(At(0), kNodeA, Step(0, 1, /*duration_s=*/0)), std::nullopt);

  EXPECT_EQ(job.rank(0).step, 1);
  EXPECT_TRUE(job.rank(0).step_durations.empty());
  EXPECT_EQ(job.rank(0).step_durations.total_added(), 0u);
}

TEST(JobTest, StepWindowCapacityIsTheJobs) {
  Job job("job", /*step_window=*/3, kComputeWindow);
  for (int step = 1; step <= 5; ++step) {
    ASSERT_EQ(job.Apply(At(step), kNodeA, Step(0, step, step * 0.1)), std::nullopt);
  }
  EXPECT_EQ(job.rank(0).step_durations.capacity(), 3u);
  EXPECT_EQ(job.rank(0).step_durations.size(), 3u);
  EXPECT_EQ(job.rank(0).step_durations.total_added(), 5u);
}

TEST(JobTest, ApplyProcessSetsAliveNodeAndPid) {
  Job job("job", kStepWindow, kComputeWindow);
  ASSERT_EQ(job.Apply(At(0), kNodeA, Step(0, 1)), std::nullopt);

  job.ApplyProcess(At(100), kNodeB, Process(1, /*alive=*/true));

  EXPECT_TRUE(job.rank(1).alive());
  EXPECT_EQ(job.rank(1).node, kNodeB);
  EXPECT_EQ(job.rank(1).pid, 2001u);
  EXPECT_EQ(job.ranks_alive(), 1u);

  RankProcessInfo dead = Process(1, /*alive=*/false);
  dead.pid = 0;  // unknown: keeps the pid already known
  job.ApplyProcess(At(100), kNodeB, dead);
  EXPECT_FALSE(job.rank(1).alive());
  EXPECT_EQ(job.rank(1).pid, 2001u);
  EXPECT_EQ(job.ranks_alive(), 0u);
}

TEST(JobTest, ApplyProcessIgnoresOtherGenerations) {
  Job job("job", kStepWindow, kComputeWindow);
  ASSERT_EQ(job.Apply(At(0), kNodeA, Step(0, 1, 0.5, 4, /*generation=*/2)), std::nullopt);

  job.ApplyProcess(At(100), kNodeA, Process(0, true, /*generation=*/1));
  job.ApplyProcess(At(100), kNodeA, Process(1, true, /*generation=*/3));
  EXPECT_EQ(job.ranks_alive(), 0u);

  job.ApplyProcess(At(100), kNodeA, Process(2, true, /*generation=*/2));
  job.ApplyProcess(At(100), kNodeA, Process(3, true, /*generation=*/0));  // 0: the current one
  EXPECT_TRUE(job.rank(2).alive());
  EXPECT_TRUE(job.rank(3).alive());
  EXPECT_EQ(job.ranks_alive(), 2u);
}

TEST(JobTest, ApplyProcessIgnoresRanksOutsideTheWorld) {
  Job job("job", kStepWindow, kComputeWindow);
  job.ApplyProcess(At(100), kNodeA, Process(0, true));  // no world yet
  EXPECT_EQ(job.ranks_alive(), 0u);

  ASSERT_EQ(job.Apply(At(0), kNodeA, Step(0, 1, 0.5, /*world_size=*/4)), std::nullopt);
  job.ApplyProcess(At(100), kNodeA, Process(4, true));
  job.ApplyProcess(At(100), kNodeA, Process(1000, true));

  EXPECT_EQ(job.ranks().size(), 1u);  // rank 0 only: nothing held for the others
  EXPECT_EQ(job.ranks_alive(), 0u);
}

TEST(JobTest, ForgetLivenessOnlyAffectsThatNodesRanks) {
  Job job("job", kStepWindow, kComputeWindow);
  ASSERT_EQ(job.Apply(At(0), kNodeA, Step(0, 1)), std::nullopt);
  job.ApplyProcess(At(100), kNodeA, Process(0, true));
  job.ApplyProcess(At(100), kNodeA, Process(1, true));
  job.ApplyProcess(At(100), kNodeB, Process(2, true));
  job.ApplyProcess(At(100), kNodeB, Process(3, true));
  ASSERT_EQ(job.ranks_alive(), 4u);

  job.ForgetLiveness(kNodeA);

  EXPECT_FALSE(job.rank(0).alive());
  EXPECT_FALSE(job.rank(1).alive());
  EXPECT_TRUE(job.rank(2).alive());
  EXPECT_TRUE(job.rank(3).alive());
  EXPECT_EQ(job.ranks_alive(), 2u);
}

TEST(JobTest, RanksReportingCountsDistinctRanks) {
  Job job("job", kStepWindow, kComputeWindow);
  ASSERT_EQ(job.Apply(At(0), kNodeA, Step(0, 1)), std::nullopt);
  ASSERT_EQ(job.Apply(At(1), kNodeA, Step(0, 2)), std::nullopt);
  ASSERT_EQ(job.Apply(At(2), kNodeA, Hb(HeartbeatKind::kComputeBegin, 0, 3)), std::nullopt);
  EXPECT_EQ(job.ranks_reporting(), 1u);

  ASSERT_EQ(job.Apply(At(3), kNodeB, Step(3, 1)), std::nullopt);
  EXPECT_EQ(job.ranks_reporting(), 2u);

  // A refused heartbeat does not make its rank reporting.
  ASSERT_EQ(job.Apply(At(4), kNodeB, Step(2, 1, 0.5, /*world_size=*/5)),
            RejectReason::kWorldSizeMismatch);
  EXPECT_EQ(job.ranks_reporting(), 2u);
}

TEST(JobTest, HeartbeatsReceivedCountsAcceptedHeartbeats) {
  Job job("job", kStepWindow, kComputeWindow);
  ASSERT_EQ(job.Apply(At(0), kNodeA, Step(0, 1)), std::nullopt);
  ASSERT_EQ(job.Apply(At(1), kNodeA, Step(0, 1)), std::nullopt);
  ASSERT_EQ(job.Apply(At(2), kNodeA, Hb(HeartbeatKind::kStart, 1, 0)), std::nullopt);
  ASSERT_EQ(job.Apply(At(3), kNodeA, Step(0, 0)), RejectReason::kStepRegressed);

  EXPECT_EQ(job.heartbeats_received(), 3u);
  EXPECT_EQ(job.rank(0).heartbeats, 2u);
  EXPECT_EQ(job.rank(1).heartbeats, 1u);
}

}  // namespace
}  // namespace trainsup
