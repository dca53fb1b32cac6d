#include "daemon/core/job_state.h"

#include <array>

namespace trainsup {
namespace {

constexpr std::array<absl::string_view, kJobStateCount> kNames = {
    "pending", "running", "stopping", "restarting", "held", "finished", "failed", "killed"};

using S = JobState;
struct Transition {
  JobState from;
  JobState to;
};
// Every allowed transition, and nothing else.
constexpr Transition kAllowed[] = {
    {S::kPending, S::kRunning},      // the generation's ranks report
    {S::kPending, S::kStopping},     // a failure before the first step
    {S::kPending, S::kFinished},     // ended cleanly before any rank reported
    {S::kPending, S::kFailed},       // no node to run on
    {S::kRunning, S::kStopping},     // crash, stall, quarantine of one of its nodes
    {S::kRunning, S::kFinished},     // every node's command exited 0
    {S::kRunning, S::kFailed},       // no node to run on
    {S::kStopping, S::kRestarting},  // all stopped (or the stop deadline passed)
    {S::kStopping, S::kHeld},        // ... and the restart cap says no
    {S::kStopping, S::kFailed},      // no node left to restart on
    {S::kRestarting, S::kRunning},   // the next generation was started
    {S::kRestarting, S::kHeld},      // the cap was hit meanwhile
    {S::kRestarting, S::kFailed},    // no node left to start on
    {S::kHeld, S::kRestarting},      // operator resume
    {S::kHeld, S::kFailed},          // no node left
    {S::kStopping, S::kKilled},      // stopped for a kill criterion
    {S::kKilled, S::kRestarting},    // operator resume
    {S::kFinished, S::kPending},     // the same job id run again
    {S::kFailed, S::kPending},       // the same job id run again
    {S::kFailed, S::kRestarting},    // operator resume
};

}  // namespace

absl::string_view JobStateName(JobState state) {
  int i = static_cast<int>(state);
  return i >= 0 && i < kJobStateCount ? kNames[i] : "unknown";
}

std::optional<JobState> JobStateFromName(absl::string_view name) {
  for (int i = 0; i < kJobStateCount; ++i) {
    if (kNames[i] == name) return static_cast<JobState>(i);
  }
  return std::nullopt;
}

bool IsAllowedTransition(JobState from, JobState to) {
  for (const Transition& t : kAllowed) {
    if (t.from == from && t.to == to) return true;
  }
  return false;
}

}  // namespace trainsup
