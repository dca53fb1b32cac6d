#ifndef TRAINSUP_DAEMON_CORE_RECOVERY_TIMER_H_
#define TRAINSUP_DAEMON_CORE_RECOVERY_TIMER_H_

#include <optional>
#include <string>

#include "absl/time/time.h"

namespace trainsup {

// Where the time of one recovery went, failure -> first step of the next
// generation: each phase's duration, adding up to `total`.
struct RecoveryFigures {
  absl::Duration detect;      // failure (a death, or a hang's last progress) -> decision
  absl::Duration stop;        // decision -> every agent stopped (or the stop timeout)
  absl::Duration backoff;     // stopped -> start sent
  absl::Duration relaunch;    // start sent -> the new generation's first heartbeat
  absl::Duration first_step;  // first heartbeat -> first completed step
  absl::Duration total;
};

// Times one restart in progress, from the failure to the next generation's
// first step, for the `recovered` event and the planner's R. Pure;
// thread-compatible.
class RecoveryTimer {
 public:
  // A failure at `failed` was decided on at `detected`; a restart begins.
  void Begin(absl::Time failed, absl::Time detected, std::string cause);
  // Every agent stopped (or the stop timed out) at `now`.
  void MarkStopped(absl::Time now);
  // The next generation's start was sent at `now`.
  void MarkStarted(absl::Time now);
  // The restart will not happen (held, failed): forget it.
  void Abandon();

  bool active() const { return begun_; }
  // Why the restart began; "" when none is under way.
  const std::string& cause() const { return cause_; }

  // The new generation made its first heartbeat and first step: the figures
  // of the recovery, once; nullopt when no started restart is under way.
  std::optional<RecoveryFigures> Complete(absl::Time first_heartbeat, absl::Time first_progress);

 private:
  bool begun_ = false;
  absl::Time failed_;
  absl::Time detected_;
  absl::Time stopped_ = absl::InfinitePast();
  absl::Time started_ = absl::InfinitePast();
  std::string cause_;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_RECOVERY_TIMER_H_
