#include "common/clock.h"

#include <chrono>

#include "absl/time/clock.h"

namespace trainsup {
namespace {

int64_t SteadyNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

MonotonicClock::MonotonicClock() : wall_at_start_(absl::Now()), steady_ns_at_start_(SteadyNanos()) {}

absl::Time MonotonicClock::Now() const {
  return wall_at_start_ + absl::Nanoseconds(SteadyNanos() - steady_ns_at_start_);
}

absl::Duration SteadyNow() { return absl::Nanoseconds(SteadyNanos()); }

}  // namespace trainsup
