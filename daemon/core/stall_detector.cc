#include "daemon/core/stall_detector.h"

#include <algorithm>
#include <tuple>

#include "daemon/core/job_stats.h"

namespace trainsup {

Culprit FindCulprit(const Job& job, const absl::flat_hash_set<NodeIndex>& silent_nodes) {
  // Where a rank is, as far as the evidence goes: a rank whose phase may be
  // stale is taken as far as its step allows (it can be behind by its step,
  // never by a phase that may have moved on).
  auto place = [](const RankState& s) {
    return std::make_tuple(s.step, s.phase_uncertain ? StepPhase::kComputeDone : s.phase);
  };
  const RankState* behind = nullptr;
  uint32_t behind_rank = 0;
  uint32_t seen = 0;
  uint32_t tied = 0;
  uint32_t unseen = 0;
  for (const auto& [i, r] : job.ranks()) {
    if (!r.seen) continue;
    // What a rank whose agent cannot be heard last said is no evidence of
    // where it is now: in a synchronous job that kept stepping it took part.
    if (silent_nodes.contains(r.node)) {
      ++unseen;
      continue;
    }
    ++seen;
    if (behind == nullptr) {
      behind = &r;
      behind_rank = i;
      tied = 1;
      continue;
    }
    if (place(r) < place(*behind)) {
      behind = &r;
      behind_rank = i;
      tied = 1;
    } else if (place(r) == place(*behind)) {
      ++tied;
      if (r.last_heartbeat < behind->last_heartbeat) {
        behind = &r;
        behind_rank = i;
      }
    }
  }
  Culprit culprit;
  culprit.seen_ranks = seen;
  culprit.unseen_ranks = unseen;
  if (behind == nullptr) return culprit;
  culprit.behind_step = behind->step;
  culprit.behind_phase = behind->phase;
  culprit.behind_ranks = tied;
  if (tied < seen) culprit.rank = behind_rank;  // else: all at one place, undetermined
  return culprit;
}

StallVerdict StallDetector::Check(const Job& job, absl::Time now,
                                  absl::Duration report_interval) const {
  if (job.ranks_reporting() == 0) return StallVerdict();
  return Check(job, now, ComputeJobStepStats(job), report_interval);
}

StallVerdict StallDetector::Check(const Job& job, absl::Time now, const JobStepStats& stats,
                                  absl::Duration report_interval, bool checkpoint_credible) const {
  StallVerdict verdict;
  if (job.ranks_reporting() == 0) return verdict;
  // A rank seen to end is a crash (or a finishing job), not a stall. Ranks
  // that cannot be seen do not switch the rule off: it judges the progress
  // it sees.
  if (job.has_dead_rank()) return verdict;
  const bool started = job.last_progress() != absl::InfinitePast();
  verdict.startup = !started;
  if (started) {
    verdict.threshold =
        std::max(options_.floor, options_.factor * absl::Seconds(stats.median_rank_p99_s));
    verdict.silent = now - job.last_progress();
  } else {
    verdict.threshold = options_.startup_grace;
    verdict.silent = now - job.generation_start();
  }
  if (job.any_in_checkpoint() && checkpoint_credible) {
    verdict.threshold = std::max(verdict.threshold, options_.checkpoint_grace);
  }
  if (job.any_exiting()) verdict.threshold = std::max(verdict.threshold, options_.exit_grace);
  verdict.threshold = std::max(verdict.threshold, kMinIntervals * report_interval);
  verdict.stalled = verdict.silent > verdict.threshold;
  return verdict;
}

}  // namespace trainsup
