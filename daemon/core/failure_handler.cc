#include "daemon/core/failure_handler.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/limits.h"
#include "daemon/core/events.h"

namespace trainsup {

const FailureRow& FailureHandler::Record(JobEntry& job, const Failure& failure) {
  FailureRow row;
  row.time = failure.failed_at;
  row.job = job.id();
  row.generation = job.job().generation();
  row.kind = failure.kind;
  row.node = agents_.NameOf(failure.node);
  row.charged = failure.charged && failure.node != kNoNode;
  row.rank = failure.rank;
  row.message = failure.message;
  return decisions_.journal().failures.emplace_back(std::move(row));
}

void FailureHandler::JudgeCheckpoints(JobEntry& job, int64_t step,
                                      std::optional<LoadFailureKind> load_kind, Failure& failure) {
  if (options_.observe_only) return;
  const uint64_t generation = job.job().generation();
  const SignalOptions& signals = job.signals().options();
  if (load_kind) {
    failure.fallback =
        job.mutable_fallback().OnLoadFailure(generation, step, *load_kind, signals.fallback);
    Attach(failure.fallback, failure);
  }
  // Under --on-non-finite restart the NaN stops the generation, whichever
  // failure the supervisor heard of first (a script that raises on it).
  if (signals.non_finite.action != NonFiniteAction::kRestart) return;
  if (std::optional<int64_t> nan = job.signals().NonFiniteLossStep(generation); nan) {
    failure.cut = job.mutable_fallback().OnNonFinite(generation, *nan);
  }
}

void FailureHandler::Attach(const FallbackDecision& d, Failure& failure) {
  switch (d.kind) {
    case FallbackDecision::Kind::kFallBack:
      // The checkpoint's, not the training code's repeat. A native crash
      // stays charged to its node as classified: a node that keeps
      // crashing after every load is still quarantined.
      failure.hold.reset();
      break;
    case FallbackDecision::Kind::kHold:
      failure.hold = FallbackHold(d);
      break;
    default:
      break;
  }
}

void FailureHandler::ActOnCheckpoints(absl::Time now, JobEntry& job, const Failure& failure) {
  using Kind = FallbackDecision::Kind;
  if (failure.fallback.kind == Kind::kNone && failure.cut.kind == Kind::kNone) return;
  decisions_.journal().fallbacks.push_back({job.id(), job.fallback().state()});
  const EventJob event_job = EventJobOf(job);
  const FallbackDecision& d = failure.fallback;
  switch (d.kind) {
    case Kind::kFallBack:
      decisions_.Emit(&job, CheckpointSuspectEvent(now, event_job, d));
      decisions_.Emit(&job, CheckpointFallbackEvent(now, event_job, d));
      break;
    case Kind::kHold:
      if (d.checkpoint >= 0) decisions_.Emit(&job, CheckpointSuspectEvent(now, event_job, d));
      break;
    case Kind::kRollBack:
      decisions_.Emit(&job, SpikeRollbackEvent(now, event_job, d));
      break;
    default:
      break;
  }
  // Named only when it excludes a checkpoint seen; the failure's own event
  // says where the next generation resumes.
  if (!failure.cut.poisoned.empty()) {
    decisions_.Emit(&job, CheckpointSuspectEvent(now, event_job, failure.cut));
    decisions_.Emit(&job, CheckpointFallbackEvent(now, event_job, failure.cut));
  }
}

void FailureHandler::OnJobFailure(absl::Time now, JobEntry& job, const Failure& failure) {
  ActOnCheckpoints(now, job, failure);
  job.mutable_costs().AddFailure();
  job.mutable_lifecycle().last_recorded_failure = Record(job, failure);
  if (failure.verdict) return HonourVerdict(now, job, failure);
  if (options_.observe_only) return;  // recorded and reported, nothing done
  // Restart first, so that the restart is about this failure even when the
  // attribution below quarantines the node (which would restart it too).
  Restart(now, job, failure, failure.hold);
  // A crash that follows its GPU's report of the application's own error
  // (docs/gpu.md: Xid 13, 31, 43, ...) is the workload's, not the node's.
  if (failure.charged && failure.node != kNoNode &&
      !job.verdicts().WorkloadGpuError(agents_.NameOf(failure.node))) {
    AttributeToNode(now, failure.node, failure.message);
  }
}

bool FailureHandler::QuarantineNow(absl::Time now, NodeIndex index, const std::string& reason,
                                   absl::string_view by) {
  if (options_.observe_only) return false;
  const NodeRecord& node = agents_.node(index);
  if (quarantine_.IsQuarantined(node.name)) return true;
  if (quarantine_.AtCap(agents_.size())) {
    JobEntry* job = jobs_.Find(node.job);
    decisions_.Emit(job, QuarantineSkippedEvent(now, EventJobOf(job), node.name, reason,
                                                {1, quarantine_.options().window},
                                                quarantine_.quarantined_count(),
                                                quarantine_.options().max_fraction, agents_.size()));
    return false;
  }
  QuarantineNode(now, index, reason, by);
  return true;
}

void FailureHandler::Restart(absl::Time now, JobEntry& job, const Failure& failure,
                             const std::optional<HoldCause>& hold) {
  const std::string& node = agents_.NameOf(failure.node);
  restarts_.BeginRestart(now, job, failure.failed_at,
                         absl::StrCat(failure.kind, node.empty() ? "" : absl::StrCat(" on ", node),
                                      ": ", failure.message),
                         hold);
}

void FailureHandler::HonourVerdict(absl::Time now, JobEntry& job, const Failure& failure) {
  const Verdict& verdict = *failure.verdict;
  const std::string& node = agents_.NameOf(failure.node);
  verdicts_.Add(verdict.action, verdict.source);
  VerdictTaken taken;
  taken.acted = !options_.observe_only;
  std::optional<HoldCause> hold;
  QuarantinePolicy::Verdict counted;
  switch (verdict.action) {
    case VerdictAction::kStop:
      hold = VerdictHold(verdict, failure.message, node);
      taken.text = "the job is held, not restarted";
      break;
    case VerdictAction::kTransient:
      taken.text = "restarted as it is; no node is charged";
      break;
    case VerdictAction::kRestartElsewhere:
      if (!failure.charged || failure.node == kNoNode) {
        taken.text = "restarted; no node to leave out";
        break;
      }
      if (taken.acted) {
        counted = quarantine_.Attribute(now, node, failure.message, agents_.size(),
                                        Charge::kRestartElsewhere);
      }
      taken.on_node = counted.failures;
      taken.quarantined = counted.quarantine;
      if (counted.quarantine) {
        taken.text = absl::StrCat(node, " had this verdict before within --quarantine-window: ",
                                  node, " is quarantined");
      } else {
        taken.text = absl::StrCat(node, " is left out of the next generation if the job can run "
                                        "on the others (at least its --nnodes minimum)",
                                  counted.skipped_by_cap
                                      ? "; its quarantine is refused by --quarantine-max-fraction"
                                      : "");
      }
      break;
    case VerdictAction::kDefault:
    case VerdictAction::kUnspecified:
      break;
  }
  decisions_.Emit(&job, VerdictEvent(now, EventJobOf(job), failure.rank, node, failure.message,
                                     verdict, failure.exit_code, taken));
  if (!taken.acted) return;  // --observe-only: recorded and reported, nothing done
  Restart(now, job, failure, hold);
  if (verdict.action != VerdictAction::kRestartElsewhere || taken.on_node == 0) return;
  ActOnCount(now, failure.node, counted);
  if (!counted.quarantine) job.mutable_lifecycle().leave_out_next = node;
}

void FailureHandler::OnNodeFailure(absl::Time now, JobEntry& job, const Failure& failure) {
  Record(job, failure);
  if (failure.charged && failure.node != kNoNode && !options_.observe_only) {
    AttributeToNode(now, failure.node, failure.message);
  }
}

void FailureHandler::AttributeToNode(absl::Time now, NodeIndex index, const std::string& what) {
  const NodeRecord& node = agents_.node(index);
  ActOnCount(now, index, quarantine_.Attribute(now, node.name, what, agents_.size()));
}

void FailureHandler::ActOnCount(absl::Time now, NodeIndex index,
                                const QuarantinePolicy::Verdict& verdict) {
  const NodeRecord& node = agents_.node(index);
  if (verdict.skipped_by_cap) {
    JobEntry* job = jobs_.Find(node.job);
    decisions_.Emit(job, QuarantineSkippedEvent(
                             now, EventJobOf(job), node.name, verdict.reason,
                             {verdict.failures, quarantine_.options().window},
                             quarantine_.quarantined_count(), quarantine_.options().max_fraction,
                             agents_.size()));
  }
  if (verdict.quarantine) {
    QuarantineNode(now, index, verdict.reason, "policy",
                   FailureCount{verdict.failures, quarantine_.options().window});
  }
}

void FailureHandler::QuarantineNode(absl::Time now, NodeIndex index, const std::string& reason,
                                    absl::string_view by, std::optional<FailureCount> counted) {
  const NodeRecord& node = agents_.node(index);
  quarantine_.Quarantine(node.name, reason);
  decisions_.journal().nodes.push_back({node.name, true, reason, now, std::string(by)});
  decisions_.Fence({node.name, reason, now});
  JobEntry* job = jobs_.Find(node.job);
  decisions_.Emit(job, QuarantineEvent(now, EventJobOf(job), node.name, by, reason, counted));
  // Its job goes on without it: restart everywhere else.
  if (job != nullptr) {
    restarts_.BeginRestart(now, *job, now, absl::StrCat("node ", node.name, " quarantined"));
  }
}

absl::StatusOr<std::string> FailureHandler::Quarantine(absl::Time now, absl::string_view name,
                                                       absl::string_view reason, bool force) {
  if (!IsValidReason(reason)) {
    return absl::InvalidArgumentError(absl::StrCat("the reason must be ", kReasonRule));
  }
  const NodeIndex index = agents_.Find(name);
  if (index == kNoNode) return absl::NotFoundError(absl::StrCat("no node '", name, "'"));
  if (quarantine_.IsQuarantined(name)) {
    return absl::StrCat("node ", name, " already quarantined: ", quarantine_.ReasonOf(name));
  }
  if (!force && quarantine_.AtCap(agents_.size())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "quarantining node ", name, " would pass --quarantine-max-fraction ",
        quarantine_.options().max_fraction, ": ", quarantine_.quarantined_count(), " of ",
        agents_.size(), " nodes are quarantined already; force it to quarantine anyway"));
  }
  QuarantineNode(now, index, std::string(reason), "operator");
  return absl::StrCat("node ", name, " quarantined");
}

absl::StatusOr<std::string> FailureHandler::Unquarantine(absl::Time now, absl::string_view name) {
  const NodeIndex index = agents_.Find(name);
  if (index == kNoNode) return absl::NotFoundError(absl::StrCat("no node '", name, "'"));
  if (!quarantine_.IsQuarantined(name)) {
    return absl::StrCat("node ", name, " already not quarantined");
  }
  const NodeRecord& node = agents_.node(index);
  quarantine_.Unquarantine(node.name);
  const std::string reason = "quarantine lifted by an operator";
  decisions_.journal().nodes.push_back({node.name, false, reason, now, "operator"});
  // The scheduler is told to take the node back (after its fence, if that
  // has not run yet: the driver runs them in the order decided).
  if (options_.unfence) {
    decisions_.Fence({node.name, reason, now, FenceAction::kUnfence});
  } else {
    decisions_.DropFence(now, node.name);  // no longer to be fenced
  }
  JobEntry* job = jobs_.Find(node.job);
  decisions_.Emit(job, UnquarantineEvent(now, EventJobOf(job), node.name));
  return absl::StrCat("node ", name, " unquarantined");
}

}  // namespace trainsup
