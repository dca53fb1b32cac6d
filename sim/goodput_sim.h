#ifndef TRAINSUP_SIM_GOODPUT_SIM_H_
#define TRAINSUP_SIM_GOODPUT_SIM_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "daemon/core/crash_detector.h"
#include "daemon/core/quarantine_policy.h"
#include "daemon/core/restart_governor.h"
#include "daemon/core/stall_detector.h"
#include "sim/failure_trace.h"

namespace trainsup::sim {

// The job and the cluster around it. Times in seconds unless named.
struct SimJob {
  uint32_t nodes = 2048;       // the job's nodes (8 GPUs each: 16,384 ranks)
  uint32_t gpus_per_node = 8;
  double step_seconds = 10;
  double checkpoint_seconds = 60;  // C: training blocks while it writes
  double restart_seconds = 300;    // R: stop, relaunch, rendezvous, reload
  double days = 54;
  // A held job waits this long for a person; a software bug then takes
  // `bug_fix_hours` more to fix.
  double human_hours = 0.5;
  double bug_fix_hours = 1.5;
  // A deterministic software bug fails again this long into each generation.
  double bug_refail_seconds = 600;
  // A node that leaves the job (lost, quarantined) is replaced at once from
  // a hot spare, or else after this long (the scheduler finds another).
  double replace_minutes = 20;
  // A node out of the job is back in the pool this long after (repair, or
  // the end of a maintenance).
  double repair_hours = 48;
  double sdc_detection_hours = 1;   // silent data corruption is found this late
  double spike_rollback_steps = 100;  // a loss spike rolls back this far (PaLM)
  // A hung generation's stop costs more than a crashed one's: the agents
  // collect the ranks' stacks first (at most 2 s: a frozen rank never
  // answers), then its frozen ranks wait out trainsupd's --stop-grace (10 s)
  // before SIGKILL. Added to R for hangs.
  double hang_stop_seconds = 12;
  double slow_hours = 2;    // a "slow" failure lasts this long...
  double slow_factor = 1.2;  // ...with the job's steps this much longer
};

// What the supervisor does: trainsup's rules (the core's own classes and
// option defaults) with the settings to compare.
struct SimPolicy {
  std::string name;
  // Unset: the planner's interval from the MTBF measured so far (the core's
  // MtbfEstimator with its 24 h prior, conservative bound), replanned after
  // each failure. Set: a fixed interval.
  std::optional<double> fixed_interval_seconds;
  bool quarantine = true;
  QuarantineOptions quarantine_options;  // the core's defaults: 3 within 1 h
  RestartPolicy restart;                 // the core's defaults: 5 within 1 h
  // Detection latency: a crash is judged `crash.settle` after it, a hang at
  // max(stall.floor, stall.factor x the step time), as trainsupd's options
  // of the same names have it (the core's defaults unless told).
  CrashOptions crash;
  StallOptions stall;
  bool hot_spares = false;
  // trainsup holds a job after a second identical failure (a bug in the
  // training code) instead of restarting it into the same failure.
  bool hold_code_bugs = true;
};

// Where the job's wall time went (seconds), the goodput ledger's terms:
// useful + checkpoint + lost = wall (starved is not simulated).
struct SimLedger {
  double wall = 0;
  double useful = 0;      // training a later checkpoint committed
  double checkpoint = 0;  // blocked writing checkpoints
  // lost, by why:
  double rework = 0;       // trained, then lost at a failure (or rolled back)
  double detection = 0;    // from the failure to its detection
  double restart = 0;      // backoff and restart cost R
  double replacement = 0;  // waiting for a node to replace one that left
  double held = 0;         // held, waiting for a person (and a bug's fix)
  double slow = 0;         // the part of slow periods' training not done
  double lost() const { return rework + detection + restart + replacement + held + slow; }
  double effective_fraction() const { return wall > 0 ? useful / wall : 0; }
};

// One failure that stopped the job (or rolled it back), as it was handled.
struct SimFailure {
  double time = 0;  // when it happened
  FailureKind kind = FailureKind::kCrash;
  uint32_t node = kNoNode;
  double rework = 0;     // training lost with it (since the last checkpoint, or rolled back)
  double detection = 0;  // from the failure to its detection
  double down = 0;       // from the failure to the next generation's start
};

struct SimResult {
  SimLedger ledger;
  std::vector<SimFailure> failure_log;  // in time order
  int failures = 0;     // that stopped the job (crashes, hangs, lost nodes, SDC found)
  int spikes = 0;       // loss-spike rollbacks
  int restarts = 0;
  int holds = 0;
  int quarantines = 0;
  int lemons_quarantined = 0;
  int nodes_replaced = 0;
  double mean_interval_seconds = 0;  // the checkpoint interval, time-weighted
  int ignored = 0;  // trace events on nodes outside the job, or while it was down
};

// Runs `job` under `policy` through `trace` (GenerateTrace or a file; node
// indexes are physical nodes, the job starts on 0..nodes-1 and replaces from
// the rest). `lemons`: the trace's lemon nodes, counted when quarantined.
// Deterministic: no clock, no randomness.
SimResult Simulate(const SimJob& job, const SimPolicy& policy,
                   const std::vector<FailureEvent>& trace, uint32_t cluster_nodes,
                   const std::vector<uint32_t>& lemons = {});

}  // namespace trainsup::sim

#endif  // TRAINSUP_SIM_GOODPUT_SIM_H_
