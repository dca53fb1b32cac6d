#include "daemon/core/event_log.h"

#include <algorithm>

namespace trainsup {

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

}  // namespace trainsup
