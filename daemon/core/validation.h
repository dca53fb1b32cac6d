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
// durations finite and non-negative, string lengths, a VERDICT's action, the
// training signals' ranges (memory and counts bounded, a replica group inside
// the world, a START's signal settings known and in range). `agent_job` is the
// job of the agent that forwarded the heartbeat; `max_world_size` the largest
// world it may claim (--max-world-size). Returns the first reason found.
std::optional<RejectReason> CheckHeartbeat(const Heartbeat& hb, absl::string_view agent_job,
                                           uint32_t max_world_size = kMaxWorldSize);

// Bounds what a command's status may hold, as trainsupd keeps it: its last
// kMaxStderrExcerptLines stderr lines, each as OutputLine keeps text
// (common/failure_text.h).
void BoundLauncher(LauncherInfo& launcher);

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_VALIDATION_H_
