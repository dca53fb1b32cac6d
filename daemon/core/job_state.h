#ifndef TRAINSUP_DAEMON_CORE_JOB_STATE_H_
#define TRAINSUP_DAEMON_CORE_JOB_STATE_H_

#include <optional>

#include "absl/strings/string_view.h"

namespace trainsup {

// A job's lifecycle as the supervisor, its only restart authority, drives it:
//
//   pending ──> running ──> stopping ──> restarting ──> running ...
//      │           │            │             │
//      │           │            └──> held <───┘     (restart cap hit)
//      │           │            │     │
//      │           │            │     └──> restarting  (operator resume)
//      │           │            └──> killed ──> restarting  (a kill criterion;
//      │           │                                         operator resume)
//      └───────────┴──> finished | failed
//
// finished and failed go back to pending only when the same job id is run
// again by fresh agents.
enum class JobState {
  kPending = 0,  // known, not yet running its current generation
  kRunning,      // the current generation runs
  kStopping,     // stop sent to every agent; waiting until all have stopped
  kRestarting,   // all stopped; the next generation starts after a backoff
  kHeld,         // restart cap hit: no more restarts until `trainsupctl resume`
  kFinished,     // every node's command exited 0
  kFailed,       // cannot run: no node left to run on
  // A kill criterion was met (kill_criteria.h): stopped, not restarted until
  // `trainsupctl resume`.
  kKilled,
  kCount,        // number of states; not a state
};
constexpr int kJobStateCount = static_cast<int>(JobState::kCount);

// Stable snake_case name ("pending", "running", ...).
absl::string_view JobStateName(JobState state);
std::optional<JobState> JobStateFromName(absl::string_view name);

// The explicit table of allowed transitions. A state to itself is not a
// transition (and not allowed).
bool IsAllowedTransition(JobState from, JobState to);

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_JOB_STATE_H_
