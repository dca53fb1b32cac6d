#ifndef TRAINSUP_DAEMON_CORE_SIGNALS_LOSS_SHIFT_RULE_H_
#define TRAINSUP_DAEMON_CORE_SIGNALS_LOSS_SHIFT_RULE_H_

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
  double baseline_median = 0;
  double baseline_sigma = 0;  // 1.4826 x MAD
  double threshold = 0;       // median + max(floor, sigmas x sigma)
};

// The loss level shift rule, on the generation's own steps (a new generation
// starts a new rule, so a resume at another level is never a shift): the
// minimum loss over the last `window` steps above the median of the
// `baseline` steps before them + max(floor, sigmas x 1.4826 x MAD). A spike
// shorter than the window never holds the minimum up; median and MAD, not
// mean and standard deviation, so that spikes inside the baseline do not
// move it. Once shifted, the baseline is held until the loss comes back
// under the threshold (the shift is over) or for `baseline` steps (the new
// level becomes the baseline). Thread-compatible.
class LossShiftRule {
 public:
  explicit LossShiftRule(const LossShiftOptions& options)
      : options_(options),
        losses_(static_cast<size_t>(options.window + options.baseline)) {}

  // The step's mean loss (finite), in step order.
  void Observe(int64_t step, double loss);
  // A shift that began since the last finding; at most one per shift.
  std::optional<LossShiftFinding> Check();
  // True from a finding until the shift is over.
  bool shifted() const { return held_.has_value(); }

 private:
  const LossShiftOptions options_;
  Series losses_;
  std::optional<LossShiftFinding> held_;  // the shift in force, its baseline
  int64_t held_since_step_ = -1;
  std::vector<double> scratch_;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_SIGNALS_LOSS_SHIFT_RULE_H_
