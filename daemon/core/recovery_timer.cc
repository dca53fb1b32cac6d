#include "daemon/core/recovery_timer.h"

#include <algorithm>
#include <utility>

namespace trainsup {

void RecoveryTimer::Begin(absl::Time failed, absl::Time detected, std::string cause) {
  begun_ = true;
  failed_ = failed;
  detected_ = detected;
  stopped_ = absl::InfinitePast();
  started_ = absl::InfinitePast();
  cause_ = std::move(cause);
}

void RecoveryTimer::MarkStopped(absl::Time now) {
  if (begun_) stopped_ = now;
}

void RecoveryTimer::MarkStarted(absl::Time now) {
  if (begun_) started_ = now;
}

void RecoveryTimer::Abandon() { *this = RecoveryTimer(); }

std::optional<RecoveryFigures> RecoveryTimer::Complete(absl::Time first_heartbeat,
                                                       absl::Time first_progress) {
  if (!begun_ || started_ == absl::InfinitePast()) return std::nullopt;
  // A heartbeat from before the start (a rank of the old generation's last
  // words) does not end the relaunch.
  const absl::Time up = std::max(first_heartbeat, started_);
  RecoveryFigures f;
  f.detect = detected_ - failed_;
  f.stop = stopped_ - detected_;
  f.backoff = started_ - stopped_;
  f.relaunch = up - started_;
  f.first_step = first_progress - up;
  f.total = first_progress - failed_;
  Abandon();
  return f;
}

}  // namespace trainsup
