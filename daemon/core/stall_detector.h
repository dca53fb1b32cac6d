#ifndef TRAINSUP_DAEMON_CORE_STALL_DETECTOR_H_
#define TRAINSUP_DAEMON_CORE_STALL_DETECTOR_H_

#include <cstdint>
#include <optional>

#include "absl/container/flat_hash_set.h"
#include "absl/time/time.h"
#include "daemon/core/job.h"
#include "daemon/core/job_stats.h"

namespace trainsup {

struct StallOptions {
  // A job is stalled when no rank's step advanced for longer than
  // max(floor, factor x the job's p99 step time). Defaults: 20s, 10.
  absl::Duration floor = absl::Seconds(20);
  double factor = 10;
  // Before the generation's first step (imports, rendezvous, loading a
  // checkpoint) the threshold is this instead. Default: 5m.
  absl::Duration startup_grace = absl::Minutes(5);
  // While a rank is inside a checkpoint's blocking part, the threshold is at
  // least this. Default: 15m.
  absl::Duration checkpoint_grace = absl::Minutes(15);
  // While a rank said it is exiting and its process has not ended (the
  // interpreter's teardown, destroying a process group), the threshold is
  // at least this: a job that finished its loop is not a hang, and a
  // teardown that hangs for longer still is one. Default: 2m.
  absl::Duration exit_grace = absl::Minutes(2);
};

// The rank that holds up a hung job, or why none can be named.
struct Culprit {
  std::optional<uint32_t> rank;  // absent: undetermined
  uint32_t seen_ranks = 0;       // ranks judged
  uint32_t unseen_ranks = 0;     // ranks left out: their node cannot be heard
  // The place furthest behind among the ranks seen (none seen: step -1):
  // the step and phase of the rank named (or of one of them when all are
  // there), and how many ranks are there.
  int64_t behind_step = -1;
  StepPhase behind_phase = StepPhase::kBetweenSteps;
  uint32_t behind_ranks = 0;
};

// Names the rank furthest behind by (last completed step, phase within the
// next step); among equals, the one whose last heartbeat is oldest. In a
// hung all-reduce the waiting ranks have left their compute phase and the
// culprit has not. Ranks on `silent_nodes` are left out (their last word is
// stale), and a rank whose phase may be stale (a
// lost datagram) can be behind only by its step. When every rank seen is at
// the same place, says so instead of guessing.
Culprit FindCulprit(const Job& job, const absl::flat_hash_set<NodeIndex>& silent_nodes = {});

// What the stall rule concluded for one job at one time.
struct StallVerdict {
  bool stalled = false;
  absl::Duration silent;     // since the last step (or the generation start)
  absl::Duration threshold;  // the threshold that applied
  bool startup = false;      // no step yet in this generation
};

// The stall rule. Pure: a function of the job's state and `now`.
class StallDetector {
 public:
  explicit StallDetector(StallOptions options) : options_(options) {}

  // Progress is dated by when its report arrived, and reports come every
  // report interval: a job is never judged stalled for less than this many
  // of its agents' report intervals (the longest in force among them), so
  // a slow interval causes no false stall, and a hang is still seen within
  // the threshold + 2 intervals of its last step while the threshold is at
  // least half an interval.
  static constexpr double kMinIntervals = 1.5;

  // A job is judged unless a rank was seen to end (a crash, or a job
  // finishing: neither is a stall). Ranks of unknown liveness (their agent
  // is not heard) never switch the rule off. Stalled means strictly longer
  // than the threshold. `report_interval`: the longest interval its agents
  // report at (zero: not known).
  StallVerdict Check(const Job& job, absl::Time now,
                     absl::Duration report_interval = absl::ZeroDuration()) const;
  // The same with the job's step statistics already computed (they cost a
  // pass over every rank's window; a sweep computes them once).
  // `checkpoint_credible`: false when every rank inside a checkpoint is on a
  // node no longer heard (a host frozen or powered off mid-save saves
  // nothing), so that the checkpoint grace is not granted for it.
  StallVerdict Check(const Job& job, absl::Time now, const JobStepStats& stats,
                     absl::Duration report_interval = absl::ZeroDuration(),
                     bool checkpoint_credible = true) const;

  const StallOptions& options() const { return options_; }

 private:
  const StallOptions options_;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_STALL_DETECTOR_H_
