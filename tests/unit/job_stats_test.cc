#include "daemon/core/job_stats.h"

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/time/time.h"
#include "daemon/core/heartbeat.h"
#include "daemon/core/job.h"
#include "gtest/gtest.h"
#include "tests/support/test_time.h"

namespace trainsup {
namespace {

using ::trainsup::testing::AtMs;

// Feeds `durations` to `rank` as consecutive STEPs.
void AddSteps(Job& job, uint32_t rank, uint32_t world_size, const std::vector<double>& durations) {
  int64_t step = rank < job.ranks().size() ? job.rank(rank).step : -1;
  for (double d : durations) {
    Heartbeat hb;
    hb.kind = HeartbeatKind::kStep;
    hb.job = job.id();
    hb.rank = rank;
    hb.world_size = world_size;
    hb.step = ++step;
    hb.step_duration_s = d;
    ASSERT_EQ(job.Apply(AtMs(step), /*node=*/0, hb), std::nullopt);
  }
}

// Makes the job's world `world_size` ranks with no samples yet.
void StartWorld(Job& job, uint32_t world_size) {
  Heartbeat hb;
  hb.kind = HeartbeatKind::kStart;
  hb.job = job.id();
  hb.world_size = world_size;
  ASSERT_EQ(job.Apply(AtMs(0), 0, hb), std::nullopt);
}

TEST(MedianInPlaceTest, EmptyIsZero) {
  std::vector<double> v;
  EXPECT_EQ(MedianInPlace(v), 0.0);
}

TEST(MedianInPlaceTest, SingleValue) {
  std::vector<double> v = {4.5};
  EXPECT_EQ(MedianInPlace(v), 4.5);
}

TEST(MedianInPlaceTest, OddCountIsTheMiddle) {
  std::vector<double> v = {9, 1, 5, 3, 7};
  EXPECT_EQ(MedianInPlace(v), 5.0);
}

TEST(MedianInPlaceTest, EvenCountIsTheLowerMiddle) {
  std::vector<double> v = {4, 1, 3, 2};
  EXPECT_EQ(MedianInPlace(v), 2.0);

  std::vector<double> two = {10, 20};
  EXPECT_EQ(MedianInPlace(two), 10.0);
}

TEST(MedianInPlaceTest, OneOutlierDoesNotMoveIt) {
  std::vector<double> v = {1.0, 1.0, 1000.0};
  EXPECT_EQ(MedianInPlace(v), 1.0);
}

TEST(ComputeJobStepStatsTest, EmptyJobHasZeroStats) {
  Job job("job", /*step_window=*/16, /*compute_window=*/16);
  JobStepStats stats = ComputeJobStepStats(job);
  EXPECT_EQ(stats.ranks_with_samples, 0u);
  EXPECT_EQ(stats.median_rank_p50_s, 0.0);
  EXPECT_EQ(stats.median_rank_p99_s, 0.0);
}

TEST(ComputeJobStepStatsTest, MediansOverAnOddNumberOfRanks) {
  Job job("job", /*step_window=*/16, /*compute_window=*/16);
  // Per-rank (p50, p99): (1, 2), (3, 6), (100, 200).
  AddSteps(job, 0, 3, {1, 2});
  AddSteps(job, 1, 3, {3, 6});
  AddSteps(job, 2, 3, {100, 200});

  JobStepStats stats = ComputeJobStepStats(job);

  EXPECT_EQ(stats.ranks_with_samples, 3u);
  EXPECT_EQ(stats.median_rank_p50_s, 3.0);
  EXPECT_EQ(stats.median_rank_p99_s, 6.0);
}

TEST(ComputeJobStepStatsTest, MediansOverAnEvenNumberOfRanksTakeTheLowerMiddle) {
  Job job("job", /*step_window=*/16, /*compute_window=*/16);
  // Per-rank (p50, p99): (4, 40), (1, 10), (3, 30), (2, 20).
  AddSteps(job, 0, 4, {4, 40});
  AddSteps(job, 1, 4, {10, 1});
  AddSteps(job, 2, 4, {3, 30});
  AddSteps(job, 3, 4, {20, 2});

  JobStepStats stats = ComputeJobStepStats(job);

  EXPECT_EQ(stats.ranks_with_samples, 4u);
  EXPECT_EQ(stats.median_rank_p50_s, 2.0);
  EXPECT_EQ(stats.median_rank_p99_s, 20.0);
}

TEST(ComputeJobStepStatsTest, RanksWithoutSamplesAreLeftOut) {
  Job job("job", /*step_window=*/16, /*compute_window=*/16);
  StartWorld(job, 5);
  AddSteps(job, 1, 5, {2});
  AddSteps(job, 3, 5, {4});
  AddSteps(job, 4, 5, {8});
  // Rank 0 completed a step but did not measure it: no sample.
  AddSteps(job, 0, 5, {0});

  JobStepStats stats = ComputeJobStepStats(job);

  EXPECT_EQ(stats.ranks_with_samples, 3u);
  // Were ranks 0 and 2 counted as 0s, the median would be 2.
  EXPECT_EQ(stats.median_rank_p50_s, 4.0);
  EXPECT_EQ(stats.median_rank_p99_s, 4.0);
}

TEST(ComputeJobStepStatsTest, UsesEachRanksWindowPercentiles) {
  Job job("job", /*step_window=*/100, /*compute_window=*/16);
  std::vector<double> durations;
  for (int i = 1; i <= 100; ++i) durations.push_back(i);
  AddSteps(job, 0, 1, durations);

  JobStepStats stats = ComputeJobStepStats(job);

  EXPECT_EQ(stats.ranks_with_samples, 1u);
  EXPECT_EQ(stats.median_rank_p50_s, 50.0);
  EXPECT_EQ(stats.median_rank_p99_s, 99.0);
}

}  // namespace
}  // namespace trainsup
