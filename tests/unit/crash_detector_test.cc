#include "daemon/core/crash_detector.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "absl/time/time.h"
#include "daemon/core/heartbeat.h"
#include "daemon/core/job.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/core_builders.h"
#include "tests/support/test_time.h"

namespace trainsup {
namespace {

using ::trainsup::testing::AliveProcess;
using ::trainsup::testing::DeadProcess;
using ::trainsup::testing::MakeHeartbeat;

constexpr NodeIndex kNodeA = 0;  // ranks 0, 1
constexpr NodeIndex kNodeB = 1;  // ranks 2, 3
constexpr uint32_t kWorld = 4;
constexpr size_t kWindow = 16;

using ::trainsup::testing::AtMs;
using ::trainsup::testing::TestEpoch;

NodeIndex NodeOf(uint32_t rank) { return rank < kWorld / 2 ? kNodeA : kNodeB; }

CrashOptions Options() {
  CrashOptions o;
  o.settle = absl::Seconds(1);
  return o;
}

Heartbeat Hb(HeartbeatKind kind, uint32_t rank, int64_t step) {
  Heartbeat hb = MakeHeartbeat(kind, rank, step, kWorld);
  hb.step_duration_s = 0.5;
  return hb;
}

// A dead rank whose exit status its agent does not know.
RankProcessInfo DiedUnknown(uint32_t rank, double ago) {
  RankProcessInfo p = DeadProcess(rank, ago, 0);
  p.exit_known = false;
  return p;
}

// A job of four ranks on two nodes, all at step 5 and alive at T0.
class CrashDetectorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (uint32_t r = 0; r < kWorld; ++r) {
      ASSERT_EQ(job_.Apply(TestEpoch(), NodeOf(r), Hb(HeartbeatKind::kStep, r, 5)), std::nullopt);
      job_.ApplyProcess(TestEpoch(), NodeOf(r), AliveProcess(r));
    }
  }

  // One agent's report of one process, received at `now`.
  void Report(absl::Time now, const RankProcessInfo& p) { job_.ApplyProcess(now, NodeOf(p.rank), p); }

  void Exception(absl::Time now, uint32_t rank, const std::string& type, const std::string& msg) {
    Heartbeat hb = Hb(HeartbeatKind::kException, rank, 5);
    hb.exception_type = type;
    hb.exception_message = msg;
    ASSERT_EQ(job_.Apply(now, NodeOf(rank), hb), std::nullopt);
  }

  Job job_{"job", kWindow, kWindow};
  CrashDetector detector_{Options()};
};

TEST_F(CrashDetectorTest, FirstToDieByCorrectedTimeIsNamedNotTheFirstReported) {
  // Node A reports rank 1 first: it died 0.2s before T0 + 10s.
  Report(AtMs(10000), DeadProcess(1, 0.2, /*exit_code=*/1));
  // Node B's report arrives later, but rank 3 died 1.0s before T0 + 10.5s:
  // 0.3s before rank 1.
  Report(AtMs(10500), DeadProcess(3, 1.0, /*exit_code=*/0, /*signal=*/6));
  // Rank 0 died last.
  Report(AtMs(10500), DeadProcess(0, 0.1, /*exit_code=*/1));

  std::optional<CrashVerdict> v = detector_.Check(job_, AtMs(10000), AtMs(12000));

  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->rank, 3u);
  EXPECT_EQ(v->death.time, AtMs(9500));
  EXPECT_EQ(v->death.signal, 6);
  EXPECT_EQ(v->failed_ranks, 3u);
}

TEST_F(CrashDetectorTest, DeathTimeIsReceiveTimeMinusDiedSecondsAgo) {
  Report(AtMs(10000), DeadProcess(2, 2.25, 1));

  ASSERT_TRUE(job_.rank(2).death.has_value());
  EXPECT_EQ(job_.rank(2).death->time, AtMs(7750));
  EXPECT_FALSE(job_.rank(2).alive());
}

TEST_F(CrashDetectorTest, NegativeOrNonFiniteDiedSecondsAgoCountsAsNow) {
  Report(AtMs(10000), DeadProcess(0, -5, 1));
  Report(AtMs(10000), DeadProcess(1, std::nan(""), 1));
  Report(AtMs(10000), DeadProcess(2, std::numeric_limits<double>::infinity(), 1));

  for (uint32_t r = 0; r < 3; ++r) {
    ASSERT_TRUE(job_.rank(r).death.has_value()) << r;
    EXPECT_EQ(job_.rank(r).death->time, AtMs(10000)) << r;
  }
}

TEST_F(CrashDetectorTest, NoVerdictBeforeTheSettleTime) {
  Report(AtMs(10000), DeadProcess(2, 0.1, 1));
  ASSERT_TRUE(CrashDetector::HasFailure(job_));

  EXPECT_EQ(detector_.Check(job_, AtMs(10000), AtMs(10000)), std::nullopt);
  EXPECT_EQ(detector_.Check(job_, AtMs(10000), AtMs(10999)), std::nullopt);
}

TEST_F(CrashDetectorTest, VerdictOnceTheSettleTimeHasPassed) {
  Report(AtMs(10000), DeadProcess(2, 0.1, 1));

  std::optional<CrashVerdict> at = detector_.Check(job_, AtMs(10000), AtMs(11000));
  std::optional<CrashVerdict> after = detector_.Check(job_, AtMs(10000), AtMs(60000));

  ASSERT_TRUE(at.has_value());
  EXPECT_EQ(at->rank, 2u);
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(after->rank, 2u);
}

TEST_F(CrashDetectorTest, SettleIsCountedFromFirstHeardNotFromTheDeath) {
  // The death is dated 5s before the report, but the supervisor heard of it
  // at T0 + 10s: the other agents get the full settle time from then.
  Report(AtMs(10000), DeadProcess(2, 5.0, 1));

  EXPECT_EQ(detector_.Check(job_, AtMs(10000), AtMs(10500)), std::nullopt);
}

TEST_F(CrashDetectorTest, AllRanksExitingZeroIsNotACrash) {
  for (uint32_t r = 0; r < kWorld; ++r) Report(AtMs(10000 + r), DeadProcess(r, 0.1 * r, 0));

  EXPECT_FALSE(CrashDetector::HasFailure(job_));
  EXPECT_EQ(detector_.Check(job_, AtMs(10000), AtMs(100000)), std::nullopt);
}

TEST_F(CrashDetectorTest, DeathWithUnknownExitStatusAloneIsNotACertainFailure) {
  Report(AtMs(10000), DiedUnknown(1, 0.1));

  EXPECT_FALSE(CrashDetector::HasFailure(job_));
  EXPECT_EQ(detector_.Check(job_, AtMs(10000), AtMs(100000)), std::nullopt);
  ASSERT_TRUE(job_.rank(1).death.has_value());
  EXPECT_TRUE(job_.rank(1).death->failed());
}

TEST_F(CrashDetectorTest, UnknownExitCountsAndCanBeNamedOnceAnotherRankCertainlyFailed) {
  // Rank 1 vanished (status unknown) 0.5s before rank 2 exited with code 1.
  Report(AtMs(10000), DiedUnknown(1, 0.5));
  Report(AtMs(10000), DeadProcess(2, 0.0, 1));

  ASSERT_TRUE(CrashDetector::HasFailure(job_));
  std::optional<CrashVerdict> v = detector_.Check(job_, AtMs(10000), AtMs(11000));

  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->rank, 1u);
  EXPECT_FALSE(v->death.exit_known);
  EXPECT_EQ(v->failed_ranks, 2u);
}

TEST_F(CrashDetectorTest, ExceptionHeartbeatMakesAnUnknownExitACertainFailure) {
  Exception(AtMs(9900), 3, "RuntimeError", "CUDA out of memory");
  Report(AtMs(10000), DiedUnknown(3, 0.05));

  EXPECT_TRUE(CrashDetector::HasFailure(job_));
  std::optional<CrashVerdict> v = detector_.Check(job_, AtMs(10000), AtMs(11000));
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->rank, 3u);
}

TEST_F(CrashDetectorTest, ExceptionOfARankStillAliveIsNoFailureYet) {
  Exception(AtMs(9900), 3, "RuntimeError", "CUDA out of memory");

  EXPECT_FALSE(CrashDetector::HasFailure(job_));
}

TEST_F(CrashDetectorTest, ExitCodeAndSignalAreCarried) {
  Report(AtMs(10000), DeadProcess(0, 0.0, /*exit_code=*/137));
  Report(AtMs(10000), DeadProcess(2, 0.5, /*exit_code=*/0, /*signal=*/11));

  std::optional<CrashVerdict> v = detector_.Check(job_, AtMs(10000), AtMs(11000));

  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->rank, 2u);
  EXPECT_TRUE(v->death.exit_known);
  EXPECT_EQ(v->death.exit_code, 0);
  EXPECT_EQ(v->death.signal, 11);
  ASSERT_TRUE(job_.rank(0).death.has_value());
  EXPECT_EQ(job_.rank(0).death->exit_code, 137);
}

TEST_F(CrashDetectorTest, FailedRanksCountsOnlyFailedDeaths) {
  Report(AtMs(10000), DeadProcess(0, 0.3, 0));  // clean exit: not counted
  Report(AtMs(10000), DeadProcess(1, 0.2, 2));
  Report(AtMs(10000), DiedUnknown(2, 0.1));
  // Rank 3 alive.

  std::optional<CrashVerdict> v = detector_.Check(job_, AtMs(10000), AtMs(11000));

  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->failed_ranks, 2u);
  EXPECT_EQ(v->rank, 1u);  // the earliest clean exit does not count as first to fail
}

TEST_F(CrashDetectorTest, AtEqualDeathTimesTheLowerRankIsNamed) {
  Report(AtMs(10000), DeadProcess(3, 0.0, 1));
  Report(AtMs(10000), DeadProcess(1, 0.0, 1));

  std::optional<CrashVerdict> v = detector_.Check(job_, AtMs(10000), AtMs(11000));

  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->rank, 1u);
}

TEST_F(CrashDetectorTest, FirstReportOfADeathWins) {
  Report(AtMs(10000), DeadProcess(2, 0.1, 1));
  // The next report of the same death, with the agent's then "seen ago":
  // it must not move the death (to 8.0s here) or change its status.
  Report(AtMs(11000), DeadProcess(2, 3.0, 9, 15));

  ASSERT_TRUE(job_.rank(2).death.has_value());
  EXPECT_EQ(job_.rank(2).death->time, AtMs(9900));
  EXPECT_EQ(job_.rank(2).death->exit_code, 1);
  EXPECT_EQ(job_.rank(2).death->signal, 0);
}

TEST_F(CrashDetectorTest, ProcessReportOfAnotherGenerationIsIgnored) {
  RankProcessInfo old = DeadProcess(2, 0.1, 1);
  old.generation = 7;  // the job is in generation 0

  Report(AtMs(10000), old);

  EXPECT_FALSE(job_.rank(2).death.has_value());
  EXPECT_TRUE(job_.rank(2).alive());
  EXPECT_FALSE(CrashDetector::HasFailure(job_));
}

// The agent saw the rank's exception report `ago` seconds before its report.
RankProcessInfo Raised(RankProcessInfo p, double ago) {
  p.exception_seen = true;
  p.exception_seconds_ago = ago;
  return p;
}

TEST_F(CrashDetectorTest, RankThatRaisedIsNamedFirstWhileItsProcessStillTearsDown) {
  // Rank 2 raised at T0 + 9s and is still alive (the interpreter tearing
  // down); rank 0 died with exit code 1 at T0 + 9.5s.
  Exception(AtMs(9000), 2, "RuntimeError", "boom");
  Report(AtMs(10000), Raised(AliveProcess(2), 1.0));
  Report(AtMs(10000), DeadProcess(0, 0.5, 1));

  ASSERT_TRUE(CrashDetector::HasFailure(job_));
  std::optional<CrashVerdict> v = detector_.Check(job_, AtMs(10000), AtMs(11000));

  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->rank, 2u);
  EXPECT_EQ(v->death.time, AtMs(9000));
  EXPECT_FALSE(v->death.exit_known);
  EXPECT_EQ(v->failed_ranks, 2u);
}

TEST_F(CrashDetectorTest, DeathOfARankThatRaisedIsDatedAtTheException) {
  Report(AtMs(10000), Raised(DeadProcess(2, 0.0, 1), 2.0));

  ASSERT_TRUE(job_.rank(2).death.has_value());
  EXPECT_EQ(job_.rank(2).death->time, AtMs(8000));
}

TEST_F(CrashDetectorTest, LaterExceptionReportMovesTheDeathBackToTheException) {
  Report(AtMs(10000), DeadProcess(2, 0.5, 1));  // died at T0 + 9.5s
  // The next report also tells it raised at T0 + 8.5s, before it died.
  Report(AtMs(11000), Raised(DeadProcess(2, 1.5, 1), 2.5));

  ASSERT_TRUE(job_.rank(2).death.has_value());
  EXPECT_EQ(job_.rank(2).death->time, AtMs(8500));
}

TEST_F(CrashDetectorTest, ExceptionReportedAfterTheDeathDoesNotMoveItLater) {
  Report(AtMs(10000), DeadProcess(2, 0.5, 1));  // died at T0 + 9.5s
  Report(AtMs(11000), Raised(DeadProcess(2, 1.5, 1), 0.5));  // "raised" at T0 + 10.5s

  ASSERT_TRUE(job_.rank(2).death.has_value());
  EXPECT_EQ(job_.rank(2).death->time, AtMs(9500));
}

TEST(CrashDetectorNoRanksTest, JobWithoutRanksHasNoCrash) {
  Job job("job", kWindow, kWindow);
  CrashDetector detector(Options());

  EXPECT_FALSE(CrashDetector::HasFailure(job));
  EXPECT_EQ(detector.Check(job, AtMs(0), AtMs(100000)), std::nullopt);
}

}  // namespace
}  // namespace trainsup

// ---------------------------------------------------------------------------
// Victims and culprits by death mode

namespace trainsup {
namespace {

class VictimTest : public CrashDetectorTest {
 protected:
  // `rank` raised a peer's communication error at `now` and died.
  void Victim(absl::Time now, uint32_t rank) {
    Exception(now, rank, "RuntimeError",
              "[../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer "
              "[127.0.0.1]:40215");
    Report(now, Raised(DeadProcess(rank, 0.0, 1), 0.0));
  }
};

TEST_F(VictimTest, VictimsReportingFirstNeverWinOverARankThatDiedOnItsOwn) {
  // Rank 3 called sys.exit(1); its teardown outlasted its peers' reaction.
  Victim(AtMs(9500), 0);
  Victim(AtMs(9510), 1);
  Victim(AtMs(9520), 2);
  Report(AtMs(11000), DeadProcess(3, 0.0, 1));  // seen dead 1.5 s after the victims

  std::optional<CrashVerdict> v = detector_.Check(job_, AtMs(9500), AtMs(11000));

  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->kind, CrashVerdict::Kind::kRank);
  EXPECT_EQ(v->rank, 3u);
  EXPECT_EQ(v->failed_ranks, 4u);
  EXPECT_EQ(v->victims, 3u);
  EXPECT_TRUE(v->death.exit_known);
  EXPECT_EQ(v->death.exit_code, 1);
}

TEST_F(VictimTest, WhileOnlyVictimsFailedAndARankStillRunsTheVerdictWaits) {
  Victim(AtMs(9500), 0);
  Victim(AtMs(9510), 1);
  Victim(AtMs(9520), 2);
  // Rank 3 alive: tearing down after sys.exit, or not yet killed.
  EXPECT_EQ(detector_.Check(job_, AtMs(9500), AtMs(11000)), std::nullopt);
  EXPECT_EQ(detector_.Check(job_, AtMs(9500), AtMs(19000)), std::nullopt);

  Report(AtMs(19100), DeadProcess(3, 0.0, 1));

  std::optional<CrashVerdict> v = detector_.Check(job_, AtMs(9500), AtMs(19200));
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->rank, 3u);
}

TEST_F(VictimTest, AnExitTheRankBeganIsItsFailureBeforeItsProcessEnds) {
  Heartbeat exit = Hb(HeartbeatKind::kExit, 3, 5);
  exit.exit_code = 1;
  ASSERT_EQ(job_.Apply(AtMs(9000), NodeOf(3), exit), std::nullopt);
  Report(AtMs(9050), Raised(AliveProcess(3), 0.05));  // reported at 9.0 s, still tearing down
  Victim(AtMs(9300), 0);
  Victim(AtMs(9310), 1);

  std::optional<CrashVerdict> v = detector_.Check(job_, AtMs(9300), AtMs(10300));

  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->kind, CrashVerdict::Kind::kRank);
  EXPECT_EQ(v->rank, 3u);
  EXPECT_EQ(v->death.time, AtMs(9000));
  EXPECT_FALSE(v->death.exit_known);  // still tearing down: the exit it began is the failure
}

TEST_F(VictimTest, ARankStoppedFromOutsideIsNotTheCulprit) {
  Report(AtMs(9000), DeadProcess(1, 0.0, 0, /*signal=*/15));  // its torchrun tore the group down
  Report(AtMs(9200), DeadProcess(2, 0.0, 0, /*signal=*/11));

  std::optional<CrashVerdict> v = detector_.Check(job_, AtMs(9000), AtMs(10200));

  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->rank, 2u);
  EXPECT_EQ(v->victims, 1u);
}

TEST_F(VictimTest, OnlyVictimsAndANodeThatCannotBeHeardIsThatNodeLost) {
  // node-b's host died with its agent: ranks 2 and 3 cannot be seen.
  Victim(AtMs(9500), 0);
  Victim(AtMs(9510), 1);

  std::optional<CrashVerdict> v =
      detector_.Check(job_, AtMs(9500), AtMs(10500), std::nullopt, {kNodeB});

  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->kind, CrashVerdict::Kind::kNodeLost);
  EXPECT_EQ(v->node, kNodeB);
  EXPECT_THAT(v->lost_ranks, ::testing::ElementsAre(2, 3));
  EXPECT_EQ(v->rank, std::nullopt);
  EXPECT_EQ(v->first_victim, 0u);
  EXPECT_EQ(v->victims, 2u);
}

TEST_F(VictimTest, OnlyVictimsWithEveryRankSeenNamesNoCulpritOnceEveryRankEnded) {
  for (uint32_t r = 0; r < kWorld; ++r) Victim(AtMs(9500 + 10 * r), r);

  std::optional<CrashVerdict> v = detector_.Check(job_, AtMs(9500), AtMs(10500));

  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->kind, CrashVerdict::Kind::kNoCulprit);
  EXPECT_EQ(v->rank, 0u);  // the first victim, for the record
}

}  // namespace
}  // namespace trainsup
