#include "daemon/core/crash_detector.h"

#include <tuple>

namespace trainsup {
namespace {

bool CertainFailure(const RankState& r) {
  if (!r.exception_type.empty()) return true;
  return r.death && r.death->exit_known && (r.death->exit_code != 0 || r.death->signal != 0);
}

}  // namespace

bool CrashDetector::HasFailure(const Job& job) {
  for (const RankState& r : job.ranks()) {
    if (r.death && r.death->failed() && CertainFailure(r)) return true;
  }
  return false;
}

std::optional<CrashVerdict> CrashDetector::Check(const Job& job, absl::Time first_heard,
                                                 absl::Time now) const {
  if (!HasFailure(job) || now - first_heard < options_.settle) return std::nullopt;
  std::optional<CrashVerdict> verdict;
  for (uint32_t i = 0; i < job.world_size(); ++i) {
    const RankState& r = job.rank(i);
    if (!r.death || !r.death->failed()) continue;
    if (!verdict) verdict.emplace();
    ++verdict->failed_ranks;
    // Earliest death first; at equal times the lower rank (a stable choice).
    if (verdict->failed_ranks == 1 || r.death->time < verdict->death.time) {
      verdict->rank = i;
      verdict->death = *r.death;
    }
  }
  return verdict;
}

}  // namespace trainsup
