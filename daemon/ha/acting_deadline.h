#ifndef TRAINSUP_DAEMON_HA_ACTING_DEADLINE_H_
#define TRAINSUP_DAEMON_HA_ACTING_DEADLINE_H_

#include <atomic>
#include <cstdint>

#include "absl/time/time.h"
#include "common/clock.h"

namespace trainsup {

// The time until which an elected instance may act: its lease's renewal
// deadline (Leadership::lease_valid_until) while it leads, the infinite past
// otherwise. The election moves it; whatever acts checks it at the moment it
// acts, so that a process that was paused (SIGSTOP, a VM freeze) past its
// lease stops at once, before any thread of the election has run again.
// Thread-safe: one atomic and a clock read.
class ActingDeadline {
 public:
  // `clock` (not owned) is the clock the deadline is set on.
  explicit ActingDeadline(const Clock* clock) : clock_(clock) {}

  void Set(absl::Time until) {
    until_ns_.store(until == absl::InfinitePast() ? INT64_MIN : absl::ToUnixNanos(until),
                    std::memory_order_release);
  }
  bool Allows() const {
    const int64_t until = until_ns_.load(std::memory_order_acquire);
    return until != INT64_MIN && absl::ToUnixNanos(clock_->Now()) < until;
  }

 private:
  const Clock* const clock_;
  std::atomic<int64_t> until_ns_{INT64_MIN};
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_HA_ACTING_DEADLINE_H_
