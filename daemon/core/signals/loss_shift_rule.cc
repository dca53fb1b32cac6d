#include "daemon/core/signals/loss_shift_rule.h"

#include <algorithm>

namespace trainsup {

void LossShiftRule::Observe(int64_t step, double loss) { losses_.Add(step, loss); }

std::optional<LossShiftFinding> LossShiftRule::Check() {
  if (!losses_.full()) return std::nullopt;
  const size_t baseline = static_cast<size_t>(options_.baseline);
  double recent_min = losses_.value(baseline);
  for (size_t i = baseline; i < losses_.size(); ++i) recent_min = std::min(recent_min, losses_.value(i));
  const int64_t step = losses_.back_step();

  if (held_) {
    // Over: back under the threshold, or long enough to be the new level.
    if (recent_min <= held_->threshold || step - held_since_step_ >= options_.baseline) {
      held_.reset();
    }
    return std::nullopt;
  }
  losses_.Values(0, baseline, &scratch_);
  const RobustSpread spread = RobustSpreadOf(scratch_);
  const double threshold =
      spread.median + std::max(options_.floor, options_.sigmas * spread.sigma);
  if (!(recent_min > threshold)) return std::nullopt;

  LossShiftFinding f;
  f.step = step;
  f.recent_min = recent_min;
  f.baseline_median = spread.median;
  f.baseline_sigma = spread.sigma;
  f.threshold = threshold;
  // The run above the threshold that ends now began at least `window` ago.
  size_t first = baseline;
  while (first > 0 && losses_.value(first - 1) > threshold) --first;
  f.onset_step = losses_.step(first);
  held_ = f;
  held_since_step_ = step;
  return f;
}

}  // namespace trainsup
