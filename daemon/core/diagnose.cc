#include "daemon/core/diagnose.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/format.h"
#include "daemon/core/job_stats.h"
#include "daemon/core/kill_criteria.h"

namespace trainsup {
namespace {

using Figures = std::vector<std::pair<std::string, double>>;

std::optional<double> FigureOf(const Event& e, absl::string_view name) {
  for (const auto& [key, value] : e.figures) {
    if (key == name) return value;
  }
  return std::nullopt;
}

// Adds `from`'s figures that `to` does not name yet.
void MergeFigures(const Figures& from, Figures* to) {
  for (const auto& figure : from) {
    const bool named = std::any_of(to->begin(), to->end(),
                                   [&](const auto& f) { return f.first == figure.first; });
    if (!named) to->push_back(figure);
  }
}

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

// A finding of `check`, "ok" until found otherwise; `command` shows more.
Finding NewFinding(DiagnosisCheck check, std::string command) {
  Finding f;
  f.check = check;
  f.command = std::move(command);
  return f;
}

std::string NodeName(const DiagnoseInput& in, NodeIndex node) {
  return node < in.nodes->size() ? (*in.nodes)[node].name : std::string();
}

// The latest event of `job` for which `pred` holds; null when none.
template <typename Pred>
const Event* Latest(const std::vector<Event>& events, Pred pred) {
  for (auto it = events.rbegin(); it != events.rend(); ++it) {
    if (pred(*it)) return &*it;
  }
  return nullptr;
}

bool IsFailureEvent(const Event& e) {
  return e.kind == EventKind::kStall || e.kind == EventKind::kCrash ||
         e.kind == EventKind::kNodeLost;
}

// ---- 1. Progress ----

// What restarts a job that waits for an operator: `resume`, once an agent
// waits to run it (with none, its next generation would start nowhere).
std::string UntilResumed(const JobView& job) {
  if (job.agents_waiting > 0) {
    return absl::StrCat("not restarted until `trainsupctl resume ", job.id, "`");
  }
  return absl::StrCat("not restarted, and no agent waits to run it (its agents have left): "
                      "start them again, then `trainsupctl resume ", job.id, "`");
}

// What trainsupd did about a failure and does next, by the job's state,
// with where the next generation resumes when trainsupd says.
std::string Handling(const JobView& job, absl::Time now) {
  const std::string resume = job.resume_advice.empty() ? "" : absl::StrCat("; ", job.resume_advice);
  switch (job.state) {
    case JobState::kStopping:
      return absl::StrCat("stopping every node; then generation ", job.generation + 1,
                          " starts (restart ", job.restarts + 1, ")", resume);
    case JobState::kRestarting:
      return absl::StrCat("stopped everywhere; generation ", job.generation + 1, " starts in ",
                          HumanSeconds(std::max(0.0, Seconds(job.restart_at - now))), resume);
    case JobState::kHeld:
      return absl::StrCat("held: ", UntilResumed(job), resume);
    case JobState::kFailed:
      return "failed: not restarted (no node left to run on)";
    default:
      return "not stopped: trainsupd only reports it (--observe-only)";
  }
}

// The stack to show for `failure`: the culprit's group of the stacks taken
// for it, else the smallest group (the odd one out).
std::string CulpritStack(const DiagnoseInput& in, const Event* failure, size_t max_bytes) {
  const StacksView* stacks = in.stacks;
  if (stacks == nullptr || stacks->groups.empty()) return "";
  if (failure != nullptr && stacks->event_id != failure->id &&
      stacks->generation != failure->generation) {
    return "";
  }
  const StackGroup* shown = &stacks->groups.front();
  for (const StackGroup& g : stacks->groups) {
    if (g.culprit) shown = &g;
  }
  return ClipText(shown->stack, max_bytes);
}

// A job a kill criterion stopped: the criterion, its evidence, the saving.
Finding Killed(const DiagnoseInput& in, Finding f) {
  const JobView& job = *in.job;
  f.summary = absl::StrCat(JobStateName(job.state), ": ", job.state_reason);
  f.figures = {{"step", static_cast<double>(job.step)},
               {"generation", static_cast<double>(job.generation)}};
  const Event* kill = Latest(*in.events, [](const Event& e) {
    return e.kind == EventKind::kKilledByCriterion;
  });
  if (kill != nullptr) {
    f.event_id = kill->id;
    MergeFigures(kill->figures, &f.figures);
    if (std::optional<double> saved = FigureOf(*kill, "gpu_seconds_saved"); saved) {
      absl::StrAppend(&f.summary, "; ", HumanSeconds(*saved), " of GPU time saved");
    }
  }
  f.handling = absl::StrCat("killed: stopped on every node and ", UntilResumed(job));
  f.figures.emplace_back("agents_waiting", job.agents_waiting);
  f.command = absl::StrCat("trainsupctl kill-criteria ", job.id, " list");
  f.fix = absl::StrCat("the run has lost against its criteria: give its allocation back, or fix "
                       "it (data, learning rate) and `trainsupctl resume ", job.id, "`");
  return f;
}

Finding CheckProgress(const DiagnoseInput& in, absl::Time now, const DiagnoseOptions& o) {
  const JobView& job = *in.job;
  Finding f = NewFinding(DiagnosisCheck::kProgress, absl::StrCat("trainsupctl events ", job.id));
  const bool failing = job.stalled || job.state == JobState::kStopping ||
                       job.state == JobState::kRestarting || job.state == JobState::kHeld ||
                       job.state == JobState::kFailed || job.state == JobState::kKilled;
  if (!failing) {
    if (job.state == JobState::kFinished) {
      f.summary = absl::StrCat("finished at step ", job.step, " (generation ", job.generation,
                               ")");
      f.figures = {{"step", static_cast<double>(job.step)},
                   {"generation", static_cast<double>(job.generation)}};
      return f;
    }
    if (job.step < 0 || job.last_progress == absl::InfinitePast()) {
      f.status = FindingStatus::kNoData;
      f.summary = absl::StrCat("starting: ", job.ranks_reporting, " of ", job.world_size,
                               " ranks reporting, no step yet in generation ", job.generation);
      f.figures = {{"ranks_reporting", job.ranks_reporting},
                   {"world_size", job.world_size},
                   {"generation", static_cast<double>(job.generation)}};
      return f;
    }
    const double since = std::max(0.0, Seconds(now - job.last_progress));
    f.figures = {{"step", static_cast<double>(job.step)},
                 {"since_progress_seconds", since},
                 {"generation", static_cast<double>(job.generation)}};
    if (job.seen.dead > 0) {
      // Its ranks are exiting (the end of the run, or a crash being judged):
      // not stepping, and not judged for a stall.
      f.summary = absl::StrCat("ending: ", job.seen.dead, " of ", job.ranks_reporting,
                               " ranks exited; the last step ", job.step, " was ",
                               HumanSeconds(since), " ago");
      f.figures.emplace_back("ranks_exited", job.seen.dead);
      return f;
    }
    f.summary = absl::StrCat("stepping: step ", job.step, ", last advanced ",
                             HumanSeconds(since), " ago");
    if (job.stall_threshold) {
      absl::StrAppend(&f.summary, " (stall threshold ",
                      HumanSeconds(Seconds(*job.stall_threshold)), ")");
      f.figures.emplace_back("threshold_seconds", Seconds(*job.stall_threshold));
    }
    return f;
  }

  f.status = FindingStatus::kProblem;
  if (job.state == JobState::kKilled ||
      (job.state == JobState::kStopping && IsKillReason(job.state_reason))) {
    return Killed(in, std::move(f));
  }
  const Event* failure = Latest(*in.events, IsFailureEvent);
  const Event* hold = job.state == JobState::kHeld
                          ? Latest(*in.events, [](const Event& e) { return e.kind == EventKind::kHold; })
                          : nullptr;
  // The culprit: the stall's, else the failure event's, else the failure
  // the state store recorded.
  if (job.stalled && job.stall_culprit) {
    f.rank = job.stall_culprit;
    f.node = job.stall_culprit_node;
  } else if (failure != nullptr && failure->rank) {
    f.rank = failure->rank;
    f.node = failure->node;
  } else if (failure != nullptr) {
    f.node = failure->node;
  } else if (job.last_failure) {
    f.rank = job.last_failure->rank;
    f.node = job.last_failure->node;
  }

  std::string what = job.stalled ? "hung" : std::string(JobStateName(job.state));
  if (failure != nullptr) {
    absl::StrAppend(&what, " after a ", EventKindName(failure->kind), " in generation ",
                    failure->generation);
    if (std::optional<double> step = FigureOf(*failure, "step"); step) {
      absl::StrAppend(&what, " at step ", static_cast<int64_t>(*step));
    }
    f.event_id = failure->id;
  }
  f.summary = what;
  if (f.rank) {
    absl::StrAppend(&f.summary, "; culprit rank ", *f.rank, f.node.empty() ? "" : " on ", f.node);
  } else if (!f.node.empty()) {
    absl::StrAppend(&f.summary, "; node ", f.node);
  }
  f.figures = {{"step", static_cast<double>(job.step)},
               {"generation", static_cast<double>(job.generation)},
               {"restarts", static_cast<double>(job.restarts)}};
  if (job.last_progress != absl::InfinitePast()) {
    f.figures.emplace_back("since_progress_seconds",
                           std::max(0.0, Seconds(now - job.last_progress)));
  }
  // Node or workload: whether the failure was charged to its node.
  if (job.last_failure) {
    const bool node_fault = job.last_failure->charged;
    absl::StrAppend(&f.summary, node_fault ? " (the node's fault: counts toward its quarantine)"
                                           : " (the workload's: no node charged)");
    f.figures.emplace_back("node_fault", node_fault ? 1 : 0);
  }
  if (hold != nullptr) {
    absl::StrAppend(&f.summary, "; held: ", job.state_reason);
    MergeFigures(hold->figures, &f.figures);
  } else if (job.state == JobState::kFailed && !job.state_reason.empty()) {
    absl::StrAppend(&f.summary, ": ", job.state_reason);
  }
  if (failure != nullptr) MergeFigures(failure->figures, &f.figures);
  if (job.state == JobState::kRestarting) {
    f.figures.emplace_back("restart_in_seconds", std::max(0.0, Seconds(job.restart_at - now)));
  }
  if (job.state == JobState::kHeld || job.state == JobState::kFailed) {
    f.figures.emplace_back("agents_waiting", job.agents_waiting);
  }
  if (job.resume_limit) {
    f.figures.emplace_back("resume_limit", static_cast<double>(*job.resume_limit));
  }
  f.handling = Handling(job, now);

  f.stack = CulpritStack(in, failure, o.max_stack_bytes);
  const bool hang = job.stalled || (failure != nullptr && failure->kind != EventKind::kCrash);
  if (!f.stack.empty() || (hang && in.stacks != nullptr)) {
    f.command = absl::StrCat("trainsupctl stacks ", job.id);
  }
  if (hang) {
    f.fix = "read the culprit's stack: the collective it never reached, a data-loader worker, "
            "a deadlock, I/O";
  } else if (job.last_failure && !job.last_failure->charged) {
    f.fix = absl::StrCat("fix the training code's failure, then `trainsupctl resume ", job.id,
                         "` if held");
  } else {
    f.fix = "check the node (`trainsupctl nodes`); trainsupd restarts the job, and quarantines "
            "a node that keeps failing";
  }
  return f;
}

// ---- 2. Input ----

Finding CheckInput(const DiagnoseInput& in, const DiagnoseOptions& o) {
  const JobView& job = *in.job;
  Finding f = NewFinding(DiagnosisCheck::kInput, absl::StrCat("trainsupctl job ", job.id));
  // Per node: the mean of its ranks' shares, and its worst rank.
  struct NodeShare {
    double sum = 0;
    int ranks = 0;
    const RankView* worst = nullptr;
  };
  std::map<NodeIndex, NodeShare> by_node;
  std::vector<double> shares;
  for (const RankView& r : *in.ranks) {
    if (!r.has_step_shares) continue;
    shares.push_back(r.data_wait_share);
    NodeShare& n = by_node[r.node];
    n.sum += r.data_wait_share;
    ++n.ranks;
    if (n.worst == nullptr || r.data_wait_share > n.worst->data_wait_share) n.worst = &r;
  }
  if (shares.empty()) {
    f.status = FindingStatus::kNoData;
    f.summary = "no step times yet";
    return f;
  }
  const double median = MedianInPlace(shares);
  NodeIndex worst_node = kNoNode;
  double worst_share = -1;
  int over = 0;
  for (const auto& [node, n] : by_node) {
    const double share = n.sum / n.ranks;
    if (share >= o.input_bound_share) ++over;
    if (share > worst_share) {
      worst_share = share;
      worst_node = node;
    }
  }
  const RankView& worst_rank = *by_node[worst_node].worst;
  f.node = NodeName(in, worst_node);
  f.rank = worst_rank.rank;
  f.figures = {{"node_share", worst_share},
               {"rank_share", worst_rank.data_wait_share},
               {"job_median_share", median},
               {"nodes_over", over},
               {"nodes", static_cast<double>(by_node.size())},
               {"threshold", o.input_bound_share}};
  if (over == 0) {
    f.summary = absl::StrCat("not input-bound: at most ", Percent(worst_share),
                             " of each step waits for data (", f.node, "; threshold ",
                             Percent(o.input_bound_share), ")");
    return f;
  }
  f.status = FindingStatus::kProblem;
  const std::string where = over > 1 && over == static_cast<int>(by_node.size())
                                ? absl::StrCat("every node (", over, "), the most on ", f.node)
                                : f.node;
  f.summary = absl::StrCat("input-bound on ", where, ": ", Percent(worst_share),
                           " of each step waiting for data (rank ", worst_rank.rank, ": ",
                           Percent(worst_rank.data_wait_share), "; job median ",
                           Percent(median), ")");
  f.fix = "more data-loader workers, pinned memory, prefetch; `trainsupctl budget` says what a "
          "faster loader buys";
  return f;
}

// ---- 3. Straggler ----

Finding CheckStraggler(const DiagnoseInput& in, absl::Time now) {
  const JobView& job = *in.job;
  Finding f = NewFinding(DiagnosisCheck::kStraggler,
                         absl::StrCat("trainsupctl ranks ", job.id, " --sort compute-p99"));
  std::vector<double> p99s;
  const RankView* slowest = nullptr;
  const RankView* slowest_flagged = nullptr;
  for (const RankView& r : *in.ranks) {
    if (!r.has_compute_samples) continue;
    p99s.push_back(r.compute_p99);
    if (slowest == nullptr || r.compute_p99 > slowest->compute_p99) slowest = &r;
    if (r.straggler && (slowest_flagged == nullptr ||
                        r.compute_p99 > slowest_flagged->compute_p99)) {
      slowest_flagged = &r;
    }
  }
  if (p99s.empty()) {
    f.status = FindingStatus::kNoData;
    f.summary = "no compute times (the script does not use hb.compute())";
    return f;
  }
  const double median = MedianInPlace(p99s);
  const RankView& shown = slowest_flagged != nullptr ? *slowest_flagged : *slowest;
  const double ratio = median > 0 ? shown.compute_p99 / median : 0;
  f.rank = shown.rank;
  f.node = NodeName(in, shown.node);
  f.figures = {{"ratio", ratio},
               {"compute_p99_seconds", shown.compute_p99},
               {"median_compute_p99_seconds", median},
               {"stragglers", static_cast<double>(job.stragglers.size())}};
  if (slowest_flagged == nullptr) {
    f.summary = absl::StrFormat("no straggler: the slowest rank's compute p99 is %.2fx the median",
                                ratio);
    return f;
  }
  f.status = FindingStatus::kProblem;
  f.summary = absl::StrFormat("rank %d on %s at %.2fx the median compute p99 (%s against %s)",
                              shown.rank, f.node, ratio, HumanSeconds(shown.compute_p99),
                              HumanSeconds(median));
  const uint32_t rank = shown.rank;
  const Event* flagged = Latest(*in.events, [&](const Event& e) {
    return e.kind == EventKind::kStraggler && e.rank == rank && e.generation == job.generation;
  });
  if (flagged != nullptr) {
    const double persistent = std::max(0.0, Seconds(now - flagged->time));
    absl::StrAppend(&f.summary, ", persistent for ", HumanSeconds(persistent));
    f.figures.emplace_back("persistent_seconds", persistent);
    f.event_id = flagged->id;
  }
  if (job.stragglers.size() > 1) {
    absl::StrAppend(&f.summary, " (", job.stragglers.size(), " stragglers)");
  }
  f.fix = "look at the node: thermal throttling, a noisy neighbour, a slower device; straggling "
          "counts toward its quarantine";
  return f;
}

// ---- 4. Communication ----

Finding CheckCommunication(const DiagnoseInput& in, const DiagnoseOptions& o) {
  const JobView& job = *in.job;
  Finding f =
      NewFinding(DiagnosisCheck::kCommunication, absl::StrCat("trainsupctl ranks ", job.id));
  // In a synchronous job every rank's step is as long as the slowest
  // rank's work plus the collective: what a rank spends outside its own
  // work is the collective plus its wait for slower peers. The ranks that
  // wait least measure the collective itself: the lowest decile (nearest
  // rank; the fastest rank of a small job), never a mean.
  std::vector<const RankView*> rows;
  for (const RankView& r : *in.ranks) {
    if (r.has_comm_share) rows.push_back(&r);
  }
  if (rows.empty()) {
    f.status = FindingStatus::kNoData;
    f.summary = "no compute times to tell communication from (hb.compute())";
    return f;
  }
  std::sort(rows.begin(), rows.end(), [](const RankView* a, const RankView* b) {
    return a->comm_share != b->comm_share ? a->comm_share < b->comm_share : a->rank < b->rank;
  });
  const size_t at = (rows.size() + 9) / 10 - 1;  // ceil(n / 10) - 1
  const RankView& low = *rows[at];
  const double share = low.comm_share;
  const double trend = low.comm_share_trend;
  f.rank = low.rank;
  f.node = NodeName(in, low.node);
  f.figures = {{"comm_share", share}, {"trend", trend}, {"threshold", o.comm_bound_share}};
  // Within 2 points either way: steady.
  const std::string trend_text =
      std::fabs(trend) < 0.02
          ? "steady"
          : absl::StrFormat("%s %.1f points", trend > 0 ? "rising" : "falling",
                            100 * std::fabs(trend));
  const std::string what = absl::StrCat(
      Percent(share), " of each step in the collective (outside compute and data wait, on the "
      "ranks that wait least), ", trend_text);
  if (share < o.comm_bound_share) {
    f.summary = absl::StrCat("not communication-bound: ", what);
    return f;
  }
  f.status = FindingStatus::kProblem;
  f.summary = absl::StrCat("communication-bound: ", what);
  f.fix = "overlap communication with compute (bucketed all-reduce), fewer or larger "
          "all-reduces (gradient accumulation), check the interconnect";
  return f;
}

// ---- 5. Signals ----

void CheckSignals(const DiagnoseInput& in, absl::Time now, const DiagnoseOptions& o,
                  std::vector<Finding>* out) {
  const std::string events_command = absl::StrCat("trainsupctl events ", in.job->id);
  size_t found = 0;
  // The kinds the table gives a fix for (common/event_kinds.cc).
  for (const EventKindInfo& kind : EventKindTable()) {
    if (kind.diagnose_fix == nullptr) continue;
    const Event* e = Latest(*in.events, [&](const Event& ev) {
      return ev.kind == kind.kind && now - ev.time <= o.signal_window;
    });
    if (e == nullptr) continue;
    ++found;
    Finding& f = out->emplace_back(NewFinding(DiagnosisCheck::kSignals, events_command));
    f.status = FindingStatus::kProblem;
    f.summary = absl::StrCat(EventKindName(e->kind), ": ", e->message);
    f.fix = kind.diagnose_fix;
    f.rank = e->rank;
    f.node = e->node;
    f.figures = e->figures;
    f.figures.emplace_back("age_seconds", std::max(0.0, Seconds(now - e->time)));
    f.event_id = e->id;
  }
  if (found > 0) return;
  Finding& f = out->emplace_back(NewFinding(DiagnosisCheck::kSignals, events_command));
  f.summary =
      absl::StrCat("no training signal in the last ", HumanSeconds(Seconds(o.signal_window)));
  f.figures = {{"window_seconds", Seconds(o.signal_window)}};
}

DiagnosisVerdict VerdictOf(DiagnosisCheck check) {
  switch (check) {
    case DiagnosisCheck::kProgress: return DiagnosisVerdict::kNotProgressing;
    case DiagnosisCheck::kInput: return DiagnosisVerdict::kInputBound;
    case DiagnosisCheck::kStraggler: return DiagnosisVerdict::kStraggler;
    case DiagnosisCheck::kCommunication: return DiagnosisVerdict::kCommunicationBound;
    case DiagnosisCheck::kSignals: return DiagnosisVerdict::kTrainingSignal;
  }
  return DiagnosisVerdict::kHealthy;
}

// "so far" unless the job has finished: its goodput is final.
std::string GoodputText(const LedgerTotals& ledger, JobState state) {
  return absl::StrCat("goodput ", Percent(ledger.goodput()),
                      state == JobState::kFinished ? "" : " so far", " (useful ",
                      HumanSeconds(ledger.seconds[static_cast<int>(Bucket::kUseful)]), " of ",
                      HumanSeconds(ledger.wall_seconds()), ")");
}

}  // namespace

absl::string_view DiagnosisVerdictName(DiagnosisVerdict verdict) {
  switch (verdict) {
    case DiagnosisVerdict::kStarting: return "starting";
    case DiagnosisVerdict::kNotProgressing: return "not_progressing";
    case DiagnosisVerdict::kInputBound: return "input_bound";
    case DiagnosisVerdict::kStraggler: return "straggler";
    case DiagnosisVerdict::kCommunicationBound: return "communication_bound";
    case DiagnosisVerdict::kTrainingSignal: return "training_signal";
    case DiagnosisVerdict::kHealthy: return "healthy";
    case DiagnosisVerdict::kFinished: return "finished";
  }
  return "unknown";
}

absl::string_view DiagnosisCheckName(DiagnosisCheck check) {
  switch (check) {
    case DiagnosisCheck::kProgress: return "progress";
    case DiagnosisCheck::kInput: return "input";
    case DiagnosisCheck::kStraggler: return "straggler";
    case DiagnosisCheck::kCommunication: return "communication";
    case DiagnosisCheck::kSignals: return "signals";
  }
  return "unknown";
}

absl::string_view FindingStatusName(FindingStatus status) {
  switch (status) {
    case FindingStatus::kOk: return "ok";
    case FindingStatus::kProblem: return "problem";
    case FindingStatus::kNoData: return "no_data";
  }
  return "unknown";
}

bool IsTrainingSignal(EventKind kind) {
  return kind != EventKind::kCount && EventKindInfoOf(kind).diagnose_fix != nullptr;
}

Diagnosis Diagnose(const DiagnoseInput& in, absl::Time now, const DiagnoseOptions& options) {
  const JobView& job = *in.job;
  Diagnosis d;
  d.job = job.id;
  d.state = job.state;
  d.ledger = job.ledger;
  d.findings.push_back(CheckProgress(in, now, options));
  d.findings.push_back(CheckInput(in, options));
  d.findings.push_back(CheckStraggler(in, now));
  d.findings.push_back(CheckCommunication(in, options));
  CheckSignals(in, now, options, &d.findings);

  const Finding& progress = d.findings.front();
  if (progress.status == FindingStatus::kNoData) {
    d.verdict = DiagnosisVerdict::kStarting;
    d.headline = progress.summary;
    return d;
  }
  if (job.state == JobState::kFinished) {
    d.verdict = DiagnosisVerdict::kFinished;
    d.headline = absl::StrCat(progress.summary, "; ", GoodputText(job.ledger, job.state));
    return d;
  }
  for (const Finding& f : d.findings) {
    if (f.status != FindingStatus::kProblem) continue;
    d.verdict = VerdictOf(f.check);
    d.headline = f.summary;
    return d;
  }
  d.verdict = DiagnosisVerdict::kHealthy;
  d.headline = absl::StrCat("healthy: ", GoodputText(job.ledger, job.state));
  return d;
}

}  // namespace trainsup
