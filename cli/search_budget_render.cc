#include "cli/search_budget_render.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "cli/render.h"
#include "cli/table.h"

namespace trainsup {

namespace {

std::string BudgetLine(absl::string_view key, absl::string_view value) {
  return absl::StrFormat("%-18s%s\n", key, value);
}

// "2.5" for the grid's mean, "32" for a count.
std::string Distinct(double values) {
  return values == static_cast<double>(static_cast<int64_t>(values))
             ? absl::StrFormat("%d", static_cast<int64_t>(values))
             : absl::StrFormat("%.2f", values);
}

const SearchStrategy* Find(const SearchBudget& b, absl::string_view name) {
  for (const SearchStrategy& s : b.strategies) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

}  // namespace

std::string RenderSearchBudgetTable(const SearchBudget& b) {
  const SearchBudgetInputs& in = b.inputs;
  std::string out;
  out += BudgetLine("budget", absl::StrFormat("%.6g GPU-hours; a full run %.6g GPU-hours",
                                        in.budget_gpu_hours, in.run_gpu_hours));
  out += BudgetLine("space", absl::StrFormat("%d dimension%s, one of which matters", in.dimensions,
                                       in.dimensions == 1 ? "" : "s"));
  out += BudgetLine("halving", absl::StrFormat("%d rungs, keeping 1 in %d; early noise %.6g",
                                         in.rungs, in.reduction_factor, in.early_noise));
  if (b.waste_fraction.has_value()) {
    out += BudgetLine("failures",
                absl::StrFormat("MTBF %.6g h, restart %s, checkpoint %s: checkpoints every %s; "
                                "%.1f %% of the GPU-hours lost, %.1f GPU-hours train",
                                *in.mtbf_hours, FormatSeconds(in.restart_seconds),
                                FormatSeconds(in.checkpoint_seconds),
                                FormatSeconds(*b.checkpoint_interval_seconds),
                                100 * *b.waste_fraction, b.training_gpu_hours));
    const SearchStrategy* random = Find(b, "random");
    if (random != nullptr) {
      out += BudgetLine("", absl::StrFormat("the budget buys %d full runs at this failure rate "
                                      "(%d without failures)",
                                      random->full_runs,
                                      static_cast<int64_t>(in.budget_gpu_hours / in.run_gpu_hours)));
    }
  }
  out += BudgetLine("monte carlo", absl::StrFormat("%d trials, seed %d", in.trials, in.seed));
  out += "\n";
  Table table({"STRATEGY", "LAYOUT", "CONFIGS", "FULL_RUNS", "DISTINCT_VALUES", "GPU_HOURS",
               "QUALITY"});
  for (const SearchStrategy& s : b.strategies) {
    table.AddRow({s.name, absl::StrReplaceAll(s.layout, {{" ", ""}}),
                  absl::StrCat(s.configurations), absl::StrCat(s.full_runs),
                  Distinct(s.distinct_important_values), absl::StrFormat("%.1f", s.gpu_hours),
                  absl::StrFormat("%.4f±%.4f", s.expected_quality, s.quality_standard_error)});
  }
  out += table.Render();
  const SearchStrategy* random = Find(b, "random");
  const SearchStrategy* halving = Find(b, "successive-halving");
  out += "\n";
  if (random != nullptr && halving != nullptr) {
    out += absl::StrFormat("halving vs random: %+.4f quality", halving->expected_quality -
                                                                   random->expected_quality);
  }
  if (b.halving_break_even_noise.has_value()) {
    out += absl::StrFormat("; its advantage is gone at --early-noise %.2f",
                           *b.halving_break_even_noise);
  }
  out += "\n";
  out += "QUALITY: 1 - the distance of the picked value of the dimension that matters from its "
         "best (1 is the best exactly); docs/search-budget.md\n";
  return out;
}

v1::SearchBudgetResult SearchBudgetToProto(const SearchBudget& b) {
  const SearchBudgetInputs& in = b.inputs;
  v1::SearchBudgetResult out;
  out.set_budget_gpu_hours(in.budget_gpu_hours);
  out.set_run_gpu_hours(in.run_gpu_hours);
  out.set_dimensions(in.dimensions);
  out.set_reduction_factor(in.reduction_factor);
  out.set_rungs(in.rungs);
  out.set_early_noise(in.early_noise);
  out.set_seed(in.seed);
  out.set_trials(in.trials);
  if (in.mtbf_hours.has_value()) {
    out.set_mtbf_hours(*in.mtbf_hours);
    out.set_restart_seconds(in.restart_seconds);
    out.set_checkpoint_seconds(in.checkpoint_seconds);
  }
  if (b.checkpoint_interval_seconds.has_value()) {
    out.set_checkpoint_interval_seconds(*b.checkpoint_interval_seconds);
  }
  if (b.waste_fraction.has_value()) out.set_waste_fraction(*b.waste_fraction);
  out.set_training_gpu_hours(b.training_gpu_hours);
  for (const SearchStrategy& s : b.strategies) {
    v1::SearchStrategyResult* r = out.add_strategies();
    r->set_name(s.name);
    r->set_layout(s.layout);
    r->set_configurations(s.configurations);
    r->set_full_runs(s.full_runs);
    r->set_distinct_important_values(s.distinct_important_values);
    r->set_gpu_hours(s.gpu_hours);
    r->set_expected_quality(s.expected_quality);
    r->set_quality_standard_error(s.quality_standard_error);
  }
  if (b.halving_break_even_noise.has_value()) {
    out.set_halving_break_even_noise(*b.halving_break_even_noise);
  }
  return out;
}

absl::StatusOr<std::string> RunSearchBudgetCommand(const SearchBudgetInputs& flags, bool json) {
  absl::StatusOr<SearchBudget> budget = PlanSearchBudget(flags);
  if (!budget.ok()) return budget.status();
  if (json) return RenderJson(SearchBudgetToProto(*budget));
  return RenderSearchBudgetTable(*budget);
}

}  // namespace trainsup
