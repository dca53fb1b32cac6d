#include "daemon/core/signals/memory_growth_rule.h"

#include <algorithm>

namespace trainsup {

void MemoryGrowthRule::Observe(int64_t step, double bytes, RankAt at, double capacity) {
  if (++seen_ <= options_.warmup) return;
  bytes_.Add(step, bytes);
  last_at_ = at;
  capacity_ = capacity;
}

std::optional<MemoryGrowthFinding> MemoryGrowthRule::Judge(double step_seconds) {
  if (!bytes_.full()) return std::nullopt;
  const size_t n = bytes_.size();
  const size_t quarter = std::max<size_t>(1, n / 4);
  double previous = 0;
  double first = 0;
  for (size_t q = 0; q < 4; ++q) {
    const double median = bytes_.Median(q * quarter, (q + 1) * quarter, &scratch_);
    if (q == 0) {
      first = median;
    } else if (median <= previous) {
      return std::nullopt;
    }
    previous = median;
  }
  const double growth = previous - first;
  if (growth < options_.min_bytes || growth <= 0) return std::nullopt;

  MemoryGrowthFinding f;
  f.host = host_;
  f.step = bytes_.back_step();
  f.steps = static_cast<int>(n);
  f.bytes = bytes_.back();
  f.at = last_at_;
  f.growth_bytes = growth;
  f.slope_bytes_per_step = bytes_.Slope(0);
  if (step_seconds > 0) f.slope_bytes_per_second = f.slope_bytes_per_step / step_seconds;
  if (!host_ && capacity_ > 0) {
    f.capacity_bytes = capacity_;
    if (f.slope_bytes_per_second > 0) {
      f.seconds_to_limit = std::max(0.0, capacity_ - f.bytes) / f.slope_bytes_per_second;
    }
  }
  return f;
}

std::optional<MemoryGrowthFinding> MemoryGrowthRule::Check(double step_seconds) {
  growing_ = Judge(step_seconds);
  if (!growing_ || reported_) return std::nullopt;
  reported_ = true;
  return growing_;
}

}  // namespace trainsup
