// The per-step sums of the signals (StepAggregator) and the replica
// disagreement rule (ReplicaRule) they feed.
#include "daemon/core/signals/step_aggregator.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/time/time.h"
#include "daemon/core/signals/replica_rule.h"
#include "gtest/gtest.h"
#include "tests/support/test_time.h"

namespace trainsup {
namespace {

using ::trainsup::testing::AtS;

// A STEP of `rank` at `step` (rank r on node r / 4).
Heartbeat Step(uint32_t rank, int64_t step) {
  Heartbeat hb;
  hb.kind = HeartbeatKind::kStep;
  hb.rank = rank;
  hb.world_size = 8;
  hb.step = step;
  hb.step_duration_s = 1.0;
  return hb;
}

RankAt AtRank(uint32_t rank) { return {rank, rank / 4}; }

TEST(StepAggregatorTest, AStepIsHandedOverOnceEveryRankSentItWithItsSums) {
  StepAggregator agg;
  for (uint32_t r = 0; r < 4; ++r) {
    Heartbeat hb = Step(r, 5);
    hb.loss = 2.0 + r;                        // mean 3.5
    hb.grad_norm = r == 2 ? 9.0 : 1.0;        // the largest on rank 2
    hb.learning_rate = 3e-4;
    hb.samples = 8;
    hb.tokens = 4096;
    hb.step_duration_s = 1.0 + r;             // mean 2.5
    hb.data_wait_s = 0.1;
    hb.device_memory_bytes = 1000 + 10 * r;   // the largest on rank 3
    hb.device_memory_capacity_bytes = 5000;
    hb.host_rss_bytes = r == 1 ? 900 : 100;
    agg.Add(AtS(1 + r * 0.1), AtRank(r), hb, 0, /*expected_ranks=*/4);
    EXPECT_EQ(agg.ready().size(), r == 3 ? 1u : 0u);
  }
  const StepSignals& s = agg.ready()[0];
  EXPECT_EQ(s.step, 5);
  EXPECT_EQ(s.time, AtS(1));
  EXPECT_EQ(s.ranks, 4u);
  EXPECT_DOUBLE_EQ(*s.loss, 3.5);
  EXPECT_DOUBLE_EQ(*s.grad_norm, 9.0);
  EXPECT_EQ(s.grad_norm_at.rank, 2u);
  EXPECT_DOUBLE_EQ(*s.learning_rate, 3e-4);
  EXPECT_EQ(s.samples, 32u);
  EXPECT_EQ(s.tokens, 4u * 4096);
  EXPECT_DOUBLE_EQ(*s.step_time_s, 2.5);
  EXPECT_DOUBLE_EQ(*s.data_wait_s, 0.1);
  EXPECT_DOUBLE_EQ(*s.device_memory_bytes, 1030);
  EXPECT_EQ(s.device_memory_at.rank, 3u);
  EXPECT_DOUBLE_EQ(*s.device_capacity_bytes, 5000);
  EXPECT_DOUBLE_EQ(*s.host_rss_bytes, 900);
  EXPECT_EQ(s.host_rss_at.rank, 1u);
}

TEST(StepAggregatorTest, NonFiniteValuesAreCountedNotSummed) {
  StepAggregator agg;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (uint32_t r = 0; r < 3; ++r) {
    Heartbeat hb = Step(r, 0);
    hb.loss = r == 1 ? nan : 2.0;
    hb.grad_norm = r == 0 ? std::numeric_limits<double>::infinity() : 1.0;
    agg.Add(AtS(0), AtRank(r), hb, 0, 3);
  }
  const StepSignals& s = agg.ready()[0];
  EXPECT_DOUBLE_EQ(*s.loss, 2.0);
  EXPECT_EQ(s.loss_nonfinite, 1u);
  EXPECT_EQ(s.grad_nonfinite, 1u);
  EXPECT_EQ(s.grad_nonfinite_at.rank, 0u);
  EXPECT_DOUBLE_EQ(*s.grad_norm, 1.0);
}

TEST(StepAggregatorTest, AnUnmeasuredOrCheckpointedStepIsNotThePace) {
  StepAggregator agg;
  Heartbeat first = Step(0, 0);
  first.step_duration_s = 0;  // the helper's first step
  agg.Add(AtS(0), AtRank(0), first, 0, 2);
  Heartbeat checkpointed = Step(1, 0);
  checkpointed.step_duration_s = 40;
  agg.Add(AtS(0), AtRank(1), checkpointed, /*checkpoint_s=*/39, 2);
  EXPECT_FALSE(agg.ready()[0].step_time_s.has_value());
}

TEST(StepAggregatorTest, StepsAreHandedOverInOrder) {
  StepAggregator agg;
  // Node 1's report (steps 7 and 8) arrives before node 0's.
  agg.Add(AtS(0), AtRank(4), Step(4, 7), 0, 2);
  agg.Add(AtS(0), AtRank(4), Step(4, 8), 0, 2);
  agg.Add(AtS(0), AtRank(0), Step(0, 8), 0, 2);  // 8 complete, 7 not yet
  EXPECT_TRUE(agg.ready().empty());
  agg.Add(AtS(0), AtRank(0), Step(0, 7), 0, 2);
  ASSERT_EQ(agg.ready().size(), 2u);
  EXPECT_EQ(agg.ready()[0].step, 7);
  EXPECT_EQ(agg.ready()[1].step, 8);
}

TEST(StepAggregatorTest, AStepARankNeverSendsIsHandedOverByAgeOrByTheRing) {
  StepAggregator agg;
  agg.Add(AtS(0), AtRank(0), Step(0, 0), 0, 2);  // rank 1 has died
  agg.Expire(AtS(5), absl::Seconds(10));
  EXPECT_TRUE(agg.ready().empty());
  agg.Expire(AtS(10.5), absl::Seconds(10));
  ASSERT_EQ(agg.ready().size(), 1u);
  EXPECT_EQ(agg.ready()[0].ranks, 1u);
  agg.ready().clear();

  // Its late STEP is left out, counted.
  agg.Add(AtS(11), AtRank(1), Step(1, 0), 0, 2);
  EXPECT_EQ(agg.late(), 1u);

  // The ring holds kSlots steps: the job running ahead hands the oldest over.
  for (int64_t step = 1; step <= static_cast<int64_t>(StepAggregator::kSlots) + 1; ++step) {
    agg.Add(AtS(12), AtRank(0), Step(0, step), 0, 2);
  }
  ASSERT_EQ(agg.ready().size(), 1u);
  EXPECT_EQ(agg.ready()[0].step, 1);
}

// ---- Replica digests ----

// `digests[r]` of ranks r = 0..n-1 in group `group` at `step`, each rank
// on node r / 4; returns the disagreements found.
std::vector<ReplicaDisagreement> Tally(const std::vector<uint64_t>& digests, uint32_t group = 0,
                                       int64_t step = 40) {
  StepAggregator agg;
  for (uint32_t r = 0; r < digests.size(); ++r) {
    Heartbeat hb = Step(r, step);
    hb.world_size = 16;
    hb.replica_digest = digests[r];
    hb.replica_group = group;
    agg.Add(AtS(0), AtRank(r), hb, 0, static_cast<uint32_t>(digests.size()));
  }
  return agg.disagreements();
}

TEST(StepAggregatorTest, AgreeingReplicasAreNotADisagreement) {
  EXPECT_TRUE(Tally({7, 7, 7, 7, 7, 7, 7, 7}).empty());
}

TEST(StepAggregatorTest, ARankThatDisagreesWithTheMajorityIsNamed) {
  std::vector<ReplicaDisagreement> found = Tally({7, 7, 7, 7, 7, 9, 7, 7}, /*group=*/3);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].step, 40);
  EXPECT_EQ(found[0].group, 3u);
  EXPECT_EQ(found[0].group_ranks, 8u);
  EXPECT_EQ(found[0].majority, 7u);
  EXPECT_EQ(found[0].disagreeing, 1u);
  EXPECT_FALSE(found[0].no_majority);
  ASSERT_EQ(found[0].named.size(), 1u);
  EXPECT_EQ(found[0].named[0].rank, 5u);
  EXPECT_EQ(found[0].named[0].node, 1u);
}

TEST(StepAggregatorTest, TwoReplicasThatDifferHaveNoMajority) {
  std::vector<ReplicaDisagreement> found = Tally({7, 9});
  ASSERT_EQ(found.size(), 1u);
  EXPECT_TRUE(found[0].no_majority);
  EXPECT_TRUE(found[0].named.empty());
}

TEST(StepAggregatorTest, GroupsAreJudgedApart) {
  StepAggregator agg;
  for (uint32_t r = 0; r < 8; ++r) {
    Heartbeat hb = Step(r, 1);
    hb.world_size = 16;
    hb.replica_group = r % 2;          // two groups of 4
    hb.replica_digest = 100 + r % 2;   // each agrees with itself
    agg.Add(AtS(0), AtRank(r), hb, 0, 8);
  }
  EXPECT_TRUE(agg.disagreements().empty());
}

TEST(ReplicaRuleTest, OneFindingPerNodeThenNotAgainUntilRearmed) {
  ReplicaOptions options;
  options.rearm_steps = 100;
  ReplicaRule rule(options);
  // Ranks 5 and 6 (node 1) and rank 9 (node 2) disagree at every step.
  for (int64_t step = 40; step < 200; ++step) {
    ReplicaDisagreement d;
    d.step = step;
    d.group_ranks = 16;
    d.majority = 13;
    d.disagreeing = 3;
    d.named = {{5, 1}, {6, 1}, {9, 2}};
    rule.Observe(d);
  }
  std::vector<ReplicaFinding> found = rule.Take();
  ASSERT_EQ(found.size(), 4u);  // nodes 1 and 2 at step 40, again at 140
  EXPECT_EQ(found[0].at.rank, 5u);
  EXPECT_EQ(found[0].on_node, 2u);
  EXPECT_EQ(found[0].step, 40);
  EXPECT_EQ(found[1].at.rank, 9u);
  EXPECT_EQ(found[1].on_node, 1u);
  EXPECT_EQ(found[2].step, 140);
  EXPECT_EQ(rule.mismatches(), 3u * 160);
}

TEST(ReplicaRuleTest, NoMajorityIsReportedPerGroupWithoutARank) {
  ReplicaRule rule{ReplicaOptions()};
  ReplicaDisagreement d;
  d.step = 3;
  d.group = 2;
  d.group_ranks = 2;
  d.majority = 1;
  d.no_majority = true;
  rule.Observe(d);
  d.step = 4;
  rule.Observe(d);
  std::vector<ReplicaFinding> found = rule.Take();
  ASSERT_EQ(found.size(), 1u);
  EXPECT_TRUE(found[0].no_majority);
  EXPECT_EQ(found[0].group, 2u);
}

}  // namespace
}  // namespace trainsup
