#ifndef TRAINSUP_CALC_SEARCH_BUDGET_H_
#define TRAINSUP_CALC_SEARCH_BUDGET_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace trainsup {

// How to spend a hyperparameter search's GPU-hours: grid, random search or
// successive halving, for a fixed budget (docs/search-budget.md has the model
// and its evidence). Pure functions of their inputs; the Monte Carlo draws
// come from a seeded generator, so the same inputs give the same figures.
//
// The model: a configuration is a point of [0, 1]^dimensions, and only one
// dimension (which one, the search does not know) matters. A trial draws the
// best value of that dimension, x*, uniformly; a configuration's quality is
// 1 - |x - x*| (1: the best value found exactly). A full run measures the
// quality exactly. A shorter run (successive halving's early rungs, a share
// b of a full run) measures it with Gaussian noise of standard deviation
// early_noise x (1 - b) / sqrt(12): `early_noise` is in units of the spread
// of the dimension that matters (1/sqrt(12) is that of a uniform value).
struct SearchBudgetInputs {
  double budget_gpu_hours = 2048;  // > 0
  double run_gpu_hours = 64;       // one full run; > 0, <= the budget
  int dimensions = 4;              // hyperparameters, one of which matters; 1..32
  int reduction_factor = 3;        // halving keeps 1 in this many per rung; 2..16
  int rungs = 4;                   // halving's rungs, the last of full runs; 1..12
  double early_noise = 0.1;        // >= 0
  uint64_t seed = 1;
  int trials = 2000;               // Monte Carlo trials; 1..1,000,000
  // Also find halving's break-even noise (17 more simulations).
  bool find_break_even = true;
  // Failures (all three or none is used; the costs have defaults): the
  // run's mean time between job-killing failures, and what each restart and
  // each checkpoint costs. Every strategy then loses the share of its
  // GPU-hours that checkpoints at the planner's interval
  // (calc/checkpoint_planner.h), re-done work and restarts take.
  std::optional<double> mtbf_hours;  // > 0
  double restart_seconds = 720;      // >= 0
  double checkpoint_seconds = 180;   // > 0
};

// One strategy's figures.
struct SearchStrategy {
  std::string name;    // "grid", "random", "successive-halving"
  std::string layout;  // grid "4x2x2x2"; halving "216 -> 72 -> 24 -> 8"; random "32"
  int64_t configurations = 0;  // explored (started)
  int64_t full_runs = 0;       // completed to the full length
  // Distinct values tried of the dimension that matters (for the grid, the
  // mean over trials: the grid does not know which dimension it is).
  double distinct_important_values = 0;
  double gpu_hours = 0;  // spent, failures included when an MTBF is given
  // The quality of the configuration the search picks (by its full runs),
  // mean over trials, and that mean's standard error.
  double expected_quality = 0;
  double quality_standard_error = 0;
};

struct SearchBudget {
  SearchBudgetInputs inputs;
  // When an MTBF is given: the checkpoint interval the planner would choose,
  // the share of GPU-hours lost to failures, restarts and checkpoints, and
  // the GPU-hours left for training (budget x (1 - waste)).
  std::optional<double> checkpoint_interval_seconds;
  std::optional<double> waste_fraction;
  double training_gpu_hours = 0;  // the budget, less the waste
  std::vector<SearchStrategy> strategies;  // grid, random, successive-halving
  // The --early-noise at which halving's expected quality falls to random
  // search's (unset when it stays above up to a noise of 8).
  std::optional<double> halving_break_even_noise;
};

// The search budget for `inputs`; InvalidArgument when an input is out of
// its range (the message names it by trainsupctl's flag), or when the budget
// buys no full run (after failures).
absl::StatusOr<SearchBudget> PlanSearchBudget(const SearchBudgetInputs& inputs);

// The grid's levels per dimension for at most `runs` configurations: as even
// as the product allows, the first dimensions taking the extra levels
// (32 runs on 4 dimensions: 4x2x2x2).
std::vector<int64_t> GridLevels(int64_t runs, int dimensions);

}  // namespace trainsup

#endif  // TRAINSUP_CALC_SEARCH_BUDGET_H_
