#ifndef TRAINSUP_DAEMON_CORE_FAILURE_HANDLER_H_
#define TRAINSUP_DAEMON_CORE_FAILURE_HANDLER_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/core/agent_registry.h"
#include "daemon/core/decisions.h"
#include "daemon/core/events.h"
#include "daemon/core/job_entry.h"
#include "daemon/core/quarantine_policy.h"
#include "daemon/core/restart_coordinator.h"
#include "daemon/core/supervisor_options.h"
#include "daemon/core/verdicts.h"

namespace trainsup {

// A failure a rule found, as the handler records and acts on it.
struct Failure {
  // "crash", "stall", "node_lost", "start_timeout", "straggler", "gpu_uncorrectable", or
  // kRestartElsewhereFailure (verdicts.h).
  std::string kind;
  NodeIndex node = kNoNode;  // where it happened; kNoNode: nowhere known
  // It counts against `node` toward a quarantine (failure_classifier.h says
  // which do: a lost node, a hang's culprit, a native crash, an
  // infrastructure error; never the training code's own errors).
  bool charged = false;
  std::optional<uint32_t> rank;
  absl::Time failed_at;  // when it happened at the source
  std::string message;   // what failed, e.g. "crash of rank 3 (exit code 1)"
  // Set: hold the job for this instead of restarting it (the training code
  // fails the same way again; its command fails before any rank reports,
  // everywhere or again).
  std::optional<HoldCause> hold;
  // The job's own verdict on the failure (verdicts.h): it decides what is
  // done instead of the classification, and `charged` says whether it counts
  // toward the node's quarantine by that verdict's rule.
  std::optional<Verdict> verdict;
  // The failing rank's exit code, when known.
  std::optional<int32_t> exit_code;
  // What it says about the job's checkpoints (checkpoint_fallback.h),
  // decided before its own event (FailureHandler::JudgeCheckpoints) and
  // acted on with it: a failure soon after a load (`fallback`), and the
  // next generations' resume below a non-finite loss (`cut`).
  FallbackDecision fallback;
  FallbackDecision cut;
};

// Verdicts acted on since start, by action and source (the metric's labels).
class VerdictCounts {
 public:
  void Add(VerdictAction action, Verdict::Source source) { ++counts_[Index(action, source)]; }
  uint64_t Get(VerdictAction action, Verdict::Source source) const {
    return counts_[Index(action, source)];
  }

 private:
  static constexpr int kActions = 5;  // VerdictAction's values
  static constexpr int kSources = 3;  // Verdict::Source's
  static int Index(VerdictAction action, Verdict::Source source) {
    return static_cast<int>(action) * kSources + static_cast<int>(source);
  }
  std::array<uint64_t, kActions * kSources> counts_{};
};



// What is done about failures: a job-killing failure is recorded (it counts
// in the MTBF), the job restarted everywhere, and the failure charged to its
// node; a node charged too often is quarantined, its scheduler told (the
// fence) and its job restarted without it. Also the operator's own
// quarantine and unquarantine. Nothing is acted on under --observe-only.
// Thread-compatible.
class FailureHandler {
 public:
  FailureHandler(const SupervisorOptions& options, const AgentRegistry& agents,
                 QuarantinePolicy& quarantine, JobTable& jobs, RestartCoordinator& restarts,
                 Decisions& decisions)
      : options_(options),
        agents_(agents),
        quarantine_(quarantine),
        jobs_(jobs),
        restarts_(restarts),
        decisions_(decisions) {}
  FailureHandler(const FailureHandler&) = delete;
  FailureHandler& operator=(const FailureHandler&) = delete;

  // What a failure that kills `job` at `step` of its current generation
  // says about its checkpoints, before its event is built (nothing under
  // --observe-only): a failure of `load_kind` (a rank's crash, a non-finite
  // loss, a resume spike) soon after the generation loaded a checkpoint
  // counts toward that checkpoint being suspect; a generation that sent a
  // non-finite loss (--on-non-finite restart) has the next generations
  // resume below it, whatever stopped it. Sets `failure.fallback` and
  // `failure.cut`, and the hold: a fallback lifts the hold of a repeat (the
  // checkpoint's, not the training code's), past the cap the job is held
  // naming the checkpoint. A charge to the node stays as classified.
  void JudgeCheckpoints(JobEntry& job, int64_t step, std::optional<LoadFailureKind> load_kind,
                        Failure& failure);
  // Sets what `d` decides on `failure`'s hold.
  static void Attach(const FallbackDecision& d, Failure& failure);

  // A failure that kills `job`: recorded, the job stopped everywhere and
  // restarted (or held), then the failure charged to its node if it is. A
  // failure with the job's own verdict is acted on as the verdict says (a
  // verdict event says what is done). Its checkpoint decisions are
  // journaled and their events emitted first.
  void OnJobFailure(absl::Time now, JobEntry& job, const Failure& failure);
  // A failure charged to a node that does not restart the job by itself (a
  // persistent straggler): recorded and counted toward the node's quarantine.
  void OnNodeFailure(absl::Time now, JobEntry& job, const Failure& failure);

  // The operator's verbs. NotFound for a node never heard of;
  // InvalidArgument for a reason that breaks the rule of common/limits.h;
  // FailedPrecondition when the quarantine would pass the fraction cap and
  // `force` is false.
  absl::StatusOr<std::string> Quarantine(absl::Time now, absl::string_view node,
                                         absl::string_view reason, bool force);
  absl::StatusOr<std::string> Unquarantine(absl::Time now, absl::string_view node);

  // A quarantine decided by a rule at the first occurrence of what it saw
  // (`by`: "gpu_error"), under --quarantine-max-fraction: true when the node
  // was quarantined (or already was), false when the cap refused it (a
  // quarantine_skipped event says so). Nothing under --observe-only.
  bool QuarantineNow(absl::Time now, NodeIndex node, const std::string& reason,
                     absl::string_view by);

  const VerdictCounts& verdicts() const { return verdicts_; }

 private:
  // The events and the journal row of a failure's checkpoint decisions.
  void ActOnCheckpoints(absl::Time now, JobEntry& job, const Failure& failure);
  // Journals `failure`; returns the row journaled.
  const FailureRow& Record(JobEntry& job, const Failure& failure);
  // The stop and the restart (or hold) of a job-killing failure.
  void Restart(absl::Time now, JobEntry& job, const Failure& failure,
               const std::optional<HoldCause>& hold);
  // OnJobFailure for a failure with the job's own verdict.
  void HonourVerdict(absl::Time now, JobEntry& job, const Failure& failure);
  void AttributeToNode(absl::Time now, NodeIndex node, const std::string& what);
  // What the quarantine policy decided on a charge against `node`: a
  // quarantine, or one the fraction cap refused.
  void ActOnCount(absl::Time now, NodeIndex node, const QuarantinePolicy::Verdict& verdict);
  // `counted`: what the policy counted against the node, when it decided.
  void QuarantineNode(absl::Time now, NodeIndex node, const std::string& reason,
                      absl::string_view by, std::optional<FailureCount> counted = std::nullopt);

  const SupervisorOptions& options_;
  const AgentRegistry& agents_;
  QuarantinePolicy& quarantine_;
  JobTable& jobs_;
  RestartCoordinator& restarts_;
  Decisions& decisions_;
  VerdictCounts verdicts_;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_FAILURE_HANDLER_H_
