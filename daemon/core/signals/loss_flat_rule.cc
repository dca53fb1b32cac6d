#include "daemon/core/signals/loss_flat_rule.h"

#include <algorithm>
#include <cmath>

namespace trainsup {

void LossFlatRule::Observe(int64_t step, double loss) {
  if (judged_) return;
  if (first_step_ < 0) {
    first_step_ = step;
    // A resume from a later step: not judged.
    if (first_step_ >= options_.steps) judged_ = true;
  }
  if (judged_ || step >= first_step_ + options_.steps) return;
  const int quarter = std::max(1, options_.steps / 4);
  if (seen_ < quarter) first_sum_ += loss;
  if (seen_ >= options_.steps - quarter) last_sum_ += loss;
  ++seen_;
  last_step_ = step;
  if (seen_ < options_.steps) return;
  judged_ = true;
  LossFlatFinding f;
  f.step = last_step_;
  f.first_step = first_step_;
  f.first_loss = first_sum_ / quarter;
  f.last_loss = last_sum_ / quarter;
  f.steps = options_.steps;
  if (f.first_loss == 0) return;  // a loss of exactly 0 has nowhere to go
  f.drop = (f.first_loss - f.last_loss) / std::fabs(f.first_loss);
  if (f.drop >= options_.min_drop) return;
  flat_ = true;
  found_ = f;
}

std::optional<LossFlatFinding> LossFlatRule::Check() {
  std::optional<LossFlatFinding> f = found_;
  found_.reset();
  return f;
}

}  // namespace trainsup
