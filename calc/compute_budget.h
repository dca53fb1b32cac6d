#ifndef TRAINSUP_CALC_COMPUTE_BUDGET_H_
#define TRAINSUP_CALC_COMPUTE_BUDGET_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace trainsup {

// The input-pipeline budget: how much of the GPUs' time a data loader of a
// given rate leaves unused ("starved" in the goodput identity), and what that
// costs. Pure functions; no I/O.
//
// Both rates are in samples per second and in the same scope (both per GPU,
// or both for the whole job); throughput is reported in that scope.
struct ComputeBudgetInputs {
  // X: what the GPUs could consume when never waiting. > 0. Default: 6912.
  double compute_samples_per_second = 6912;
  // Y: what the loader produces. > 0. Default: 5000.
  double loader_samples_per_second = 5000;
  // Loading overlaps compute (prefetch, DataLoader workers): a sample costs
  // max(1/X, 1/Y). Without overlap the two add: 1/X + 1/Y. Default: true.
  bool overlap = true;
  // Optional, for the wall time and cost of a run of `useful_gpu_hours` of
  // pure compute: GPUs in the job (>= 1), price of one GPU-hour (>= 0, any
  // currency), useful GPU-hours (> 0).
  std::optional<int> gpus;
  std::optional<double> price_per_gpu_hour;
  std::optional<double> useful_gpu_hours;
};

// One loader rate and what it gives.
struct ComputeBudgetPoint {
  std::string label;  // "0.5x", ..., "2x" of the given loader rate; "= compute" for Y = X
  double loader_samples_per_second = 0;
  double seconds_per_sample = 0;
  double utilization_fraction = 0;  // (1/X) / seconds_per_sample, in (0, 1]
  double throughput_samples_per_second = 0;
  std::optional<double> wall_gpu_hours;  // when useful_gpu_hours is given
  std::optional<double> cost;            // when the price is given too
};

struct ComputeBudget {
  ComputeBudgetInputs inputs;
  double compute_seconds_per_sample = 0;  // 1/X
  double loader_seconds_per_sample = 0;   // 1/Y
  double seconds_per_sample = 0;          // max(1/X, 1/Y), or 1/X + 1/Y
  double utilization_fraction = 0;        // (1/X) / seconds_per_sample
  double idle_fraction = 0;               // 1 - utilization: waiting for data
  double throughput_samples_per_second = 0;  // 1 / seconds_per_sample
  bool loader_bound = false;  // the loader, not compute, sets the pace (Y < X with overlap)
  // When useful_gpu_hours (H) is given: H / utilization.
  std::optional<double> wall_gpu_hours;
  // When H and gpus (N) are given: wall_gpu_hours / N.
  std::optional<double> wall_hours;
  // When H and the price (P) are given: wall_gpu_hours x P, and the part of
  // it paid for idle GPUs: (wall_gpu_hours - H) x P.
  std::optional<double> cost;
  std::optional<double> idle_cost;
  // Loader rates 0.5x, 0.75x, 1x, 1.25x, 1.5x and 2x Y, and Y = X, sorted
  // by rate; a rate that appears twice is one row with both labels.
  std::vector<ComputeBudgetPoint> sweep;
};

// The budget for `inputs`; InvalidArgument when an input is out of its range
// (or not finite).
absl::StatusOr<ComputeBudget> PlanComputeBudget(const ComputeBudgetInputs& inputs);

}  // namespace trainsup

#endif  // TRAINSUP_CALC_COMPUTE_BUDGET_H_
