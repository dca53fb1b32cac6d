// The checkpoint publishing policy alone: how far ahead a plan starts, when
// a new interval is worth a plan, plan ids, one-offs, and plans adopted back
// from the agents after a supervisor restart.
#include "daemon/core/checkpoint_publisher.h"

#include <cstdint>
#include <vector>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_time.h"

namespace trainsup {
namespace {

using ::testing::ElementsAre;

using ::trainsup::testing::AtS;

PlanPublishOptions Options(absl::Duration horizon = absl::Seconds(10), double threshold = 0.2) {
  PlanPublishOptions o;
  o.horizon = horizon;
  o.replan_threshold = threshold;
  return o;
}

std::vector<uint64_t> Ids(const CheckpointPublisher& p) {
  std::vector<uint64_t> ids;
  for (const CheckpointPlanSpec& plan : p.plans()) ids.push_back(plan.plan_id);
  return ids;
}

TEST(CheckpointPublisherTest, HorizonIsTheHorizonInStepsButAtLeastFive) {
  CheckpointPublisher p(Options(absl::Seconds(10)));
  EXPECT_EQ(p.HorizonSteps(0.5), 20);  // 10s at 0.5s a step
  EXPECT_EQ(p.HorizonSteps(3.0), 5);   // 4 steps would do; never fewer than 5
  EXPECT_EQ(p.HorizonSteps(0.3), 34);  // rounded up
}

// Found by fuzz/agent_intake_fuzzer: a rank reported a step of 1.47e-39 s
// (a valid duration: any >= 0 is), and the horizon in steps overflowed the
// conversion to int64 (undefined; 5 steps on x86, a plan no rank could hold
// in time).
TEST(CheckpointPublisherTest, HorizonOfAStepTimeNearZeroIsTheCap) {
  CheckpointPublisher p(Options(absl::Seconds(10)));
  EXPECT_EQ(p.HorizonSteps(1.4693679385278594e-39), CheckpointPublisher::kMaxHorizonSteps);
  EXPECT_EQ(p.HorizonSteps(1e-300), CheckpointPublisher::kMaxHorizonSteps);
  EXPECT_EQ(p.HorizonSteps(10.0 / CheckpointPublisher::kMaxHorizonSteps),
            CheckpointPublisher::kMaxHorizonSteps);
}

TEST(CheckpointPublisherTest, FirstPlanIsAlwaysWorthIt) {
  CheckpointPublisher p(Options());
  EXPECT_TRUE(p.WorthReplanning(100));
}

TEST(CheckpointPublisherTest, SmallMovesOfTheIntervalAreNotWorthAPlan) {
  CheckpointPublisher p(Options(absl::Seconds(10), 0.2));
  p.Publish(AtS(0), p.Periodic(0, 1.0, 100));
  EXPECT_FALSE(p.WorthReplanning(120));  // exactly the threshold: no
  EXPECT_FALSE(p.WorthReplanning(81));
  EXPECT_TRUE(p.WorthReplanning(121));
  EXPECT_TRUE(p.WorthReplanning(79));
}

TEST(CheckpointPublisherTest, PeriodicPlanStartsAHorizonAheadAndIsAnchoredThere) {
  CheckpointPublisher p(Options(absl::Seconds(10)));
  const CheckpointPlanSpec spec = p.Periodic(/*max_step=*/40, /*step_s=*/1.0, 25);
  EXPECT_EQ(spec.effective_from_step, 50);
  EXPECT_EQ(spec.anchor_step, 50);
  EXPECT_EQ(spec.interval_steps, 25);
  EXPECT_TRUE(spec.one_off_steps.empty());
}

TEST(CheckpointPublisherTest, PeriodicPlanNeverStartsBeforeAnEarlierPlan) {
  // After a restart went back to step 10, a plan from before it (starting at
  // 200) must not be left in force from 200 on by a plan starting earlier.
  CheckpointPublisher p(Options(absl::Seconds(10)));
  CheckpointPlanSpec early = p.Periodic(190, 1.0, 50);
  ASSERT_EQ(early.effective_from_step, 200);
  p.Publish(AtS(0), early);

  const CheckpointPlanSpec next = p.Periodic(/*max_step=*/10, 1.0, 30);

  EXPECT_EQ(next.effective_from_step, 200);
  EXPECT_EQ(next.anchor_step, 200);
}

TEST(CheckpointPublisherTest, OneOffKeepsTheScheduleInForceAndAddsOneStep) {
  CheckpointPublisher p(Options(absl::Seconds(10)));
  p.Publish(AtS(0), p.Periodic(0, 1.0, 100));

  const CheckpointPlanSpec one_off = p.OneOff(/*max_step=*/42, 1.0);

  EXPECT_EQ(one_off.interval_steps, 100);
  EXPECT_EQ(one_off.effective_from_step, 10);
  EXPECT_THAT(one_off.one_off_steps, ElementsAre(52));
}

TEST(CheckpointPublisherTest, OneOffWithoutAnyPlanIsOnlyTheOneStep) {
  CheckpointPublisher p(Options(absl::Seconds(10)));
  const CheckpointPlanSpec one_off = p.OneOff(0, 2.0);
  EXPECT_EQ(one_off.interval_steps, 0);
  EXPECT_THAT(one_off.one_off_steps, ElementsAre(5));
}

TEST(CheckpointPublisherTest, FirstIdIsTheTimeInMicrosecondsThenIdsIncrease) {
  CheckpointPublisher p(Options());
  const uint64_t first = p.Publish(AtS(0), p.Periodic(0, 1.0, 10)).plan_id;
  EXPECT_EQ(first, static_cast<uint64_t>(absl::ToUnixMicros(AtS(0))));
  // Published in the same microsecond, and published later: always greater.
  EXPECT_EQ(p.Publish(AtS(0), p.Periodic(0, 1.0, 20)).plan_id, first + 1);
  EXPECT_EQ(p.Publish(AtS(5), p.Periodic(0, 1.0, 40)).plan_id,
            static_cast<uint64_t>(absl::ToUnixMicros(AtS(5))));
}

TEST(CheckpointPublisherTest, IdsGrowAcrossASupervisorRestartThatAdoptedThePlans) {
  CheckpointPublisher before(Options());
  before.Publish(AtS(100), before.Periodic(0, 1.0, 10));
  CheckpointPublisher after(Options());
  after.Adopt(before.plans());

  // The restarted supervisor's clock reads earlier than the adopted id.
  const uint64_t id = after.Publish(AtS(50), after.Periodic(0, 1.0, 20)).plan_id;

  EXPECT_GT(id, before.plans().back().plan_id);
}

TEST(CheckpointPublisherTest, AdoptKeepsEachIdOnceInIdOrder) {
  CheckpointPublisher p(Options());
  CheckpointPlanSpec a, b, c;
  a.plan_id = 30;
  b.plan_id = 10;
  c.plan_id = 20;
  p.Adopt({a, b});
  p.Adopt({c, a});  // a second agent holds the same plan 30
  EXPECT_THAT(Ids(p), ElementsAre(10, 20, 30));
}

TEST(CheckpointPublisherTest, OnlyTheNewestPlansAreKept) {
  CheckpointPublisher p(Options());
  for (size_t i = 0; i < CheckpointPublisher::kMaxPlans + 3; ++i) {
    p.Publish(AtS(static_cast<int64_t>(i)), p.Periodic(0, 1.0, 10 + static_cast<int64_t>(i)));
  }
  ASSERT_EQ(p.plans().size(), CheckpointPublisher::kMaxPlans);
  EXPECT_EQ(p.plans().front().interval_steps, 13);
}

TEST(CheckpointPublisherTest, FiguresAreThoseOfTheLastPeriodicPlan) {
  CheckpointPublisher p(Options());
  EXPECT_FALSE(p.figures().has_value());
  CheckpointPlan figures;
  figures.interval_seconds = 2789;
  p.set_figures(figures);
  ASSERT_TRUE(p.figures().has_value());
  EXPECT_EQ(p.figures()->interval_seconds, 2789);
}

}  // namespace
}  // namespace trainsup
