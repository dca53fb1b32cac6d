#include "agent/rank_socket.h"

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace trainsup {
namespace {

constexpr absl::Duration kInterval = absl::Milliseconds(5);
constexpr absl::Duration kQuiet = absl::Seconds(1);

absl::Duration Ms(int64_t ms) { return absl::Milliseconds(ms); }

TEST(DrainScheduleTest, WaitsOnTheSocketUntilTheFirstDatagram) {
  DrainSchedule drain(kInterval, kQuiet);
  EXPECT_TRUE(drain.WaitOnSocket(Ms(0)));
  EXPECT_FALSE(drain.DrainDue(Ms(0), /*readable=*/false));
  EXPECT_TRUE(drain.DrainDue(Ms(0), /*readable=*/true));
  drain.Drained(Ms(0), 0);  // woken for nothing: still waiting on it
  EXPECT_TRUE(drain.WaitOnSocket(Ms(1)));
}

TEST(DrainScheduleTest, WhileRanksSendItDrainsOnTheTimerAlone) {
  DrainSchedule drain(kInterval, kQuiet);
  drain.Drained(Ms(100), 1);
  EXPECT_FALSE(drain.WaitOnSocket(Ms(100)));
  EXPECT_EQ(drain.UntilDrain(Ms(102)), Ms(3));
  EXPECT_FALSE(drain.DrainDue(Ms(102), /*readable=*/true));  // not asked: not woken
  EXPECT_TRUE(drain.DrainDue(Ms(105), /*readable=*/false));
  EXPECT_EQ(drain.UntilDrain(Ms(107)), absl::ZeroDuration());  // late: at once
  // Drains that find nothing keep the timer for a quiet second...
  drain.Drained(Ms(105), 0);
  drain.Drained(Ms(600), 0);
  EXPECT_FALSE(drain.WaitOnSocket(Ms(1099)));
  // ... then the agent sleeps on the socket again.
  EXPECT_TRUE(drain.WaitOnSocket(Ms(1100)));
  EXPECT_TRUE(drain.DrainDue(Ms(1100), /*readable=*/true));
}

TEST(DrainScheduleTest, AZeroIntervalAlwaysWaitsOnTheSocket) {
  DrainSchedule drain(absl::ZeroDuration(), kQuiet);
  drain.Drained(Ms(100), 5);
  EXPECT_TRUE(drain.WaitOnSocket(Ms(100)));
  EXPECT_FALSE(drain.DrainDue(Ms(200), /*readable=*/false));
  EXPECT_TRUE(drain.DrainDue(Ms(100), /*readable=*/true));
}

}  // namespace
}  // namespace trainsup
