#ifndef TRAINSUP_DAEMON_CORE_EVENT_LOG_H_
#define TRAINSUP_DAEMON_CORE_EVENT_LOG_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace trainsup {

// What happened to a job. A fixed set, so metrics by kind stay bounded.
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
  kCount,              // number of kinds; not a kind
};
constexpr int kEventKindCount = static_cast<int>(EventKind::kCount);

// Stable snake_case name ("stall", "straggler_cleared", ...).
absl::string_view EventKindName(EventKind kind);
std::optional<EventKind> EventKindFromName(absl::string_view name);

struct Event {
  uint64_t id = 0;  // assigned by the log: 1, 2, 3, ...
  absl::Time time;
  EventKind kind = EventKind::kStall;
  std::string job;
  uint64_t generation = 0;
  std::optional<uint32_t> rank;  // absent when no rank is named
  std::string node;              // empty when no node is named
  std::string message;           // one line for a human
  // Key figures, e.g. {"threshold_seconds", 20}, {"p99_seconds", 0.15}.
  std::vector<std::pair<std::string, double>> figures;
};

// The most recent events, bounded. Thread-compatible.
class EventLog {
 public:
  // REQUIRES: capacity >= 1.
  explicit EventLog(size_t capacity);

  // Stamps the event with the next id and keeps it (dropping the oldest
  // when full). Returns the stored event.
  const Event& Append(Event event);

  // Puts back events read from the state store (ids kept, oldest first);
  // new events continue after the highest id.
  void Restore(const std::vector<Event>& events);

  // Events with id > `after_id`, oldest first, of `job` only unless empty,
  // at most `limit`.
  std::vector<Event> Since(uint64_t after_id, absl::string_view job = "",
                           size_t limit = SIZE_MAX) const;

  uint64_t last_id() const { return next_id_ - 1; }
  size_t size() const { return events_.size(); }

 private:
  const size_t capacity_;
  std::deque<Event> events_;
  uint64_t next_id_ = 1;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_EVENT_LOG_H_
