#ifndef TRAINSUP_DAEMON_CORE_RESTART_GOVERNOR_H_
#define TRAINSUP_DAEMON_CORE_RESTART_GOVERNOR_H_

#include <deque>

#include "absl/time/time.h"

namespace trainsup {

struct RestartPolicy {
  // At most `limit` restarts within any `window`; the next failure holds the
  // job instead of restarting it. Defaults: 5 per 1h.
  int limit = 5;
  absl::Duration window = absl::Hours(1);
  // Wait before restart k (k restarts already in the window): initial x 2^k,
  // at most `backoff_max`. Defaults: 5s, 5m.
  absl::Duration backoff_initial = absl::Seconds(5);
  absl::Duration backoff_max = absl::Minutes(5);
};

// Caps a job's restart rate, so that a job that always fails is held for a
// human instead of looping. Pure; thread-compatible.
class RestartGovernor {
 public:
  explicit RestartGovernor(RestartPolicy policy) : policy_(policy) {}

  struct Decision {
    bool allowed = false;
    absl::Duration backoff;  // when allowed: wait this long before restarting
    int recent = 0;          // restarts within the window before now
  };
  // Whether one more restart may happen at `now`, and after what wait.
  Decision Decide(absl::Time now) const;

  // A restart happened at `time` (times may come in any order at restore).
  void RecordRestart(absl::Time time);

  // The operator lifted a hold: restarts before `now` no longer count.
  // Persisted with the job, so that the resume outlives a supervisor restart.
  void Forgive(absl::Time now);
  absl::Time forgiven_before() const { return forgiven_before_; }

  const RestartPolicy& policy() const { return policy_; }

 private:
  int RecentAt(absl::Time now) const;

  const RestartPolicy policy_;
  std::deque<absl::Time> restarts_;  // sorted
  absl::Time forgiven_before_ = absl::InfinitePast();
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_RESTART_GOVERNOR_H_
