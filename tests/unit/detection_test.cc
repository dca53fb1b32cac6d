// Detection on its own: the rules run over one job's generation, driven by a
// fake clock; what it decides is read from the events and the failures it
// hands to the FailureHandler (the journal's failure rows, the job's state).
#include "daemon/core/detection.h"

#include <optional>
#include <vector>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/core_parts.h"

namespace trainsup {
namespace {

using ::testing::ElementsAre;
using ::testing::Optional;
using ::trainsup::testing::CorePartsTest;
using ::trainsup::testing::DeadProcess;
using ::trainsup::testing::Figure;
using ::trainsup::testing::OfKind;

class DetectionTest : public CorePartsTest {
 protected:
  // Rank `rank`'s process died `ago` seconds before now with `exit_code`.
  void Dies(uint32_t rank, double ago, int32_t exit_code) {
    RankProcessInfo dead = DeadProcess(rank, ago, exit_code);
    dead.generation = 1;
    job().job().ApplyProcess(now(), NodeOfRank(rank), dead);
  }
};

TEST_F(DetectionTest, CrashIsJudgedAfterTheSettleTimeAndNamesTheFirstRankToFail) {
  RunJob();
  RunSteps(3);
  Dies(2, /*ago=*/0.5, 1);
  Dies(0, /*ago=*/0.1, 1);
  Detection::NoticeReport(now(), job(), /*launcher_failed=*/false);

  // Within the settle time the other agents may still report an earlier death.
  clock_.Advance(absl::Milliseconds(900));
  EXPECT_FALSE(detection_.SweepCrash(now(), job()));
  EXPECT_TRUE(decisions_.pending_events().empty());

  clock_.Advance(absl::Milliseconds(100));
  ASSERT_TRUE(detection_.SweepCrash(now(), job()));

  SupervisorOutput out = decisions_.Take();
  const std::vector<Event> crashes = OfKind(out.events, EventKind::kCrash);
  ASSERT_EQ(crashes.size(), 1u);
  EXPECT_EQ(crashes[0].rank, std::optional<uint32_t>(2));
  EXPECT_EQ(crashes[0].node, "node-b");
  EXPECT_THAT(Figure(crashes[0], "exit_code"), Optional(1.0));
  EXPECT_THAT(Figure(crashes[0], "failed_ranks"), Optional(2.0));
  EXPECT_EQ(job().verdicts().crash_culprit, std::optional<uint32_t>(2));
  // Handed on: recorded at its source time, and the job is stopped.
  ASSERT_EQ(out.journal.failures.size(), 1u);
  EXPECT_EQ(out.journal.failures[0].kind, "crash");
  EXPECT_EQ(out.journal.failures[0].node, "node-b");
  EXPECT_EQ(out.journal.failures[0].rank, std::optional<uint32_t>(2));
  EXPECT_EQ(out.journal.failures[0].time, now() - absl::Seconds(1.5));
  EXPECT_EQ(job().lifecycle().state, JobState::kStopping);

  // One verdict a generation.
  clock_.Advance(absl::Seconds(1));
  EXPECT_FALSE(detection_.SweepCrash(now(), job()));
  EXPECT_TRUE(decisions_.pending_events().empty());
}

TEST_F(DetectionTest, SettleClockStartsAtTheFirstFailureHeardOnly) {
  RunJob();
  RunSteps(2);
  Detection::NoticeReport(now(), job(), false);
  EXPECT_EQ(job().verdicts().failure_first_heard, absl::InfinitePast());  // nothing failed

  Dies(3, 0.2, 1);
  Detection::NoticeReport(now(), job(), false);
  const absl::Time first = now();
  clock_.Advance(absl::Milliseconds(500));
  Detection::NoticeReport(now(), job(), false);

  EXPECT_EQ(job().verdicts().failure_first_heard, first);
}

TEST_F(DetectionTest, StallPastTheThresholdNamesTheRankFurthestBehind) {
  RunJob();
  RunSteps(9);
  clock_.Advance(absl::Seconds(1));
  Step(10, {0, 1, 3});  // rank 2 never finishes step 10: the others wait on it
  const absl::Time last_progress = now();

  // The agents keep reporting; nothing advances. The threshold is the 20s floor.
  for (int s = 1; s <= 19; ++s) {
    clock_.Advance(absl::Seconds(1));
    Heard("node-a");
    Heard("node-b");
    EXPECT_FALSE(detection_.SweepStall(now(), job(), job().StepStats())) << s << "s";
  }
  clock_.Advance(absl::Seconds(2));
  Heard("node-a");
  Heard("node-b");
  ASSERT_TRUE(detection_.SweepStall(now(), job(), job().StepStats()));

  SupervisorOutput out = decisions_.Take();
  const std::vector<Event> stalls = OfKind(out.events, EventKind::kStall);
  ASSERT_EQ(stalls.size(), 1u);
  EXPECT_EQ(stalls[0].rank, std::optional<uint32_t>(2));
  EXPECT_EQ(stalls[0].node, "node-b");
  EXPECT_THAT(Figure(stalls[0], "threshold_seconds"), Optional(20.0));
  EXPECT_THAT(Figure(stalls[0], "silent_seconds"), Optional(21.0));
  EXPECT_THAT(Figure(stalls[0], "behind_step"), Optional(9.0));
  EXPECT_EQ(job().verdicts().stall_culprit, std::optional<uint32_t>(2));
  EXPECT_EQ(job().verdicts().stall_event_id, stalls[0].id);
  // The hang is charged to the culprit's node from its last progress; the
  // stop asks for the ranks' stacks.
  ASSERT_EQ(out.journal.failures.size(), 1u);
  EXPECT_EQ(out.journal.failures[0].kind, "stall");
  EXPECT_EQ(out.journal.failures[0].node, "node-b");
  EXPECT_TRUE(out.journal.failures[0].charged);
  EXPECT_EQ(out.journal.failures[0].time, last_progress);
  EXPECT_EQ(job().lifecycle().state, JobState::kStopping);
  EXPECT_TRUE(job().lifecycle().collect_stacks);
}

TEST_F(DetectionTest, StallBehindASilentNodeLosesThatNode) {
  RunJob();
  RunSteps(10);
  const absl::Time node_b_heard = now();
  // node-b's agent goes silent; node-a's ranks wait in the collective.
  for (int s = 1; s <= 21; ++s) {
    clock_.Advance(absl::Seconds(1));
    Heard("node-a");
  }
  detection_.SweepNodes(now(), job());  // node-b unreachable: its ranks unknown
  ASSERT_TRUE(detection_.SweepStall(now(), job(), job().StepStats()));

  SupervisorOutput out = decisions_.Take();
  EXPECT_TRUE(OfKind(out.events, EventKind::kStall).empty());
  const std::vector<Event> lost = OfKind(out.events, EventKind::kNodeLost);
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].node, "node-b");
  EXPECT_THAT(Figure(lost[0], "lost_ranks"), Optional(2.0));
  EXPECT_THAT(Figure(lost[0], "unheard_seconds"),
              Optional(absl::ToDoubleSeconds(now() - node_b_heard)));
  ASSERT_EQ(out.journal.failures.size(), 1u);
  EXPECT_EQ(out.journal.failures[0].kind, "node_lost");
  EXPECT_EQ(out.journal.failures[0].node, "node-b");
  EXPECT_TRUE(out.journal.failures[0].charged);
  EXPECT_EQ(job().lifecycle().state, JobState::kStopping);
}

TEST_F(DetectionTest, SilentAgentIsUnreachableUntilHeardAgainAndNothingStops) {
  RunJob();
  RunSteps(3);
  const absl::Time node_b_heard = now();
  for (int s = 1; s <= 14; ++s) {
    clock_.Advance(absl::Seconds(1));
    Step(3 + s, {0, 1});
    Heard("node-a");
    detection_.SweepNodes(now(), job());
  }
  EXPECT_TRUE(decisions_.pending_events().empty());  // 14s: not yet

  clock_.Advance(absl::Seconds(2));
  Heard("node-a");
  detection_.SweepNodes(now(), job());
  SupervisorOutput out = decisions_.Take();
  ASSERT_EQ(out.events.size(), 1u);
  EXPECT_EQ(out.events[0].kind, EventKind::kNodeUnreachable);
  EXPECT_EQ(out.events[0].node, "node-b");
  EXPECT_THAT(Figure(out.events[0], "ranks"), Optional(2.0));
  EXPECT_THAT(Figure(out.events[0], "unheard_seconds"), Optional(16.0));
  EXPECT_TRUE(Node("node-b").unreachable);
  EXPECT_EQ(job().job().rank(2).liveness, Liveness::kUnknown);
  EXPECT_EQ(job().lifecycle().state, JobState::kRunning);  // nothing is stopped for it
  detection_.SweepNodes(now() + absl::Seconds(1), job());
  EXPECT_TRUE(decisions_.pending_events().empty());  // said once

  clock_.Advance(absl::Seconds(4));
  detection_.NoticeHeard(now(), &job(), Index("node-b"));
  out = decisions_.Take();
  ASSERT_EQ(out.events.size(), 1u);
  EXPECT_EQ(out.events[0].kind, EventKind::kNodeReachable);
  EXPECT_EQ(out.events[0].node, "node-b");
  EXPECT_THAT(Figure(out.events[0], "silent_seconds"),
              Optional(absl::ToDoubleSeconds(now() - node_b_heard)));
  EXPECT_FALSE(Node("node-b").unreachable);
}

}  // namespace
}  // namespace trainsup
