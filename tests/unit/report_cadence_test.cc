// The report interval agents are told (daemon/core/report_cadence.h), on a
// fake clock.
#include "daemon/core/report_cadence.h"

#include <optional>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/support/test_time.h"

namespace trainsup {
namespace {

using ::trainsup::testing::AtS;

ReportCadenceOptions Options() {
  ReportCadenceOptions o;
  o.budget = 12500;
  o.min_interval = absl::Milliseconds(200);
  o.max_interval = absl::Seconds(5);
  o.min_change = 0.2;
  o.hold = absl::Seconds(5);
  return o;
}

TEST(ReportCadenceTest, WantedIsAgentsOverTheBudgetWithinTheBounds) {
  ReportCadence cadence(Options());
  EXPECT_EQ(cadence.Wanted(0), absl::Milliseconds(200));
  EXPECT_EQ(cadence.Wanted(2500), absl::Milliseconds(200));
  EXPECT_EQ(cadence.Wanted(6250), absl::Milliseconds(500));
  EXPECT_EQ(cadence.Wanted(12500), absl::Seconds(1));
  EXPECT_EQ(cadence.Wanted(13000), absl::Seconds(1));  // 1.04s, to 100ms
  EXPECT_EQ(cadence.Wanted(1000000), absl::Seconds(5));
}

TEST(ReportCadenceTest, StartsAtTheFloor) {
  ReportCadence cadence(Options());
  EXPECT_EQ(cadence.current(), absl::Milliseconds(200));
  EXPECT_EQ(cadence.Update(AtS(0), 1), std::nullopt);
}

TEST(ReportCadenceTest, AgentsConnectingOneByOneCauseFewChanges) {
  ReportCadence cadence(Options());
  int changes = 0;
  // 12,500 agents connect over 25 s (one every 2 ms), then the sweep runs
  // every second; the interval ends near 1 s (within the 20 % band) after a
  // handful of changes, not one per agent.
  for (int i = 1; i <= 12500; ++i) {
    const double t = i * 0.002;
    if (cadence.Update(AtS(t), static_cast<uint32_t>(i))) ++changes;
  }
  for (int s = 26; s <= 40; ++s) {
    if (cadence.Update(AtS(s), 12500)) ++changes;
  }
  EXPECT_GE(cadence.current(), absl::Milliseconds(800));
  EXPECT_LE(cadence.current(), absl::Seconds(1));
  EXPECT_LE(changes, 6);
  EXPECT_GE(changes, 1);
}

TEST(ReportCadenceTest, SmallMovesAreIgnored) {
  ReportCadence cadence(Options());
  ASSERT_EQ(cadence.Update(AtS(0), 12500), absl::Seconds(1));
  // 10% fewer agents: 0.9s wanted, within the 20% band.
  EXPECT_EQ(cadence.Update(AtS(60), 11250), std::nullopt);
  EXPECT_EQ(cadence.current(), absl::Seconds(1));
  // Half of them leave: 0.5s, a change.
  EXPECT_EQ(cadence.Update(AtS(120), 6250), absl::Milliseconds(500));
}

TEST(ReportCadenceTest, ChangesAtMostOncePerHold) {
  ReportCadence cadence(Options());
  ASSERT_EQ(cadence.Update(AtS(0), 12500), absl::Seconds(1));
  EXPECT_EQ(cadence.Update(AtS(4.9), 25000), std::nullopt);
  EXPECT_EQ(cadence.current(), absl::Seconds(1));
  // Held back, not lost: the next update after the hold makes it.
  EXPECT_EQ(cadence.Update(AtS(5), 25000), absl::Seconds(2));
}

TEST(ReportCadenceTest, ABudgetOfZeroTurnsItOff) {
  ReportCadenceOptions o = Options();
  o.budget = 0;
  ReportCadence cadence(o);
  EXPECT_FALSE(cadence.enabled());
  EXPECT_EQ(cadence.current(), absl::ZeroDuration());
  EXPECT_EQ(cadence.Update(AtS(0), 12500), std::nullopt);
}

}  // namespace
}  // namespace trainsup
