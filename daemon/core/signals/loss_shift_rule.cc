#include "daemon/core/signals/loss_shift_rule.h"

#include <algorithm>
#include <utility>

namespace trainsup {

void LossShiftRule::Observe(int64_t step, double loss) {
  losses_.Add(step, loss);
  // Judged at every step, not only when the sweep asks: a short spike
  // enters the baseline's last part a few steps after it fills the window,
  // and from then on it raises the level it is judged against. A sweep
  // that takes five steps at once could miss the steps between.
  if (std::optional<LossShiftFinding> f = Judge(); f && !found_) found_ = f;
}

std::optional<LossShiftFinding> LossShiftRule::Check() { return std::exchange(found_, std::nullopt); }

double LossShiftRule::Trend(double step) const {
  // The segment between two knots that holds `step`, or an end segment.
  size_t i = 0;
  while (i + 2 < kTrendParts && step > knot_steps_[i + 1]) ++i;
  const double run = knot_steps_[i + 1] - knot_steps_[i];
  const double slope = run > 0 ? (knot_values_[i + 1] - knot_values_[i]) / run : 0;
  return knot_values_[i] + slope * (step - knot_steps_[i]);
}

std::optional<LossShiftFinding> LossShiftRule::Judge() {
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
  // The baseline's trend: the median of each part at the part's mean step
  // (baseline >= 8: every part holds 2 steps or more).
  const size_t part = baseline / kTrendParts;
  for (size_t p = 0; p < kTrendParts; ++p) {
    const size_t from = p * part;
    const size_t to = p + 1 == kTrendParts ? baseline : from + part;
    double steps = 0;
    for (size_t i = from; i < to; ++i) steps += static_cast<double>(losses_.step(i));
    knot_steps_[p] = steps / static_cast<double>(to - from);
    knot_values_[p] = losses_.Median(from, to, &scratch_);
  }
  scratch_.clear();
  for (size_t i = 0; i < baseline; ++i) {
    scratch_.push_back(losses_.value(i) - Trend(static_cast<double>(losses_.step(i))));
  }
  const RobustSpread noise = RobustSpreadOf(scratch_);
  const double last = static_cast<double>(losses_.step(baseline - 1));
  const size_t tail = std::min(baseline, std::max<size_t>(3, static_cast<size_t>(options_.window) / 2));
  const double level = std::max(Trend(last) + noise.median,
                                losses_.Median(baseline - tail, baseline, &scratch_));
  const double threshold = level + std::max(options_.floor, options_.sigmas * noise.sigma);
  if (!(recent_min > threshold)) return std::nullopt;

  LossShiftFinding f;
  f.step = step;
  f.recent_min = recent_min;
  f.baseline_level = level;
  f.baseline_slope = Trend(last) - Trend(last - 1);
  f.baseline_sigma = noise.sigma;
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
