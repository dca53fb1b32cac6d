#include "daemon/core/validation.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/failure_text.h"
#include "daemon/core/kill_criteria.h"

#include "daemon/core/signals/signal_options.h"

namespace trainsup {
namespace {

// The largest step a heartbeat may carry: 2^53, 285 years of 1 us steps.
// Beyond it the rules' sums (a step plus a straggler window or a plan
// horizon) would overflow int64. Refused as kNegativeStep, the reason for a
// step outside the range (a reason of its own would change the wire API).
constexpr int64_t kMaxStep = int64_t{1} << 53;

bool IsValidDuration(double seconds) {
  return std::isfinite(seconds) && seconds >= 0 && seconds <= kMaxDurationSeconds;
}

bool IsValidOptionalDuration(const std::optional<double>& seconds) {
  return !seconds.has_value() || IsValidDuration(*seconds);
}

// No memory figure may exceed this (64 PiB), nor a step's samples or
// tokens 2^40: sums over 2^20 ranks stay exact in a double and an int64.
constexpr uint64_t kMaxMemoryBytes = uint64_t{1} << 56;
constexpr uint64_t kMaxStepCount = uint64_t{1} << 40;

bool AtMost(const std::optional<uint64_t>& value, uint64_t limit) {
  return !value.has_value() || *value <= limit;
}

// A START's signal settings: at most kMaxSignalSettings, each a known
// setting with a value in its range.
bool ValidSettings(const Heartbeat& hb) {
  if (hb.signal_settings.empty()) return true;
  if (hb.kind != HeartbeatKind::kStart || hb.signal_settings.size() > kMaxSignalSettings) {
    return false;
  }
  for (const auto& [name, value] : hb.signal_settings) {
    const SignalSetting* setting =
        name.size() <= kMaxSignalSettingName ? FindSignalSetting(name) : nullptr;
    if (setting == nullptr || !SettingAllows(*setting, value)) return false;
  }
  return true;
}

bool ValidSignals(const Heartbeat& hb) {
  if (!AtMost(hb.device_memory_bytes, kMaxMemoryBytes) ||
      !AtMost(hb.host_rss_bytes, kMaxMemoryBytes) ||
      !AtMost(hb.device_memory_capacity_bytes, kMaxMemoryBytes) ||
      !AtMost(hb.samples, kMaxStepCount) || !AtMost(hb.tokens, kMaxStepCount)) {
    return false;
  }
  if (hb.device_memory_capacity_bytes && *hb.device_memory_capacity_bytes == 0) return false;
  if (hb.replica_group >= hb.world_size) return false;
  return ValidSettings(hb);
}

bool IsKnownKind(HeartbeatKind kind) {
  switch (kind) {
    case HeartbeatKind::kStep:
    case HeartbeatKind::kComputeBegin:
    case HeartbeatKind::kComputeEnd:
    case HeartbeatKind::kCheckpointBegin:
    case HeartbeatKind::kCheckpointEnd:
    case HeartbeatKind::kException:
    case HeartbeatKind::kStart:
    case HeartbeatKind::kExit:
    case HeartbeatKind::kVerdict:
    case HeartbeatKind::kKillCriteria:
      return true;
    case HeartbeatKind::kUnspecified:
      break;
  }
  return false;
}

}  // namespace

std::optional<RejectReason> CheckHeartbeat(const Heartbeat& hb, absl::string_view agent_job,
                                           uint32_t max_world_size) {
  if (!IsKnownKind(hb.kind)) return RejectReason::kBadKind;
  // An agent leaves out its own job (see heartbeat.proto).
  if (!hb.job.empty()) {
    if (!IsValidName(hb.job)) return RejectReason::kBadJob;
    if (hb.job != agent_job) return RejectReason::kJobMismatch;
  }
  if (hb.world_size == 0 || hb.world_size > std::min(max_world_size, kMaxWorldSize)) {
    return RejectReason::kBadWorldSize;
  }
  if (hb.rank >= hb.world_size || hb.local_rank >= hb.world_size) {
    return RejectReason::kRankOutOfRange;
  }
  if (hb.step < 0 || hb.step > kMaxStep) return RejectReason::kNegativeStep;
  if (!IsValidDuration(hb.step_duration_s) || !IsValidDuration(hb.data_wait_s) ||
      !IsValidOptionalDuration(hb.compute_s) || !IsValidDuration(hb.checkpoint_blocking_s) ||
      !IsValidDuration(hb.checkpoint_async_s) || !IsValidDuration(hb.queued_s)) {
    return RejectReason::kBadDuration;
  }
  if (hb.exception_type.size() > kMaxExceptionTypeLength ||
      hb.exception_message.size() > kMaxExceptionMessageLength ||
      hb.verdict_reason.size() > kMaxReasonLength) {
    return RejectReason::kTooLong;
  }
  if (hb.kind == HeartbeatKind::kVerdict && hb.verdict == VerdictAction::kUnspecified) {
    return RejectReason::kBadVerdict;
  }
  if (!ValidSignals(hb)) return RejectReason::kBadSignal;
  // Kill criteria only in a KILL_CRITERIA heartbeat, within their bounds.
  if ((hb.kind == HeartbeatKind::kKillCriteria) != hb.kill_criteria.has_value() ||
      (hb.kill_criteria && !CheckKillCriteria(*hb.kill_criteria).ok())) {
    return RejectReason::kBadSignal;
  }
  return std::nullopt;
}

void BoundLauncher(LauncherInfo& launcher) {
  std::vector<std::string>& lines = launcher.stderr_lines;
  if (lines.size() > kMaxStderrExcerptLines) {
    lines.erase(lines.begin(), lines.end() - kMaxStderrExcerptLines);
  }
  for (std::string& line : lines) {
    if (line.size() > kMaxStderrLineBytes || !IsValidReason(line)) {
      line = OutputLine(line, kMaxStderrLineBytes);
    }
  }
}

}  // namespace trainsup
