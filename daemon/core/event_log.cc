#include "daemon/core/event_log.h"

#include <algorithm>

namespace trainsup {

absl::string_view EventKindName(EventKind kind) {
  switch (kind) {
    case EventKind::kStall:
      return "stall";
    case EventKind::kCrash:
      return "crash";
    case EventKind::kStraggler:
      return "straggler";
    case EventKind::kStragglerCleared:
      return "straggler_cleared";
    case EventKind::kStateChange:
      return "state";
    case EventKind::kRestart:
      return "restart";
    case EventKind::kRecovered:
      return "recovered";
    case EventKind::kHold:
      return "hold";
    case EventKind::kResume:
      return "resume";
    case EventKind::kQuarantine:
      return "quarantine";
    case EventKind::kUnquarantine:
      return "unquarantine";
    case EventKind::kQuarantineSkipped:
      return "quarantine_skipped";
    case EventKind::kFence:
      return "fence";
    case EventKind::kWorldSizeChanged:
      return "world_size_changed";
    case EventKind::kCheckpointPlan:
      return "checkpoint_plan";
    case EventKind::kNodeUnreachable:
      return "node_unreachable";
    case EventKind::kNodeReachable:
      return "node_reachable";
    case EventKind::kNodeLost:
      return "node_lost";
    case EventKind::kStacks:
      return "stacks";
    case EventKind::kPersistFailed:
      return "persist_failed";
    case EventKind::kUnfence:
      return "unfence";
    case EventKind::kVerdict:
      return "verdict";
    case EventKind::kNotFinite:
      return "not_finite";
    case EventKind::kLossShift:
      return "loss_shift";
    case EventKind::kLossFlat:
      return "loss_flat";
    case EventKind::kGradSpike:
      return "grad_spike";
    case EventKind::kGradCollapse:
      return "grad_collapse";
    case EventKind::kThroughputChange:
      return "throughput_change";
    case EventKind::kThroughputDecay:
      return "throughput_decay";
    case EventKind::kMemoryGrowth:
      return "memory_growth";
    case EventKind::kReplicaMismatch:
      return "replica_mismatch";
    case EventKind::kRendezvous:
      return "rendezvous";
    case EventKind::kStartTimeout:
      return "start_timeout";
    case EventKind::kLeadership:
      return "leadership";
    case EventKind::kResumedBehind:
      return "resumed_behind";
    case EventKind::kLrMismatch:
      return "lr_mismatch";
    case EventKind::kDataPositionMismatch:
      return "data_position_mismatch";
    case EventKind::kResumeSpike:
      return "resume_spike";
    case EventKind::kCheckpointSuspect:
      return "checkpoint_suspect";
    case EventKind::kCheckpointFallback:
      return "checkpoint_fallback";
    case EventKind::kSpikeRollback:
      return "spike_rollback";
    case EventKind::kKilledByCriterion:
      return "killed_by_criterion";
    case EventKind::kCount:
      break;
  }
  return "unknown";
}

EventLog::EventLog(size_t capacity) : capacity_(std::max<size_t>(1, capacity)) {}

const Event& EventLog::Append(Event event) {
  event.id = next_id_++;
  if (events_.size() >= capacity_) events_.pop_front();
  events_.push_back(std::move(event));
  return events_.back();
}

void EventLog::Restore(const std::vector<Event>& events) {
  for (const Event& e : events) {
    if (!events_.empty() && e.id <= events_.back().id) continue;  // keep ids increasing
    if (events_.size() >= capacity_) events_.pop_front();
    events_.push_back(e);
    next_id_ = e.id + 1;
  }
}

std::vector<Event> EventLog::Since(uint64_t after_id, absl::string_view job, size_t limit) const {
  std::vector<Event> out;
  auto it = std::upper_bound(events_.begin(), events_.end(), after_id,
                             [](uint64_t id, const Event& e) { return id < e.id; });
  for (; it != events_.end() && out.size() < limit; ++it) {
    if (job.empty() || it->job == job) out.push_back(*it);
  }
  return out;
}

std::optional<EventKind> EventKindFromName(absl::string_view name) {
  for (int k = 0; k < kEventKindCount; ++k) {
    if (EventKindName(static_cast<EventKind>(k)) == name) return static_cast<EventKind>(k);
  }
  return std::nullopt;
}

}  // namespace trainsup
