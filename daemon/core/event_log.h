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
#include "common/event_kinds.h"

namespace trainsup {

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

// The job an event is about and its generation when the event was made.
// Empty (generation 0) for an event about a node whose job the supervisor
// does not hold. A JobEntry's is EventJobOf (job_entry.h).
struct EventJob {
  std::string id;
  uint64_t generation = 0;
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
