#include "calc/search_budget.h"

#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainsup {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const SearchStrategy& Strategy(const SearchBudget& b, const std::string& name) {
  for (const SearchStrategy& s : b.strategies) {
    if (s.name == name) return s;
  }
  ADD_FAILURE() << "no strategy " << name;
  static const SearchStrategy none;
  return none;
}

// Without the break-even noise (17 more simulations) unless asked.
SearchBudget Plan(SearchBudgetInputs in, bool break_even = false) {
  in.find_break_even = break_even;
  absl::StatusOr<SearchBudget> b = PlanSearchBudget(in);
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? *b : SearchBudget{};
}

// The course module's figures (Lab 3) with its defaults: 2,048 GPU-hours,
// 64 a run, 4 dimensions, halving by 3 over 4 rungs.
TEST(SearchBudgetTest, TheDefaultsGiveTheModulesFigures) {
  const SearchBudget b = Plan(SearchBudgetInputs{});
  const SearchStrategy& grid = Strategy(b, "grid");
  const SearchStrategy& random = Strategy(b, "random");
  const SearchStrategy& halving = Strategy(b, "successive-halving");

  EXPECT_EQ(grid.full_runs, 32);
  EXPECT_EQ(random.full_runs, 32);
  EXPECT_DOUBLE_EQ(grid.gpu_hours, 2048);
  EXPECT_DOUBLE_EQ(random.gpu_hours, 2048);
  // 32^(1/4) = 2.4 values a dimension: the grid is 4x2x2x2, so the
  // dimension that matters gets 2 values three times in four, 4 once.
  EXPECT_EQ(grid.layout, "4x2x2x2");
  EXPECT_NEAR(grid.distinct_important_values, 2.5, 0.1);
  EXPECT_EQ(random.distinct_important_values, 32);
  EXPECT_EQ(halving.configurations, 216);
  EXPECT_EQ(halving.full_runs, 8);
  EXPECT_EQ(halving.layout, "216 -> 72 -> 24 -> 8");
  EXPECT_DOUBLE_EQ(halving.gpu_hours, 2048);
  // With short runs that rank well, halving finds the best, random next.
  EXPECT_GT(halving.expected_quality, random.expected_quality);
  EXPECT_GT(random.expected_quality, grid.expected_quality);
}

// The grid's quality has a closed form: k cells of the dimension that
// matters leave the best value 1/(4k) away on average.
TEST(SearchBudgetTest, TheGridsQualityIsItsClosedForm) {
  SearchBudgetInputs in;
  in.trials = 10000;
  const SearchBudget b = Plan(in);
  const double expected = 1 - (3 * (1.0 / 8) + 1.0 / 16) / 4;  // 4x2x2x2
  EXPECT_NEAR(Strategy(b, "grid").expected_quality, expected, 0.005);
  // Random search's: the nearest of 32 uniform values, about 1/66 away.
  EXPECT_NEAR(Strategy(b, "random").expected_quality, 1 - 1.0 / 66, 0.002);
}

TEST(SearchBudgetTest, NoisyShortRunsTakeHalvingsAdvantageAway) {
  SearchBudgetInputs quiet;
  quiet.trials = 500;
  const SearchBudget q = Plan(quiet, /*break_even=*/true);
  const double advantage = Strategy(q, "successive-halving").expected_quality -
                           Strategy(q, "random").expected_quality;
  ASSERT_GT(advantage, 0.01);

  SearchBudgetInputs noisy;
  noisy.early_noise = 2.0;
  noisy.trials = 4000;
  const SearchBudget n = Plan(noisy);
  const double left = Strategy(n, "successive-halving").expected_quality -
                      Strategy(n, "random").expected_quality;
  EXPECT_LT(left, advantage / 10);
  ASSERT_TRUE(q.halving_break_even_noise.has_value());
  EXPECT_GT(*q.halving_break_even_noise, 1.0);
  EXPECT_LT(*q.halving_break_even_noise, 3.0);
}

TEST(SearchBudgetTest, MoreDimensionsMakeTheGridWorse) {
  SearchBudgetInputs six;
  six.dimensions = 6;
  const SearchBudget b4 = Plan(SearchBudgetInputs{});
  const SearchBudget b6 = Plan(six);
  EXPECT_EQ(Strategy(b6, "grid").layout, "2x2x2x2x2x1");
  EXPECT_LT(Strategy(b6, "grid").distinct_important_values,
            Strategy(b4, "grid").distinct_important_values);
  EXPECT_LT(Strategy(b6, "grid").expected_quality, Strategy(b4, "grid").expected_quality);
  // Random search and halving do not care how many dimensions do not matter.
  EXPECT_EQ(Strategy(b6, "random").distinct_important_values, 32);
}

TEST(SearchBudgetTest, TheSameSeedGivesTheSameFiguresAndAnotherSeedOthers) {
  SearchBudgetInputs in;
  in.trials = 300;
  const SearchBudget a = Plan(in);
  const SearchBudget again = Plan(in);
  in.seed = 2;
  const SearchBudget other = Plan(in);
  for (const std::string name : {"grid", "random", "successive-halving"}) {
    EXPECT_EQ(Strategy(a, name).expected_quality, Strategy(again, name).expected_quality) << name;
  }
  EXPECT_NE(Strategy(a, "random").expected_quality, Strategy(other, "random").expected_quality);
}

TEST(SearchBudgetTest, FailuresLeaveFewerRunsAndSpendTheBudget) {
  SearchBudgetInputs in;
  in.mtbf_hours = 3.1;  // Llama 3's 16k-GPU job: 419 interruptions in 54 days
  in.checkpoint_seconds = 60;
  in.restart_seconds = 600;
  const SearchBudget b = Plan(in);
  ASSERT_TRUE(b.waste_fraction.has_value());
  ASSERT_TRUE(b.checkpoint_interval_seconds.has_value());
  EXPECT_GT(*b.waste_fraction, 0.05);
  EXPECT_LT(*b.waste_fraction, 0.5);
  EXPECT_NEAR(b.training_gpu_hours, 2048 * (1 - *b.waste_fraction), 1e-9);
  const SearchStrategy& random = Strategy(b, "random");
  EXPECT_EQ(random.full_runs, static_cast<int64_t>(b.training_gpu_hours / 64));
  EXPECT_LT(random.full_runs, 32);
  // Each run's GPU-hours carry its share of the failures: no strategy
  // spends more than the budget.
  for (const SearchStrategy& s : b.strategies) EXPECT_LE(s.gpu_hours, 2048 + 1e-9) << s.name;
  EXPECT_NEAR(random.gpu_hours, random.full_runs * 64 / (1 - *b.waste_fraction), 1e-9);
}

TEST(SearchBudgetTest, ABadInputIsNamedByItsFlag) {
  SearchBudgetInputs in;
  in.trials = 0;
  EXPECT_THAT(PlanSearchBudget(in).status().message(), HasSubstr("--trials"));
  in = SearchBudgetInputs{};
  in.run_gpu_hours = NAN;
  EXPECT_THAT(PlanSearchBudget(in).status().message(), HasSubstr("--run-gpu-hours"));
  in = SearchBudgetInputs{};
  in.budget_gpu_hours = 100;  // one run, and halving needs four
  EXPECT_THAT(PlanSearchBudget(in).status().message(), HasSubstr("4 rungs"));
  in = SearchBudgetInputs{};
  in.mtbf_hours = 0.01;  // 36 s between failures: nothing completes
  EXPECT_THAT(PlanSearchBudget(in).status().message(), HasSubstr("no run completes"));
  in = SearchBudgetInputs{};
  in.reduction_factor = 16;
  in.rungs = 12;
  EXPECT_THAT(PlanSearchBudget(in).status().message(), HasSubstr("configurations"));
}

TEST(GridLevelsTest, AsEvenAsTheRunsAllow) {
  EXPECT_THAT(GridLevels(32, 4), ElementsAre(4, 2, 2, 2));
  EXPECT_THAT(GridLevels(81, 4), ElementsAre(3, 3, 3, 3));
  EXPECT_THAT(GridLevels(32, 6), ElementsAre(2, 2, 2, 2, 2, 1));
  EXPECT_THAT(GridLevels(7, 1), ElementsAre(7));
  EXPECT_THAT(GridLevels(1, 3), ElementsAre(1, 1, 1));
}

}  // namespace
}  // namespace trainsup
