#ifndef TRAINSUP_DAEMON_CORE_VALIDATION_H_
#define TRAINSUP_DAEMON_CORE_VALIDATION_H_

#include <cstdint>
#include <optional>

#include "absl/strings/string_view.h"
#include "daemon/core/heartbeat.h"
#include "daemon/core/reject_reason.h"

namespace trainsup {

// Limits on what the wire may carry. Every field from the wire is checked
// against them before it touches state.
constexpr size_t kMaxNameLength = 128;          // job ids and node names
constexpr uint32_t kMaxWorldSize = 1u << 20;    // 1,048,576 ranks
constexpr size_t kMaxExceptionTypeLength = 256;
constexpr size_t kMaxExceptionMessageLength = 1024;
// No duration a rank reports may exceed this (a year): beyond it, a value is
// garbage, and it would overflow the 32-bit floats of the step windows.
constexpr double kMaxDurationSeconds = 365.0 * 24 * 3600;

// True for 1..kMaxNameLength characters of [A-Za-z0-9._-].
bool IsValidName(absl::string_view name);

// The checks that need no state: kind, job, world size, rank range, step sign,
// durations finite and non-negative, string lengths. `agent_job` is the job of
// the agent that forwarded the heartbeat. Returns the first reason found.
std::optional<RejectReason> CheckHeartbeat(const Heartbeat& hb, absl::string_view agent_job);

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_VALIDATION_H_
