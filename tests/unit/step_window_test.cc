#include "daemon/core/step_window.h"

#include <cstddef>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace trainsup {
namespace {

TEST(StepWindowTest, EmptyWindowHasZeroPercentiles) {
  StepWindow window(16);

  EXPECT_TRUE(window.empty());
  EXPECT_EQ(window.size(), 0u);
  EXPECT_EQ(window.Percentile(0.5), 0.0);
  EXPECT_EQ(window.Percentile(0.99), 0.0);
  StepWindow::Quantiles q = window.P50P99();
  EXPECT_EQ(q.p50, 0.0);
  EXPECT_EQ(q.p99, 0.0);
}

TEST(StepWindowTest, NearestRankPercentilesOnOneToHundred) {
  StepWindow window(100);
  // Added in a scrambled order: percentiles must not depend on arrival order.
  for (int i = 0; i < 100; ++i) window.Add(static_cast<double>((i * 37) % 100 + 1));

  EXPECT_EQ(window.Percentile(0.5), 50.0);
  EXPECT_EQ(window.Percentile(0.99), 99.0);
  EXPECT_EQ(window.Percentile(1.0), 100.0);
  EXPECT_EQ(window.Percentile(0.01), 1.0);
  StepWindow::Quantiles q = window.P50P99();
  EXPECT_EQ(q.p50, 50.0);
  EXPECT_EQ(q.p99, 99.0);
}

TEST(StepWindowTest, NearestRankOnSmallCounts) {
  StepWindow window(8);
  window.Add(3.0);
  EXPECT_EQ(window.Percentile(0.5), 3.0);
  EXPECT_EQ(window.Percentile(0.99), 3.0);

  window.Add(1.0);
  // Two samples: rank ceil(0.5 * 2) = 1 is the lower one, ceil(0.99 * 2) = 2 the upper.
  EXPECT_EQ(window.Percentile(0.5), 1.0);
  EXPECT_EQ(window.Percentile(0.99), 3.0);
}

TEST(StepWindowTest, RingKeepsOnlyTheLastCapacitySamples) {
  StepWindow window(10);
  // 1..10 are overwritten by 101..110.
  for (int i = 1; i <= 10; ++i) window.Add(i);
  for (int i = 101; i <= 110; ++i) window.Add(i);

  EXPECT_EQ(window.size(), 10u);
  EXPECT_EQ(window.capacity(), 10u);
  EXPECT_EQ(window.Percentile(0.01), 101.0);
  EXPECT_EQ(window.Percentile(0.5), 105.0);
  EXPECT_EQ(window.Percentile(1.0), 110.0);
}

TEST(StepWindowTest, RingOverwritesOldestFirst) {
  StepWindow window(3);
  window.Add(1000.0);  // the oldest: overwritten first
  window.Add(1.0);
  window.Add(2.0);
  window.Add(3.0);

  EXPECT_EQ(window.size(), 3u);
  EXPECT_EQ(window.Percentile(1.0), 3.0);
  EXPECT_EQ(window.Percentile(0.01), 1.0);
}

TEST(StepWindowTest, TotalAddedCountsEverySample) {
  StepWindow window(4);
  for (int i = 0; i < 11; ++i) window.Add(1.0);

  EXPECT_EQ(window.size(), 4u);
  EXPECT_EQ(window.total_added(), 11u);
}

TEST(StepWindowTest, P50P99MatchesPercentileOnRandomData) {
  constexpr size_t kCapacity = 128;
  std::mt19937 rng(20240611);
  std::uniform_real_distribution<double> seconds(0.0, 5.0);
  const std::vector<size_t> sizes = {1, 2, 3, 7, 50, 99, 100, 101, 127, kCapacity, kCapacity + 1,
                                     3 * kCapacity + 17};
  for (size_t n : sizes) {
    for (int trial = 0; trial < 5; ++trial) {
      StepWindow window(kCapacity);
      for (size_t i = 0; i < n; ++i) window.Add(seconds(rng));
      StepWindow::Quantiles q = window.P50P99();
      EXPECT_EQ(q.p50, window.Percentile(0.5)) << "n=" << n << " trial=" << trial;
      EXPECT_EQ(q.p99, window.Percentile(0.99)) << "n=" << n << " trial=" << trial;
    }
  }
}

TEST(StepWindowTest, P50P99MatchesPercentileWithDuplicates) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> value(0, 3);
  for (size_t n = 1; n <= 40; ++n) {
    StepWindow window(32);
    for (size_t i = 0; i < n; ++i) window.Add(value(rng));
    StepWindow::Quantiles q = window.P50P99();
    EXPECT_EQ(q.p50, window.Percentile(0.5)) << "n=" << n;
    EXPECT_EQ(q.p99, window.Percentile(0.99)) << "n=" << n;
  }
}

TEST(StepWindowTest, ClearEmptiesTheWindow) {
  StepWindow window(4);
  for (int i = 1; i <= 6; ++i) window.Add(i * 10.0);

  window.Clear();

  EXPECT_TRUE(window.empty());
  EXPECT_EQ(window.size(), 0u);
  EXPECT_EQ(window.capacity(), 4u);
  EXPECT_EQ(window.Percentile(0.5), 0.0);
  EXPECT_EQ(window.P50P99().p99, 0.0);
}

TEST(StepWindowTest, SamplesAfterClearIgnoreTheOldOnes) {
  StepWindow window(4);
  for (int i = 0; i < 4; ++i) window.Add(100.0);
  window.Clear();

  window.Add(1.0);
  window.Add(2.0);

  EXPECT_EQ(window.size(), 2u);
  EXPECT_EQ(window.Percentile(1.0), 2.0);
  EXPECT_EQ(window.Percentile(0.5), 1.0);
}

}  // namespace
}  // namespace trainsup
