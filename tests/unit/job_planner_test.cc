// JobPlanner on its own: a job's measured costs and MTBF -> the planner ->
// the publisher -> the plan event; plans confirmed once every agent holds
// them and revoked when one does not in time; the operator's one-off
// checkpoint. Driven by a fake clock; read from the plans and the events.
#include "daemon/core/job_planner.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/core_parts.h"

namespace trainsup {
namespace {

using ::testing::HasSubstr;
using ::testing::Optional;
using ::trainsup::testing::CorePartsTest;
using ::trainsup::testing::Figure;
using ::trainsup::testing::OfKind;

class JobPlannerTest : public CorePartsTest {
 protected:
  // Every rank steps on to `last`, one step a second, both agents heard
  // (node-b only while `node_b_heard`).
  void StepTo(int64_t last, bool node_b_heard = true) {
    for (int64_t s = job().job().max_step() + 1; s <= last; ++s) {
      clock_.Advance(absl::Seconds(1));
      Step(s);
      Heard("node-a");
      if (node_b_heard) Heard("node-b");
    }
  }
  void Replan() { planner_.Replan(now(), job(), job().StepStats()); }
  void CheckAcks() { planner_.CheckAcks(now(), job(), job().StepStats()); }
  const std::vector<CheckpointPlanSpec>& plans() { return job().plans().plans(); }
};

TEST_F(JobPlannerTest, PlanIsPublishedOnceTheStepTimeIsKnownAndAnnounced) {
  RunJob();
  Replan();
  EXPECT_TRUE(plans().empty());  // no step yet

  StepTo(5);
  Replan();

  ASSERT_EQ(plans().size(), 1u);
  const CheckpointPlanSpec& plan = plans()[0];
  EXPECT_GT(plan.interval_steps, 0);
  EXPECT_GT(plan.effective_from_step, job().job().max_step());  // a horizon ahead
  const std::vector<Event> events = OfKind(decisions_.Take().events, EventKind::kCheckpointPlan);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_THAT(Figure(events[0], "plan_id"), Optional(static_cast<double>(plan.plan_id)));
  EXPECT_THAT(Figure(events[0], "interval_steps"),
              Optional(static_cast<double>(plan.interval_steps)));
  // The priors, not yet measured: C 60s, R 5m.
  EXPECT_THAT(Figure(events[0], "checkpoint_seconds"), Optional(60.0));
  EXPECT_THAT(Figure(events[0], "restart_seconds"), Optional(300.0));
  EXPECT_THAT(Figure(events[0], "checkpoint_measured"), Optional(0.0));

  // The same interval again is not worth a plan.
  StepTo(6);
  Replan();
  EXPECT_EQ(plans().size(), 1u);
  EXPECT_TRUE(decisions_.Take().events.empty());
}

TEST_F(JobPlannerTest, NoPlanWhileAnAgentOfTheJobCannotBeHeard) {
  RunJob();
  StepTo(5, /*node_b_heard=*/false);  // node-b silent for 5s

  Replan();

  EXPECT_TRUE(plans().empty());
  EXPECT_TRUE(decisions_.Take().events.empty());
}

TEST_F(JobPlannerTest, PlanIsConfirmedOnceEveryAgentHoldsIt) {
  RunJob();
  StepTo(5);
  Replan();
  ASSERT_EQ(plans().size(), 1u);
  const uint64_t id = plans()[0].plan_id;

  Node("node-a").plans_held_through = id;
  CheckAcks();
  EXPECT_LT(job().plans().confirmed_through(), id);  // node-b does not hold it yet

  Node("node-b").plans_held_through = id;
  CheckAcks();
  EXPECT_EQ(job().plans().confirmed_through(), id);
}

TEST_F(JobPlannerTest, PlanNotHeldInTimeIsRevokedAndTheScheduleBeforeItStays) {
  RunJob();
  StepTo(5);
  Replan();
  ASSERT_EQ(plans().size(), 1u);
  const CheckpointPlanSpec plan = plans()[0];
  Node("node-a").plans_held_through = plan.plan_id;  // node-b never gets it
  decisions_.Take();

  std::vector<Event> revoked;
  while (revoked.empty() && job().job().max_step() < plan.effective_from_step) {
    StepTo(job().job().max_step() + 1);
    CheckAcks();
    revoked = OfKind(decisions_.Take().events, EventKind::kCheckpointPlan);
  }

  ASSERT_EQ(revoked.size(), 1u);
  EXPECT_EQ(revoked[0].node, "node-b");
  EXPECT_THAT(Figure(revoked[0], "revoked_plan_id"),
              Optional(static_cast<double>(plan.plan_id)));
  EXPECT_LT(job().job().max_step(), plan.effective_from_step);  // no rank reached it
  // Restated as a newer plan: no periodic checkpoints, as before it.
  ASSERT_EQ(plans().size(), 2u);
  EXPECT_GT(plans()[1].plan_id, plan.plan_id);
  EXPECT_EQ(plans()[1].interval_steps, 0);
  EXPECT_EQ(job().plans().confirmed_through(), plans()[1].plan_id);
}

TEST_F(JobPlannerTest, OneOffCheckpointOnlyWhenEveryRankCanLearnOfIt) {
  StartJob();
  absl::StatusOr<std::string> refused = planner_.RequestCheckpoint(now(), job());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("is pending"));

  ASSERT_TRUE(restarts_.Transition(now(), job(), JobState::kRunning, "ranks report").ok());
  StepTo(5, /*node_b_heard=*/false);
  refused = planner_.RequestCheckpoint(now(), job());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("node node-b cannot be heard"));
  EXPECT_TRUE(plans().empty());

  Heard("node-b");
  decisions_.Take();
  absl::StatusOr<std::string> done = planner_.RequestCheckpoint(now(), job());

  ASSERT_TRUE(done.ok()) << done.status();
  ASSERT_EQ(plans().size(), 1u);
  ASSERT_EQ(plans()[0].one_off_steps.size(), 1u);
  const int64_t step = plans()[0].one_off_steps[0];
  EXPECT_GT(step, job().job().max_step());
  EXPECT_EQ(*done, "job job will checkpoint at step " + std::to_string(step) + " (in about " +
                       std::to_string(step - job().job().max_step()) + "s)");
  const std::vector<Event> events = OfKind(decisions_.Take().events, EventKind::kCheckpointPlan);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_THAT(Figure(events[0], "one_off_step"), Optional(static_cast<double>(step)));
}

}  // namespace
}  // namespace trainsup
