// Reconciler on its own: what each connected agent of a job must be told for
// the job's lifecycle (stop, start, hold, quarantine, the plans), and that
// each is told once a stream. Read from the commands it decides.
#include "daemon/core/reconciler.h"

#include <cstdint>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/core_parts.h"

namespace trainsup {
namespace {

using ::testing::ElementsAre;
using ::trainsup::testing::CorePartsTest;
using Kind = AgentCommand::Kind;

class ReconcilerTest : public CorePartsTest {
 protected:
  // The commands the reconciler decides for the job now, as "node kind
  // generation".
  std::vector<std::string> Reconcile() {
    reconciler_.Reconcile(job());
    std::vector<std::string> out;
    for (const AgentCommand& c : decisions_.Take().commands) {
      out.push_back(c.node + " " + KindName(c.kind) + " " + std::to_string(c.generation));
    }
    return out;
  }
  static std::string KindName(Kind kind) {
    switch (kind) {
      case Kind::kStop: return "stop";
      case Kind::kStart: return "start";
      case Kind::kHold: return "hold";
      case Kind::kQuarantine: return "quarantine";
      case Kind::kPlan: return "plan";
      case Kind::kSettings: return "settings";
    }
    return "?";
  }
  void MoveTo(JobState state, const std::string& reason = "test") {
    job().mutable_lifecycle().state = state;
    job().mutable_lifecycle().reason = reason;
  }
};

TEST_F(ReconcilerTest, StoppingJobStopsEveryRunningAgentOnceAskingForStacks) {
  RunJob();
  MoveTo(JobState::kStopping, "hang at rank 2");
  job().mutable_lifecycle().collect_stacks = true;

  reconciler_.Reconcile(job());
  const std::vector<AgentCommand> commands = decisions_.Take().commands;

  ASSERT_EQ(commands.size(), 2u);
  for (const AgentCommand& c : commands) {
    EXPECT_EQ(c.kind, Kind::kStop);
    EXPECT_EQ(c.generation, 1u);
    EXPECT_EQ(c.reason, "hang at rank 2");
    EXPECT_EQ(c.grace, options_.stop_grace);
    EXPECT_TRUE(c.collect_stacks);
    EXPECT_EQ(c.session, Node(c.node).session);
  }
  EXPECT_TRUE(Reconcile().empty());  // told once
}

TEST_F(ReconcilerTest, MemberOfANewGenerationThatStoppedIsStartedOnce) {
  RunJob();
  // Generation 2 was started; node-a is a member, node-b was cut from it.
  job().job().ObserveGeneration(now(), 2);
  Node("node-a").member_generation = 2;
  for (const char* name : {"node-a", "node-b"}) Node(name).launcher.state = LauncherState::kExited;

  EXPECT_THAT(Reconcile(), ElementsAre("node-a start 2"));
  EXPECT_TRUE(Reconcile().empty());
}

TEST_F(ReconcilerTest, AgentStillRunningAnOldGenerationIsStoppedFirst) {
  RunJob();
  job().job().ObserveGeneration(now(), 2);  // node-b was away during the restart
  Node("node-a").member_generation = 2;
  Node("node-a").generation = 2;

  EXPECT_THAT(Reconcile(), ElementsAre("node-b stop 1"));
  EXPECT_TRUE(Reconcile().empty());
}

TEST_F(ReconcilerTest, HeldJobIsHeldOnEveryAgentOnce) {
  RunJob();
  MoveTo(JobState::kHeld, "restart cap");

  EXPECT_THAT(Reconcile(), ElementsAre("node-a hold 1", "node-b hold 1"));
  EXPECT_TRUE(Reconcile().empty());
}

TEST_F(ReconcilerTest, QuarantinedNodeIsToldThatAndNothingElse) {
  RunJob();
  quarantine_.Quarantine("node-b", "bad disk");
  MoveTo(JobState::kStopping);

  reconciler_.Reconcile(job());
  const std::vector<AgentCommand> commands = decisions_.Take().commands;

  ASSERT_EQ(commands.size(), 2u);
  EXPECT_EQ(commands[0].node, "node-a");
  EXPECT_EQ(commands[0].kind, Kind::kStop);
  EXPECT_EQ(commands[1].node, "node-b");
  EXPECT_EQ(commands[1].kind, Kind::kQuarantine);
  EXPECT_EQ(commands[1].reason, "bad disk");
  EXPECT_TRUE(Reconcile().empty());
}

TEST_F(ReconcilerTest, PlansGoToEveryAgentInOrderAndOnlyOnce) {
  RunJob();
  CheckpointPublisher& plans = job().mutable_plans();
  const uint64_t first = plans.Publish(now(), plans.Periodic(10, 1.0, 50)).plan_id;
  const uint64_t second = plans.Publish(now(), plans.OneOff(10, 1.0)).plan_id;

  reconciler_.Reconcile(job());
  std::vector<std::pair<std::string, uint64_t>> sent;
  for (const AgentCommand& c : decisions_.Take().commands) {
    ASSERT_EQ(c.kind, Kind::kPlan);
    sent.emplace_back(c.node, c.plan.plan_id);
  }
  EXPECT_THAT(sent, ElementsAre(std::make_pair("node-a", first), std::make_pair("node-a", second),
                                std::make_pair("node-b", first), std::make_pair("node-b", second)));
  EXPECT_TRUE(Reconcile().empty());

  const uint64_t third = plans.Publish(now(), plans.Periodic(20, 1.0, 80)).plan_id;
  EXPECT_THAT(Reconcile(), ElementsAre("node-a plan 0", "node-b plan 0"));
  EXPECT_EQ(Node("node-a").told.plan_id, third);
}

TEST_F(ReconcilerTest, DisconnectedAgentIsToldNothing) {
  RunJob();
  agents_.Disconnect(Node("node-b").session);
  MoveTo(JobState::kHeld);

  EXPECT_THAT(Reconcile(), ElementsAre("node-a hold 1"));
}

}  // namespace
}  // namespace trainsup
