#ifndef TRAINSUP_DAEMON_CORE_SIGNALS_LOSS_FLAT_RULE_H_
#define TRAINSUP_DAEMON_CORE_SIGNALS_LOSS_FLAT_RULE_H_

#include <cstdint>
#include <optional>

#include "daemon/core/signals/signal_options.h"

namespace trainsup {

// The loss did not go down from the start.
struct LossFlatFinding {
  int64_t step = -1;        // the last step of the window
  int64_t first_step = -1;  // the generation's first
  double first_loss = 0;    // mean of the window's first quarter
  double last_loss = 0;     // mean of its last quarter
  double drop = 0;          // (first - last) / |first|
  int steps = 0;
};

// A generation that starts near step 0 (a fresh run, not a resume: late in
// training a flat loss is normal) must bring its loss down: over its first
// `steps` steps, the mean of the last quarter is below the mean of the first
// quarter by at least `min_drop` of it, or the loss is flat. Judged once, in
// O(1) memory. Thread-compatible.
class LossFlatRule {
 public:
  explicit LossFlatRule(const LossFlatOptions& options) : options_(options) {}

  // The step's mean loss (finite), in step order.
  void Observe(int64_t step, double loss);
  // The finding, once, when the window is complete and flat.
  std::optional<LossFlatFinding> Check();
  bool flat() const { return flat_; }

 private:
  const LossFlatOptions options_;
  int64_t first_step_ = -1;
  int seen_ = 0;
  double first_sum_ = 0;
  double last_sum_ = 0;
  int64_t last_step_ = -1;
  bool judged_ = false;
  bool flat_ = false;
  std::optional<LossFlatFinding> found_;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_SIGNALS_LOSS_FLAT_RULE_H_
