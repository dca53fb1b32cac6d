#ifndef TRAINSUP_DAEMON_CORE_SIGNALS_NON_FINITE_RULE_H_
#define TRAINSUP_DAEMON_CORE_SIGNALS_NON_FINITE_RULE_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/time/time.h"
#include "daemon/core/signals/signal_options.h"
#include "daemon/core/signals/step_aggregator.h"

namespace trainsup {

// A generation's training went non-finite.
struct NonFiniteFinding {
  // false: a rank's loss was NaN or infinite at `step`; true: the gradient
  // norm was non-finite for `consecutive_steps` steps in a row up to `step`
  // (every loss finite), beginning at `first_step`.
  bool grad_norm = false;
  int64_t step = -1;
  int64_t first_step = -1;
  int consecutive_steps = 0;
  // The first ranks with it at the first step (at most kNamed), and how
  // many had it there.
  std::vector<RankAt> ranks;
  uint32_t ranks_at_step = 0;
  double value = 0;  // the first non-finite loss (NaN, +inf, -inf)
  absl::Time seen;   // when it was first heard of
};

// A NaN or infinite loss: the first rank(s) and step, reported once per
// generation, `settle` after it was first seen (so that a rank at an earlier
// step, whose report is still on its way, is named first). A non-finite
// gradient norm with finite losses is an fp16 overflow step (skipped by
// dynamic loss scaling): counted, and non-finite only after
// `grad_steps` steps in a row. One rule per generation; thread-compatible.
class NonFiniteRule {
 public:
  static constexpr size_t kNamed = 4;

  explicit NonFiniteRule(const NonFiniteOptions& options) : options_(options) {}

  // `at` sent `loss` at `step` (every STEP with a loss; O(1)).
  void ObserveLoss(absl::Time now, int64_t step, RankAt at, double loss);
  // A step's record, in step order.
  void ObserveStep(const StepSignals& s);
  // The finding, once per generation, when it is due.
  std::optional<NonFiniteFinding> Check(absl::Time now);

  // Finalized steps with a non-finite loss, and overflow steps (a
  // non-finite gradient norm with finite losses), in this generation.
  uint64_t loss_steps() const { return loss_steps_; }
  uint64_t overflow_steps() const { return overflow_steps_; }
  bool reported() const { return reported_; }
  // The least step with a non-finite loss heard so far, reported or not
  // (a crash may stop the generation before its settle time).
  std::optional<int64_t> first_loss_step() const {
    return loss_ ? std::optional<int64_t>(loss_->first_step) : std::nullopt;
  }

 private:
  const NonFiniteOptions options_;
  std::optional<NonFiniteFinding> loss_;  // the earliest non-finite loss seen
  absl::Time loss_seen_;
  std::optional<NonFiniteFinding> grad_;  // a run of overflow steps long enough
  int run_ = 0;                           // overflow steps in a row
  int64_t run_first_ = -1;
  RankAt run_first_at_;
  uint32_t run_first_ranks_ = 0;
  int64_t last_step_ = -1;
  uint64_t loss_steps_ = 0;
  uint64_t overflow_steps_ = 0;
  bool reported_ = false;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_SIGNALS_NON_FINITE_RULE_H_
