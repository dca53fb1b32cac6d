// The agents' registry: sessions, supersession, the per-job node index.
#include "daemon/core/agent_registry.h"

#include <string>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/core_builders.h"

namespace trainsup {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::trainsup::testing::MakeHello;

const absl::Time kT0 = absl::FromUnixSeconds(1000);

TEST(AgentRegistryTest, HelloRegistersTheNodeUnderItsJob) {
  AgentRegistry r;
  const AgentRegistry::Connection c = r.Connect(kT0, MakeHello("n1", "llama"));

  ASSERT_NE(c.node, kNoNode);
  EXPECT_EQ(c.superseded, 0u);
  EXPECT_EQ(r.NodeOfSession(c.session), c.node);
  EXPECT_EQ(r.Find("n1"), c.node);
  EXPECT_EQ(r.NameOf(c.node), "n1");
  EXPECT_TRUE(r.node(c.node).connected);
  EXPECT_EQ(r.node(c.node).last_report, kT0);
  EXPECT_THAT(r.NodesOf("llama"), ElementsAre(c.node));
  EXPECT_EQ(r.connected(), 1u);
}

TEST(AgentRegistryTest, SecondHelloOfANodeSupersedesTheFirstSession) {
  AgentRegistry r;
  const AgentRegistry::Connection first = r.Connect(kT0, MakeHello("n1"));
  const AgentRegistry::Connection second = r.Connect(kT0, MakeHello("n1"));

  EXPECT_EQ(second.node, first.node);
  EXPECT_EQ(second.superseded, first.session);
  EXPECT_NE(second.session, first.session);
  EXPECT_EQ(r.NodeOfSession(first.session), kNoNode);
  EXPECT_EQ(r.Disconnect(first.session), kNoNode);  // a superseded stream ends: ignored
  EXPECT_TRUE(r.node(second.node).connected);
  EXPECT_EQ(r.connected(), 1u);
}

TEST(AgentRegistryTest, NewIncarnationStartsTheAgentsCountersFromZero) {
  AgentRegistry r;
  const AgentRegistry::Connection c = r.Connect(kT0, MakeHello("n1", "job", /*incarnation=*/1));
  r.mutable_node(c.node).agent_dropped = 7;
  r.mutable_node(c.node).agent_rejected["invalid_json"] = 3;

  r.Connect(kT0, MakeHello("n1", "job", 1));  // the same agent reconnects
  EXPECT_EQ(r.node(c.node).agent_dropped, 7u);
  r.Connect(kT0, MakeHello("n1", "job", 2));  // a new agent process
  EXPECT_EQ(r.node(c.node).agent_dropped, 0u);
  EXPECT_THAT(r.node(c.node).agent_rejected, IsEmpty());
}

TEST(AgentRegistryTest, NewStreamHasBeenToldNothing) {
  AgentRegistry r;
  const AgentRegistry::Connection c = r.Connect(kT0, MakeHello("n1"));
  r.mutable_node(c.node).told.plan_id = 5;
  r.mutable_node(c.node).told.hold = true;
  r.Connect(kT0, MakeHello("n1"));
  EXPECT_EQ(r.node(c.node).told.plan_id, 0u);
  EXPECT_FALSE(r.node(c.node).told.hold);
}

TEST(AgentRegistryTest, NodeThatMovesToAnotherJobLeavesTheOldJobsIndex) {
  AgentRegistry r;
  const NodeIndex n1 = r.Connect(kT0, MakeHello("n1", "a")).node;
  const NodeIndex n2 = r.Connect(kT0, MakeHello("n2", "a")).node;

  r.Connect(kT0, MakeHello("n1", "b"));

  EXPECT_THAT(r.NodesOf("a"), ElementsAre(n2));
  EXPECT_THAT(r.NodesOf("b"), ElementsAre(n1));
  EXPECT_EQ(r.node(n1).job, "b");
  EXPECT_THAT(r.NodesOf("nobody"), IsEmpty());
}

TEST(AgentRegistryTest, DisconnectKeepsTheNodeUnderItsJob) {
  AgentRegistry r;
  const AgentRegistry::Connection c = r.Connect(kT0, MakeHello("n1", "a"));
  EXPECT_EQ(r.Disconnect(c.session), c.node);
  EXPECT_FALSE(r.node(c.node).connected);
  EXPECT_EQ(r.connected(), 0u);
  EXPECT_THAT(r.NodesOf("a"), ElementsAre(c.node));
  EXPECT_EQ(r.Disconnect(c.session), kNoNode);  // twice: ignored
}

TEST(AgentRegistryTest, RestoredNodeHasNoJobUntilItsAgentSpeaks) {
  AgentRegistry r;
  const NodeIndex n = r.FindOrAdd("n9");
  EXPECT_EQ(r.FindOrAdd("n9"), n);
  EXPECT_FALSE(r.node(n).connected);
  EXPECT_EQ(r.node(n).job, "");
  r.Connect(kT0, MakeHello("n9", "llama"));
  EXPECT_THAT(r.NodesOf("llama"), ElementsAre(n));
}

TEST(AgentRegistryTest, NameOfNoNodeIsEmpty) {
  AgentRegistry r;
  EXPECT_EQ(r.NameOf(kNoNode), "");
  EXPECT_EQ(r.Find("nobody"), kNoNode);
}

}  // namespace
}  // namespace trainsup
