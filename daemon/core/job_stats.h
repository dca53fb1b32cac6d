#ifndef TRAINSUP_DAEMON_CORE_JOB_STATS_H_
#define TRAINSUP_DAEMON_CORE_JOB_STATS_H_

#include "daemon/core/job.h"

namespace trainsup {

// A job's step time summarized over ranks: the median of the per-rank p50s
// and of the per-rank p99s. Medians of per-rank percentiles, never a mean, so
// one odd rank cannot move the job's figure. Ranks without samples are left out.
struct JobStepStats {
  double median_rank_p50_s = 0;
  double median_rank_p99_s = 0;
  uint32_t ranks_with_samples = 0;
};

JobStepStats ComputeJobStepStats(const Job& job);

// Median of `values` (the lower middle for an even count); 0 when empty.
// Reorders `values`.
double MedianInPlace(std::vector<double>& values);

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_JOB_STATS_H_
