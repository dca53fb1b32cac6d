#ifndef TRAINSUP_DAEMON_CORE_DIAGNOSE_H_
#define TRAINSUP_DAEMON_CORE_DIAGNOSE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/core/event_log.h"
#include "daemon/core/job_view.h"

// `trainsupctl diagnose JOB`: the triage flowchart an engineer walks over a
// training job (docs/diagnose.md), on the read model's values, as one
// verdict and its findings in the order walked:
//   1. progress       is it stepping? else the failure, its culprit, the
//                     culprit's stack, node or workload, what was done, what next
//   2. input          the share of each step waiting for data, per rank and node
//   3. straggler      a rank flagged slow, its compute against the median, how long
//   4. communication  the share of each step in the collective (outside compute and
//                     data wait, on the ranks that wait least), its trend
//   5. signals        the training signals' events (signal rules)
//   6. else healthy, with the job's goodput so far.
// The verdict is the first check that finds a problem. Pure: a function of
// its input and `now`, no clock, no I/O.

namespace trainsup {

enum class DiagnosisVerdict {
  kStarting = 0,        // no step yet in the current generation
  kNotProgressing,      // stalled, crashed, stopping, restarting, held or failed
  kInputBound,
  kStraggler,
  kCommunicationBound,
  kTrainingSignal,
  kHealthy,
  kFinished,            // every node's command exited 0
};
// "starting", "not_progressing", "input_bound", "straggler",
// "communication_bound", "training_signal", "healthy", "finished".
absl::string_view DiagnosisVerdictName(DiagnosisVerdict verdict);

// The flowchart's checks, in its order.
enum class DiagnosisCheck { kProgress = 0, kInput, kStraggler, kCommunication, kSignals };
// "progress", "input", "straggler", "communication", "signals".
absl::string_view DiagnosisCheckName(DiagnosisCheck check);

enum class FindingStatus { kOk = 0, kProblem, kNoData };
absl::string_view FindingStatusName(FindingStatus status);  // "ok", "problem", "no_data"

// What one check found.
struct Finding {
  DiagnosisCheck check = DiagnosisCheck::kProgress;
  FindingStatus status = FindingStatus::kOk;
  std::string summary;  // one line for people; its numbers are among `figures`
  std::string fix;      // what to do about it (problems only)
  // Progress, a failure: what trainsupd did about it and does next.
  std::string handling;
  std::string command;  // the trainsupctl command that shows more
  std::optional<uint32_t> rank;  // the rank it names, if any
  std::string node;              // the node it names, if any
  // Its numbers in base units (shares as fractions, seconds), by name.
  std::vector<std::pair<std::string, double>> figures;
  std::string stack;      // progress, a hang: the culprit's Python stack
  uint64_t event_id = 0;  // the event it rests on (0: none)
};

struct Diagnosis {
  std::string job;
  JobState state = JobState::kPending;
  DiagnosisVerdict verdict = DiagnosisVerdict::kHealthy;
  std::string headline;  // the verdict in one line: the first problem's summary
  // Progress, input, straggler, communication, then one per training
  // signal kind seen (or one "ok" signals finding).
  std::vector<Finding> findings;
  LedgerTotals ledger;  // the job's goodput so far
};

struct DiagnoseOptions {
  // A node is input-bound when its ranks wait for data this share of their
  // step time (the mean of its ranks' recent shares). Default: 0.2.
  double input_bound_share = 0.2;
  // The job is communication-bound when the ranks that wait least for their
  // peers (the lowest decile) spend this share of their step time outside
  // compute and data wait: in the collective itself. Default: 0.3.
  double comm_bound_share = 0.3;
  // Training-signal events this recent count. Default: 10 minutes.
  absl::Duration signal_window = absl::Minutes(10);
  // At most this many bytes of a culprit's stack. Default: 8 KiB.
  size_t max_stack_bytes = 8192;
};

// What the diagnosis reads: the read model's views of one job.
struct DiagnoseInput {
  const JobView* job = nullptr;
  const std::vector<RankView>* ranks = nullptr;  // its ranks heard from, by rank
  const std::vector<NodeView>* nodes = nullptr;  // indexed by RankView::node
  const StacksView* stacks = nullptr;            // its latest stacks; null: none
  const std::vector<Event>* events = nullptr;    // its kept events, oldest first
};

// The event kinds the signals check reads as training signals
// (docs/diagnose.md): those the event-kind table gives a fix for
// (common/event_kinds.cc). Each is reported as its latest event within
// signal_window, with its figures, rank and node.
bool IsTrainingSignal(EventKind kind);

// REQUIRES: every pointer of `input` but `stacks` set.
Diagnosis Diagnose(const DiagnoseInput& input, absl::Time now,
                   const DiagnoseOptions& options = {});

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_DIAGNOSE_H_
