// What a job's checkpoints, restarts and running time measure: the
// planner's C, R and the MTBF's exposure.
#include "daemon/core/job_costs.h"

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/support/test_time.h"

namespace trainsup {
namespace {

using ::trainsup::testing::AtS;

TEST(JobCostsTest, CheckpointCostIsThePriorUntilMeasuredThenTheMedian) {
  JobCosts costs;
  CostFigure c = costs.Checkpoint(absl::Seconds(60));
  EXPECT_EQ(c.seconds, 60);
  EXPECT_FALSE(c.measured);

  costs.AddCheckpoint(10, 0);
  costs.AddCheckpoint(30, 0);
  costs.AddCheckpoint(20, 0);
  c = costs.Checkpoint(absl::Seconds(60));
  EXPECT_EQ(c.seconds, 20);
  EXPECT_TRUE(c.measured);
}

TEST(JobCostsTest, ZerosAreNotSamples) {
  JobCosts costs;
  costs.AddCheckpoint(0, 0);
  EXPECT_FALSE(costs.Checkpoint(absl::Seconds(60)).measured);
  EXPECT_EQ(costs.AsyncWrite(), 0);
  costs.AddCheckpoint(0, 4.5);  // an async write with no blocking part
  EXPECT_FALSE(costs.Checkpoint(absl::Seconds(60)).measured);
  EXPECT_EQ(costs.AsyncWrite(), 4.5);
}

TEST(JobCostsTest, RestartCostIsThePriorUntilMeasured) {
  JobCosts costs;
  EXPECT_EQ(costs.Restart(absl::Minutes(5)).seconds, 300);
  costs.AddRestart(20.5);
  const CostFigure r = costs.Restart(absl::Minutes(5));
  EXPECT_EQ(r.seconds, 20.5);
  EXPECT_TRUE(r.measured);
}

TEST(JobCostsTest, ExposureCountsOnlyRunningTime) {
  JobCosts costs;
  EXPECT_EQ(costs.ExposureSeconds(AtS(100)), 0);
  costs.StartRunning(AtS(10));
  EXPECT_EQ(costs.ExposureSeconds(AtS(40)), 30);
  costs.StopRunning(AtS(50));
  EXPECT_EQ(costs.ExposureSeconds(AtS(500)), 40);
  costs.StartRunning(AtS(600));
  costs.StartRunning(AtS(700));  // already running: the first start counts
  EXPECT_EQ(costs.ExposureSeconds(AtS(800)), 240);
}

TEST(JobCostsTest, ExposureNeverGoesBackwards) {
  JobCosts costs;
  costs.StartRunning(AtS(100));
  EXPECT_EQ(costs.ExposureSeconds(AtS(50)), 0);  // a time before the start
}

TEST(JobCostsTest, RestoredExposureGoesOnFromNowWhenRunning) {
  JobCosts running;
  running.RestoreExposure(3600, /*running=*/true, AtS(0));
  EXPECT_EQ(running.ExposureSeconds(AtS(10)), 3610);
  JobCosts held;
  held.RestoreExposure(3600, /*running=*/false, AtS(0));
  EXPECT_EQ(held.ExposureSeconds(AtS(10)), 3600);
}

TEST(JobCostsTest, FailuresCount) {
  JobCosts costs;
  costs.AddFailure();
  costs.AddFailure();
  EXPECT_EQ(costs.failures(), 2);
}

}  // namespace
}  // namespace trainsup
