#include <algorithm>
#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sim/failure_trace.h"
#include "sim/goodput_sim.h"
#include "sim/stragglers.h"

namespace trainsup::sim {
namespace {

using ::testing::HasSubstr;

// A one-day job on 4 nodes of a 6-node cluster, checkpointing every hour
// (C = 60 s), restarting in R = 300 s.
SimJob Day() {
  SimJob job;
  job.nodes = 4;
  job.days = 1;
  job.step_seconds = 10;
  job.checkpoint_seconds = 60;
  job.restart_seconds = 300;
  return job;
}

SimPolicy Hourly() {
  SimPolicy p;
  p.fixed_interval_seconds = 3600;
  return p;
}

FailureEvent At(double time, uint32_t node, FailureKind kind, std::string cause = "GPU") {
  FailureEvent e;
  e.time_seconds = time;
  e.node = node;
  e.kind = kind;
  e.cause = std::move(cause);
  return e;
}

double Sum(const SimLedger& l) { return l.useful + l.checkpoint + l.lost(); }

TEST(GoodputSimTest, WithoutFailuresOnlyCheckpointsCost) {
  const SimResult r = Simulate(Day(), Hourly(), {}, 6);
  // 23 cycles of 3600 + 60 s fit in 86400 s; the last 2220 s go on.
  EXPECT_DOUBLE_EQ(r.ledger.checkpoint, 23 * 60);
  EXPECT_DOUBLE_EQ(r.ledger.useful, 23 * 3600 + 2220);
  EXPECT_DOUBLE_EQ(r.ledger.wall, 86400);
  EXPECT_EQ(r.failures, 0);
  EXPECT_EQ(r.restarts, 0);
}

TEST(GoodputSimTest, OneCrashCostsItsReworkDetectionBackoffAndRestart) {
  const SimResult r = Simulate(Day(), Hourly(), {At(5000, 1, FailureKind::kCrash)}, 6);
  const SimLedger& l = r.ledger;
  EXPECT_DOUBLE_EQ(l.rework, 5000 - 3660);  // trained since the first checkpoint
  EXPECT_DOUBLE_EQ(l.detection, 1);         // the crash rule's settle
  EXPECT_DOUBLE_EQ(l.restart, 5 + 300);     // the first backoff, then R
  // The next generation starts at 5306 s: 22 cycles and 574 s.
  EXPECT_DOUBLE_EQ(l.useful, 3600 + 22 * 3600 + 574);
  EXPECT_DOUBLE_EQ(l.checkpoint, 23 * 60);
  EXPECT_DOUBLE_EQ(Sum(l), l.wall);
  EXPECT_EQ(r.failures, 1);
  EXPECT_EQ(r.restarts, 1);
}

TEST(GoodputSimTest, AHangIsFoundAtTheStallThresholdAndStopsSlowerThanACrash) {
  const SimResult r = Simulate(Day(), Hourly(), {At(5000, 1, FailureKind::kHang)}, 6);
  // max(20 s floor, 10 x the 10 s step)
  EXPECT_DOUBLE_EQ(r.ledger.detection, 100);
  // The backoff, R, and the hang's stop (stacks, then the stop grace).
  EXPECT_DOUBLE_EQ(r.ledger.restart, 5 + 300 + 12);
  ASSERT_EQ(r.failure_log.size(), 1u);
  const SimFailure& f = r.failure_log[0];
  EXPECT_EQ(f.kind, FailureKind::kHang);
  EXPECT_EQ(f.node, 1u);
  EXPECT_DOUBLE_EQ(f.rework, 5000 - 3660);
  EXPECT_DOUBLE_EQ(f.detection, 100);
  EXPECT_DOUBLE_EQ(f.down, 100 + 5 + 300 + 12);
}

TEST(GoodputSimTest, TheDetectionRulesAreThePolicysOwn) {
  SimPolicy fast = Hourly();
  fast.crash.settle = absl::Milliseconds(500);
  fast.stall.floor = absl::Seconds(5);
  fast.stall.factor = 0.1;
  fast.restart.backoff_initial = absl::Seconds(1);
  const SimResult r = Simulate(
      Day(), fast, {At(5000, 1, FailureKind::kCrash), At(7000, 2, FailureKind::kHang)}, 6);
  ASSERT_EQ(r.failure_log.size(), 2u);
  EXPECT_DOUBLE_EQ(r.failure_log[0].detection, 0.5);
  EXPECT_DOUBLE_EQ(r.failure_log[1].detection, 5);  // max(5 s, 0.1 x 10 s)
  EXPECT_DOUBLE_EQ(r.failure_log[0].down, 0.5 + 1 + 300);
  // The second restart within the hour: its backoff doubles.
  EXPECT_DOUBLE_EQ(r.failure_log[1].down, 5 + 2 + 300 + 12);
}

TEST(GoodputSimTest, ASoftwareBugIsHeldAtItsSecondFailureInsteadOfLooping) {
  FailureEvent bug = At(1000, kNoNode, FailureKind::kCrash, "software bug");
  bug.deterministic = true;
  const SimResult held = Simulate(Day(), Hourly(), {bug}, 6);
  EXPECT_EQ(held.failures, 2);  // once, and again 600 s into the next generation
  EXPECT_EQ(held.holds, 1);
  EXPECT_DOUBLE_EQ(held.ledger.held, (0.5 + 1.5) * 3600);
  EXPECT_DOUBLE_EQ(Sum(held.ledger), held.ledger.wall);

  SimPolicy no_rule = Hourly();
  no_rule.hold_code_bugs = false;
  const SimResult looped = Simulate(Day(), no_rule, {bug}, 6);
  // The restart cap (5 within 1 h) never bites a loop of ~15 minutes: the job
  // fails all day.
  EXPECT_GT(looped.failures, 80);
  EXPECT_EQ(looped.holds, 0);
  EXPECT_LT(looped.ledger.effective_fraction(), 0.01);
  EXPECT_GT(held.ledger.effective_fraction(), 0.85);
}

TEST(GoodputSimTest, ANodeFailingThreeTimesInAnHourIsQuarantinedAndReplaced) {
  const std::vector<FailureEvent> trace = {At(1000, 2, FailureKind::kCrash),
                                           At(2000, 2, FailureKind::kCrash),
                                           At(3000, 2, FailureKind::kCrash),
                                           At(4000, 2, FailureKind::kCrash)};
  SimPolicy policy = Hourly();
  const SimResult r = Simulate(Day(), policy, trace, 6, /*lemons=*/{2});
  EXPECT_EQ(r.quarantines, 1);
  EXPECT_EQ(r.lemons_quarantined, 1);
  EXPECT_EQ(r.nodes_replaced, 1);
  EXPECT_EQ(r.failures, 3);  // the fourth is on a node no longer in the job
  EXPECT_EQ(r.ignored, 1);
  // 20 minutes for the replacement, of which the third restart's backoff
  // (5 s x 2^2) covers the first 20 s.
  EXPECT_DOUBLE_EQ(r.ledger.replacement, 20 * 60 - 20);

  policy.hot_spares = true;
  EXPECT_DOUBLE_EQ(Simulate(Day(), policy, trace, 6, {2}).ledger.replacement, 0);
  policy.quarantine = false;
  const SimResult kept = Simulate(Day(), policy, trace, 6, {2});
  EXPECT_EQ(kept.quarantines, 0);
  EXPECT_EQ(kept.failures, 4);
}

TEST(GoodputSimTest, SilentCorruptionRollsBackTheCheckpointsSinceIt) {
  // Corrupted at 4000 s, found an hour later at 7600 s: the checkpoint
  // committed at 7320 s holds bad training, and goes.
  const SimResult r = Simulate(Day(), Hourly(), {At(4000, 1, FailureKind::kCorruption)}, 6);
  EXPECT_EQ(r.failures, 1);
  EXPECT_DOUBLE_EQ(r.ledger.rework, (7600 - 7320) + 3600);
  EXPECT_DOUBLE_EQ(Sum(r.ledger), r.ledger.wall);
}

TEST(GoodputSimTest, ALossSpikeRollsBackAHundredSteps) {
  FailureEvent spike = At(7400, kNoNode, FailureKind::kLossSpike, "loss spike");
  const SimResult r = Simulate(Day(), Hourly(), {spike}, 6);
  EXPECT_EQ(r.spikes, 1);
  EXPECT_EQ(r.failures, 0);
  // 1000 s back is 6400 s: the checkpoint of 7320 s goes too.
  EXPECT_DOUBLE_EQ(r.ledger.rework, (7400 - 7320) + 3600);
  EXPECT_DOUBLE_EQ(r.ledger.detection, 20 * 10);  // the loss-shift window
}

TEST(GoodputSimTest, PlannedCheckpointsBeatAFixedHourWhenFailuresAreFrequent) {
  TraceOptions t;
  t.nodes = 2150;
  t.days = 10;
  const std::vector<FailureEvent> trace = GenerateTrace(t);
  SimJob job;
  job.days = 10;
  SimPolicy planned;
  const SimResult a = Simulate(job, planned, trace, t.nodes, LemonNodes(t));
  const SimResult b = Simulate(job, Hourly(), trace, t.nodes, LemonNodes(t));
  EXPECT_GT(a.ledger.effective_fraction(), b.ledger.effective_fraction());
  EXPECT_LT(a.mean_interval_seconds, 3600);
  EXPECT_NEAR(Sum(a.ledger), a.ledger.wall, 1e-6 * a.ledger.wall);
  EXPECT_NEAR(Sum(b.ledger), b.ledger.wall, 1e-6 * b.ledger.wall);
}

TEST(FailureTraceTest, Llama3sCausesSumTo419) {
  int sum = 0;
  for (const FailureCause& c : Llama3Causes()) sum += c.count;
  EXPECT_EQ(sum, 419);
}

TEST(FailureTraceTest, AGeneratedTraceHasTheRatesLemonsAndSeed) {
  TraceOptions t;  // 2048 nodes, 54 days: 419 expected
  const std::vector<FailureEvent> trace = GenerateTrace(t);
  int node_failures = 0, on_lemons = 0, workload = 0, bugs = 0, spikes = 0;
  const std::vector<uint32_t> lemons = LemonNodes(t);
  EXPECT_EQ(lemons.size(), 307u);  // 15 % of 2048
  for (const FailureEvent& e : trace) {
    bugs += e.deterministic;
    if (e.kind == FailureKind::kLossSpike) {
      ++spikes;
    } else if (e.node == kNoNode) {
      ++workload;
    } else {
      ++node_failures;
      on_lemons += std::binary_search(lemons.begin(), lemons.end(), e.node);
    }
  }
  // Llama 3's 419: 363 of the nodes, 56 of the workload (54 of them bugs).
  EXPECT_NEAR(node_failures, 363, 4 * std::sqrt(363.0));
  EXPECT_NEAR(workload, 56, 4 * std::sqrt(56.0));
  EXPECT_NEAR(bugs, 54, 4 * std::sqrt(54.0));
  EXPECT_NEAR(spikes, 20, 4 * std::sqrt(20.0));
  // Lemons fail 5x: 0.15 x 5 / (0.85 + 0.15 x 5) = 47 % of the nodes' failures.
  EXPECT_NEAR(static_cast<double>(on_lemons) / node_failures, 0.47, 0.08);
  // The workload's failures do not grow with the cluster.
  TraceOptions big = t;
  big.nodes = 12500;
  int big_workload = 0;
  for (const FailureEvent& e : GenerateTrace(big)) {
    big_workload += e.node == kNoNode && e.kind != FailureKind::kLossSpike;
  }
  EXPECT_NEAR(big_workload, 56, 4 * std::sqrt(56.0));
  EXPECT_TRUE(std::is_sorted(trace.begin(), trace.end(), [](const auto& a, const auto& b) {
    return a.time_seconds < b.time_seconds;
  }));
  EXPECT_EQ(TraceToCsv(GenerateTrace(t)), TraceToCsv(trace));
  t.seed = 2;
  EXPECT_NE(TraceToCsv(GenerateTrace(t)), TraceToCsv(trace));
}

TEST(FailureTraceTest, ACsvTraceReadsBackAndBadLinesAreNamed) {
  TraceOptions t;
  t.nodes = 64;
  t.days = 30;
  const std::vector<FailureEvent> trace = GenerateTrace(t);
  absl::StatusOr<std::vector<FailureEvent>> back = ParseTraceCsv(TraceToCsv(trace));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(TraceToCsv(*back), TraceToCsv(trace));

  absl::StatusOr<std::vector<FailureEvent>> minimal =
      ParseTraceCsv("# a comment\ntime,node,kind\n20,1,hang\n10,0,crash\n30,-,loss_spike\n");
  ASSERT_TRUE(minimal.ok()) << minimal.status();
  ASSERT_EQ(minimal->size(), 3u);
  EXPECT_EQ((*minimal)[0].kind, FailureKind::kCrash);  // sorted by time
  EXPECT_EQ((*minimal)[2].node, kNoNode);

  EXPECT_THAT(ParseTraceCsv("time,node,kind\n1,0,melted\n").status().message(),
              HasSubstr("line 2"));
  EXPECT_THAT(ParseTraceCsv("time,node,kind\n-1,0,crash\n").status().message(),
              HasSubstr("seconds"));
  EXPECT_THAT(ParseTraceCsv("when,node,kind\n").status().message(), HasSubstr("header"));
  EXPECT_THAT(ParseTraceCsv("time,node,kind\n1,0\n").status().message(), HasSubstr("fields"));
  EXPECT_FALSE(ParseTraceCsv("").ok());
}

TEST(StragglersTest, TheLossGrowsWithTheRanks) {
  const std::vector<StragglerPoint> p = StragglerLoss({8, 512, 16384}, 0.05, 50, 1);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_GT(p[1].throughput_loss, p[0].throughput_loss);
  EXPECT_GT(p[2].throughput_loss, p[1].throughput_loss);
  // The max of n normals is about sqrt(2 ln n): 16384 ranks, sigma 0.05:
  // exp(0.05 x ~3.9) ~ 1.22 medians.
  EXPECT_NEAR(p[2].mean_step, 1.22, 0.03);
  EXPECT_DOUBLE_EQ(StragglerLoss({1000}, 0, 5, 1)[0].throughput_loss, 0);
}

}  // namespace
}  // namespace trainsup::sim
