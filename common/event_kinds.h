#ifndef TRAINSUP_COMMON_EVENT_KINDS_H_
#define TRAINSUP_COMMON_EVENT_KINDS_H_

// What can happen to a job, as one table (event_kinds.cc): each kind's
// stable name, its family, the doc that lists its figures, the alert that
// pages on it and what `trainsupctl diagnose` tells the operator to do. The
// core makes events of these kinds (daemon/core/events.h: one typed
// constructor a kind); the metrics, the state store, `trainsupctl events
// --kind`, diagnose and the tests read the table, so a new kind is one
// enumerator, one row and its constructor. Pure; shared by every binary
// (the names are part of the wire: JSON, metric labels, the state store).

#include <optional>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace trainsup {

// A fixed set, so metrics by kind stay bounded. The order is the table's.
enum class EventKind {
  kStall = 0,          // no rank advanced for longer than the stall threshold
  kCrash,              // rank processes died (names the first to die)
  kStraggler,          // a rank's compute time stays above the job's
  kStragglerCleared,   // a straggler is back in line
  kStateChange,        // the job moved from one lifecycle state to another
  kRestart,            // a new generation was started everywhere
  kRecovered,          // the new generation completed its first step
  kHold,               // the restart cap was hit: no more restarts
  kResume,             // an operator lifted a hold
  kQuarantine,         // a node was quarantined
  kUnquarantine,       // a node's quarantine was lifted
  kQuarantineSkipped,  // a node qualified, but the fraction cap refused
  kFence,              // the fence command ran for a node
  kWorldSizeChanged,   // a generation runs with another world size than the last
  kCheckpointPlan,     // a new checkpoint plan was published to the ranks
  kNodeUnreachable,    // a node's agent has not been heard for --node-lost-after
  kNodeReachable,      // an unreachable node's agent is heard again
  kNodeLost,           // the job failed or stalled and a node it cannot hear is why
  kStacks,             // the Python stacks of a hung job's ranks, collected before the stop
  kPersistFailed,      // the state store refused a commit: its commands and fences were not acted on
  kUnfence,            // the unfence command ran for a node whose quarantine was lifted
  kVerdict,            // a failure the job itself gave a verdict on (an exit code, an exception, hb.verdict)
  // Training signals (docs/signals.md).
  kNotFinite,          // a NaN/Inf loss (or a gradient norm non-finite for too long)
  kLossShift,          // the loss moved to a higher level and stayed there
  kLossFlat,           // the loss did not go down from the start
  kGradSpike,          // a gradient norm far above its baseline
  kGradCollapse,       // gradient norms collapsed to about 0
  kThroughputChange,   // the step time (or a node's compute time) slowed in a step
  kThroughputDecay,    // ... or drifted slower
  kMemoryGrowth,       // device memory or host RSS rising steadily
  kReplicaMismatch,    // a rank disagrees with its replica group's majority
  kRendezvous,         // where a generation meets: the node hosting torchrun's rendezvous store
  kStartTimeout,       // a generation made no first step within --start-timeout and no rank reported
  kLeadership,         // under an election (docs/ha.md): this trainsupd began or stopped acting
  // Resume verification (docs/signals.md, "Resume").
  kResumedBehind,         // a generation resumed from before the last checkpoint seen complete
  kLrMismatch,            // ... with another learning rate than before at the same steps
  kDataPositionMismatch,  // ... with other samples/tokens per step than before
  kResumeSpike,           // ... with a loss far above the loss before at the same steps
  kCheckpointSuspect,  // a checkpoint failed soon after its load in two generations in a row
  kCheckpointFallback, // the next generations load the checkpoint before a suspect one
  kSpikeRollback,      // a loss spike: restart before it, skipping its batches
  kKilledByCriterion,  // a kill criterion was met: the job is stopped, not restarted (docs/kill-criteria.md)
  // Checkpoint saves (docs/signals.md, "Checkpoint saves").
  kCheckpointFailed,   // the script reported a failed save
  kCheckpointOverdue,  // no checkpoint committed for more than twice the planned interval
  // The hardware (docs/gpu.md).
  kGpuError,           // the GPU's driver reported an Xid on a node
  kCount,              // number of kinds; not a kind
};
constexpr int kEventKindCount = static_cast<int>(EventKind::kCount);

// The families of kinds, for people reading the table.
enum class EventFamily {
  kDetection,   // the job stopped making progress, or part of it is slow
  kLifecycle,   // what trainsup did about it: states, generations, holds
  kNode,        // a node: reachable or not, quarantined, fenced
  kCheckpoint,  // checkpoint plans, and checkpoints found bad
  kSignal,      // a training signal (the loss, gradients, throughput, memory, replicas)
  kResume,      // a generation resumed otherwise than the one before it ran
  kSupervisor,  // trainsupd itself: its state store, its leadership
};

struct EventKindInfo {
  EventKind kind;
  const char* name;  // stable snake_case: JSON, the `kind` label, the state store
  EventFamily family;
  // The doc (under docs/) that says what the kind means and lists its figures.
  const char* doc;
  // The alert of deploy/prometheus/trainsup-rules.yml that pages on the kind
  // (on its counter or on the gauge it moves); nullptr when none does.
  const char* alert;
  // What `trainsupctl diagnose` tells the operator to do when its signals
  // check finds the kind; nullptr when that check does not report it (the
  // other checks read detections and lifecycle from the job's state).
  const char* diagnose_fix;
};

// Every kind, in the enum's order (row i is kind i).
absl::Span<const EventKindInfo> EventKindTable();
// REQUIRES: kind != kCount.
const EventKindInfo& EventKindInfoOf(EventKind kind);

// The kind's stable name; "unknown" for kCount or a value out of range.
absl::string_view EventKindName(EventKind kind);
std::optional<EventKind> EventKindFromName(absl::string_view name);
absl::string_view EventFamilyName(EventFamily family);

}  // namespace trainsup

#endif  // TRAINSUP_COMMON_EVENT_KINDS_H_
