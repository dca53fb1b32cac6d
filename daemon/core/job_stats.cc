#include "daemon/core/job_stats.h"

#include <algorithm>
#include <vector>

namespace trainsup {

double MedianInPlace(std::vector<double>& values) {
  if (values.empty()) return 0;
  size_t mid = (values.size() - 1) / 2;
  std::nth_element(values.begin(), values.begin() + mid, values.end());
  return values[mid];
}

JobStepStats ComputeJobStepStats(const Job& job) {
  std::vector<double> p50s;
  std::vector<double> p99s;
  for (const auto& [i, r] : job.ranks()) {
    if (r.step_durations.empty()) continue;
    StepWindow::Quantiles q = r.step_durations.P50P99();
    p50s.push_back(q.p50);
    p99s.push_back(q.p99);
  }
  JobStepStats stats;
  stats.ranks_with_samples = static_cast<uint32_t>(p50s.size());
  stats.median_rank_p50_s = MedianInPlace(p50s);
  stats.median_rank_p99_s = MedianInPlace(p99s);
  return stats;
}

}  // namespace trainsup
