#ifndef TRAINSUP_DAEMON_CORE_VERDICTS_H_
#define TRAINSUP_DAEMON_CORE_VERDICTS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/verdict_rule.h"
#include "daemon/core/heartbeat.h"
#include "daemon/core/job.h"

namespace trainsup {

// The job's own verdicts on its failures (docs/signals.md, "Verdicts").
// Frameworks decide inside the job what a failure means: Megatron-LM exits
// 16 ("resume on a different node") or 17 ("transient"), llm-foundry raises
// LossSpikeError ("stop, do not retry"). A verdict table maps exit codes and
// exception types to actions, and a script may say the same itself
// (hb.verdict). The crash's culprit rank is looked up; the FailureHandler
// acts on what is found. Pure. How rules are written: common/verdict_rule.h.

// Rules by key: one action per exit code and per exception type.
// Thread-compatible.
class VerdictTable {
 public:
  VerdictTable() = default;

  // What exists today: Megatron-LM's exit 16 -> restart-elsewhere and 17 ->
  // transient; llm-foundry's LossSpikeError and HighLossError -> stop.
  static VerdictTable Defaults();
  // The table of `rules` (each as ParseVerdictRule reads it), in order.
  static absl::StatusOr<VerdictTable> FromRules(const std::vector<std::string>& rules);

  // Adds `rule`, replacing the rule of the same key.
  void Set(VerdictRule rule);
  // The rules of a table file: one a line, '#' starts a comment, blank
  // lines are skipped. InvalidArgument names the first bad line; nothing is
  // added then.
  absl::Status AddText(absl::string_view text);

  // The rule for an exit code or an exception type; nullptr when none.
  const VerdictRule* ForExitCode(int32_t exit_code) const;
  const VerdictRule* ForException(absl::string_view type) const;

  const std::vector<VerdictRule>& rules() const { return rules_; }
  bool empty() const { return rules_.empty(); }

 private:
  std::vector<VerdictRule> rules_;  // in the order first set
};

// The kind a crash with a restart-elsewhere verdict is recorded as (journal.h:
// FailureRow), so that it counts toward its node's quarantine by that
// verdict's rule again after trainsupd restarts.
inline constexpr char kRestartElsewhereFailure[] = "restart_elsewhere";

// A verdict on a failure, and where it came from.
struct Verdict {
  enum class Source {
    kScript,     // the rank's script said so (hb.verdict)
    kExitCode,   // the exit code the rank ended with matched a rule
    kException,  // the exception it raised (or was handling at its sys.exit) matched one
  };
  VerdictAction action = VerdictAction::kDefault;
  Source source = Source::kScript;
  // How it was found, for people: "hb.verdict", "the job's rule
  // exit:16=restart-elsewhere", "trainsupd's rule exception:LossSpikeError=stop".
  std::string found_by;
  std::string reason;  // the script's own words (kScript only)
};
// "script", "exit_code", "exception": the metric's label.
absl::string_view VerdictSourceName(Verdict::Source source);

// The exit code a rank ended with: the code it passed to sys.exit if its
// helper said, else its process's exit code; nullopt when neither is known
// or a signal ended it.
std::optional<int32_t> ExitCodeOf(const RankState& rank);

// The verdict on `rank`'s failure: the script's own (hb.verdict) first, then
// a rule for the exit code it ended with, then a rule for its exception's
// type; for each key the job's rules (`job_rules`, may be null) before
// `table`. nullopt when nothing applies or what applies is "default".
std::optional<Verdict> VerdictOn(const RankState& rank, const VerdictTable* job_rules,
                                 const VerdictTable& table);

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_VERDICTS_H_
