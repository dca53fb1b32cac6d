#include "calc/compute_budget.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainsup {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> Labels(const ComputeBudget& b) {
  std::vector<std::string> out;
  for (const ComputeBudgetPoint& p : b.sweep) out.push_back(p.label);
  return out;
}

TEST(ComputeBudgetTest, DefaultsGiveAboutSeventyTwoPercent) {
  ComputeBudgetInputs in;
  EXPECT_EQ(in.compute_samples_per_second, 6912);
  EXPECT_EQ(in.loader_samples_per_second, 5000);
  EXPECT_TRUE(in.overlap);
  absl::StatusOr<ComputeBudget> b = PlanComputeBudget(in);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_NEAR(b->utilization_fraction, 5000.0 / 6912, 1e-12);
  EXPECT_NEAR(b->utilization_fraction, 0.72, 0.005);
  EXPECT_NEAR(b->idle_fraction, 1 - 5000.0 / 6912, 1e-12);
  EXPECT_DOUBLE_EQ(b->seconds_per_sample, 1 / 5000.0);
  EXPECT_DOUBLE_EQ(b->compute_seconds_per_sample, 1 / 6912.0);
  EXPECT_DOUBLE_EQ(b->loader_seconds_per_sample, 1 / 5000.0);
  EXPECT_NEAR(b->throughput_samples_per_second, 5000, 1e-9);
  EXPECT_TRUE(b->loader_bound);
  EXPECT_FALSE(b->wall_gpu_hours.has_value());
  EXPECT_FALSE(b->wall_hours.has_value());
  EXPECT_FALSE(b->cost.has_value());
  EXPECT_FALSE(b->idle_cost.has_value());
}

TEST(ComputeBudgetTest, WithoutOverlapTheTimesAdd) {
  ComputeBudgetInputs in;
  in.overlap = false;
  absl::StatusOr<ComputeBudget> b = PlanComputeBudget(in);
  ASSERT_TRUE(b.ok());
  EXPECT_DOUBLE_EQ(b->seconds_per_sample, 1 / 6912.0 + 1 / 5000.0);
  EXPECT_NEAR(b->utilization_fraction, 5000.0 / (5000 + 6912), 1e-12);
  EXPECT_NEAR(b->throughput_samples_per_second, 1 / (1 / 6912.0 + 1 / 5000.0), 1e-9);
  EXPECT_FALSE(b->loader_bound);
}

TEST(ComputeBudgetTest, AFastLoaderLeavesComputeAsThePace) {
  ComputeBudgetInputs in;
  in.loader_samples_per_second = 10000;
  absl::StatusOr<ComputeBudget> b = PlanComputeBudget(in);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->utilization_fraction, 1);
  EXPECT_EQ(b->idle_fraction, 0);
  EXPECT_NEAR(b->throughput_samples_per_second, 6912, 1e-9);
  EXPECT_FALSE(b->loader_bound);
}

TEST(ComputeBudgetTest, WallTimeAndCost) {
  ComputeBudgetInputs in;
  in.useful_gpu_hours = 1000;
  absl::StatusOr<ComputeBudget> b = PlanComputeBudget(in);
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(b->wall_gpu_hours.has_value());
  EXPECT_NEAR(*b->wall_gpu_hours, 1000 * 6912 / 5000.0, 1e-9);
  EXPECT_FALSE(b->wall_hours.has_value());  // no GPU count
  EXPECT_FALSE(b->cost.has_value());        // no price

  in.gpus = 8;
  in.price_per_gpu_hour = 2.5;
  b = PlanComputeBudget(in);
  ASSERT_TRUE(b.ok());
  const double wall_gpu_hours = 1000 * 6912 / 5000.0;
  EXPECT_NEAR(*b->wall_hours, wall_gpu_hours / 8, 1e-9);
  EXPECT_NEAR(*b->cost, wall_gpu_hours * 2.5, 1e-9);
  EXPECT_NEAR(*b->idle_cost, (wall_gpu_hours - 1000) * 2.5, 1e-9);
  for (const ComputeBudgetPoint& p : b->sweep) {
    ASSERT_TRUE(p.wall_gpu_hours.has_value());
    ASSERT_TRUE(p.cost.has_value());
    EXPECT_NEAR(*p.wall_gpu_hours, 1000 / p.utilization_fraction, 1e-9);
    EXPECT_NEAR(*p.cost, *p.wall_gpu_hours * 2.5, 1e-9);
  }
}

TEST(ComputeBudgetTest, SweepOfLoaderRates) {
  absl::StatusOr<ComputeBudget> b = PlanComputeBudget(ComputeBudgetInputs{});
  ASSERT_TRUE(b.ok());
  // 6912 lies between 1.25x (6250) and 1.5x (7500) of 5000.
  EXPECT_THAT(Labels(*b), ElementsAre("0.5x", "0.75x", "1x", "1.25x", "= compute", "1.5x", "2x"));
  const double rates[] = {2500, 3750, 5000, 6250, 6912, 7500, 10000};
  for (size_t i = 0; i < b->sweep.size(); ++i) {
    const ComputeBudgetPoint& p = b->sweep[i];
    EXPECT_NEAR(p.loader_samples_per_second, rates[i], 1e-9) << p.label;
    EXPECT_NEAR(p.utilization_fraction, std::min(1.0, rates[i] / 6912), 1e-12) << p.label;
    EXPECT_NEAR(p.throughput_samples_per_second, std::min(6912.0, rates[i]), 1e-9) << p.label;
    EXPECT_FALSE(p.wall_gpu_hours.has_value());
  }
  EXPECT_DOUBLE_EQ(b->sweep[2].utilization_fraction, b->utilization_fraction);
}

TEST(ComputeBudgetTest, SweepMergesEqualRates) {
  ComputeBudgetInputs in;
  in.loader_samples_per_second = in.compute_samples_per_second;
  absl::StatusOr<ComputeBudget> b = PlanComputeBudget(in);
  ASSERT_TRUE(b.ok());
  EXPECT_THAT(Labels(*b), ElementsAre("0.5x", "0.75x", "1x = compute", "1.25x", "1.5x", "2x"));
  EXPECT_EQ(b->utilization_fraction, 1);

  in.loader_samples_per_second = 10000;
  in.compute_samples_per_second = 5000;  // = 0.5x
  b = PlanComputeBudget(in);
  ASSERT_TRUE(b.ok());
  EXPECT_THAT(Labels(*b), ElementsAre("0.5x = compute", "0.75x", "1x", "1.25x", "1.5x", "2x"));
}

TEST(ComputeBudgetTest, SweepWithoutOverlapNeverReachesFullUtilization) {
  ComputeBudgetInputs in;
  in.overlap = false;
  absl::StatusOr<ComputeBudget> b = PlanComputeBudget(in);
  ASSERT_TRUE(b.ok());
  double previous = 0;
  for (const ComputeBudgetPoint& p : b->sweep) {
    EXPECT_GT(p.utilization_fraction, previous) << p.label;
    EXPECT_LT(p.utilization_fraction, 1) << p.label;
    previous = p.utilization_fraction;
  }
  // Y = X without overlap: half the time loading.
  EXPECT_EQ(b->sweep[4].label, "= compute");
  EXPECT_NEAR(b->sweep[4].utilization_fraction, 0.5, 1e-12);
}

TEST(ComputeBudgetTest, BadInputsAreRefused) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto refused = [](ComputeBudgetInputs in) {
    return PlanComputeBudget(in).status().code() == absl::StatusCode::kInvalidArgument;
  };
  ComputeBudgetInputs in;
  in.compute_samples_per_second = 0;
  EXPECT_TRUE(refused(in));
  EXPECT_THAT(std::string(PlanComputeBudget(in).status().message()), HasSubstr("compute rate"));
  in = {};
  in.loader_samples_per_second = -1;
  EXPECT_TRUE(refused(in));
  in = {};
  in.loader_samples_per_second = nan;
  EXPECT_TRUE(refused(in));
  in = {};
  in.gpus = 0;
  EXPECT_TRUE(refused(in));
  in = {};
  in.price_per_gpu_hour = -1;
  EXPECT_TRUE(refused(in));
  in = {};
  in.useful_gpu_hours = 0;
  EXPECT_TRUE(refused(in));
  in = {};
  in.price_per_gpu_hour = 0;  // free GPUs are fine
  in.useful_gpu_hours = 10;
  EXPECT_FALSE(refused(in));
}

}  // namespace
}  // namespace trainsup
