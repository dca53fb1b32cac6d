#ifndef TRAINSUP_DAEMON_CORE_SIGNALS_GRAD_NORM_RULE_H_
#define TRAINSUP_DAEMON_CORE_SIGNALS_GRAD_NORM_RULE_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "daemon/core/signals/series.h"
#include "daemon/core/signals/signal_options.h"
#include "daemon/core/signals/step_aggregator.h"

namespace trainsup {

// A gradient norm far above its baseline (often ahead of a loss spike), or
// collapsed to about 0 for a while.
struct GradNormFinding {
  bool collapse = false;  // false: a spike
  int64_t step = -1;      // the spike's step; the collapse's last step
  int64_t first_step = -1;  // the collapse's first step (the spike's own)
  double grad_norm = 0;
  double baseline_median = 0;
  double ratio = 0;  // grad_norm / baseline_median (0 when the baseline is 0)
  int steps = 1;     // collapsed steps in a row
  RankAt at;         // the rank with the largest gradient norm at `step`
};

// Spike: a step's gradient norm (the largest of its ranks') above
// `spike_factor` x the median of the last `baseline` ones. Collapse:
// `collapse_steps` steps in a row at or below `collapse_ratio` x that median,
// or exactly 0. Spikes and collapsed steps stay out of the baseline; no rule
// judges before it holds half of `baseline` steps (a generation's first
// steps, whose gradients fall fast, set it). A spike is reported once until
// 20 normal steps in a row; after a collapse the baseline starts over.
// Non-finite norms are the non-finite rule's. Thread-compatible.
class GradNormRule {
 public:
  // Normal steps in a row after which a new spike is reported.
  static constexpr int kRearmSteps = 20;

  explicit GradNormRule(const GradNormOptions& options)
      : options_(options), norms_(static_cast<size_t>(options.baseline)) {}

  // The step's largest finite gradient norm (at `at`), in step order.
  void Observe(int64_t step, double grad_norm, RankAt at);
  // The findings since the last call (at most a spike and a collapse).
  std::vector<GradNormFinding> Take();

 private:
  double Baseline(int64_t step);

  const GradNormOptions options_;
  Series norms_;
  double median_ = 0;
  int64_t median_step_ = -1;  // when the median was last computed
  bool spike_armed_ = true;
  int normal_run_ = 0;
  int collapse_run_ = 0;
  int64_t collapse_first_ = -1;
  bool collapse_reported_ = false;
  std::vector<GradNormFinding> found_;
  std::vector<double> scratch_;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_SIGNALS_GRAD_NORM_RULE_H_
