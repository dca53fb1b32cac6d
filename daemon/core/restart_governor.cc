#include "daemon/core/restart_governor.h"

#include <algorithm>

namespace trainsup {

int RestartGovernor::RecentAt(absl::Time now) const {
  int n = 0;
  for (absl::Time t : restarts_) {
    // Within the window, and not before the last forgiveness (a restart at
    // the very moment of a resume counts).
    if (t > now - policy_.window && t >= forgiven_before_ && t <= now) ++n;
  }
  return n;
}

RestartGovernor::Decision RestartGovernor::Decide(absl::Time now) const {
  Decision d;
  d.recent = RecentAt(now);
  d.allowed = d.recent < policy_.limit;
  if (!d.allowed) return d;
  d.backoff = policy_.backoff_initial;
  for (int i = 0; i < d.recent && d.backoff < policy_.backoff_max; ++i) d.backoff *= 2;
  d.backoff = std::min(d.backoff, policy_.backoff_max);
  return d;
}

void RestartGovernor::RecordRestart(absl::Time time) {
  restarts_.insert(std::upper_bound(restarts_.begin(), restarts_.end(), time), time);
  // Keep memory bounded: what is older than the window never counts again.
  while (restarts_.size() > static_cast<size_t>(policy_.limit) + 1 &&
         restarts_.front() <= restarts_.back() - policy_.window) {
    restarts_.pop_front();
  }
}

void RestartGovernor::Forgive(absl::Time now) { forgiven_before_ = now; }

}  // namespace trainsup
