#ifndef TRAINSUP_DAEMON_CORE_SUPERVISOR_OPTIONS_H_
#define TRAINSUP_DAEMON_CORE_SUPERVISOR_OPTIONS_H_

#include <cstddef>

#include "absl/time/time.h"
#include "daemon/core/checkpoint_publisher.h"
#include "daemon/core/crash_detector.h"
#include "daemon/core/diagnose.h"
#include "daemon/core/mtbf_estimator.h"
#include "daemon/core/node_loss_detector.h"
#include "daemon/core/report_cadence.h"
#include "daemon/core/quarantine_policy.h"
#include "daemon/core/restart_governor.h"
#include "daemon/core/signals/signal_options.h"
#include "daemon/core/stall_detector.h"
#include "daemon/core/straggler_detector.h"
#include "daemon/core/verdicts.h"
#include "daemon/core/xid_catalog.h"

namespace trainsup {

// Bounds on what clients can make the supervisor hold (docs/limits.md): a
// flood of job ids, a claimed world size, or agents that come and go never
// grow its memory without end.
struct LimitOptions {
  // Jobs held in memory at once; a hello for a new job past it is refused
  // with RESOURCE_EXHAUSTED. Default: 10000.
  size_t max_jobs = 10000;
  // Nodes held in memory at once; a hello from a new node name past it is
  // refused with RESOURCE_EXHAUSTED. Default: 100000.
  size_t max_nodes = 100000;
  // The largest world size a heartbeat may claim; above it the heartbeat is
  // refused as bad_world_size. At most kMaxWorldSize. Default: 131072.
  uint32_t max_world_size = 131072;
  // A job no agent has spoken for in this long (a finished or failed one,
  // or one whose agents went away) leaves memory; its records stay in the
  // state store. A node whose agent has been gone this long leaves too,
  // unless it is quarantined. Default: 24h.
  absl::Duration job_retention = absl::Hours(24);
};

// Every option of the core, each rule's in its own struct (see the rule's
// header for its defaults).
struct SupervisorOptions {
  // Step durations kept per rank for p50/p99. Default: 128.
  size_t step_window = 128;
  StallOptions stall;
  CrashOptions crash;
  NodeLossOptions node_loss;
  ReportCadenceOptions cadence;
  StragglerOptions straggler;
  // The training signals' rules (docs/signals.md); a job's script may
  // override them for its job.
  SignalOptions signals;
  DiagnoseOptions diagnose;  // `trainsupctl diagnose`
  // Events kept in memory for `trainsupctl events`. Default: 10000.
  size_t event_log_size = 10000;
  LimitOptions limits;
  RestartPolicy restart;
  QuarantineOptions quarantine;
  // The job's own verdicts on its failures: exit codes and exception types
  // -> action (verdicts.h; --verdict, --verdict-table). A job's agent may
  // bring rules of its own, which come first. Default: VerdictTable::Defaults().
  VerdictTable verdicts = VerdictTable::Defaults();
  // After sending stop, wait at most this long for every agent to report its
  // command ended before going on without the stragglers. Default: 60s.
  absl::Duration stop_timeout = absl::Seconds(60);
  // A generation whose command runs but of which no rank has reported and
  // none stepped this long after it started (a rendezvous that cannot
  // complete, an import that hangs) is a failure (start_timeout). Ranks that
  // report before the first step are the stall rule's (its startup grace).
  // Default: 5m.
  absl::Duration start_timeout = absl::Minutes(5);
  // The agents' SIGTERM -> SIGKILL grace on a stop. Default: 10s.
  absl::Duration stop_grace = absl::Seconds(10);

  // Checkpoint planning. The MTBF prior (one pseudo-failure over it) and the
  // confidence of its interval; the planner uses its lower bound.
  MtbfOptions mtbf;
  // C and R until the job has measured them. Defaults: 60s, 5m.
  absl::Duration checkpoint_cost_prior = absl::Seconds(60);
  absl::Duration restart_cost_prior = absl::Minutes(5);
  // When a new plan is published and how far ahead it takes effect.
  PlanPublishOptions publish;
  // Publish checkpoint plans at all. Default: true.
  bool plan_checkpoints = true;
  // Detect and report only: never stop, restart or quarantine (a way to roll
  // trainsup out, or to watch a job's own failure handling). Agents then exit
  // with their command's code, as without a supervisor. Default: false.
  bool observe_only = false;
  // What each Xid a node's GPU driver reports means and makes trainsupd do
  // (NVIDIA's catalog, with --xid-action's overrides; docs/gpu.md).
  XidCatalog xid_catalog;
  // The driver runs an unfence command (--unfence-command) when an operator
  // lifts a quarantine, journaled and retried like a fence; without one,
  // lifting a quarantine only forgets the node's pending fence. Default: false.
  bool unfence = false;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_SUPERVISOR_OPTIONS_H_
