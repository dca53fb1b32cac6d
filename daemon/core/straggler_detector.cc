#include "daemon/core/straggler_detector.h"

#include <cmath>
#include <utility>

#include "daemon/core/job_stats.h"

namespace trainsup {

StragglerChange StragglerDetector::Change(uint32_t rank, bool flagged, double rank_p99_s,
                                          double median_p99_s) const {
  StragglerChange c;
  c.rank = rank;
  c.flagged = flagged;
  c.rank_p99_s = rank_p99_s;
  c.job_median_p99_s = median_p99_s;
  c.ratio = median_p99_s > 0 ? rank_p99_s / median_p99_s : 0;
  return c;
}

std::vector<StragglerChange> StragglerDetector::Evaluate(const Job& job, StragglerSet* flagged) {
  std::vector<StragglerChange> changes;
  if (job.max_step() < 0) return changes;
  if (next_window_step_ < 0) {
    next_window_step_ = job.max_step() + static_cast<int64_t>(options_.window);
    return changes;
  }
  if (job.max_step() < next_window_step_) return changes;
  next_window_step_ = job.max_step() + static_cast<int64_t>(options_.window);

  // Per-rank p99 over each rank's last `window` compute samples, for the
  // ranks that report (never sized by the claimed world size).
  std::vector<std::pair<uint32_t, double>> p99;
  std::vector<double> present;
  for (const auto& [i, r] : job.ranks()) {
    const StepWindow& w = r.compute_durations;
    if (w.size() < std::min(options_.window, w.capacity())) continue;
    p99.emplace_back(i, w.P50P99().p99);
    present.push_back(p99.back().second);
  }
  if (present.size() < 2) return changes;
  const double median = MedianInPlace(present);
  std::vector<double> deviations;
  for (const auto& [i, v] : p99) deviations.push_back(std::fabs(v - median));
  const double mad = MedianInPlace(deviations);

  for (const auto& [i, v] : p99) {
    const bool slow = v > options_.ratio * median && v - median > options_.mad_factor * mad;
    Streak& streak = streaks_[i];
    streak.slow = slow ? streak.slow + 1 : 0;
    streak.ok = slow ? 0 : streak.ok + 1;
    const bool was_flagged = flagged->contains(i);
    if (!was_flagged && streak.slow >= options_.persistence) {
      flagged->insert(i);
      changes.push_back(Change(i, true, v, median));
    } else if (was_flagged && streak.ok >= options_.persistence) {
      flagged->erase(i);
      changes.push_back(Change(i, false, v, median));
    }
  }
  return changes;
}

}  // namespace trainsup
