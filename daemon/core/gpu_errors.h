#ifndef TRAINSUP_DAEMON_CORE_GPU_ERRORS_H_
#define TRAINSUP_DAEMON_CORE_GPU_ERRORS_H_

// What trainsupd does when a node's GPU driver reports an Xid (docs/gpu.md):
// NVIDIA's catalog (xid_catalog.h) says what the GPU needs, and the node
// leaves the job at the first occurrence (the GPU or the machine must be
// reset), finishes it and is drained, or stays with the crash that follows
// counted as the workload's. Pure; thread-compatible.

#include <map>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/core/agent_registry.h"
#include "daemon/core/decisions.h"
#include "daemon/core/event_log.h"
#include "daemon/core/failure_handler.h"
#include "daemon/core/gpu_health.h"
#include "daemon/core/heartbeat.h"
#include "daemon/core/job_entry.h"
#include "daemon/core/quarantine_policy.h"
#include "daemon/core/supervisor_options.h"
#include "daemon/core/xid_catalog.h"

namespace trainsup {

// kGpuError: `node` reported `error`, which means `meaning`; `taken` says
// what was done.
Event GpuErrorEvent(absl::Time time, const EventJob& job, const std::string& node,
                    const GpuErrorInfo& error, const XidMeaning& meaning,
                    absl::string_view taken);

class GpuErrorHandler {
 public:
  GpuErrorHandler(const SupervisorOptions& options, AgentRegistry& agents,
                  const QuarantinePolicy& quarantine, JobTable& jobs, FailureHandler& failures,
                  Decisions& decisions)
      : options_(options),
        agents_(agents),
        quarantine_(quarantine),
        jobs_(jobs),
        failures_(failures),
        decisions_(decisions) {}
  GpuErrorHandler(const GpuErrorHandler&) = delete;
  GpuErrorHandler& operator=(const GpuErrorHandler&) = delete;

  // The agent of `node` read `error` in its kernel log.
  void OnGpuError(absl::Time now, NodeIndex node, const GpuErrorInfo& error);
  // The agent of `node` read its GPUs' health: kept on the node's record
  // (a straggler's event names a slowed GPU); an uncorrectable error counter
  // that rose counts against the node, toward its quarantine.
  void OnGpuHealth(absl::Time now, NodeIndex node, const GpuHealthInfo& report);
  // Quarantines each node to drain once its job no longer runs on it (it
  // stopped, restarts without it, or ended). Call at every sweep.
  void SweepDrains(absl::Time now);
  size_t drains_pending() const { return drains_.size(); }

 private:
  // What a leave or a drain will do, in words, before it is done.
  std::string LeaveText(const std::string& node) const;

  const SupervisorOptions& options_;
  AgentRegistry& agents_;  // a node's last GPU error is kept on its record
  const QuarantinePolicy& quarantine_;
  JobTable& jobs_;
  FailureHandler& failures_;
  Decisions& decisions_;
  std::map<std::string, std::string> drains_;  // node -> the quarantine's reason
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_GPU_ERRORS_H_
