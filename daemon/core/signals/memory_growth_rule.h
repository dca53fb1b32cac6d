#ifndef TRAINSUP_DAEMON_CORE_SIGNALS_MEMORY_GROWTH_RULE_H_
#define TRAINSUP_DAEMON_CORE_SIGNALS_MEMORY_GROWTH_RULE_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "daemon/core/signals/series.h"
#include "daemon/core/signals/signal_options.h"
#include "daemon/core/signals/step_aggregator.h"

namespace trainsup {

// Memory rising steadily.
struct MemoryGrowthFinding {
  bool host = false;     // false: device memory; true: host RSS
  int64_t step = -1;     // the last step of the window
  int steps = 0;         // the window
  double bytes = 0;      // at `step` (the largest rank's)
  RankAt at;             // that rank
  double growth_bytes = 0;          // last quarter's median - first quarter's
  double slope_bytes_per_step = 0;  // least squares over the window
  double slope_bytes_per_second = 0;  // by the job's step time; 0: unknown
  // The device's capacity and the time until the slope reaches it; 0 when
  // the capacity is not known (host RSS: never projected).
  double capacity_bytes = 0;
  double seconds_to_limit = 0;
};

// Memory growth, for one kind of memory, for one generation: after `warmup`
// steps (allocator caches fill, then level off), the largest rank's memory
// per step over the last `steps` steps grows when each quarter's median is
// above the previous quarter's and the last quarter's is at least
// `min_bytes` above the first's. Medians of quarters, so a checkpoint's
// passing peak does not count. Reported once per generation; slope() stays
// current for the metrics. Thread-compatible.
class MemoryGrowthRule {
 public:
  MemoryGrowthRule(const MemoryGrowthOptions& options, bool host)
      : options_(options), host_(host), bytes_(static_cast<size_t>(options.steps)) {}

  // The step's largest memory (at `at`; `capacity` 0: unknown), in step
  // order.
  void Observe(int64_t step, double bytes, RankAt at, double capacity);
  // Judges the window; `step_seconds`: the job's recent step time (0:
  // unknown). The finding once per generation.
  std::optional<MemoryGrowthFinding> Check(double step_seconds);

  // While memory grows steadily: bytes per second (0: not growing, or the
  // step time unknown). Updated by Check.
  double slope_bytes_per_second() const { return growing_ ? growing_->slope_bytes_per_second : 0; }
  const std::optional<MemoryGrowthFinding>& growing() const { return growing_; }

 private:
  std::optional<MemoryGrowthFinding> Judge(double step_seconds);

  const MemoryGrowthOptions options_;
  const bool host_;
  int64_t seen_ = 0;
  Series bytes_;
  RankAt last_at_;
  double capacity_ = 0;
  bool reported_ = false;
  std::optional<MemoryGrowthFinding> growing_;
  std::vector<double> scratch_;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_SIGNALS_MEMORY_GROWTH_RULE_H_
