#ifndef TRAINSUP_CLI_SEARCH_BUDGET_RENDER_H_
#define TRAINSUP_CLI_SEARCH_BUDGET_RENDER_H_

#include <string>

#include "absl/status/statusor.h"
#include "calc/search_budget.h"
#include "trainsup/v1/calculators.pb.h"

namespace trainsup {

// `trainsupctl search-budget` (offline): the table, or -o json through
// SearchBudgetResult like every verb.
std::string RenderSearchBudgetTable(const SearchBudget& budget);
v1::SearchBudgetResult SearchBudgetToProto(const SearchBudget& budget);
// The whole command: its stdout, or the error for `error: ...` (exit 2).
absl::StatusOr<std::string> RunSearchBudgetCommand(const SearchBudgetInputs& flags, bool json);

}  // namespace trainsup

#endif  // TRAINSUP_CLI_SEARCH_BUDGET_RENDER_H_
