#ifndef TRAINSUP_DAEMON_CORE_VALIDATION_H_
#define TRAINSUP_DAEMON_CORE_VALIDATION_H_

#include <cstdint>
#include <optional>

#include "absl/strings/string_view.h"
#include "common/limits.h"
#include "daemon/core/heartbeat.h"
#include "daemon/core/reject_reason.h"

namespace trainsup {

// The checks that need no state: kind, job, world size, rank range, step sign,
// durations finite and non-negative, string lengths. `agent_job` is the job of
// the agent that forwarded the heartbeat. Returns the first reason found.
std::optional<RejectReason> CheckHeartbeat(const Heartbeat& hb, absl::string_view agent_job);

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_VALIDATION_H_
