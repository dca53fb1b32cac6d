// Where each generation of a job meets: the host of torchrun's rendezvous
// store stays while it is a member and the job met there, moves to a
// survivor when it is lost, and static node ranks are numbered afresh only
// when the nodes change.
#include "daemon/core/rendezvous.h"

#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainsup {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

RendezvousMember Member(const std::string& node, uint32_t port,
                        RendezvousKind kind = RendezvousKind::kC10d, uint32_t node_rank = 0) {
  RendezvousOffer offer;
  offer.kind = kind;
  offer.address = "10.0.0." + std::to_string(port % 100);
  offer.port = port;
  offer.node_rank = node_rank;
  return {node, offer};
}

RendezvousMember Silent(const std::string& node) { return {node, std::nullopt}; }

TEST(RendezvousOfferTest, AddressPortAndNodeRankAreChecked) {
  RendezvousOffer ok;
  ok.address = "node-1.example.org";
  ok.port = 29400;
  EXPECT_TRUE(CheckRendezvousOffer(ok).ok());
  ok.address = "fd00::1";
  EXPECT_TRUE(CheckRendezvousOffer(ok).ok());

  RendezvousOffer bad = ok;
  bad.address = "";
  EXPECT_THAT(CheckRendezvousOffer(bad).message(), HasSubstr("1..253 characters"));
  bad.address = "a b";
  EXPECT_FALSE(CheckRendezvousOffer(bad).ok());
  bad.address = std::string(254, 'a');
  EXPECT_FALSE(CheckRendezvousOffer(bad).ok());
  bad = ok;
  bad.port = 0;
  EXPECT_THAT(CheckRendezvousOffer(bad).message(), HasSubstr("port 0"));
  bad.port = 65536;
  EXPECT_FALSE(CheckRendezvousOffer(bad).ok());
  bad = ok;
  bad.node_rank = 1u << 20;
  EXPECT_FALSE(CheckRendezvousOffer(bad).ok());
}

TEST(RendezvousPlanTest, TheFirstNodeToLaunchHostsAndLateNodesMeetThere) {
  RendezvousPlan plan;
  EXPECT_TRUE(plan.Join(1, Member("node-b", 41)));
  EXPECT_FALSE(plan.Join(1, Member("node-a", 42)));
  EXPECT_FALSE(plan.Join(1, Member("node-a", 42)));  // said twice: once

  std::optional<RendezvousSpec> b = plan.For(1, "node-b");
  std::optional<RendezvousSpec> a = plan.For(1, "node-a");
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->host_node, "node-b");
  EXPECT_EQ(a->address, "10.0.0.41");
  EXPECT_EQ(a->port, 41u);
  EXPECT_EQ(b->node_rank, 0u);
  EXPECT_EQ(a->node_rank, 1u);
  EXPECT_FALSE(plan.For(2, "node-a"));      // another generation: nothing told
  EXPECT_FALSE(plan.For(1, "node-c"));      // not in it
  EXPECT_FALSE(plan.Join(1, Silent("node-c")));  // offers nothing: its command decides
}

TEST(RendezvousPlanTest, TheHostStaysWhileItIsAMemberAndTheJobMetThere) {
  RendezvousPlan plan;
  plan.Join(1, Member("node-a", 41));
  plan.Join(1, Member("node-b", 42));
  const RendezvousDecision* d =
      plan.Decide(2, {Member("node-b", 42), Member("node-a", 41)}, /*previous_met=*/true);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->host, "node-a");
  EXPECT_FALSE(d->moved());
  EXPECT_FALSE(d->renumbered);
  EXPECT_THAT(d->ranks, ElementsAre("node-a", "node-b"));
}

TEST(RendezvousPlanTest, ALostHostMovesTheNextGenerationToASurvivor) {
  RendezvousPlan plan;
  plan.Join(1, Member("node-b", 42));
  plan.Join(1, Member("node-a", 41));
  // node-b froze: generation 2 runs on node-a alone.
  const RendezvousDecision* d = plan.Decide(2, {Member("node-a", 41)}, /*previous_met=*/true);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->host, "node-a");
  EXPECT_EQ(d->address, "10.0.0.41");
  EXPECT_EQ(d->port, 41u);
  EXPECT_EQ(d->previous_host, "node-b");
  EXPECT_TRUE(d->moved());
  std::optional<RendezvousSpec> a = plan.For(2, "node-a");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->host_node, "node-a");
  EXPECT_FALSE(plan.For(2, "node-b"));

  // node-b comes back for generation 3: the host stays on node-a.
  d = plan.Decide(3, {Member("node-a", 41), Member("node-b", 43)}, /*previous_met=*/true);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->host, "node-a");
  EXPECT_EQ(plan.For(3, "node-b")->port, 41u);
}

TEST(RendezvousPlanTest, AGenerationThatNeverMetMovesToAnotherMemberWhenThereIsOne) {
  RendezvousPlan plan;
  plan.Join(1, Member("node-a", 41));
  plan.Join(1, Member("node-b", 42));
  const RendezvousDecision* d =
      plan.Decide(2, {Member("node-a", 41), Member("node-b", 42)}, /*previous_met=*/false);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->host, "node-b");
  // Alone, it stays where it is: there is nowhere else.
  d = plan.Decide(3, {Member("node-b", 42)}, /*previous_met=*/false);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->host, "node-b");
}

TEST(RendezvousPlanTest, OnlyAMemberThatOffersHosts) {
  RendezvousPlan plan;
  const RendezvousDecision* d =
      plan.Decide(1, {Silent("node-a"), Member("node-b", 42)}, /*previous_met=*/false);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->host, "node-b");
  EXPECT_EQ(plan.Decide(2, {Silent("node-a")}, true), nullptr);
  EXPECT_FALSE(plan.current());
  EXPECT_FALSE(plan.For(2, "node-a"));
}

TEST(RendezvousPlanTest, StaticRunsAsWrittenUntilTheNodesChangeThenRanksAreFresh) {
  const RendezvousKind s = RendezvousKind::kStatic;
  RendezvousPlan plan;
  // Generation 1 as the commands say: node-b is node rank 0, so it hosts.
  EXPECT_FALSE(plan.Join(1, Member("node-a", 41, s, 1)));
  EXPECT_FALSE(plan.Join(1, Member("node-b", 42, s, 0)));  // nothing decided
  EXPECT_FALSE(plan.For(1, "node-a"));  // as written: nothing to rewrite
  EXPECT_EQ(plan.current()->host, "node-b");

  // The same nodes again, and they met: still as written.
  const RendezvousDecision* d =
      plan.Decide(2, {Member("node-a", 41, s, 1), Member("node-b", 42, s, 0)}, true);
  ASSERT_NE(d, nullptr);
  EXPECT_TRUE(d->as_written);
  EXPECT_FALSE(plan.For(2, "node-a"));

  // node-b is lost and node-c comes: node-a hosts as rank 0, node-c is 1.
  d = plan.Decide(3, {Member("node-a", 41, s, 1), Member("node-c", 43, s, 1)}, true);
  ASSERT_NE(d, nullptr);
  EXPECT_FALSE(d->as_written);
  EXPECT_TRUE(d->renumbered);
  EXPECT_THAT(d->ranks, ElementsAre("node-a", "node-c"));
  std::optional<RendezvousSpec> c = plan.For(3, "node-c");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->address, "10.0.0.41");
  EXPECT_EQ(c->port, 41u);
  EXPECT_EQ(c->node_rank, 1u);
  EXPECT_EQ(plan.For(3, "node-a")->node_rank, 0u);

  // The same nodes again: the same ranks, told again (not as written now).
  d = plan.Decide(4, {Member("node-c", 43, s, 1), Member("node-a", 41, s, 1)}, true);
  ASSERT_NE(d, nullptr);
  EXPECT_FALSE(d->renumbered);
  EXPECT_THAT(d->ranks, ElementsAre("node-a", "node-c"));
  EXPECT_EQ(plan.For(4, "node-c")->node_rank, 1u);
}

}  // namespace
}  // namespace trainsup
