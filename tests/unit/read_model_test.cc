// ReadModel on its own: the plain views the adapters render, filled from the
// core's parts as the supervisor wires them (tests/support/core_parts.h),
// with a fake clock. What a rule decided reaches the view as the sweep left
// it; what was observed is counted as reported.
#include "daemon/core/read_model.h"

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/time/time.h"
#include "daemon/core/early_failure.h"
#include "daemon/core/failure_handler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/core_parts.h"

namespace trainsup {
namespace {

using ::testing::IsEmpty;
using ::trainsup::testing::CorePartsTest;

class ReadModelTest : public CorePartsTest {
 protected:
  VerdictCounts verdicts_;
  EarlyFailureCounts early_failures_;
  ReadModel model_{agents_, quarantine_, jobs_, planner_, verdicts_, early_failures_};
};

TEST_F(ReadModelTest, ARunningJobsViewCountsItsRanksAndItsFurthestStep) {
  RunJob();
  RunSteps(5);
  const JobView view = model_.JobViewOf(job(), now());
  EXPECT_EQ(view.id, "job");
  EXPECT_EQ(view.state, JobState::kRunning);
  EXPECT_EQ(view.generation, 1u);
  EXPECT_EQ(view.world_size, 4u);
  EXPECT_EQ(view.ranks_reporting, 4u);
  EXPECT_EQ(view.ranks_alive, 4u);
  EXPECT_EQ(view.seen.alive, 4u);
  EXPECT_EQ(view.step, 5);
  EXPECT_EQ(view.nodes, 2u);
  EXPECT_FALSE(view.stalled);
  EXPECT_EQ(view.stall_culprit, std::nullopt);
}

TEST_F(ReadModelTest, EveryJobHasOneViewById) {
  RunJob();
  jobs_.FindOrAdd("another");
  const std::vector<JobView> views = model_.JobViews(now());
  ASSERT_EQ(views.size(), 2u);
  EXPECT_EQ(views[0].id, "another");
  EXPECT_EQ(views[1].id, "job");
}

TEST_F(ReadModelTest, RankRowsAreByRankAndPointAtTheirNodes) {
  RunJob();
  RunSteps(3);
  std::vector<RankView> rows;
  std::vector<RankTexts> texts;
  model_.RankViewsOf(job(), &rows, &texts);
  ASSERT_EQ(rows.size(), 4u);
  const std::vector<NodeView> nodes = model_.NodeViews();
  for (uint32_t rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(rows[rank].rank, rank);
    EXPECT_EQ(rows[rank].step, 3);
    ASSERT_LT(rows[rank].node, nodes.size());
    EXPECT_EQ(nodes[rows[rank].node].name, rank < 2 ? "node-a" : "node-b");
  }
  // The outputs are emptied first: a second call gives the same rows.
  model_.RankViewsOf(job(), &rows, &texts);
  EXPECT_EQ(rows.size(), 4u);
}

TEST_F(ReadModelTest, NodesAreInTheOrderFirstHeardWithTheirJobAndRanks) {
  RunJob();
  RunSteps(1);
  const std::vector<NodeView> nodes = model_.NodeViews();
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[0].name, "node-a");
  EXPECT_EQ(nodes[1].name, "node-b");
  for (const NodeView& n : nodes) {
    EXPECT_EQ(n.job, "job") << n.name;
    EXPECT_EQ(n.generation, 1u) << n.name;
    EXPECT_EQ(n.ranks, 2u) << n.name;
    EXPECT_TRUE(n.connected) << n.name;
    EXPECT_FALSE(n.quarantined) << n.name;
  }
}

TEST_F(ReadModelTest, TheClusterCountsItsNodesAndNoneIsQuarantinedOrUnreachable) {
  RunJob();
  const ClusterView cluster = model_.Cluster(now());
  EXPECT_EQ(cluster.nodes, 2u);
  EXPECT_EQ(cluster.nodes_quarantined, 0u);
  EXPECT_THAT(cluster.quarantined_nodes, IsEmpty());
  EXPECT_THAT(cluster.unreachable_nodes, IsEmpty());
}

TEST_F(ReadModelTest, AJobWithNoStacksHasNone) {
  RunJob();
  EXPECT_EQ(model_.StacksOf(job(), 0), std::nullopt);
  EXPECT_EQ(model_.StacksOf(job(), 1), std::nullopt);
}

}  // namespace
}  // namespace trainsup
