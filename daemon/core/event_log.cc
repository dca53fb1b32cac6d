#include "daemon/core/event_log.h"

#include <algorithm>

namespace trainsup {

absl::string_view EventKindName(EventKind kind) {
  switch (kind) {
    case EventKind::kStall:
      return "stall";
    case EventKind::kStallCleared:
      return "stall_cleared";
    case EventKind::kCrash:
      return "crash";
    case EventKind::kStraggler:
      return "straggler";
    case EventKind::kStragglerCleared:
      return "straggler_cleared";
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

std::vector<Event> EventLog::Since(uint64_t after_id, absl::string_view job, size_t limit) const {
  std::vector<Event> out;
  // Ids are consecutive: skip straight to the first one after `after_id`.
  size_t start = 0;
  if (!events_.empty() && after_id >= events_.front().id) {
    start = static_cast<size_t>(after_id - events_.front().id + 1);
  }
  for (size_t i = start; i < events_.size() && out.size() < limit; ++i) {
    if (job.empty() || events_[i].job == job) out.push_back(events_[i]);
  }
  return out;
}

}  // namespace trainsup
