#ifndef TRAINSUP_DAEMON_CORE_STRAGGLER_DETECTOR_H_
#define TRAINSUP_DAEMON_CORE_STRAGGLER_DETECTOR_H_

#include <cstdint>
#include <vector>

#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "daemon/core/job.h"

namespace trainsup {

struct StragglerOptions {
  // Steps per window: each rank's p99 compute time is taken over its last
  // `window` steps, and a window is judged every `window` steps of the job.
  // Default: 50.
  size_t window = 50;
  // A rank is slow in a window when its p99 is above `ratio` x the job's
  // median p99 AND above the median by more than `mad_factor` x the median
  // absolute deviation of the ranks' p99s. Defaults: 1.5, 3.
  double ratio = 1.5;
  double mad_factor = 3;
  // Consecutive windows that must agree to flag a rank, and to clear it.
  // Default: 3.
  int persistence = 3;
};

// The ranks flagged as stragglers now, by rank.
using StragglerSet = absl::btree_set<uint32_t>;

// A rank whose verdict changed in this window.
struct StragglerChange {
  uint32_t rank = 0;
  bool flagged = false;  // true: became a straggler; false: cleared
  double rank_p99_s = 0;
  double job_median_p99_s = 0;
  double ratio = 0;  // rank_p99_s / job_median_p99_s
};

// Finds ranks whose own work (hb.compute()) is persistently slower than the
// job's. Wall step time is useless for this in synchronous training: the fast
// ranks wait inside the collective for the slow one, so every rank's step
// takes the same time. Per-rank distributions are compared by their p99 with
// the job's median p99: never a mean, which one slow rank would drag.
// Keeps per-rank streaks between windows (one detector per job and
// generation); thread-compatible.
class StragglerDetector {
 public:
  explicit StragglerDetector(StragglerOptions options) : options_(options) {}

  // Judges a window when the job has advanced `window` steps since the last
  // one; updates `*flagged` (the verdict, kept with the generation's other
  // verdicts); returns the changes. Ranks without a full window of compute
  // samples are left out; fewer than 2 such ranks, no judgement.
  std::vector<StragglerChange> Evaluate(const Job& job, StragglerSet* flagged);

  const StragglerOptions& options() const { return options_; }

 private:
  StragglerChange Change(uint32_t rank, bool flagged, double rank_p99_s, double median_p99_s) const;

  struct Streak {
    int slow = 0;
    int ok = 0;
  };
  StragglerOptions options_;  // not const: a new generation assigns a fresh detector
  int64_t next_window_step_ = -1;
  absl::flat_hash_map<uint32_t, Streak> streaks_;  // by rank, for ranks that report
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_STRAGGLER_DETECTOR_H_
