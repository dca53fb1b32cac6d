#include "calc/search_budget.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "calc/checkpoint_planner.h"

namespace trainsup {

namespace {

// More configurations than this in one trial make the Monte Carlo slow
// without saying anything a smaller search would not.
constexpr int64_t kMaxConfigurations = 1'000'000;
// The spread of a uniform value in [0, 1]: the unit of early_noise.
const double kUniformSpread = 1 / std::sqrt(12.0);
// Halving's break-even noise is looked for up to this noise.
constexpr double kMaxBreakEvenNoise = 8;

absl::Status CheckNumber(double value, double least, double most, bool least_allowed,
                         const char* what) {
  if (std::isfinite(value) && (value > least || (least_allowed && value == least)) &&
      value <= most) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s must be %s %g and at most %g, got %g", what, least_allowed ? ">=" : ">", least, most,
      value));
}

absl::Status CheckInputs(const SearchBudgetInputs& in) {
  absl::Status checks[] = {
      CheckNumber(in.budget_gpu_hours, 0, 1e12, false, "--budget-gpu-hours"),
      CheckNumber(in.run_gpu_hours, 0, 1e12, false, "--run-gpu-hours"),
      CheckNumber(in.dimensions, 1, 32, true, "--dimensions"),
      CheckNumber(in.reduction_factor, 2, 16, true, "--reduction-factor"),
      CheckNumber(in.rungs, 1, 12, true, "--rungs"),
      CheckNumber(in.early_noise, 0, 1e6, true, "--early-noise"),
      CheckNumber(in.trials, 1, 1e6, true, "--trials"),
      CheckNumber(in.restart_seconds, 0, 1e9, true, "--restart-cost"),
      CheckNumber(in.checkpoint_seconds, 0, 1e9, false, "--checkpoint-cost"),
  };
  for (const absl::Status& s : checks) {
    if (!s.ok()) return s;
  }
  if (in.mtbf_hours.has_value()) {
    return CheckNumber(*in.mtbf_hours, 0, 1e9, false, "--mtbf");
  }
  return absl::OkStatus();
}

// The shape of each strategy for a budget of `runs` full runs.
struct Shapes {
  std::vector<int64_t> grid;         // levels per dimension
  int64_t random = 0;                // configurations
  std::vector<int64_t> halving;      // configurations per rung, the last of full runs
  std::vector<double> rung_share;    // each rung's share of a full run
};

Shapes ShapesFor(const SearchBudgetInputs& in, int64_t runs) {
  Shapes s;
  s.grid = GridLevels(runs, in.dimensions);
  s.random = runs;
  // Each rung spends the same share of the budget: n_i x share_i x run is
  // the same for every rung, so the last rung completes runs / rungs.
  const int64_t last = runs / in.rungs;
  for (int i = 0; i < in.rungs; ++i) {
    const double cut = std::pow(in.reduction_factor, in.rungs - 1 - i);
    s.halving.push_back(last * static_cast<int64_t>(cut));
    s.rung_share.push_back(1 / cut);
  }
  return s;
}

int64_t Product(const std::vector<int64_t>& levels) {
  return std::accumulate(levels.begin(), levels.end(), int64_t{1}, std::multiplies<int64_t>());
}

// The Monte Carlo: the quality each strategy picks, trial by trial.
class SearchSimulation {
 public:
  SearchSimulation(const SearchBudgetInputs& in, const Shapes& shapes, double early_noise)
      : in_(in), shapes_(shapes), early_noise_(early_noise), rng_(in.seed) {}

  // Runs every trial; the qualities are then in grid(), random(), halving().
  void Run() {
    for (int t = 0; t < in_.trials; ++t) {
      const double best = Uniform();
      const int important = static_cast<int>(rng_() % static_cast<uint64_t>(in_.dimensions));
      grid_.push_back(GridTrial(best, important));
      random_.push_back(RandomTrial(best));
      halving_.push_back(HalvingTrial(best));
    }
  }

  const std::vector<double>& grid() const { return grid_; }
  const std::vector<double>& random() const { return random_; }
  const std::vector<double>& halving() const { return halving_; }
  double mean_grid_levels() const { return grid_levels_ / in_.trials; }

 private:
  double Uniform() { return std::uniform_real_distribution<double>(0, 1)(rng_); }
  static double Quality(double x, double best) { return 1 - std::abs(x - best); }

  // The grid's values of the dimension that matters: the centres of its
  // levels' cells, (i + 0.5) / k.
  double GridTrial(double best, int important) {
    const int64_t k = shapes_.grid[important];
    grid_levels_ += static_cast<double>(k);
    double q = 0;
    for (int64_t i = 0; i < k; ++i) q = std::max(q, Quality((i + 0.5) / k, best));
    return q;
  }

  double RandomTrial(double best) {
    double q = 0;
    for (int64_t i = 0; i < shapes_.random; ++i) q = std::max(q, Quality(Uniform(), best));
    return q;
  }

  // Synchronous successive halving: every rung scores its configurations by
  // a run of its share, keeps the best 1 in reduction_factor for the next;
  // the last rung's full runs measure exactly, and the best is picked.
  double HalvingTrial(double best) {
    const size_t rungs = shapes_.halving.size();
    quality_.resize(static_cast<size_t>(shapes_.halving[0]));
    for (double& q : quality_) q = Quality(Uniform(), best);
    for (size_t i = 0; i + 1 < rungs; ++i) {
      const double sigma = early_noise_ * kUniformSpread * (1 - shapes_.rung_share[i]);
      std::normal_distribution<double> noise(0, sigma > 0 ? sigma : 1);
      scored_.clear();
      for (double q : quality_) scored_.push_back({sigma > 0 ? q + noise(rng_) : q, q});
      const size_t keep = static_cast<size_t>(shapes_.halving[i + 1]);
      std::partial_sort(scored_.begin(), scored_.begin() + keep, scored_.end(),
                        [](const Scored& a, const Scored& b) { return a.score > b.score; });
      quality_.clear();
      for (size_t j = 0; j < keep; ++j) quality_.push_back(scored_[j].quality);
    }
    return *std::max_element(quality_.begin(), quality_.end());
  }

  struct Scored {
    double score;
    double quality;
  };

  const SearchBudgetInputs& in_;
  const Shapes& shapes_;
  const double early_noise_;
  std::mt19937_64 rng_;
  std::vector<double> grid_, random_, halving_;
  double grid_levels_ = 0;
  std::vector<double> quality_;  // the rung's configurations (scratch)
  std::vector<Scored> scored_;   // scratch
};

double Mean(const std::vector<double>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

double StandardError(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const double mean = Mean(v);
  double sum = 0;
  for (double x : v) sum += (x - mean) * (x - mean);
  return std::sqrt(sum / static_cast<double>(v.size() - 1) / static_cast<double>(v.size()));
}

// Halving's mean quality minus random search's, at `noise`. The same seed
// at every noise: the difference moves with the noise, not the draws.
double HalvingAdvantage(const SearchBudgetInputs& in, const Shapes& shapes, double noise) {
  SearchSimulation sim(in, shapes, noise);
  sim.Run();
  return Mean(sim.halving()) - Mean(sim.random());
}

std::optional<double> BreakEvenNoise(const SearchBudgetInputs& in, const Shapes& shapes) {
  double low = 0;
  double high = kMaxBreakEvenNoise;
  if (HalvingAdvantage(in, shapes, low) <= 0 || HalvingAdvantage(in, shapes, high) > 0) {
    return std::nullopt;
  }
  for (int i = 0; i < 16; ++i) {  // to 8 / 2^16 of a unit
    const double mid = (low + high) / 2;
    (HalvingAdvantage(in, shapes, mid) > 0 ? low : high) = mid;
  }
  return (low + high) / 2;
}

}  // namespace

std::vector<int64_t> GridLevels(int64_t runs, int dimensions) {
  std::vector<int64_t> levels(static_cast<size_t>(std::max(dimensions, 1)), 1);
  if (runs < 1) return levels;
  int64_t product = 1;
  for (;;) {
    // The dimension with the fewest levels (the first of equals) whose next
    // level still fits.
    int pick = -1;
    for (size_t d = 0; d < levels.size(); ++d) {
      const bool fits = product / levels[d] * (levels[d] + 1) <= runs;
      if (fits && (pick < 0 || levels[d] < levels[static_cast<size_t>(pick)])) {
        pick = static_cast<int>(d);
      }
    }
    if (pick < 0) return levels;
    product = product / levels[static_cast<size_t>(pick)] * (levels[static_cast<size_t>(pick)] + 1);
    ++levels[static_cast<size_t>(pick)];
  }
}

absl::StatusOr<SearchBudget> PlanSearchBudget(const SearchBudgetInputs& in) {
  if (absl::Status s = CheckInputs(in); !s.ok()) return s;
  SearchBudget out;
  out.inputs = in;
  double kept = 1;  // the share of GPU-hours that trains
  if (in.mtbf_hours.has_value()) {
    CheckpointPlanInputs plan_in;
    plan_in.checkpoint_seconds = in.checkpoint_seconds;
    plan_in.mtbf_seconds = *in.mtbf_hours * 3600;
    plan_in.restart_seconds = in.restart_seconds;
    absl::StatusOr<CheckpointPlan> plan = PlanCheckpoints(plan_in);
    if (!plan.ok()) return plan.status();
    out.checkpoint_interval_seconds = plan->interval_seconds;
    out.waste_fraction = plan->at_interval.total_waste_fraction;
    kept = 1 - *out.waste_fraction;
    if (kept <= 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "at an MTBF of %g h, checkpoints, re-done work and restarts take all the time "
          "(%.0f %% of it): no run completes",
          *in.mtbf_hours, 100 * *out.waste_fraction));
    }
  }
  out.training_gpu_hours = in.budget_gpu_hours * kept;
  const double runs_exact = out.training_gpu_hours / in.run_gpu_hours;
  if (runs_exact < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the budget buys no full run: %g GPU-hours%s for runs of %g GPU-hours",
        out.training_gpu_hours, in.mtbf_hours.has_value() ? " (after failures)" : "",
        in.run_gpu_hours));
  }
  const int64_t runs = static_cast<int64_t>(std::floor(runs_exact + 1e-9));
  if (runs / in.rungs < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "successive halving with %d rungs needs %d full runs' budget, the budget buys %d",
        in.rungs, in.rungs, runs));
  }
  const double first_rung =
      static_cast<double>(runs / in.rungs) * std::pow(in.reduction_factor, in.rungs - 1);
  if (first_rung > kMaxConfigurations || runs > kMaxConfigurations) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "more than %d configurations to simulate: fewer rungs, a smaller reduction factor or "
        "a smaller budget",
        kMaxConfigurations));
  }
  const Shapes shapes = ShapesFor(in, runs);

  SearchSimulation sim(in, shapes, in.early_noise);
  sim.Run();
  const double gpu_hours_per_run = in.run_gpu_hours / kept;  // failures included

  SearchStrategy grid;
  grid.name = "grid";
  grid.layout = absl::StrJoin(shapes.grid, "x");
  grid.configurations = Product(shapes.grid);
  grid.full_runs = grid.configurations;
  grid.distinct_important_values = sim.mean_grid_levels();
  grid.gpu_hours = static_cast<double>(grid.full_runs) * gpu_hours_per_run;
  grid.expected_quality = Mean(sim.grid());
  grid.quality_standard_error = StandardError(sim.grid());

  SearchStrategy random;
  random.name = "random";
  random.layout = absl::StrCat(shapes.random);
  random.configurations = shapes.random;
  random.full_runs = shapes.random;
  random.distinct_important_values = static_cast<double>(shapes.random);
  random.gpu_hours = static_cast<double>(random.full_runs) * gpu_hours_per_run;
  random.expected_quality = Mean(sim.random());
  random.quality_standard_error = StandardError(sim.random());

  SearchStrategy halving;
  halving.name = "successive-halving";
  halving.layout = absl::StrJoin(shapes.halving, " -> ");
  halving.configurations = shapes.halving[0];
  halving.full_runs = shapes.halving.back();
  halving.distinct_important_values = static_cast<double>(shapes.halving[0]);
  for (size_t i = 0; i < shapes.halving.size(); ++i) {
    halving.gpu_hours +=
        static_cast<double>(shapes.halving[i]) * shapes.rung_share[i] * gpu_hours_per_run;
  }
  halving.expected_quality = Mean(sim.halving());
  halving.quality_standard_error = StandardError(sim.halving());

  out.strategies = {grid, random, halving};
  if (in.find_break_even && in.rungs > 1) out.halving_break_even_noise = BreakEvenNoise(in, shapes);
  return out;
}

}  // namespace trainsup
