#ifndef TRAINSUP_DAEMON_CORE_REJECT_REASON_H_
#define TRAINSUP_DAEMON_CORE_REJECT_REASON_H_

#include <array>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace trainsup {

// Why a heartbeat was refused. A fixed set, so that the
// trainsup_heartbeats_rejected_total{reason} series stay bounded. The first
// group is decided by the agent (it sees the datagram), the rest by the
// supervisor (it sees the job). Documented in docs/heartbeats.md.
enum class RejectReason {
  // agent
  kInvalidJson = 0,    // not a JSON object of RankHeartbeat
  kUnknownField,       // a field RankHeartbeat does not have
  kOversize,           // datagram larger than the agent accepts
  kWrongSender,        // sent by another uid than the agent's
  // supervisor
  kBadKind,            // kind missing or unknown
  kBadJob,             // job id empty, too long or with forbidden characters
  kJobMismatch,        // not the job of the agent that forwarded it
  kBadWorldSize,       // world_size 0 or above --max-world-size
  kRankOutOfRange,     // rank >= world_size (or local_rank >= world_size)
  kNegativeStep,       // step < 0
  kStepRegressed,      // step below the rank's last step in the same generation
  kBadDuration,        // a duration negative, NaN or infinite
  kStaleGeneration,    // from an older generation than the job's current one
  kWorldSizeMismatch,  // world_size differs from the job's in the same generation
  kTooLong,            // a string field beyond its documented limit
  kUnknownGeneration,  // a generation of the job this supervisor never started
  kBadVerdict,         // a VERDICT without a known action
  kBadSignal,          // a training-signal field out of its range (validation.h)
  kOther,              // an agent-reported reason this supervisor does not know
  kCount,              // number of reasons; not a reason
};

constexpr int kRejectReasonCount = static_cast<int>(RejectReason::kCount);

// Stable snake_case name, used in metrics, logs and the agent report.
absl::string_view RejectReasonName(RejectReason reason);
// Inverse of RejectReasonName; unknown names map to kOther.
RejectReason RejectReasonFromName(absl::string_view name);

// Counts by reason.
class RejectCounts {
 public:
  void Add(RejectReason reason, uint64_t n = 1) { counts_[static_cast<int>(reason)] += n; }
  uint64_t Get(RejectReason reason) const { return counts_[static_cast<int>(reason)]; }
  uint64_t Total() const;

 private:
  std::array<uint64_t, kRejectReasonCount> counts_{};
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_REJECT_REASON_H_
