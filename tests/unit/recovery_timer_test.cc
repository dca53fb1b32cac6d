// Timing one restart, failure -> the next generation's first step.
#include "daemon/core/recovery_timer.h"

#include <cstdint>
#include <optional>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/support/test_time.h"

namespace trainsup {
namespace {

using ::trainsup::testing::AtMs;

TEST(RecoveryTimerTest, PhasesAddUpToTheTotal) {
  RecoveryTimer t;
  t.Begin(AtMs(0), AtMs(1600), "crash on n2");
  t.MarkStopped(AtMs(1900));
  t.MarkStarted(AtMs(2900));

  std::optional<RecoveryFigures> f = t.Complete(AtMs(5500), AtMs(5700));

  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->detect, absl::Milliseconds(1600));
  EXPECT_EQ(f->stop, absl::Milliseconds(300));
  EXPECT_EQ(f->backoff, absl::Milliseconds(1000));
  EXPECT_EQ(f->relaunch, absl::Milliseconds(2600));
  EXPECT_EQ(f->first_step, absl::Milliseconds(200));
  EXPECT_EQ(f->total, absl::Milliseconds(5700));
  EXPECT_EQ(f->detect + f->stop + f->backoff + f->relaunch + f->first_step, f->total);
}

TEST(RecoveryTimerTest, CompletesOnceAndThenIsIdle) {
  RecoveryTimer t;
  t.Begin(AtMs(0), AtMs(100), "stall");
  t.MarkStopped(AtMs(200));
  t.MarkStarted(AtMs(300));
  ASSERT_TRUE(t.Complete(AtMs(400), AtMs(500)).has_value());
  EXPECT_FALSE(t.active());
  EXPECT_EQ(t.cause(), "");
  EXPECT_FALSE(t.Complete(AtMs(400), AtMs(500)).has_value());
}

TEST(RecoveryTimerTest, NothingToCompleteBeforeTheStart) {
  RecoveryTimer t;
  EXPECT_FALSE(t.Complete(AtMs(400), AtMs(500)).has_value());  // none begun
  t.Begin(AtMs(0), AtMs(100), "crash");
  t.MarkStopped(AtMs(200));
  // The old generation's last steps arrive before the new one started.
  EXPECT_FALSE(t.Complete(AtMs(150), AtMs(150)).has_value());
  EXPECT_TRUE(t.active());
  EXPECT_EQ(t.cause(), "crash");
}

TEST(RecoveryTimerTest, HeartbeatFromBeforeTheStartDoesNotEndTheRelaunch) {
  RecoveryTimer t;
  t.Begin(AtMs(0), AtMs(100), "crash");
  t.MarkStopped(AtMs(200));
  t.MarkStarted(AtMs(1000));

  std::optional<RecoveryFigures> f = t.Complete(/*first_heartbeat=*/AtMs(900), AtMs(1500));

  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->relaunch, absl::ZeroDuration());
  EXPECT_EQ(f->first_step, absl::Milliseconds(500));
}

TEST(RecoveryTimerTest, AbandonedRestartIsForgotten) {
  RecoveryTimer t;
  t.Begin(AtMs(0), AtMs(100), "crash");
  t.Abandon();  // held at the restart cap
  t.MarkStarted(AtMs(300));
  EXPECT_FALSE(t.active());
  EXPECT_FALSE(t.Complete(AtMs(400), AtMs(500)).has_value());
}

}  // namespace
}  // namespace trainsup
