#ifndef TRAINSUP_COMMON_VERDICT_RULE_H_
#define TRAINSUP_COMMON_VERDICT_RULE_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trainsup {

// The job's own verdicts on its failures, as rules are written
// (docs/signals.md, "Verdicts"): trainsupd reads them from --verdict and
// --verdict-table, an agent from its --verdict (it checks them before it
// says hello). Pure.

// What the job itself says to do about a failure (heartbeat.proto:
// VerdictAction).
enum class VerdictAction {
  kUnspecified = 0,  // refused on the wire
  kDefault = 1,      // no verdict: the failure is classified as any other
  kRestartElsewhere = 2,
  kTransient = 3,
  kStop = 4,
};

// "default", "restart-elsewhere", "transient", "stop".
absl::string_view VerdictActionName(VerdictAction action);
std::optional<VerdictAction> VerdictActionFromName(absl::string_view name);

// Exit codes a rule may name: a failure's, so 1..255.
inline constexpr int kMinVerdictExitCode = 1;
inline constexpr int kMaxVerdictExitCode = 255;
// The most rules a job's agent may bring, and the longest rule.
inline constexpr size_t kMaxJobVerdictRules = 64;
inline constexpr size_t kMaxVerdictRuleLength = 300;

// One rule: an exit code or an exception type, and its action.
struct VerdictRule {
  std::optional<int32_t> exit_code;  // set: matches this exit code
  std::string exception_type;        // else: matches this exception type (its __name__)
  VerdictAction action = VerdictAction::kDefault;

  // "exit:16=restart-elsewhere", "exception:LossSpikeError=stop".
  std::string ToString() const;
};

// A rule as written: "exit:CODE=ACTION" or "exception:TYPE=ACTION", spaces
// around the parts allowed. InvalidArgument says what is wrong.
absl::StatusOr<VerdictRule> ParseVerdictRule(absl::string_view text);

// A job's rules as its agent brings them: at most kMaxJobVerdictRules, each
// one that parses. InvalidArgument says which not.
absl::Status CheckJobVerdictRules(const std::vector<std::string>& rules);

}  // namespace trainsup

#endif  // TRAINSUP_COMMON_VERDICT_RULE_H_
