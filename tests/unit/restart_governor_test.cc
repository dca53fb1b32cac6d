// The sliding-window restart cap and its backoff.
#include "daemon/core/restart_governor.h"

#include <cstdint>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/support/test_time.h"

namespace trainsup {
namespace {

using ::trainsup::testing::At;
using ::trainsup::testing::TestEpoch;

RestartPolicy Policy(int limit, absl::Duration window = absl::Hours(1)) {
  RestartPolicy p;
  p.limit = limit;
  p.window = window;
  p.backoff_initial = absl::Seconds(5);
  p.backoff_max = absl::Minutes(5);
  return p;
}

TEST(RestartGovernorTest, FirstRestartIsAllowedWithTheInitialBackoff) {
  RestartGovernor g(Policy(3));
  RestartGovernor::Decision d = g.Decide(TestEpoch());
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.recent, 0);
  EXPECT_EQ(d.backoff, absl::Seconds(5));
}

TEST(RestartGovernorTest, LimitRestartsWithinTheWindowAreAllowedAndTheNextRefused) {
  RestartGovernor g(Policy(3));
  for (int i = 0; i < 3; ++i) {
    const absl::Time now = At(absl::Minutes(i));
    RestartGovernor::Decision d = g.Decide(now);
    ASSERT_TRUE(d.allowed) << "restart " << i + 1;
    EXPECT_EQ(d.recent, i);
    g.RecordRestart(now);
  }
  RestartGovernor::Decision d = g.Decide(At(absl::Minutes(3)));
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.recent, 3);
}

TEST(RestartGovernorTest, LimitZeroRefusesEveryRestart) {
  RestartGovernor g(Policy(0));
  EXPECT_FALSE(g.Decide(TestEpoch()).allowed);
}

// A restart at t counts while t > now - window: at exactly the window's age
// it no longer counts.
TEST(RestartGovernorTest, RestartJustInsideTheWindowStillCounts) {
  RestartGovernor g(Policy(1));
  g.RecordRestart(TestEpoch());
  RestartGovernor::Decision d = g.Decide(At(absl::Hours(1) - absl::Nanoseconds(1)));
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.recent, 1);
}

TEST(RestartGovernorTest, RestartExactlyAtWindowAgeNoLongerCounts) {
  RestartGovernor g(Policy(1));
  g.RecordRestart(TestEpoch());
  RestartGovernor::Decision d = g.Decide(At(absl::Hours(1)));
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.recent, 0);
}

TEST(RestartGovernorTest, RestartPastWindowAgeFreesASlot) {
  RestartGovernor g(Policy(2));
  g.RecordRestart(TestEpoch());
  g.RecordRestart(At(absl::Minutes(30)));
  EXPECT_FALSE(g.Decide(At(absl::Minutes(59))).allowed);

  RestartGovernor::Decision d = g.Decide(At(absl::Minutes(61)));
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.recent, 1);
}

TEST(RestartGovernorTest, BackoffDoublesWithEachRecentRestartUpToTheMax) {
  RestartGovernor g(Policy(20));
  // initial 5s x 2^k: 5, 10, 20, 40, 80, 160, then capped at 300.
  const absl::Duration expected[] = {absl::Seconds(5),   absl::Seconds(10),  absl::Seconds(20),
                                     absl::Seconds(40),  absl::Seconds(80),  absl::Seconds(160),
                                     absl::Seconds(300), absl::Seconds(300), absl::Seconds(300)};
  absl::Time now = TestEpoch();
  for (int k = 0; k < 9; ++k) {
    RestartGovernor::Decision d = g.Decide(now);
    ASSERT_TRUE(d.allowed);
    EXPECT_EQ(d.recent, k);
    EXPECT_EQ(d.backoff, expected[k]) << "k=" << k;
    g.RecordRestart(now);
    now += absl::Seconds(1);
  }
}

TEST(RestartGovernorTest, BackoffIsCappedEvenWhenTheInitialExceedsTheMax) {
  RestartPolicy p = Policy(5);
  p.backoff_initial = absl::Minutes(10);
  p.backoff_max = absl::Minutes(5);
  RestartGovernor g(p);
  EXPECT_EQ(g.Decide(TestEpoch()).backoff, absl::Minutes(5));
}

TEST(RestartGovernorTest, BackoffFallsBackWhenRestartsLeaveTheWindow) {
  RestartGovernor g(Policy(5));
  g.RecordRestart(TestEpoch());
  g.RecordRestart(At(absl::Minutes(1)));
  EXPECT_EQ(g.Decide(At(absl::Minutes(2))).backoff, absl::Seconds(20));
  EXPECT_EQ(g.Decide(At(absl::Minutes(60) + absl::Seconds(30))).backoff, absl::Seconds(10));
  EXPECT_EQ(g.Decide(At(absl::Minutes(62))).backoff, absl::Seconds(5));
}

TEST(RestartGovernorTest, ForgiveMakesEarlierRestartsNotCount) {
  RestartGovernor g(Policy(2));
  g.RecordRestart(TestEpoch());
  g.RecordRestart(At(absl::Minutes(1)));
  ASSERT_FALSE(g.Decide(At(absl::Minutes(2))).allowed);

  g.Forgive(At(absl::Minutes(2)));

  RestartGovernor::Decision d = g.Decide(At(absl::Minutes(3)));
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.recent, 0);
  EXPECT_EQ(d.backoff, absl::Seconds(5));
}

TEST(RestartGovernorTest, RestartsAfterForgiveCountAgain) {
  RestartGovernor g(Policy(2));
  g.RecordRestart(TestEpoch());
  g.RecordRestart(At(absl::Minutes(1)));
  g.Forgive(At(absl::Minutes(2)));

  g.RecordRestart(At(absl::Minutes(3)));
  EXPECT_EQ(g.Decide(At(absl::Minutes(4))).recent, 1);
  g.RecordRestart(At(absl::Minutes(4)));
  RestartGovernor::Decision d = g.Decide(At(absl::Minutes(5)));
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.recent, 2);
}

// Forgive(now) forgives restarts before `now`: a restart at the forgiving
// instant itself (Resume schedules the restart at `now`) still counts.
TEST(RestartGovernorTest, RestartAtTheForgivingInstantStillCounts) {
  RestartGovernor g(Policy(2));
  g.Forgive(TestEpoch());
  g.RecordRestart(TestEpoch());
  EXPECT_EQ(g.Decide(At(absl::Seconds(1))).recent, 1);
}

TEST(RestartGovernorTest, RestartsRecordedOutOfOrderCountTheSame) {
  RestartGovernor in_order(Policy(3));
  RestartGovernor shuffled(Policy(3));
  const absl::Time times[] = {At(absl::Minutes(10)), At(absl::Minutes(40)),
                              At(absl::Minutes(70))};
  for (absl::Time t : times) in_order.RecordRestart(t);
  shuffled.RecordRestart(times[2]);
  shuffled.RecordRestart(times[0]);
  shuffled.RecordRestart(times[1]);

  for (absl::Duration at : {absl::Minutes(71), absl::Minutes(105), absl::Minutes(125)}) {
    RestartGovernor::Decision a = in_order.Decide(At(at));
    RestartGovernor::Decision b = shuffled.Decide(At(at));
    EXPECT_EQ(a.recent, b.recent) << at;
    EXPECT_EQ(a.allowed, b.allowed) << at;
    EXPECT_EQ(a.backoff, b.backoff) << at;
  }
  EXPECT_EQ(shuffled.Decide(At(absl::Minutes(71))).recent, 2);   // 40, 70
  EXPECT_EQ(shuffled.Decide(At(absl::Minutes(105))).recent, 1);  // 70
}

TEST(RestartGovernorTest, OlderRestartRecordedAfterPruningStillCountsInItsWindow) {
  RestartGovernor g(Policy(1));
  // Many recent restarts, then a restore delivers an older one that is still
  // inside the window.
  for (int i = 0; i < 10; ++i) g.RecordRestart(At(absl::Hours(5) + absl::Minutes(i)));
  g.RecordRestart(At(absl::Hours(4) + absl::Minutes(30)));
  // At 5h20m: the restarts at 5h00..5h09 and 4h30 are all within 1h.
  EXPECT_EQ(g.Decide(At(absl::Hours(5) + absl::Minutes(20))).recent, 11);
  // At 5h35m: 4h30 has left the window.
  EXPECT_EQ(g.Decide(At(absl::Hours(5) + absl::Minutes(35))).recent, 10);
}

TEST(RestartGovernorTest, ManyRestartsOverTimeStillDecideRight) {
  RestartGovernor g(Policy(5, absl::Hours(1)));
  // 10,000 restarts, one every 10 minutes (about 69 days).
  absl::Time last;
  for (int i = 0; i < 10000; ++i) {
    last = At(absl::Minutes(10 * i));
    g.RecordRestart(last);
  }
  // Within the last hour: the restarts at last-50m .. last.
  RestartGovernor::Decision d = g.Decide(last + absl::Seconds(1));
  EXPECT_EQ(d.recent, 6);
  EXPECT_FALSE(d.allowed);
  // 35 minutes later: last-20m, last-10m, last still count.
  d = g.Decide(last + absl::Minutes(35));
  EXPECT_EQ(d.recent, 3);
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.backoff, absl::Seconds(40));
  // A day later none counts.
  d = g.Decide(last + absl::Hours(24));
  EXPECT_EQ(d.recent, 0);
  EXPECT_EQ(d.backoff, absl::Seconds(5));
}

TEST(RestartGovernorTest, ManyRestartsInBurstsStillHitTheCapInEachBurst) {
  RestartGovernor g(Policy(3, absl::Hours(1)));
  for (int day = 0; day < 1000; ++day) {
    const absl::Time start = At(absl::Hours(24 * day));
    for (int i = 0; i < 3; ++i) {
      const absl::Time t = start + absl::Minutes(i);
      ASSERT_TRUE(g.Decide(t).allowed) << "day " << day << " restart " << i;
      g.RecordRestart(t);
    }
    ASSERT_FALSE(g.Decide(start + absl::Minutes(3)).allowed) << "day " << day;
  }
}

}  // namespace
}  // namespace trainsup
