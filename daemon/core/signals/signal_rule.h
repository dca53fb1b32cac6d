#ifndef TRAINSUP_DAEMON_CORE_SIGNALS_SIGNAL_RULE_H_
#define TRAINSUP_DAEMON_CORE_SIGNALS_SIGNAL_RULE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "daemon/core/checkpoint_schedule.h"
#include "daemon/core/event_log.h"
#include "daemon/core/heartbeat.h"
#include "daemon/core/job.h"
#include "daemon/core/signals/step_aggregator.h"

namespace trainsup {

// What is done about a signal rule's finding besides its event.
enum class SignalAction {
  kReport,      // the event only
  kChargeNode,  // and a failure charged to the finding's node toward its
                // quarantine; the job goes on
};

// A rule's finding: its event, whole (kind, job, generation, rank, node's
// name, figures, message), and what is done about it.
struct SignalFinding {
  Event event;
  SignalAction action = SignalAction::kReport;
  // kChargeNode: the node charged, and the failure's text in its record.
  NodeIndex node = kNoNode;
  std::string failure;
};

// A checkpoint's outcome: committed (every rank reporting in the generation
// ended its save), or a save a rank reported failed (CHECKPOINT_END with an
// exception: the `with hb.checkpointing(...)` block raised, or
// hb.checkpoint_failed(...) for a write that failed later).
struct CheckpointOutcome {
  int64_t step = 0;
  bool committed = false;
  // A failed save: the rank that reported it, and why.
  RankAt at;
  std::string error;
};

// What a rule's sweep reads besides its own state: the time, the job (its
// ranks' nodes), the job and generation its events are about, the names
// of nodes, whether trainsupd only observes (--observe-only: a finding
// says it charged nothing), and the job's checkpoint plans as the ranks hold
// them. `node_name` refers to a callable that must outlive the sweep (a
// named lambda, not a temporary).
struct SignalSweep {
  absl::Time now;
  const Job& job;
  EventJob event_job;
  absl::FunctionRef<const std::string&(NodeIndex)> node_name;
  bool observe_only = false;
  absl::Span<const CheckpointPlanSpec> plans = {};

  // The name of the node `rank` reports from ("" when none).
  const std::string& NodeOfRank(uint32_t rank) const { return node_name(job.rank(rank).node); }
};

// A training-signal rule as SignalMonitor runs it (docs/signals.md): made
// for one generation from the options in force, fed what the job's steps
// show, asked at each sweep what it found. Every rule of the registry
// (signal_rules.h) is one of these; the job-stopping rules (a non-finite
// loss, a loss spike's rollback, the resume checks) are not, because what
// they do reads the job's checkpoints and its last failure (SignalDetection).
// Thread-compatible.
class SignalRule {
 public:
  virtual ~SignalRule() = default;

  // A rank's STEP as applied, before its step is complete across the job
  // (a rule that follows ranks or nodes rather than the job's aggregate).
  virtual void ObserveRank(absl::Time now, const RankAt& at, const Heartbeat& hb) {}
  // A step's aggregate over the job's ranks, in step order (every rank
  // reporting heard it, or it expired).
  virtual void ObserveStep(const StepSignals& step) {}
  // A replica group whose ranks did not all send the same digest at a step.
  virtual void ObserveDisagreement(const ReplicaDisagreement& d) {}
  // A checkpoint committed or a save that failed.
  virtual void ObserveCheckpoint(const CheckpointOutcome& c) {}
  // Appends what it found since the last sweep.
  virtual void Sweep(const SignalSweep& sweep, std::vector<SignalFinding>& out) = 0;
  // Its state as named gauges for the read model (docs/signals.md lists
  // each), e.g. {"loss_flat", 1}; a gauge not known yet is left out.
  virtual void Gauges(std::vector<std::pair<std::string, double>>& out) const {}
  // The supervisor renumbered its nodes: `move` rewrites each index it
  // holds (kNoNode: the node is gone).
  virtual void MoveNodes(absl::FunctionRef<void(NodeIndex&)> move) {}
};

// An event reported as it is.
inline SignalFinding Report(Event event) {
  SignalFinding f;
  f.event = std::move(event);
  return f;
}

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_SIGNALS_SIGNAL_RULE_H_
