#include "daemon/core/crash_detector.h"

#include <tuple>

namespace trainsup {
bool CrashDetector::HasFailure(const Job& job) { return job.has_certain_failure(); }

std::optional<CrashVerdict> CrashDetector::Check(const Job& job, absl::Time first_heard,
                                                 absl::Time now, bool launcher_failed) const {
  if (!(launcher_failed || HasFailure(job)) || now - first_heard < options_.settle) {
    return std::nullopt;
  }
  std::optional<CrashVerdict> verdict;
  for (uint32_t i = 0; i < job.world_size(); ++i) {
    const RankState& r = job.rank(i);
    // A rank that reported an uncaught exception has failed even if its
    // process is still tearing down.
    RankDeath failure;
    if (r.death && r.death->failed()) {
      failure = *r.death;
    } else if (r.exception_time) {
      failure.time = *r.exception_time;
    } else {
      continue;
    }
    if (!verdict) verdict.emplace();
    ++verdict->failed_ranks;
    // Earliest failure first; at equal times the lower rank (a stable choice).
    if (verdict->failed_ranks == 1 || failure.time < verdict->death.time) {
      verdict->rank = i;
      verdict->death = failure;
    }
  }
  return verdict;
}

}  // namespace trainsup
