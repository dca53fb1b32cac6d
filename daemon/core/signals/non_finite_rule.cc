#include "daemon/core/signals/non_finite_rule.h"

#include <cmath>
#include <limits>

namespace trainsup {

void NonFiniteRule::ObserveLoss(absl::Time now, int64_t step, RankAt at, double loss) {
  if (std::isfinite(loss) || reported_) return;
  if (!loss_ || step < loss_->step) {
    loss_ = NonFiniteFinding();
    loss_->step = loss_->first_step = step;
    loss_->value = loss;
    loss_->seen = now;
    loss_seen_ = now;
  }
  if (step != loss_->step) return;
  ++loss_->ranks_at_step;
  if (loss_->ranks.size() < kNamed) loss_->ranks.push_back(at);
}

void NonFiniteRule::ObserveStep(const StepSignals& s) {
  if (s.loss_nonfinite > 0) ++loss_steps_;
  const bool overflow = s.grad_nonfinite > 0 && s.loss_nonfinite == 0;
  if (!overflow) {
    run_ = 0;
    last_step_ = s.step;
    return;
  }
  ++overflow_steps_;
  // A run is of consecutive steps the job reported.
  if (run_ == 0 || s.step != last_step_ + 1) {
    run_ = 0;
    run_first_ = s.step;
    run_first_at_ = s.grad_nonfinite_at;
    run_first_ranks_ = s.grad_nonfinite;
  }
  ++run_;
  last_step_ = s.step;
  if (run_ < options_.grad_steps || grad_ || reported_) return;
  grad_ = NonFiniteFinding();
  grad_->grad_norm = true;
  grad_->step = s.step;
  grad_->first_step = run_first_;
  grad_->consecutive_steps = run_;
  grad_->ranks = {run_first_at_};
  grad_->ranks_at_step = run_first_ranks_;
  grad_->value = std::numeric_limits<double>::quiet_NaN();
  grad_->seen = s.time;
}

std::optional<NonFiniteFinding> NonFiniteRule::Check(absl::Time now) {
  if (reported_ || options_.action == NonFiniteAction::kOff) return std::nullopt;
  std::optional<NonFiniteFinding> found;
  if (loss_ && now - loss_seen_ >= options_.settle) {
    found = loss_;
  } else if (grad_ && !loss_) {
    found = grad_;
  }
  if (found) reported_ = true;
  return found;
}

}  // namespace trainsup
