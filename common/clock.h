#ifndef TRAINSUP_COMMON_CLOCK_H_
#define TRAINSUP_COMMON_CLOCK_H_

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace trainsup {

// The one seam through which time enters a process. The pure core never reads
// a clock: the driver asks a Clock and passes `now` in.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
};

// Monotonic time expressed as wall time: the wall clock read once at
// construction plus the steady clock's progress since. It never jumps (NTP
// steps do not move it), so liveness deadlines are safe, and it stays close
// enough to wall time to export as a Prometheus *_timestamp_seconds.
class MonotonicClock : public Clock {
 public:
  MonotonicClock();
  absl::Time Now() const override;

 private:
  const absl::Time wall_at_start_;
  const int64_t steady_ns_at_start_;
};

// A clock that only moves when told. For tests. Thread-safe.
class FakeClock : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'700'000'000)) : now_(start) {}
  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_;
};

// The steady clock alone, for measuring intervals inside one process.
absl::Duration SteadyNow();

}  // namespace trainsup

#endif  // TRAINSUP_COMMON_CLOCK_H_
