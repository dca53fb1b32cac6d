#include "daemon/core/signals/memory_growth_rule.h"

#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace trainsup {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGiB = 1024.0 * kMiB;

// Steps [from, to) of `bytes(step)` (rank 3 on node 1, a device of
// `capacity`), judged after each with 0.5s steps; returns the findings.
template <typename Fn>
std::vector<MemoryGrowthFinding> Feed(MemoryGrowthRule& rule, int64_t from, int64_t to, Fn bytes,
                                     double capacity = 0) {
  std::vector<MemoryGrowthFinding> found;
  for (int64_t step = from; step < to; ++step) {
    rule.Observe(step, bytes(step), {3, 1}, capacity);
    if (std::optional<MemoryGrowthFinding> f = rule.Check(0.5)) found.push_back(*f);
  }
  return found;
}

TEST(MemoryGrowthRuleTest, ALeakIsFoundWithItsSlopeAndTheTimeToTheDevicesCapacity) {
  MemoryGrowthRule rule(MemoryGrowthOptions(), /*host=*/false);  // 200 steps after 50, 64 MiB
  std::vector<MemoryGrowthFinding> found = Feed(
      rule, 0, 1000, [](int64_t step) { return 30 * kGiB + step * 1.0 * kMiB; }, 80 * kGiB);
  ASSERT_EQ(found.size(), 1u);  // once per generation
  const MemoryGrowthFinding& f = found[0];
  EXPECT_FALSE(f.host);
  EXPECT_EQ(f.step, 249);  // the first full window after the warm-up
  EXPECT_EQ(f.steps, 200);
  EXPECT_EQ(f.at.rank, 3u);
  EXPECT_NEAR(f.slope_bytes_per_step, 1.0 * kMiB, 1);
  EXPECT_NEAR(f.slope_bytes_per_second, 2.0 * kMiB, 2);
  EXPECT_NEAR(f.growth_bytes, 150 * kMiB, 1 * kMiB);
  EXPECT_DOUBLE_EQ(f.capacity_bytes, 80 * kGiB);
  EXPECT_NEAR(f.seconds_to_limit, (80 * kGiB - f.bytes) / (2.0 * kMiB), 1);
  EXPECT_GT(rule.slope_bytes_per_second(), 0);  // still growing
}

TEST(MemoryGrowthRuleTest, HostMemoryIsNeverProjected) {
  MemoryGrowthRule rule(MemoryGrowthOptions(), /*host=*/true);
  std::vector<MemoryGrowthFinding> found =
      Feed(rule, 0, 400, [](int64_t step) { return 2 * kGiB + step * 2.0 * kMiB; }, 80 * kGiB);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_TRUE(found[0].host);
  EXPECT_EQ(found[0].capacity_bytes, 0);
  EXPECT_EQ(found[0].seconds_to_limit, 0);
}

TEST(MemoryGrowthRuleTest, AllocatorWarmUpCheckpointPeaksAndNoiseAreNotGrowth) {
  for (uint32_t seed = 1; seed <= 10; ++seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<double> noise(0.0, 20 * kMiB);
    MemoryGrowthRule rule(MemoryGrowthOptions(), /*host=*/false);
    EXPECT_TRUE(Feed(rule, 0, 5000, [&](int64_t step) {
                  // The caching allocator fills over the first 40 steps, then
                  // the level holds; a checkpoint every 100 steps peaks for 3.
                  double bytes = 20 * kGiB * std::min(1.0, (step + 1) / 40.0);
                  if (step % 100 < 3) bytes += 4 * kGiB;
                  return bytes + noise(rng);
                }).empty())
        << seed;
  }
}

TEST(MemoryGrowthRuleTest, GrowthThatStopsOrStaysSmallIsNot) {
  MemoryGrowthRule small(MemoryGrowthOptions(), false);
  // 0.2 MiB a step: 30 MiB over the window, below 64 MiB.
  EXPECT_TRUE(Feed(small, 0, 2000, [](int64_t step) { return 10 * kGiB + step * 0.2 * kMiB; }).empty());
  MemoryGrowthRule plateau(MemoryGrowthOptions(), false);
  // Up for 120 steps after the warm-up, then flat: no window has four rising quarters.
  EXPECT_TRUE(Feed(plateau, 0, 2000, [](int64_t step) {
                return 10 * kGiB + std::min<int64_t>(step, 170) * 5 * kMiB;
              }).empty());
}

TEST(MemoryGrowthRuleTest, NothingBeforeAFullWindowAfterTheWarmUp) {
  MemoryGrowthRule rule(MemoryGrowthOptions(), false);
  EXPECT_TRUE(Feed(rule, 0, 249, [](int64_t step) { return step * 100 * kMiB; }).empty());
  EXPECT_EQ(rule.slope_bytes_per_second(), 0);
}

}  // namespace
}  // namespace trainsup
