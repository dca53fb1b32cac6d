#include "calc/compute_budget.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace trainsup {

namespace {

absl::Status CheckPositive(double value, bool allow_zero, const char* what) {
  if (std::isfinite(value) && (value > 0 || (allow_zero && value == 0))) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrFormat("%s must be a finite number %s, got %g", what,
                                                    allow_zero ? ">= 0" : "> 0", value));
}

// The figures of one loader rate.
ComputeBudgetPoint At(const ComputeBudgetInputs& in, double loader_samples_per_second) {
  ComputeBudgetPoint p;
  p.loader_samples_per_second = loader_samples_per_second;
  const double compute = 1 / in.compute_samples_per_second;
  const double load = 1 / loader_samples_per_second;
  p.seconds_per_sample = in.overlap ? std::max(compute, load) : compute + load;
  p.utilization_fraction = compute / p.seconds_per_sample;
  p.throughput_samples_per_second = 1 / p.seconds_per_sample;
  if (in.useful_gpu_hours.has_value()) {
    p.wall_gpu_hours = *in.useful_gpu_hours / p.utilization_fraction;
    if (in.price_per_gpu_hour.has_value()) p.cost = *p.wall_gpu_hours * *in.price_per_gpu_hour;
  }
  return p;
}

constexpr double kSweepFactors[] = {0.5, 0.75, 1, 1.25, 1.5, 2};

}  // namespace

absl::StatusOr<ComputeBudget> PlanComputeBudget(const ComputeBudgetInputs& in) {
  if (absl::Status s = CheckPositive(in.compute_samples_per_second, false,
                                     "compute rate (samples per second)");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckPositive(in.loader_samples_per_second, false,
                                     "loader rate (samples per second)");
      !s.ok()) {
    return s;
  }
  if (in.gpus.has_value() && *in.gpus < 1) {
    return absl::InvalidArgumentError(absl::StrFormat("GPU count must be >= 1, got %d", *in.gpus));
  }
  if (in.price_per_gpu_hour.has_value()) {
    if (absl::Status s = CheckPositive(*in.price_per_gpu_hour, true, "price per GPU-hour");
        !s.ok()) {
      return s;
    }
  }
  if (in.useful_gpu_hours.has_value()) {
    if (absl::Status s = CheckPositive(*in.useful_gpu_hours, false, "useful GPU-hours"); !s.ok()) {
      return s;
    }
  }

  ComputeBudget b;
  b.inputs = in;
  b.compute_seconds_per_sample = 1 / in.compute_samples_per_second;
  b.loader_seconds_per_sample = 1 / in.loader_samples_per_second;
  const ComputeBudgetPoint here = At(in, in.loader_samples_per_second);
  b.seconds_per_sample = here.seconds_per_sample;
  b.utilization_fraction = here.utilization_fraction;
  b.idle_fraction = 1 - here.utilization_fraction;
  b.throughput_samples_per_second = here.throughput_samples_per_second;
  b.loader_bound = in.overlap && in.loader_samples_per_second < in.compute_samples_per_second;
  if (in.useful_gpu_hours.has_value()) {
    b.wall_gpu_hours = here.wall_gpu_hours;
    if (in.gpus.has_value()) b.wall_hours = *b.wall_gpu_hours / *in.gpus;
    if (in.price_per_gpu_hour.has_value()) {
      b.cost = *b.wall_gpu_hours * *in.price_per_gpu_hour;
      b.idle_cost = (*b.wall_gpu_hours - *in.useful_gpu_hours) * *in.price_per_gpu_hour;
    }
  }

  for (double factor : kSweepFactors) {
    ComputeBudgetPoint p = At(in, factor * in.loader_samples_per_second);
    p.label = absl::StrFormat("%gx", factor);
    b.sweep.push_back(std::move(p));
  }
  ComputeBudgetPoint matched = At(in, in.compute_samples_per_second);
  matched.label = "= compute";
  auto same_rate = [&](const ComputeBudgetPoint& p) {
    return std::abs(p.loader_samples_per_second - matched.loader_samples_per_second) <=
           1e-12 * matched.loader_samples_per_second;
  };
  if (auto it = std::find_if(b.sweep.begin(), b.sweep.end(), same_rate); it != b.sweep.end()) {
    absl::StrAppend(&it->label, " ", matched.label);
  } else {
    b.sweep.insert(std::upper_bound(b.sweep.begin(), b.sweep.end(), matched,
                                    [](const ComputeBudgetPoint& a, const ComputeBudgetPoint& p) {
                                      return a.loader_samples_per_second <
                                             p.loader_samples_per_second;
                                    }),
                   std::move(matched));
  }
  return b;
}

}  // namespace trainsup
