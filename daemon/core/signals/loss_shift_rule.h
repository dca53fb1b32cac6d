#ifndef TRAINSUP_DAEMON_CORE_SIGNALS_LOSS_SHIFT_RULE_H_
#define TRAINSUP_DAEMON_CORE_SIGNALS_LOSS_SHIFT_RULE_H_

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "daemon/core/signals/series.h"
#include "daemon/core/signals/signal_options.h"

namespace trainsup {

// The loss moved to a higher level and stayed there.
struct LossShiftFinding {
  int64_t step = -1;        // the last step judged
  int64_t onset_step = -1;  // the first step of the run above the threshold
  double recent_min = 0;    // the least loss of the last `window` steps
  // Where the loss of the `baseline` steps before had got to by their last
  // step, along their trend; the trend's slope there (loss per step); the
  // noise about the trend (1.4826 x MAD of the residuals).
  double baseline_level = 0;
  double baseline_slope = 0;
  double baseline_sigma = 0;
  double threshold = 0;  // level + max(floor, sigmas x sigma)
};

// The loss level shift rule, on the generation's own steps (a new generation
// starts a new rule, so a resume at another level is never a shift): the
// minimum loss over the last `window` steps above where the `baseline` steps
// before them had got to, + max(floor, sigmas x 1.4826 x MAD about their
// trend). The trend is robust and local: a line through the medians of the
// baseline's quarters, so that a loss still falling (early training, a
// warm-up, a schedule's decay) neither lifts the level to the baseline's
// early values nor counts its fall as noise; the level is where the trend
// ended, or the median of the baseline's last window/2 steps if higher (a
// trend is never extrapolated into the window, so a fall that slows, or a
// smoothed loss that wanders, is not read as a rise). A spike shorter than
// the window never holds the minimum up; medians and MADs, so that spikes
// inside the baseline do not move it. Once shifted, the baseline is held
// until the loss comes back under the threshold (the shift is over) or for
// `baseline` steps (the new level becomes the baseline). Thread-compatible.
class LossShiftRule {
 public:
  // The baseline's trend is a line through the medians of this many parts.
  static constexpr size_t kTrendParts = 4;

  explicit LossShiftRule(const LossShiftOptions& options)
      : options_(options),
        losses_(static_cast<size_t>(options.window + options.baseline)) {}

  // The step's mean loss (finite), in step order; judged at once, O(baseline).
  void Observe(int64_t step, double loss);
  // The shift found since the last call, as first judged; at most one per
  // shift.
  std::optional<LossShiftFinding> Check();
  // True from a finding until the shift is over.
  bool shifted() const { return held_.has_value(); }

 private:
  // The baseline's trend at step `step` (extrapolated with its end parts'
  // slopes beyond their medians).
  double Trend(double step) const;
  // A shift that began with the newest step, if any.
  std::optional<LossShiftFinding> Judge();

  const LossShiftOptions options_;
  Series losses_;
  std::optional<LossShiftFinding> held_;  // the shift in force, its baseline
  int64_t held_since_step_ = -1;
  std::optional<LossShiftFinding> found_;  // judged, not yet taken by Check
  // The trend's knots, per Judge: each part's median at its mean step.
  std::array<double, kTrendParts> knot_steps_{};
  std::array<double, kTrendParts> knot_values_{};
  std::vector<double> scratch_;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_SIGNALS_LOSS_SHIFT_RULE_H_
