// What heartbeats tell the rank watcher, and reading a zombie's exit status
// from /proc/PID/stat (agent/rank_watcher.h). The watched pid is the test's
// own, which is alive throughout.
#include "agent/rank_watcher.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <limits>

#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace trainsup {
namespace {

// Steady time: seconds since an arbitrary origin.
absl::Duration T(double seconds) { return absl::Seconds(seconds); }

TEST(FailureTimeTest, WithoutTheRanksTimeTheFailureIsDatedAtReceipt) {
  EXPECT_EQ(FailureTime(T(1000), 0), T(1000));
  EXPECT_EQ(FailureTime(T(1000), -3), T(1000));
  EXPECT_EQ(FailureTime(T(1000), std::nan("")), T(1000));
  EXPECT_EQ(FailureTime(T(1000), std::numeric_limits<double>::infinity()), T(1000));
}

TEST(FailureTimeTest, TheRanksMonotonicTimeDatesTheFailure) {
  EXPECT_EQ(FailureTime(T(1000), 999.25), T(999.25));
  EXPECT_EQ(FailureTime(T(1000), 1000), T(1000));
}

TEST(FailureTimeTest, TheRanksTimeIsClampedToTheLastMinuteBeforeReceipt) {
  EXPECT_EQ(FailureTime(T(1000), 1000.5), T(1000));  // not in the future
  EXPECT_EQ(FailureTime(T(1000), 940), T(940));
  EXPECT_EQ(FailureTime(T(1000), 10), T(1000) - kMaxFailureAge);
}

v1::RankHeartbeat Heartbeat(v1::HeartbeatKind kind, uint32_t rank, pid_t pid,
                            uint64_t generation = 1) {
  v1::RankHeartbeat hb;
  hb.set_kind(kind);
  hb.set_rank(rank);
  hb.set_local_rank(rank);
  hb.set_pid(static_cast<uint32_t>(pid));
  hb.set_generation(generation);
  return hb;
}

class RankWatcherTest : public ::testing::Test {
 protected:
  // The only observation of `rank`; fails the test if there is none.
  ProcessObservation Observed(uint32_t rank) {
    for (const ProcessObservation& o : watcher_.Snapshot()) {
      if (o.process.rank() == rank) return o;
    }
    ADD_FAILURE() << "rank " << rank << " is not watched";
    return {};
  }

  const pid_t pid_ = getpid();
  RankWatcher watcher_;
};

TEST_F(RankWatcherTest, StartWatchesTheRankAndKeepsItsStackSignal) {
  v1::RankHeartbeat start = Heartbeat(v1::HEARTBEAT_KIND_START, 0, pid_);
  start.set_stack_signal(40);
  EXPECT_TRUE(watcher_.Observe(start, 1, T(1)));
  ProcessObservation o = Observed(0);
  EXPECT_TRUE(o.process.alive());
  EXPECT_EQ(o.process.pid(), static_cast<uint32_t>(pid_));
  EXPECT_EQ(o.stack_signal, 40);
  // Later heartbeats of the same process keep it.
  EXPECT_FALSE(watcher_.Observe(Heartbeat(v1::HEARTBEAT_KIND_STEP, 0, pid_), 1, T(2)));
  EXPECT_EQ(Observed(0).stack_signal, 40);
}

TEST_F(RankWatcherTest, ExitMarksTheFailureAtTheRanksOwnTime) {
  ASSERT_TRUE(watcher_.Observe(Heartbeat(v1::HEARTBEAT_KIND_STEP, 0, pid_), 1, T(1)));
  v1::RankHeartbeat exit = Heartbeat(v1::HEARTBEAT_KIND_EXIT, 0, pid_);
  exit.set_exit_code(3);
  exit.set_monotonic_seconds(9.5);

  EXPECT_TRUE(watcher_.Observe(exit, 1, T(10)));

  ProcessObservation o = Observed(0);
  EXPECT_TRUE(o.process.exception_seen());
  EXPECT_EQ(o.exception_at, T(9.5));
  EXPECT_TRUE(o.process.alive());  // the watcher's pidfd says when it is gone
}

TEST_F(RankWatcherTest, ExceptionWithoutATimeIsDatedAtReceipt) {
  ASSERT_TRUE(watcher_.Observe(Heartbeat(v1::HEARTBEAT_KIND_STEP, 0, pid_), 1, T(1)));
  EXPECT_TRUE(watcher_.Observe(Heartbeat(v1::HEARTBEAT_KIND_EXCEPTION, 0, pid_), 1, T(7)));
  EXPECT_EQ(Observed(0).exception_at, T(7));
}

TEST_F(RankWatcherTest, TheEarliestFailureTimeIsKept) {
  ASSERT_TRUE(watcher_.Observe(Heartbeat(v1::HEARTBEAT_KIND_STEP, 0, pid_), 1, T(1)));
  v1::RankHeartbeat exception = Heartbeat(v1::HEARTBEAT_KIND_EXCEPTION, 0, pid_);
  exception.set_monotonic_seconds(5);
  ASSERT_TRUE(watcher_.Observe(exception, 1, T(6)));
  v1::RankHeartbeat exit = Heartbeat(v1::HEARTBEAT_KIND_EXIT, 0, pid_);
  exit.set_monotonic_seconds(5.5);
  EXPECT_FALSE(watcher_.Observe(exit, 1, T(6)));
  EXPECT_EQ(Observed(0).exception_at, T(5));
  // An earlier time (a datagram overtaken by another) moves it back.
  exit.set_monotonic_seconds(4);
  EXPECT_TRUE(watcher_.Observe(exit, 1, T(6)));
  EXPECT_EQ(Observed(0).exception_at, T(4));
}

TEST_F(RankWatcherTest, FailuresDoNotProveLifeNorWatchAnUnknownRank) {
  EXPECT_FALSE(watcher_.Observe(Heartbeat(v1::HEARTBEAT_KIND_EXIT, 0, pid_), 1, T(1)));
  EXPECT_FALSE(watcher_.Observe(Heartbeat(v1::HEARTBEAT_KIND_EXCEPTION, 0, pid_), 1, T(1)));
  EXPECT_TRUE(watcher_.Snapshot().empty());
}

TEST_F(RankWatcherTest, AFailureOfAnotherProcessOrGenerationIsStale) {
  ASSERT_TRUE(watcher_.Observe(Heartbeat(v1::HEARTBEAT_KIND_STEP, 0, pid_, 2), 2, T(1)));
  EXPECT_FALSE(watcher_.Observe(Heartbeat(v1::HEARTBEAT_KIND_EXIT, 0, pid_ + 1, 2), 2, T(2)));
  EXPECT_FALSE(watcher_.Observe(Heartbeat(v1::HEARTBEAT_KIND_EXIT, 0, pid_, 1), 2, T(2)));
  EXPECT_FALSE(Observed(0).process.exception_seen());
  // Generation 0 is the current one.
  EXPECT_TRUE(watcher_.Observe(Heartbeat(v1::HEARTBEAT_KIND_EXIT, 0, pid_, 0), 2, T(2)));
}

// A /proc/PID/stat line: pid, (comm), state, then fields 4..52 with
// `last` as field 52 (the wait status).
std::string StatLine(const std::string& comm, const std::string& state, const std::string& last) {
  std::string line = absl::StrCat("4242 (", comm, ") ", state);
  for (int field = 4; field < 52; ++field) absl::StrAppend(&line, " 0");
  return absl::StrCat(line, " ", last);
}

TEST(ZombieWaitStatusTest, ReadsTheWaitStatusOfAZombie) {
  EXPECT_EQ(ZombieWaitStatus(StatLine("python3", "Z", "256")), 256);  // exit code 1
  std::optional<int> killed = ZombieWaitStatus(StatLine("python3", "Z", "9"));
  ASSERT_TRUE(killed.has_value());
  EXPECT_TRUE(WIFSIGNALED(*killed));
  EXPECT_EQ(WTERMSIG(*killed), 9);
}

TEST(ZombieWaitStatusTest, ACommandNameWithSpacesAndParenthesesIsSkipped) {
  EXPECT_EQ(ZombieWaitStatus(StatLine("pt_main (x) Z 1", "Z", "512")), 512);
}

TEST(ZombieWaitStatusTest, ALiveProcessHasNone) {
  EXPECT_EQ(ZombieWaitStatus(StatLine("python3", "S", "0")), std::nullopt);
  EXPECT_EQ(ZombieWaitStatus(StatLine("python3", "R", "0")), std::nullopt);
}

TEST(ZombieWaitStatusTest, MalformedLinesHaveNoneAndDoNotThrow) {
  EXPECT_EQ(ZombieWaitStatus(""), std::nullopt);
  EXPECT_EQ(ZombieWaitStatus("4242 (python3"), std::nullopt);
  EXPECT_EQ(ZombieWaitStatus("4242 (python3)"), std::nullopt);  // ends at the ')'
  EXPECT_EQ(ZombieWaitStatus("4242 (python3) Z 1 2 3"), std::nullopt);  // too few fields
  EXPECT_EQ(ZombieWaitStatus(StatLine("python3", "Z", "")), std::nullopt);
  EXPECT_EQ(ZombieWaitStatus(StatLine("python3", "Z", "x1")), std::nullopt);
  EXPECT_EQ(ZombieWaitStatus(StatLine("python3", "Z", "99999999999999999999")), std::nullopt);
}

}  // namespace
}  // namespace trainsup
