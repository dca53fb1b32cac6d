#ifndef TRAINSUP_DAEMON_CORE_REPORT_CADENCE_H_
#define TRAINSUP_DAEMON_CORE_REPORT_CADENCE_H_

#include <cstdint>
#include <optional>

#include "absl/time/time.h"

namespace trainsup {

struct ReportCadenceOptions {
  // Reports per second the supervisor wants from all agents together; 0
  // turns adaptive reporting off (agents keep their own --report-interval).
  // Default: 12,500/s, so that 12,500 nodes (100,000 ranks at 8 per node)
  // report every second, and up to 2,500 nodes keep the 200ms floor, as
  // before: the run at 10,000 ranks (6,250 reports/s) was healthy, 25,000/s
  // at 12,500 nodes was not.
  double budget = 12500;
  // The interval never leaves [min, max]. Defaults: 200ms (the agents' own
  // default), 5s (hangs and lost nodes are still seen within seconds).
  absl::Duration min_interval = absl::Milliseconds(200);
  absl::Duration max_interval = absl::Seconds(5);
  // Hysteresis: the interval changes only when the wanted one differs from
  // the one in force by at least this fraction, and at most once per `hold`,
  // so that agents connecting one by one do not cause a broadcast each.
  // Defaults: 0.2, 5s.
  double min_change = 0.2;
  absl::Duration hold = absl::Seconds(5);
};

// How often agents report: the number of connected agents over the budget,
// clamped to [min, max], rounded to 100ms, changed with hysteresis. Pure.
class ReportCadence {
 public:
  explicit ReportCadence(ReportCadenceOptions options);

  // The interval `connected` agents would want, before hysteresis.
  absl::Duration Wanted(uint32_t connected) const;

  // Re-decides for `connected` agents at `now`; returns the new interval
  // when it changed (every agent is to be told), nullopt otherwise.
  std::optional<absl::Duration> Update(absl::Time now, uint32_t connected);

  // The interval in force, which the welcome carries; zero when adaptive
  // reporting is off (agents keep their own).
  absl::Duration current() const { return current_; }
  bool enabled() const { return options_.budget > 0; }
  const ReportCadenceOptions& options() const { return options_; }

 private:
  const ReportCadenceOptions options_;
  absl::Duration current_;
  absl::Time changed_at_ = absl::InfinitePast();
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_REPORT_CADENCE_H_
