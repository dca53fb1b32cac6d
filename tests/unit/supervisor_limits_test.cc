// The Supervisor's bounds (docs/limits.md), driven through Hello/Report/Sweep
// as the agents' adapter does: --max-jobs, --max-world-size, memory only for
// ranks that report, a generation or a checkpoint plan the supervisor never
// gave refused, and jobs and nodes forgotten after --job-retention.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/core/checkpoint_schedule.h"
#include "daemon/core/heartbeat.h"
#include "daemon/core/reject_reason.h"
#include "daemon/core/supervisor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/core_builders.h"
#include "tests/support/fake_agents.h"
#include "tests/support/test_time.h"

namespace trainsup {
namespace {

using ::testing::HasSubstr;
using ::trainsup::testing::FakeAgentsOptions;
using ::trainsup::testing::FakeAgentsTest;
using ::trainsup::testing::MakeHello;

using ::trainsup::testing::AtS;

class SupervisorLimitsTest : public FakeAgentsTest {
 protected:
  SupervisorLimitsTest() {
    options_ = FakeAgentsOptions();
    options_.limits.max_jobs = 3;
    options_.limits.max_world_size = 64;
    options_.limits.job_retention = absl::Hours(1);
  }
};

TEST_F(SupervisorLimitsTest, NewJobsPastMaxJobsAreRefusedWithTheFlagToRaise) {
  Create();
  ConnectAgents(AtS(0));  // job "job"
  ASSERT_TRUE(sup_->Hello(AtS(1), MakeHello("n1", "other-1")).ok());
  ASSERT_TRUE(sup_->Hello(AtS(1), MakeHello("n2", "other-2")).ok());

  absl::StatusOr<Supervisor::HelloResult> refused = sup_->Hello(AtS(2), MakeHello("n3", "other-3"));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(), HasSubstr("--max-jobs=3"));
  EXPECT_EQ(sup_->Jobs().size(), 3u);
  EXPECT_EQ(sup_->nodes().size(), 4u);  // the refused agent left no node behind

  // A job already held takes more agents.
  EXPECT_TRUE(sup_->Hello(AtS(3), MakeHello("n4", "other-1", /*incarnation=*/9)).ok());
}

TEST_F(SupervisorLimitsTest, NewNodesPastMaxNodesAreRefusedWithTheFlagToRaise) {
  options_.limits.max_nodes = 2;
  Create();
  ConnectAgents(AtS(0));
  absl::StatusOr<Supervisor::HelloResult> refused = sup_->Hello(AtS(1), MakeHello("node-c"));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(), HasSubstr("--max-nodes=2"));
  EXPECT_EQ(sup_->nodes().size(), 2u);
}

TEST_F(SupervisorLimitsTest, AClaimedWorldSizeAboveTheMaximumIsCountedAndHoldsNothing) {
  Create();
  ConnectAgents(AtS(0));
  world_ = 1u << 20;
  Send(AtS(1), a_, {Hb(HeartbeatKind::kStart, 0, 0), Hb(HeartbeatKind::kStart, 1, 0)});

  EXPECT_EQ(sup_->rejected().Get(RejectReason::kBadWorldSize), 2u);
  EXPECT_EQ(job().world_size(), 0u);
  EXPECT_TRUE(job().ranks().empty());
}

TEST_F(SupervisorLimitsTest, RanksGetMemoryWhenTheyReportNotForTheClaimedWorld) {
  Create();
  ConnectAgents(AtS(0));
  world_ = 64;  // the maximum
  Send(AtS(1), a_, {Hb(HeartbeatKind::kStart, 63, 0)});

  EXPECT_EQ(job().world_size(), 64u);
  ASSERT_EQ(job().ranks().size(), 1u);
  EXPECT_EQ(job().ranks().begin()->first, 63u);
}

TEST_F(SupervisorLimitsTest, AReportOfAGenerationNeverStartedIsRefusedAndCounted) {
  Create();
  ConnectAgents(AtS(0));  // generation 1, started by the supervisor
  Send(AtS(1), a_, {Hb(HeartbeatKind::kStart, 0, 0)});
  ASSERT_EQ(job().generation(), 1u);

  gen_ = 7;
  Send(AtS(2), a_, {Hb(HeartbeatKind::kStep, 0, 1), Hb(HeartbeatKind::kStep, 1, 1)});

  EXPECT_EQ(sup_->reports_refused(), 1u);
  EXPECT_EQ(sup_->rejected().Get(RejectReason::kUnknownGeneration), 2u);
  EXPECT_EQ(job().generation(), 1u);
  EXPECT_EQ(job().max_step(), -1);
}

TEST_F(SupervisorLimitsTest, AHeartbeatOfAGenerationNeverStartedIsRefusedAndCounted) {
  Create();
  ConnectAgents(AtS(0));
  Heartbeat forged = Hb(HeartbeatKind::kStep, 0, 5);
  forged.generation = 9;
  Send(AtS(1), a_, {forged, Hb(HeartbeatKind::kStart, 1, 0)});

  EXPECT_EQ(sup_->rejected().Get(RejectReason::kUnknownGeneration), 1u);
  EXPECT_EQ(job().generation(), 1u);
  EXPECT_EQ(job().ranks_reporting(), 1u);  // rank 1's honest START
}

TEST_F(SupervisorLimitsTest, AHelloOfAGenerationNeverStartedIsRefused) {
  Create();
  ConnectAgents(AtS(0));
  absl::StatusOr<Supervisor::HelloResult> refused = sup_->Hello(AtS(1), HelloOf("node-c", 5));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("generation 5"));
  EXPECT_EQ(job().generation(), 1u);
}

TEST_F(SupervisorLimitsTest, GenerationsAreAdoptedFromAgentsOnlyWhileTheSupervisorStartedNone) {
  Create();  // a supervisor that lost its state: the agents run generation 3 and 4
  a_ = Connect(AtS(0), "node-a", 3);
  EXPECT_EQ(job().generation(), 3u);
  b_ = Connect(AtS(0), "node-b", 4);
  EXPECT_EQ(job().generation(), 4u);
}

TEST_F(SupervisorLimitsTest, HeldPlansMustBeWellFormed) {
  Create();
  AgentHelloInfo hello = HelloOf("node-a");
  CheckpointPlanSpec bad;
  bad.plan_id = 5;
  bad.interval_steps = -10;
  hello.plans = {bad};
  absl::StatusOr<Supervisor::HelloResult> refused = sup_->Hello(AtS(0), hello);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("checkpoint plan 5 is malformed"));
  EXPECT_TRUE(sup_->Jobs().empty());
}

TEST_F(SupervisorLimitsTest, HeldPlansMustBeTheOnesThisSupervisorPublished) {
  Create();  // a supervisor that lost its state: an agent brings back its plan
  CheckpointPlanSpec mine;
  mine.plan_id = 100;
  mine.interval_steps = 50;
  AgentHelloInfo adopt = HelloOf("node-a", 1);
  adopt.plans = {mine};
  a_ = Connect(AtS(1), adopt);

  CheckpointPlanSpec rewritten = mine;
  rewritten.interval_steps = 1;  // checkpoint every step: a DoS on the job's storage
  AgentHelloInfo hello = HelloOf("node-b", 1);
  hello.plans = {rewritten};
  absl::StatusOr<Supervisor::HelloResult> refused = sup_->Hello(AtS(2), hello);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("plan 100 was never published"));
  ASSERT_EQ(entry().plans().plans().size(), 1u);
  EXPECT_EQ(entry().plans().plans()[0].interval_steps, 50);
}

TEST_F(SupervisorLimitsTest, AJobAndItsNodesLeaveMemoryAfterRetentionWithoutAgents) {
  Create();
  ConnectAgents(AtS(0));
  Send(AtS(1), a_, {Hb(HeartbeatKind::kStart, 0, 0)});
  Disconnect(AtS(2), a_);
  Disconnect(AtS(2), b_);

  sup_->Sweep(AtS(2) + absl::Minutes(59));
  EXPECT_EQ(sup_->Jobs().size(), 1u);
  EXPECT_EQ(sup_->nodes().size(), 2u);

  sup_->Sweep(AtS(2) + absl::Minutes(61));
  EXPECT_TRUE(sup_->Jobs().empty());
  EXPECT_TRUE(sup_->nodes().empty());
  EXPECT_EQ(sup_->jobs_forgotten(), 1u);
  EXPECT_EQ(sup_->nodes_forgotten(), 2u);
  // Its id is free again, and a new run of it starts from scratch.
  EXPECT_TRUE(sup_->Hello(AtS(4000), MakeHello("node-a", "job", 50)).ok());
  EXPECT_EQ(job().generation(), 1u);
}

TEST_F(SupervisorLimitsTest, AConnectedAgentKeepsItsJobAndAQuarantinedNodeStays) {
  Create();
  ConnectAgents(AtS(0));
  ASSERT_TRUE(sup_->Quarantine(AtS(1), "node-b", "bad GPU").ok());
  Disconnect(AtS(2), b_);
  ASSERT_TRUE(sup_->Hello(AtS(2), MakeHello("node-x", "gone-job", 77)).ok());
  sup_->Disconnected(AtS(3), sup_->nodes().back().session);

  sup_->Sweep(AtS(10) + absl::Hours(2));  // node-a connected but silent all along

  std::vector<std::string> jobs;
  for (const JobEntry* j : sup_->Jobs()) jobs.push_back(j->id());
  EXPECT_THAT(jobs, ::testing::ElementsAre("job"));
  std::vector<std::string> nodes;
  for (const NodeRecord& n : sup_->nodes()) nodes.push_back(n.name);
  EXPECT_THAT(nodes, ::testing::ElementsAre("node-a", "node-b"));
}

TEST_F(SupervisorLimitsTest, ForgettingANodeKeepsTheOthersRanksOnTheirNodes) {
  Create();
  ConnectAgents(AtS(0));
  ASSERT_TRUE(sup_->Hello(AtS(0), MakeHello("node-0", "early-job", 40)).ok());
  sup_->Disconnected(AtS(0), sup_->nodes().back().session);
  Send(AtS(2) + absl::Hours(2), b_, {Hb(HeartbeatKind::kStart, 2, 0)});
  Send(AtS(2) + absl::Hours(2), a_, {Hb(HeartbeatKind::kStart, 0, 0)});

  sup_->Sweep(AtS(3) + absl::Hours(2));  // node-0 (index 2) goes; none before it

  ASSERT_EQ(sup_->nodes().size(), 2u);
  EXPECT_EQ(sup_->node(job().rank(0).node).name, "node-a");
  EXPECT_EQ(sup_->node(job().rank(2).node).name, "node-b");
}

}  // namespace
}  // namespace trainsup
