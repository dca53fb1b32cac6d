#include "agent/report_batcher.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "agent/rank_watcher.h"
#include "gtest/gtest.h"
#include "trainsup/v1/agent.pb.h"
#include "trainsup/v1/heartbeat.pb.h"

namespace trainsup {
namespace {

// Steady-clock readings are durations since an arbitrary origin.
absl::Duration Steady(int64_t ms) { return absl::Seconds(500) + absl::Milliseconds(ms); }

v1::RankHeartbeat Hb(v1::HeartbeatKind kind, uint32_t rank, int64_t step,
                     uint64_t generation = 1) {
  v1::RankHeartbeat hb;
  hb.set_kind(kind);
  hb.set_job("job");
  hb.set_rank(rank);
  hb.set_world_size(8);
  hb.set_step(step);
  hb.set_generation(generation);
  return hb;
}

v1::RankHeartbeat Step(uint32_t rank, int64_t step, uint64_t generation = 1) {
  return Hb(v1::HEARTBEAT_KIND_STEP, rank, step, generation);
}

// "<KIND> r<rank> s<step>" for each heartbeat of `report`, to compare orders.
std::vector<std::string> Summary(const v1::NodeReport& report) {
  std::vector<std::string> out;
  for (const v1::RankHeartbeat& hb : report.heartbeats()) {
    std::string kind = v1::HeartbeatKind_Name(hb.kind());
    kind = kind.substr(std::string("HEARTBEAT_KIND_").size());
    out.push_back(kind + " r" + std::to_string(hb.rank()) + " s" + std::to_string(hb.step()));
  }
  return out;
}

using Names = std::vector<std::string>;

class ReportBatcherTest : public ::testing::Test {
 protected:
  ReportBatcherTest() { batcher_.SetGeneration(1); }

  v1::NodeReport Take() { return batcher_.TakeReport(Steady(0)); }

  ReportBatcher batcher_{100};
};

TEST_F(ReportBatcherTest, ABacklogBeyondTheMessageLimitIsSplitInOrder) {
  const size_t envelope = Take().ByteSizeLong();  // a report without heartbeats
  const size_t one = Step(0, 5).ByteSizeLong() + 6;  // what the batcher counts for one
  for (int step = 0; step < 10; ++step) batcher_.AddHeartbeat(Step(0, step));

  std::vector<std::string> sent;
  bool more = true;
  int reports = 0;
  while (more) {
    v1::NodeReport report = batcher_.TakeReport(Steady(0), envelope + 4 * one, &more);
    EXPECT_LE(report.ByteSizeLong(), envelope + 4 * one);
    for (const std::string& s : Summary(report)) sent.push_back(s);
    ++reports;
  }
  EXPECT_EQ(reports, 3);  // 4 + 4 + 2
  ASSERT_EQ(sent.size(), 10u);
  for (int step = 0; step < 10; ++step) EXPECT_EQ(sent[step], "STEP r0 s" + std::to_string(step));
}

TEST_F(ReportBatcherTest, TakeReportReturnsHeartbeatsInArrivalOrder) {
  batcher_.AddHeartbeat(Step(2, 1));
  batcher_.AddHeartbeat(Step(0, 1));
  batcher_.AddHeartbeat(Hb(v1::HEARTBEAT_KIND_COMPUTE_BEGIN, 2, 2));
  batcher_.AddHeartbeat(Step(1, 1));

  v1::NodeReport report = Take();

  EXPECT_EQ(Summary(report),
            (Names{"STEP r2 s1", "STEP r0 s1", "COMPUTE_BEGIN r2 s2", "STEP r1 s1"}));
  EXPECT_EQ(batcher_.heartbeats_added(), 4u);
}

TEST_F(ReportBatcherTest, TakeReportEmptiesTheBacklog) {
  batcher_.AddHeartbeat(Step(0, 1));
  batcher_.AddHeartbeat(Step(0, 2));
  ASSERT_EQ(batcher_.backlog(), 2u);

  EXPECT_EQ(Take().heartbeats_size(), 2);

  EXPECT_EQ(batcher_.backlog(), 0u);
  EXPECT_EQ(Take().heartbeats_size(), 0);
}

TEST_F(ReportBatcherTest, SequenceIncreasesByOnePerReport) {
  EXPECT_EQ(Take().sequence(), 1u);
  batcher_.AddHeartbeat(Step(0, 1));
  EXPECT_EQ(Take().sequence(), 2u);
  EXPECT_EQ(Take().sequence(), 3u);
}

TEST_F(ReportBatcherTest, ReportCarriesGenerationAndLauncher) {
  batcher_.SetGeneration(4);
  v1::LauncherStatus launcher;
  launcher.set_state(v1::LauncherStatus::STATE_RUNNING);
  launcher.set_pid(777);
  batcher_.SetLauncher(launcher);

  v1::NodeReport report = Take();

  EXPECT_EQ(report.generation(), 4u);
  EXPECT_EQ(batcher_.generation(), 4u);
  EXPECT_EQ(report.launcher().state(), v1::LauncherStatus::STATE_RUNNING);
  EXPECT_EQ(report.launcher().pid(), 777u);
}

TEST_F(ReportBatcherTest, ANewGenerationGoesUpWithItsOwnLauncherNeverTheLastOnesEnd) {
  v1::LauncherStatus ended;
  ended.set_state(v1::LauncherStatus::STATE_EXITED);
  ended.set_exit_code(1);
  batcher_.SetLauncher(ended);  // generation 1 failed
  v1::LauncherStatus running;
  running.set_state(v1::LauncherStatus::STATE_RUNNING);
  running.set_pid(778);

  batcher_.StartGeneration(2, running);

  v1::NodeReport report = Take();
  EXPECT_EQ(report.generation(), 2u);
  EXPECT_EQ(report.launcher().state(), v1::LauncherStatus::STATE_RUNNING);
  EXPECT_EQ(report.launcher().pid(), 778u);
}

TEST(ReportBatcherBoundTest, FullBacklogDropsTheOldestAndCountsThem) {
  ReportBatcher batcher(3);
  for (int step = 1; step <= 5; ++step) batcher.AddHeartbeat(Step(0, step));

  EXPECT_EQ(batcher.backlog(), 3u);
  EXPECT_EQ(batcher.dropped_total(), 2u);
  EXPECT_EQ(batcher.heartbeats_added(), 5u);
  v1::NodeReport report = batcher.TakeReport(Steady(0));
  EXPECT_EQ(Summary(report), (Names{"STEP r0 s3", "STEP r0 s4", "STEP r0 s5"}));
  EXPECT_EQ(report.dropped_total(), 2u);

  // Cumulative: still reported once nothing more is dropped.
  EXPECT_EQ(batcher.TakeReport(Steady(0)).dropped_total(), 2u);
}

TEST_F(ReportBatcherTest, RejectsAreReportedAsCumulativeCountsByReason) {
  batcher_.CountReject(v1::REJECT_REASON_OVERSIZE);
  batcher_.CountReject(v1::REJECT_REASON_INVALID_JSON);
  batcher_.CountReject(v1::REJECT_REASON_OVERSIZE);

  v1::NodeReport first = Take();
  ASSERT_EQ(first.rejected_size(), 2);
  EXPECT_EQ(first.rejected(0).reject_reason(), v1::REJECT_REASON_INVALID_JSON);
  EXPECT_EQ(first.rejected(0).count(), 1u);
  EXPECT_EQ(first.rejected(1).reject_reason(), v1::REJECT_REASON_OVERSIZE);
  EXPECT_EQ(first.rejected(1).count(), 2u);

  batcher_.CountReject(v1::REJECT_REASON_OVERSIZE);
  v1::NodeReport second = Take();
  ASSERT_EQ(second.rejected_size(), 2);
  EXPECT_EQ(second.rejected(0).reject_reason(), v1::REJECT_REASON_INVALID_JSON);
  EXPECT_EQ(second.rejected(0).count(), 1u);
  EXPECT_EQ(second.rejected(1).reject_reason(), v1::REJECT_REASON_OVERSIZE);
  EXPECT_EQ(second.rejected(1).count(), 3u);
}

TEST_F(ReportBatcherTest, NoRejectsMeansNoRejectEntries) {
  batcher_.AddHeartbeat(Step(0, 1));
  EXPECT_EQ(Take().rejected_size(), 0);
}

TEST_F(ReportBatcherTest, RestorePutsAFailedReportBackBeforeNewerHeartbeats) {
  batcher_.AddHeartbeat(Step(0, 1));
  batcher_.AddHeartbeat(Step(1, 1));
  v1::NodeReport failed = Take();
  batcher_.AddHeartbeat(Step(0, 2));
  batcher_.AddHeartbeat(Step(1, 2));

  batcher_.Restore(std::move(failed));

  EXPECT_EQ(batcher_.backlog(), 4u);
  EXPECT_EQ(batcher_.dropped_total(), 0u);
  EXPECT_EQ(Summary(Take()), (Names{"STEP r0 s1", "STEP r1 s1", "STEP r0 s2", "STEP r1 s2"}));
}

// Each heartbeat says how long the agent held it, so that the supervisor
// dates the step by its making, not by the report's interval.
TEST_F(ReportBatcherTest, HeartbeatsSayHowLongTheyWaited) {
  batcher_.AddHeartbeat(Step(0, 1), Steady(100));
  batcher_.AddHeartbeat(Step(0, 2), Steady(700));
  batcher_.AddHeartbeat(Step(1, 1));  // read at an unknown time: not said
  v1::NodeReport report = batcher_.TakeReport(Steady(900));
  ASSERT_EQ(report.heartbeats_size(), 3);
  EXPECT_DOUBLE_EQ(report.heartbeats(0).queued_seconds(), 0.8);
  EXPECT_DOUBLE_EQ(report.heartbeats(1).queued_seconds(), 0.2);
  EXPECT_EQ(report.heartbeats(2).queued_seconds(), 0);

  // A report that could not be sent waits on from when its heartbeats were read.
  batcher_.Restore(std::move(report));
  report = batcher_.TakeReport(Steady(2'100));
  ASSERT_EQ(report.heartbeats_size(), 3);
  EXPECT_DOUBLE_EQ(report.heartbeats(0).queued_seconds(), 2.0);
  EXPECT_DOUBLE_EQ(report.heartbeats(1).queued_seconds(), 1.4);
  EXPECT_EQ(report.heartbeats(2).queued_seconds(), 0);
}

TEST(ReportBatcherBoundTest, RestoreRespectsTheBoundDroppingTheOldestRestored) {
  ReportBatcher batcher(3);
  batcher.AddHeartbeat(Step(0, 1));
  batcher.AddHeartbeat(Step(0, 2));
  v1::NodeReport failed = batcher.TakeReport(Steady(0));
  batcher.AddHeartbeat(Step(0, 3));
  batcher.AddHeartbeat(Step(0, 4));

  batcher.Restore(std::move(failed));

  EXPECT_EQ(batcher.backlog(), 3u);
  EXPECT_EQ(batcher.dropped_total(), 1u);
  EXPECT_EQ(Summary(batcher.TakeReport(Steady(0))),
            (Names{"STEP r0 s2", "STEP r0 s3", "STEP r0 s4"}));
}

TEST(ReportBatcherBoundTest, RestoreIntoAFullBacklogDropsAllRestored) {
  ReportBatcher batcher(2);
  batcher.AddHeartbeat(Step(0, 1));
  v1::NodeReport failed = batcher.TakeReport(Steady(0));
  batcher.AddHeartbeat(Step(0, 2));
  batcher.AddHeartbeat(Step(0, 3));

  batcher.Restore(std::move(failed));

  EXPECT_EQ(batcher.dropped_total(), 1u);
  EXPECT_EQ(Summary(batcher.TakeReport(Steady(0))), (Names{"STEP r0 s2", "STEP r0 s3"}));
}

TEST_F(ReportBatcherTest, BeginSessionResendsLatestStepAndPhaseAlreadySent) {
  batcher_.AddHeartbeat(Step(0, 1));
  batcher_.AddHeartbeat(Hb(v1::HEARTBEAT_KIND_COMPUTE_BEGIN, 0, 2));
  batcher_.AddHeartbeat(Step(1, 1));
  batcher_.AddHeartbeat(Step(0, 2));
  batcher_.AddHeartbeat(Hb(v1::HEARTBEAT_KIND_COMPUTE_END, 1, 2));
  ASSERT_EQ(Take().heartbeats_size(), 5);
  batcher_.AddHeartbeat(Step(2, 7));  // pending: sent once, after the resent ones

  batcher_.BeginSession();
  v1::NodeReport report = Take();

  // Rank 0: latest phase (COMPUTE_BEGIN s2) and step (STEP s2); rank 1: STEP s1
  // and COMPUTE_END s2; in their original order, then what was pending.
  EXPECT_EQ(Summary(report), (Names{"COMPUTE_BEGIN r0 s2", "STEP r1 s1", "STEP r0 s2",
                                    "COMPUTE_END r1 s2", "STEP r2 s7"}));
}

TEST_F(ReportBatcherTest, BeginSessionResendsOnlyInTheNextReport) {
  batcher_.AddHeartbeat(Step(0, 1));
  Take();
  batcher_.BeginSession();
  ASSERT_EQ(Take().heartbeats_size(), 1);

  EXPECT_EQ(Take().heartbeats_size(), 0);
}

TEST_F(ReportBatcherTest, BeginSessionDoesNotResendWhatIsStillPending) {
  batcher_.AddHeartbeat(Step(0, 1));
  batcher_.AddHeartbeat(Hb(v1::HEARTBEAT_KIND_COMPUTE_BEGIN, 1, 1));
  batcher_.AddHeartbeat(Step(1, 1));
  Take();
  batcher_.AddHeartbeat(Step(0, 2));  // rank 0's latest step, not sent yet
  batcher_.AddHeartbeat(Hb(v1::HEARTBEAT_KIND_COMPUTE_END, 1, 1));  // rank 1's latest phase

  batcher_.BeginSession();

  // Only rank 1's step has nothing newer waiting.
  EXPECT_EQ(Summary(Take()), (Names{"STEP r1 s1", "STEP r0 s2", "COMPUTE_END r1 s1"}));
}

TEST_F(ReportBatcherTest, BeginSessionDoesNotResendStartCheckpointOrException) {
  batcher_.AddHeartbeat(Hb(v1::HEARTBEAT_KIND_START, 0, 0));
  batcher_.AddHeartbeat(Hb(v1::HEARTBEAT_KIND_CHECKPOINT_BEGIN, 1, 5));
  batcher_.AddHeartbeat(Hb(v1::HEARTBEAT_KIND_CHECKPOINT_END, 1, 5));
  batcher_.AddHeartbeat(Hb(v1::HEARTBEAT_KIND_EXCEPTION, 2, 9));
  Take();

  batcher_.BeginSession();

  EXPECT_EQ(Take().heartbeats_size(), 0);
}

TEST_F(ReportBatcherTest, BeginSessionDoesNotResendHeartbeatsOfAnotherGeneration) {
  batcher_.AddHeartbeat(Step(0, 5, /*generation=*/1));
  batcher_.AddHeartbeat(Step(1, 5, /*generation=*/2));  // a rank ahead of the agent
  Take();

  batcher_.BeginSession();

  EXPECT_EQ(Summary(Take()), (Names{"STEP r0 s5"}));
}

TEST_F(ReportBatcherTest, NewGenerationForgetsTheOldGenerationsLatest) {
  batcher_.AddHeartbeat(Step(0, 5, /*generation=*/1));
  Take();

  batcher_.SetGeneration(2);
  batcher_.BeginSession();

  EXPECT_EQ(Take().heartbeats_size(), 0);

  batcher_.AddHeartbeat(Step(0, 1, /*generation=*/2));
  Take();
  batcher_.BeginSession();
  EXPECT_EQ(Summary(Take()), (Names{"STEP r0 s1"}));
}

// When the first report of a session (the one carrying the re-sent latest
// heartbeats) cannot be written, Restore() puts its heartbeats back under
// their own numbers, so the next BeginSession() sees the latest STEP as
// pending and does not send it twice. This is the link's reconnect path
// (Write fails -> Restore -> new session -> BeginSession -> TakeReport).
TEST_F(ReportBatcherTest, ResendAfterRestoreOfAResendReportHasNoDuplicates) {
  batcher_.AddHeartbeat(Step(0, 1));  // sent
  Take();
  batcher_.AddHeartbeat(Hb(v1::HEARTBEAT_KIND_EXCEPTION, 1, 0));  // sent
  Take();

  batcher_.BeginSession();
  v1::NodeReport failed = Take();
  ASSERT_EQ(Summary(failed), (Names{"STEP r0 s1"}));
  batcher_.Restore(std::move(failed));
  batcher_.BeginSession();

  // Actual: {"STEP r0 s1", "STEP r0 s1"}.
  EXPECT_EQ(Summary(Take()), (Names{"STEP r0 s1"}));
}

TEST_F(ReportBatcherTest, RestoreThenBeginSessionSendsARestoredResendOnce) {
  // The contiguous case works: the restored copy keeps the seq it had.
  batcher_.AddHeartbeat(Step(0, 1));
  Take();
  batcher_.BeginSession();
  v1::NodeReport failed = Take();
  ASSERT_EQ(failed.heartbeats_size(), 1);
  batcher_.Restore(std::move(failed));

  batcher_.BeginSession();

  EXPECT_EQ(Summary(Take()), (Names{"STEP r0 s1"}));
}

TEST_F(ReportBatcherTest, EveryReportSaysWhichPlansAreHeld) {
  EXPECT_EQ(Take().plans_held_through(), 0u);
  batcher_.SetPlansHeldThrough(3);
  EXPECT_EQ(Take().plans_held_through(), 3u);
  EXPECT_EQ(Take().plans_held_through(), 3u);  // a report without news says it too
}

TEST_F(ReportBatcherTest, AFailureIsDatedFromItsOwnTimeInEveryReport) {
  ProcessObservation failed;
  failed.process.set_rank(0);
  failed.process.set_pid(100);
  failed.process.set_alive(true);
  failed.process.set_exception_seen(true);
  failed.exception_at = Steady(1000);
  batcher_.SetProcesses({failed});

  EXPECT_DOUBLE_EQ(batcher_.TakeReport(Steady(1250)).processes(0).exception_seconds_ago(), 0.25);
  EXPECT_DOUBLE_EQ(batcher_.TakeReport(Steady(3000)).processes(0).exception_seconds_ago(), 2.0);
}

TEST_F(ReportBatcherTest, DeadProcessReportsHowLongAgoItDied) {
  ProcessObservation alive;
  alive.process.set_rank(0);
  alive.process.set_pid(100);
  alive.process.set_alive(true);
  ProcessObservation dead;
  dead.process.set_rank(1);
  dead.process.set_pid(101);
  dead.process.set_alive(false);
  dead.process.set_exit_known(true);
  dead.process.set_exit_code(1);
  dead.died_at = Steady(1000);
  batcher_.SetProcesses({alive, dead});

  v1::NodeReport report = batcher_.TakeReport(Steady(3500));

  ASSERT_EQ(report.processes_size(), 2);
  EXPECT_TRUE(report.processes(0).alive());
  EXPECT_EQ(report.processes(0).died_seconds_ago(), 0.0);
  EXPECT_FALSE(report.processes(1).alive());
  EXPECT_EQ(report.processes(1).pid(), 101u);
  EXPECT_TRUE(report.processes(1).exit_known());
  EXPECT_EQ(report.processes(1).exit_code(), 1);
  EXPECT_DOUBLE_EQ(report.processes(1).died_seconds_ago(), 2.5);

  // Every report dates the death from its own send time.
  EXPECT_DOUBLE_EQ(batcher_.TakeReport(Steady(5000)).processes(1).died_seconds_ago(), 4.0);
}

}  // namespace
}  // namespace trainsup
