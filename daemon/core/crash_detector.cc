#include "daemon/core/crash_detector.h"

#include "absl/strings/str_cat.h"
#include "common/format.h"

namespace trainsup {
namespace {

// The earliest failure among the ranks (the lower rank at equal times), and
// how many ranks failed; nullopt when none did.
std::optional<CrashVerdict> FirstRankToFail(const Job& job) {
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
    if (verdict->failed_ranks == 1 || failure.time < verdict->death.time) {
      verdict->rank = i;
      verdict->node = r.node;
      verdict->death = failure;
    }
  }
  return verdict;
}

}  // namespace

std::optional<CrashVerdict> CrashDetector::Check(const Job& job, absl::Time first_heard,
                                                 absl::Time now,
                                                 const std::optional<FailedLauncher>& failed) const {
  if (first_heard == absl::InfinitePast() || now - first_heard < options_.settle) {
    return std::nullopt;
  }
  if (!(failed || HasFailure(job))) return std::nullopt;
  std::optional<CrashVerdict> verdict = FirstRankToFail(job);
  if (verdict) {
    const RankState& r = job.rank(*verdict->rank);
    const RankDeath& d = verdict->death;
    verdict->reason = absl::StrCat("died first (", ExitStatusText(d.exit_known, d.exit_code, d.signal), ")");
    if (!r.exception_type.empty()) {
      absl::StrAppend(&verdict->reason, ": ", r.exception_type, ": ", r.exception_message);
    }
    absl::StrAppend(&verdict->reason, "; ", verdict->failed_ranks, " of ", job.ranks_reporting(),
                    " ranks failed");
    return verdict;
  }
  if (!failed) return std::nullopt;
  // The command failed without a rank death to name: name its node.
  CrashVerdict v;
  v.node = failed->node;
  v.death.time = first_heard;
  v.death.exit_known = true;
  v.death.exit_code = failed->launcher.exit_code;
  v.death.signal = failed->launcher.signal;
  v.reason = absl::StrCat("failed (", ExitStatusText(true, v.death.exit_code, v.death.signal),
                          ") with no rank death to name");
  return v;
}

}  // namespace trainsup
