#include "daemon/core/reject_reason.h"

namespace trainsup {
namespace {

constexpr absl::string_view kNames[kRejectReasonCount] = {
    "invalid_json",     "unknown_field",    "oversize",       "wrong_sender",
    "bad_kind",         "bad_job",          "job_mismatch",   "bad_world_size",
    "rank_out_of_range", "negative_step",   "step_regressed", "bad_duration",
    "stale_generation", "world_size_mismatch", "too_long",
    "unknown_generation", "bad_verdict", "bad_signal", "other",
};

}  // namespace

absl::string_view RejectReasonName(RejectReason reason) {
  int i = static_cast<int>(reason);
  if (i < 0 || i >= kRejectReasonCount) return "other";
  return kNames[i];
}

RejectReason RejectReasonFromName(absl::string_view name) {
  for (int i = 0; i < kRejectReasonCount; ++i) {
    if (kNames[i] == name) return static_cast<RejectReason>(i);
  }
  return RejectReason::kOther;
}

uint64_t RejectCounts::Total() const {
  uint64_t total = 0;
  for (uint64_t c : counts_) total += c;
  return total;
}

}  // namespace trainsup
