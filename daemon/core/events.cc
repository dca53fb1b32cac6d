#include "daemon/core/events.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/format.h"

namespace trainsup {
namespace {

Event Make(absl::Time time, const EventJob& job, EventKind kind) {
  Event e;
  e.time = time;
  e.kind = kind;
  e.job = job.id;
  e.generation = job.generation;
  return e;
}

double FigureSeconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

// "no rank advanced for 20.5s (threshold 20.0s) at step 12".
std::string StallText(const StallVerdict& verdict, int64_t step) {
  if (verdict.startup) {
    return absl::StrCat("no first step ", TenthsOfSeconds(verdict.silent),
                        " after the generation started (start-up grace ",
                        TenthsOfSeconds(verdict.threshold), ")");
  }
  return absl::StrCat("no rank advanced for ", TenthsOfSeconds(verdict.silent), " (threshold ",
                      TenthsOfSeconds(verdict.threshold), ") at step ", step);
}

// Why `culprit` names its rank, or why it names none: "furthest behind: step
// 10, computing", "all 4 ranks seen at step 10, compute_done; undetermined
// (...)".
std::string CulpritText(const Culprit& c) {
  if (c.seen_ranks == 0) return c.unseen_ranks > 0 ? "no rank can be seen" : "no rank has reported";
  const std::string place =
      absl::StrCat("step ", c.behind_step, ", ", StepPhaseName(c.behind_phase));
  if (!c.rank) {
    return absl::StrCat(
        c.seen_ranks == 1 ? "the only rank seen" : absl::StrCat("all ", c.seen_ranks, " ranks seen"),
        " at ", place,
        c.unseen_ranks > 0 ? absl::StrCat("; ", c.unseen_ranks, " cannot be seen")
                           : "; undetermined (bracket each step's own work with hb.compute() to "
                             "name the culprit)");
  }
  return absl::StrCat(
      "furthest behind: ", place,
      c.behind_ranks > 1 ? absl::StrCat(" (", c.behind_ranks, " ranks there; this one silent longest)")
                         : "");
}

// How a rank failed: "(killed by SIGSEGV (signal 11))", "(exit code 1):
// ValueError: bad batch", "(exit code 1, after it began to exit with code
// 1)", with the exception it caught before its sys.exit or the node fault
// its last stderr line names. `d`: its failure as the crash verdict dates
// it.
std::string CauseText(const RankState& r, const RankDeath& d) {
  std::string out = absl::StrCat(
      "(", d.exit_known ? ExitStatusText(true, d.exit_code, d.signal)
                        : (r.death ? "exit status unknown" : "still tearing down"));
  if (!r.exception_type.empty()) {
    absl::StrAppend(&out, "): ", r.exception_type, ": ", r.exception_message,
                    r.exception_caught ? " (caught: it then called sys.exit)" : "");
  } else if (r.exiting) {
    absl::StrAppend(&out, ", after it began to exit",
                    r.exiting_code ? absl::StrCat(" with code ", *r.exiting_code) : "", ")");
  } else {
    absl::StrAppend(&out, ")");
  }
  if (r.exception_type.empty() && !r.stderr_line.empty()) {
    absl::StrAppend(&out, "; its last stderr line names a broken node: ", r.stderr_line);
  }
  return out;
}

// The figures CauseText states.
void AddCauseFigures(const RankState& r, const RankDeath& d, Event& e) {
  e.figures.emplace_back("exit_known", d.exit_known ? 1 : 0);
  if (r.exception_type.empty() && r.exiting && r.exiting_code) {
    e.figures.emplace_back("exiting_code", *r.exiting_code);
  }
}

// "3 of 4 ranks failed, 2 of them victims of a peer".
std::string CountsText(uint32_t failed, uint32_t ranks, uint32_t victims) {
  std::string out = absl::StrCat(failed, " of ", ranks, " ranks failed");
  if (victims > 0) absl::StrAppend(&out, ", ", victims, " of them victims of a peer");
  return out;
}

// "2 nodes (a, b)"; past kListCap nodes only the count: the names that
// matter are the ones left out.
std::string NodesStarted(const std::vector<std::string>& names) {
  std::string text = Counted(names.size(), "node", "nodes");
  if (names.size() <= kListCap) absl::StrAppend(&text, " (", ListSome(names), ")");
  return text;
}

// "; without n17, n903 (quarantined), n5 (not heard)", or "" when every
// node of the job runs.
std::string LeftOut(LeftOutNodes& left_out) {
  std::vector<std::string> groups;
  for (auto [names, why] : {std::make_pair(&left_out.quarantined, "quarantined"),
                            std::make_pair(&left_out.unreachable, "unreachable"),
                            std::make_pair(&left_out.unheard, "not heard"),
                            std::make_pair(&left_out.elsewhere, "left out: restart elsewhere"),
                            std::make_pair(&left_out.failed_preflight, "failed its preflight")}) {
    if (names->empty()) continue;
    std::sort(names->begin(), names->end());
    groups.push_back(absl::StrCat(ListSome(*names), " (", why, ")"));
  }
  if (groups.empty()) return "";
  return absl::StrCat("; without ", absl::StrJoin(groups, ", "));
}

// The figures every checkpoint_plan event has: the plan as published.
Event PlanEvent(absl::Time time, const EventJob& job, const CheckpointPlanSpec& plan) {
  Event e = Make(time, job, EventKind::kCheckpointPlan);
  e.figures = {{"plan_id", static_cast<double>(plan.plan_id)},
               {"interval_steps", static_cast<double>(plan.interval_steps)},
               {"effective_from_step", static_cast<double>(plan.effective_from_step)}};
  return e;
}

}  // namespace

Event StallEvent(absl::Time time, const EventJob& job, const StallVerdict& verdict, int64_t step,
                 const Culprit& culprit, const std::string& culprit_node) {
  Event e = Make(time, job, EventKind::kStall);
  e.message = StallText(verdict, step);
  if (culprit.rank) {
    e.rank = *culprit.rank;
    e.node = culprit_node;
    absl::StrAppend(&e.message, "; suspect rank ", *culprit.rank, " on ", e.node, ", ",
                    CulpritText(culprit));
  } else {
    absl::StrAppend(&e.message, "; culprit: ", CulpritText(culprit));
  }
  e.figures = {{"silent_seconds", FigureSeconds(verdict.silent)},
               {"threshold_seconds", FigureSeconds(verdict.threshold)},
               {"step", static_cast<double>(step)}};
  if (culprit.seen_ranks > 0) {
    e.figures.emplace_back("seen_ranks", culprit.seen_ranks);
    e.figures.emplace_back("behind_step", static_cast<double>(culprit.behind_step));
    e.figures.emplace_back("behind_ranks", culprit.behind_ranks);
  }
  return e;
}

Event NodeLostInStallEvent(absl::Time time, const EventJob& job, const StallVerdict& verdict,
                           int64_t step, const std::string& node, absl::Duration unheard,
                           const std::vector<uint32_t>& ranks) {
  Event e = Make(time, job, EventKind::kNodeLost);
  e.node = node;
  e.message = absl::StrCat("node ", node, " lost: not heard for ", TenthsOfSeconds(unheard),
                           " (ranks ", ListSome(ranks), ") while ", StallText(verdict, step),
                           " and every rank that can be seen waits for it");
  e.figures = {{"silent_seconds", FigureSeconds(verdict.silent)},
               {"threshold_seconds", FigureSeconds(verdict.threshold)},
               {"unheard_seconds", FigureSeconds(unheard)},
               {"lost_ranks", static_cast<double>(ranks.size())},
               {"step", static_cast<double>(step)}};
  return e;
}

Event CrashEvent(absl::Time time, const EventJob& job, const CrashVerdict& verdict,
                 const std::string& node, const Job& observed,
                 const std::optional<std::string>& workload_hold) {
  Event e = Make(time, job, EventKind::kCrash);
  e.node = node;
  const RankDeath& d = verdict.death;
  const uint32_t ranks = observed.ranks_reporting();
  const std::string counts = CountsText(verdict.failed_ranks, ranks, verdict.victims);
  switch (verdict.kind) {
    case CrashVerdict::Kind::kRank:
    case CrashVerdict::Kind::kNoCulprit: {
      const RankState& r = observed.rank(*verdict.rank);
      e.rank = *verdict.rank;
      e.message = absl::StrCat(
          "rank ", *verdict.rank, " on ", node, " ",
          verdict.kind == CrashVerdict::Kind::kRank
              ? absl::StrCat("died first ", CauseText(r, d), "; ", counts)
              : absl::StrCat("reported a peer's failure first ", CauseText(r, d),
                             "; no rank failed on its own and every rank can be seen; ", counts));
      e.figures = {{"exit_code", d.exit_code},
                   {"signal", d.signal},
                   {"failed_ranks", verdict.failed_ranks},
                   {"victims", verdict.victims},
                   {"step", static_cast<double>(r.step)},
                   {"ranks", ranks},
                   {"workload_repeat", workload_hold ? 1 : 0}};
      AddCauseFigures(r, d, e);
      if (workload_hold) absl::StrAppend(&e.message, "; ", *workload_hold);
      break;
    }
    case CrashVerdict::Kind::kNodeLost: {
      const uint32_t victim = *verdict.first_victim;
      const RankState& r = observed.rank(victim);
      e.kind = EventKind::kNodeLost;
      e.message = absl::StrCat(
          "node ", node, " lost: its agent cannot be heard and its ranks ",
          ListSome(verdict.lost_ranks),
          " cannot be seen, while every rank that failed is a victim of a peer ", CauseText(r, d),
          " first on rank ", victim, "; ", counts);
      e.figures = {{"lost_ranks", static_cast<double>(verdict.lost_ranks.size())},
                   {"failed_ranks", verdict.failed_ranks},
                   {"victims", verdict.victims},
                   {"ranks", ranks},
                   {"first_victim", victim},
                   {"exit_code", d.exit_code},
                   {"signal", d.signal}};
      AddCauseFigures(r, d, e);
      break;
    }
    case CrashVerdict::Kind::kLauncher:
      e.message = absl::StrCat("the command on ", node, " failed (",
                               ExitStatusText(true, d.exit_code, d.signal),
                               ") with no rank death to name");
      e.figures = {{"exit_code", d.exit_code}, {"signal", d.signal}};
      break;
  }
  return e;
}

Event EarlyCrashEvent(absl::Time time, const EventJob& job, const std::string& node,
                      const RankDeath& death, const JudgedEarlyFailure& early) {
  Event e = Make(time, job, EventKind::kCrash);
  e.node = node;
  const EarlyFailure& f = early.failure;
  e.message = absl::StrCat("the command on ", node, " failed (",
                           ExitStatusText(true, death.exit_code, death.signal),
                           ") before any rank reported",
                           f.cause.empty() ? " and wrote nothing to stderr"
                                           : absl::StrCat(": ", f.cause),
                           "; ", early.failed, " of the ", early.ran,
                           " nodes that ran the generation failed so");
  bool charged = false;
  switch (early.judgement.kind) {
    case EarlyJudgement::Kind::kNode:
      charged = true;
      absl::StrAppend(&e.message, "; ",
                      f.infrastructure ? "an infrastructure fault" : "a crash signal",
                      " on this node alone: charged to ", node);
      break;
    case EarlyJudgement::Kind::kWorkload:
      absl::StrAppend(&e.message, "; the workload's failure: the job is held, no node charged");
      break;
    case EarlyJudgement::Kind::kFirst:
      absl::StrAppend(&e.message, "; first seen: restarted, no node charged (held if it comes "
                                  "again)");
      break;
  }
  e.figures = {{"exit_code", death.exit_code},
               {"signal", death.signal},
               {"early_failure", 1},
               {"nodes_failed_early", static_cast<double>(early.failed)},
               {"nodes_ran", static_cast<double>(early.ran)},
               {"charged", charged ? 1 : 0},
               {"workload", early.judgement.kind == EarlyJudgement::Kind::kWorkload ? 1 : 0}};
  return e;
}

Event VerdictEvent(absl::Time time, const EventJob& job, std::optional<uint32_t> rank,
                   const std::string& node, const std::string& failure, const Verdict& verdict,
                   std::optional<int32_t> exit_code, const VerdictTaken& taken) {
  Event e = Make(time, job, EventKind::kVerdict);
  e.rank = rank;
  e.node = node;
  e.message = absl::StrCat(failure, node.empty() ? "" : absl::StrCat(" on ", node),
                           ": the job's own verdict is ", VerdictActionName(verdict.action), " (",
                           verdict.found_by,
                           verdict.reason.empty() ? "" : absl::StrCat(": ", verdict.reason),
                           "); ", taken.acted ? "" : "not acted on (--observe-only): ",
                           taken.text);
  e.figures = {{"action", static_cast<double>(verdict.action)}, {"acted", taken.acted ? 1 : 0}};
  if (exit_code) e.figures.emplace_back("exit_code", *exit_code);
  if (verdict.action == VerdictAction::kRestartElsewhere && taken.acted) {
    e.figures.emplace_back("on_node", taken.on_node);
    e.figures.emplace_back("quarantined", taken.quarantined ? 1 : 0);
  }
  return e;
}

Event StragglerEvent(absl::Time time, const EventJob& job, const StragglerChange& change,
                     const std::string& node, const StragglerOptions& options,
                     const GpuHealthState* slowed_gpu) {
  Event e = Make(time, job, change.flagged ? EventKind::kStraggler : EventKind::kStragglerCleared);
  e.rank = change.rank;
  e.node = node;
  e.message = absl::StrFormat(
      "rank %d on %s: compute p99 %.3fs vs job median p99 %.3fs (%.1fx)%s", change.rank, node,
      change.rank_p99_s, change.job_median_p99_s, change.ratio,
      change.flagged
          ? absl::StrFormat(" for %d windows of %d steps", options.persistence, options.window)
          : " again in line");
  e.figures = {{"rank_p99_seconds", change.rank_p99_s},
               {"job_median_p99_seconds", change.job_median_p99_s},
               {"ratio", change.ratio}};
  if (change.flagged) {
    e.figures.emplace_back("windows", options.persistence);
    e.figures.emplace_back("window_steps", static_cast<double>(options.window));
  }
  if (change.flagged && slowed_gpu != nullptr) {
    absl::StrAppend(&e.message, "; its ", SlowedGpuNote(*slowed_gpu, time));
    e.figures.emplace_back("gpu_index", slowed_gpu->index);
    e.figures.emplace_back("gpu_slowing_reasons", static_cast<double>(slowed_gpu->slowing));
    e.figures.emplace_back("gpu_slowed_seconds", FigureSeconds(time - slowed_gpu->slowed_since));
  }
  return e;
}

Event NodeUnreachableEvent(absl::Time time, const EventJob& job, const std::string& node,
                           absl::Duration unheard, absl::Duration lost_after,
                           const std::vector<uint32_t>& ranks) {
  Event e = Make(time, job, EventKind::kNodeUnreachable);
  e.node = node;
  e.message = absl::StrCat(
      "node ", node, " not heard for ", TenthsOfSeconds(unheard), " (threshold ",
      TenthsOfSeconds(lost_after), "); ",
      ranks.empty() ? std::string("it has no rank") : absl::StrCat("ranks ", ListSome(ranks)),
      " unknown; nothing is stopped while the job steps");
  e.figures = {{"unheard_seconds", FigureSeconds(unheard)},
               {"ranks", static_cast<double>(ranks.size())},
               {"threshold_seconds", FigureSeconds(lost_after)}};
  return e;
}

Event StartTimeoutEvent(absl::Time time, const EventJob& job, absl::Duration waited,
                        absl::Duration timeout, int nodes_running,
                        const RendezvousDecision* rendezvous) {
  Event e = Make(time, job, EventKind::kStartTimeout);
  const std::string where =
      rendezvous == nullptr || rendezvous->host.empty()
          ? "its rendezvous"
          : absl::StrCat("its rendezvous on ", rendezvous->host, " (", rendezvous->address, ":",
                         rendezvous->port, ")");
  e.message = absl::StrCat("generation ", job.generation, " made no first step within ",
                           TenthsOfSeconds(timeout), " (started ", TenthsOfSeconds(waited),
                           " ago; no rank reported on the ", Counted(nodes_running, "node", "nodes"),
                           " running it): ", where,
                           " did not complete, or its ranks did not start");
  e.figures = {{"waited_seconds", FigureSeconds(waited)},
               {"timeout_seconds", FigureSeconds(timeout)},
               {"nodes_running", static_cast<double>(nodes_running)}};
  return e;
}

Event NodeReachableEvent(absl::Time time, const EventJob& job, const std::string& node,
                         absl::Duration silent) {
  Event e = Make(time, job, EventKind::kNodeReachable);
  e.node = node;
  e.message = absl::StrCat("node ", node, " heard again after ", TenthsOfSeconds(silent),
                           " of silence");
  e.figures = {{"silent_seconds", FigureSeconds(silent)}};
  return e;
}

Event StacksEvent(absl::Time time, const EventJob& job, const std::string& node, int ranks,
                  int answered, double collect_seconds) {
  Event e = Make(time, job, EventKind::kStacks);
  e.node = node;
  e.message = absl::StrFormat(
      "Python stacks of %d rank(s) on %s collected in %s (%d did not answer); `trainsupctl "
      "stacks %s` shows them",
      ranks, node, TenthsOfSeconds(absl::Seconds(collect_seconds)), ranks - answered, job.id);
  e.figures = {{"ranks", ranks}, {"answered", answered}, {"collect_seconds", collect_seconds}};
  return e;
}

namespace {

// "NaN", "inf", "-inf".
std::string NonFiniteText(double value) {
  if (std::isnan(value)) return "NaN";
  return value > 0 ? "inf" : "-inf";
}

// "0.110s -> 0.134s (x1.22) since step 150, held 64 steps (1m5s)".
std::string MoveText(const ThroughputFinding& f) {
  return absl::StrFormat("%s -> %s (x%.2f) since step %d, held %d steps (%s)",
                         HumanSeconds(f.before_s), HumanSeconds(f.after_s), f.ratio, f.onset_step,
                         f.steps, HumanSeconds(absl::ToDoubleSeconds(f.held)));
}

}  // namespace

Event NotFiniteEvent(absl::Time time, const EventJob& job, const NonFiniteFinding& f,
                     const std::vector<std::string>& nodes, bool restart,
                     const std::optional<std::string>& workload_hold,
                     std::optional<int64_t> resume_limit) {
  Event e = Make(time, job, EventKind::kNotFinite);
  if (!f.ranks.empty()) e.rank = f.ranks.front().rank;
  if (!nodes.empty()) e.node = nodes.front();
  const std::string first =
      e.rank ? absl::StrCat("first rank ", *e.rank, " on ", e.node) : std::string("no rank named");
  if (f.grad_norm) {
    e.message = absl::StrCat("gradient norm non-finite at every step from ", f.first_step, " to ",
                             f.step, " (", f.consecutive_steps,
                             " in a row, beyond fp16 overflow steps) with finite losses, ", first);
  } else {
    e.message = absl::StrCat("loss ", NonFiniteText(f.value), " at step ", f.step, " on ",
                             Counted(f.ranks_at_step, "rank", "ranks"), ", ", first);
  }
  if (workload_hold) {
    absl::StrAppend(&e.message, "; the job is held: ", *workload_hold);
  } else if (restart && resume_limit) {
    absl::StrAppend(&e.message, "; generation ", job.generation,
                    " is stopped on every node and restarted from the newest checkpoint at or "
                    "below step ", *resume_limit, " (one committed from step ", f.first_step,
                    " on may hold the NaN)");
  } else if (restart) {
    absl::StrAppend(&e.message, "; generation ", job.generation,
                    " is stopped on every node and restarted from its last checkpoint");
  } else {
    absl::StrAppend(&e.message, "; reported only, not acted on");
  }
  e.figures = {{"step", static_cast<double>(f.step)},
               {"first_step", static_cast<double>(f.first_step)},
               {"ranks", static_cast<double>(f.ranks_at_step)},
               {"grad_norm", f.grad_norm ? 1.0 : 0.0},
               {"restart", restart && !workload_hold ? 1.0 : 0.0},
               {"workload_repeat", workload_hold ? 1.0 : 0.0}};
  if (f.grad_norm) e.figures.emplace_back("consecutive_steps", f.consecutive_steps);
  if (restart && resume_limit) e.figures.emplace_back("resume_limit", *resume_limit);
  return e;
}

Event LossShiftEvent(absl::Time time, const EventJob& job, const LossShiftFinding& f,
                     const LossShiftOptions& options) {
  Event e = Make(time, job, EventKind::kLossShift);
  e.message = absl::StrFormat(
      "loss shifted up since step %d: at step %d the least loss of the last %d steps, %.4g, is "
      "above %.4g (the level %.4g the %d steps before had reached, their trend %+.3g a step, "
      "+ max(%.4g, %.4g x sigma %.4g about the trend))",
      f.onset_step, f.step, options.window, f.recent_min, f.threshold, f.baseline_level,
      options.baseline, f.baseline_slope, options.floor, options.sigmas, f.baseline_sigma);
  e.figures = {{"step", static_cast<double>(f.step)},
               {"onset_step", static_cast<double>(f.onset_step)},
               {"recent_min", f.recent_min},
               {"threshold", f.threshold},
               {"baseline_level", f.baseline_level},
               {"baseline_slope", f.baseline_slope},
               {"baseline_sigma", f.baseline_sigma},
               {"window_steps", static_cast<double>(options.window)},
               {"baseline_steps", static_cast<double>(options.baseline)},
               {"floor", options.floor},
               {"sigmas", options.sigmas}};
  return e;
}

Event LossFlatEvent(absl::Time time, const EventJob& job, const LossFlatFinding& f,
                    double min_drop) {
  Event e = Make(time, job, EventKind::kLossFlat);
  const int quarter = std::max(1, f.steps / 4);
  e.message = absl::StrFormat(
      "loss flat from the start: over steps %d-%d its mean went from %.4g (first %d steps) to "
      "%.4g (last %d), a drop of %s where at least %s was expected; is the model learning "
      "(learning rate, frozen parameters, labels)?",
      f.first_step, f.step, f.first_loss, quarter, f.last_loss, quarter, Percent(f.drop),
      Percent(min_drop));
  e.figures = {{"first_step", static_cast<double>(f.first_step)},
               {"step", static_cast<double>(f.step)},
               {"first_loss", f.first_loss},
               {"last_loss", f.last_loss},
               {"drop", f.drop},
               {"min_drop", min_drop},
               {"window_steps", static_cast<double>(f.steps)},
               {"quarter_steps", static_cast<double>(quarter)}};
  return e;
}

Event GradNormEvent(absl::Time time, const EventJob& job, const GradNormFinding& f,
                    const std::string& node) {
  Event e = Make(time, job, f.collapse ? EventKind::kGradCollapse : EventKind::kGradSpike);
  e.rank = f.at.rank;
  e.node = node;
  if (f.collapse) {
    e.message = absl::StrFormat(
        "gradient norm collapsed: %d steps in a row (steps %d-%d) at about 0, %.4g at step %d "
        "against a baseline median of %.4g (x%.3g); largest on rank %d on %s",
        f.steps, f.first_step, f.step, f.grad_norm, f.step, f.baseline_median, f.ratio,
        f.at.rank, node);
  } else {
    e.message = absl::StrFormat(
        "gradient norm spike at step %d: %.4g, x%.3g the baseline median %.4g; largest on rank "
        "%d on %s (a loss spike often follows)",
        f.step, f.grad_norm, f.ratio, f.baseline_median, f.at.rank, node);
  }
  e.figures = {{"step", static_cast<double>(f.step)},
               {"grad_norm", f.grad_norm},
               {"baseline_median", f.baseline_median},
               {"ratio", f.ratio}};
  if (f.collapse) {
    e.figures.emplace_back("first_step", static_cast<double>(f.first_step));
    e.figures.emplace_back("steps", f.steps);
  }
  return e;
}

Event ThroughputEvent(absl::Time time, const EventJob& job, const ThroughputSignal& signal,
                      const std::string& node) {
  const ThroughputFinding& f = signal.finding;
  Event e = Make(time, job, f.decay ? EventKind::kThroughputDecay : EventKind::kThroughputChange);
  e.node = node;
  const char* how = f.decay ? "drifted slower" : "slowed";
  if (!signal.job) {
    e.message = absl::StrCat("compute time of node ", node, " ", how, ": ", MoveText(f),
                             "; the job's other nodes did not move with it");
  } else {
    e.message = absl::StrCat("step time ", how, ": ", MoveText(f));
    if (signal.node_finding) {
      const ThroughputFinding& n = *signal.node_finding;
      absl::StrAppend(&e.message,
                      absl::StrFormat("; the compute time of node %s alone moved with it: %s -> "
                                      "%s (x%.2f)",
                                      node, HumanSeconds(n.before_s), HumanSeconds(n.after_s),
                                      n.ratio));
    } else if (signal.nodes_moving > 1) {
      absl::StrAppend(&e.message, "; the compute times of ", signal.nodes_moving,
                      " nodes moved together");
    }
  }
  e.figures = {{"step", static_cast<double>(f.step)},
               {"onset_step", static_cast<double>(f.onset_step)},
               {"before_seconds", f.before_s},
               {"after_seconds", f.after_s},
               {"ratio", f.ratio},
               {"steps", static_cast<double>(f.steps)},
               {"held_seconds", absl::ToDoubleSeconds(f.held)},
               {"job_step_time", signal.job ? 1.0 : 0.0},
               {"nodes_moving", static_cast<double>(signal.nodes_moving)}};
  if (signal.node_finding) {
    e.figures.emplace_back("node_before_seconds", signal.node_finding->before_s);
    e.figures.emplace_back("node_after_seconds", signal.node_finding->after_s);
    e.figures.emplace_back("node_ratio", signal.node_finding->ratio);
  }
  return e;
}

Event MemoryGrowthEvent(absl::Time time, const EventJob& job, const MemoryGrowthFinding& f,
                        const std::string& node) {
  Event e = Make(time, job, EventKind::kMemoryGrowth);
  e.rank = f.at.rank;
  e.node = node;
  e.message = absl::StrCat(
      f.host ? "host memory (RSS)" : "device memory", " of rank ", f.at.rank, " on ", node,
      " grew ", HumanBytes(f.growth_bytes), " over ", f.steps, " steps to ", HumanBytes(f.bytes),
      " at step ", f.step, ": ", HumanBytes(f.slope_bytes_per_step), " per step");
  if (f.slope_bytes_per_second > 0) {
    absl::StrAppend(&e.message, " (", HumanBytes(f.slope_bytes_per_second), "/s)");
  }
  if (f.capacity_bytes > 0 && f.seconds_to_limit > 0) {
    absl::StrAppend(&e.message, "; at that rate it reaches the device's ",
                    HumanBytes(f.capacity_bytes), " in ", HumanSeconds(f.seconds_to_limit));
  }
  e.figures = {{"step", static_cast<double>(f.step)},
               {"window_steps", static_cast<double>(f.steps)},
               {"host_memory", f.host ? 1.0 : 0.0},
               {"bytes", f.bytes},
               {"growth_bytes", f.growth_bytes},
               {"slope_bytes_per_step", f.slope_bytes_per_step},
               {"slope_bytes_per_second", f.slope_bytes_per_second}};
  if (f.capacity_bytes > 0) {
    e.figures.emplace_back("capacity_bytes", f.capacity_bytes);
    if (f.seconds_to_limit > 0) e.figures.emplace_back("seconds_to_limit", f.seconds_to_limit);
  }
  return e;
}

Event ReplicaMismatchEvent(absl::Time time, const EventJob& job, const ReplicaFinding& f,
                           const std::string& node, bool charged) {
  Event e = Make(time, job, EventKind::kReplicaMismatch);
  if (f.no_majority) {
    e.message = absl::StrFormat(
        "replica group %d has no majority at step %d: its %d ranks sent different digests (at "
        "most %d agree); no rank can be named",
        f.group, f.step, f.group_ranks, f.majority);
  } else {
    e.rank = f.at.rank;
    e.node = node;
    e.message = absl::StrFormat(
        "rank %d on %s disagrees with its replica group %d at step %d: %d of its %d ranks "
        "agree, %d do not (%d named on %s); silent data corruption?",
        f.at.rank, node, f.group, f.step, f.majority, f.group_ranks, f.disagreeing, f.on_node,
        node);
    if (charged) absl::StrAppend(&e.message, "; counted against ", node, " toward its quarantine");
  }
  e.figures = {{"step", static_cast<double>(f.step)},
               {"group", static_cast<double>(f.group)},
               {"group_ranks", static_cast<double>(f.group_ranks)},
               {"majority", static_cast<double>(f.majority)},
               {"disagreeing", static_cast<double>(f.disagreeing)},
               {"on_node", static_cast<double>(f.on_node)},
               {"no_majority", f.no_majority ? 1.0 : 0.0},
               {"charged", charged ? 1.0 : 0.0}};
  return e;
}

Event ResumedBehindEvent(absl::Time time, const EventJob& job, const ResumeBehindFinding& f) {
  Event e = Make(time, job, EventKind::kResumedBehind);
  e.message = absl::StrFormat(
      "resumed after step %d, behind the last checkpoint seen complete (step %d): %d steps "
      "done again for nothing (booked lost); did it load an older checkpoint, or none?",
      f.resumed_step, f.checkpoint_step, f.repeated_steps);
  e.figures = {{"first_step", static_cast<double>(f.first_step)},
               {"resumed_step", static_cast<double>(f.resumed_step)},
               {"checkpoint_step", static_cast<double>(f.checkpoint_step)},
               {"repeated_steps", static_cast<double>(f.repeated_steps)}};
  return e;
}

Event LrMismatchEvent(absl::Time time, const EventJob& job, const LrMismatchFinding& f,
                      const ResumeOptions& options) {
  Event e = Make(time, job, EventKind::kLrMismatch);
  e.message = absl::StrFormat(
      "learning rate at step %d is %.6g, it was %.6g at that step before the restart (%s off; "
      "%d of %d steps compared differ by more than %s): the LR scheduler's state did not "
      "restore",
      f.step, f.lr_after, f.lr_before, Percent(f.relative), f.differing, f.compared,
      Percent(options.lr_tolerance));
  e.figures = {{"step", static_cast<double>(f.step)},
               {"lr_before", f.lr_before},
               {"lr_after", f.lr_after},
               {"relative", f.relative},
               {"compared_steps", static_cast<double>(f.compared)},
               {"differing_steps", static_cast<double>(f.differing)},
               {"judged_step", static_cast<double>(f.judged_step)},
               {"tolerance", options.lr_tolerance}};
  return e;
}

Event DataPositionMismatchEvent(absl::Time time, const EventJob& job,
                                const DataPositionFinding& f, const ResumeOptions& options) {
  Event e = Make(time, job, EventKind::kDataPositionMismatch);
  e.message = absl::StrFormat(
      "step %d read %d samples and %d tokens, it read %d and %d before the restart (%d of %d "
      "steps compared differ): the data position (sampler, loader) did not restore",
      f.step, f.samples_after, f.tokens_after, f.samples_before, f.tokens_before, f.differing,
      f.compared);
  e.figures = {{"step", static_cast<double>(f.step)},
               {"samples_before", static_cast<double>(f.samples_before)},
               {"samples_after", static_cast<double>(f.samples_after)},
               {"tokens_before", static_cast<double>(f.tokens_before)},
               {"tokens_after", static_cast<double>(f.tokens_after)},
               {"compared_steps", static_cast<double>(f.compared)},
               {"differing_steps", static_cast<double>(f.differing)},
               {"judged_step", static_cast<double>(f.judged_step)},
               {"tolerance", options.data_tolerance}};
  return e;
}

Event ResumeSpikeEvent(absl::Time time, const EventJob& job, const ResumeSpikeFinding& f,
                       const ResumeOptions& options) {
  Event e = Make(time, job, EventKind::kResumeSpike);
  e.message = absl::StrFormat(
      "loss after resuming from step %d is %.4g over steps %d-%d, it was %.4g at those steps "
      "before the restart: a median rise of %.4g, above %.4g (max(%.4g, %.4g x sigma %.4g)); "
      "the checkpoint may be incomplete (optimizer state, RNG, data position)",
      f.resumed_step, f.loss_after, f.first_step, f.step, f.loss_before, f.excess, f.threshold,
      options.spike_floor, options.spike_sigmas, f.sigma);
  e.figures = {{"resumed_step", static_cast<double>(f.resumed_step)},
               {"first_step", static_cast<double>(f.first_step)},
               {"step", static_cast<double>(f.step)},
               {"peak_step", static_cast<double>(f.peak_step)},
               {"peak_excess", f.peak_excess},
               {"loss_before", f.loss_before},
               {"loss_after", f.loss_after},
               {"excess", f.excess},
               {"sigma", f.sigma},
               {"threshold", f.threshold},
               {"compared_steps", static_cast<double>(f.compared)}};
  return e;
}

Event StateChangeEvent(absl::Time time, const EventJob& job, JobState from, JobState to,
                       const std::string& reason) {
  Event e = Make(time, job, EventKind::kStateChange);
  e.message = absl::StrCat(JobStateName(from), " -> ", JobStateName(to), ": ", reason);
  return e;
}

Event RestartEvent(absl::Time time, const EventJob& job, const std::vector<std::string>& nodes,
                   LeftOutNodes left_out, const std::string& cause) {
  Event e = Make(time, job, EventKind::kRestart);
  const size_t elsewhere = left_out.elsewhere.size();
  const size_t count = left_out.quarantined.size() + left_out.unreachable.size() +
                       left_out.unheard.size() + elsewhere + left_out.failed_preflight.size();
  e.message = absl::StrCat("generation ", job.generation, " started on ", NodesStarted(nodes),
                           LeftOut(left_out),
                           left_out.kept.empty() ? "" : absl::StrCat("; ", left_out.kept),
                           "; after: ", cause);
  e.figures = {{"nodes", static_cast<double>(nodes.size())},
               {"nodes_left_out", static_cast<double>(count)}};
  if (elsewhere > 0) e.figures.emplace_back("nodes_elsewhere", static_cast<double>(elsewhere));
  return e;
}

Event RecoveredEvent(absl::Time time, const EventJob& job, const RecoveryFigures& f) {
  Event e = Make(time, job, EventKind::kRecovered);
  e.message = absl::StrCat("first step of generation ", job.generation, " ",
                           TenthsOfSeconds(f.total), " after the failure: detect ",
                           TenthsOfSeconds(f.detect), ", stop ", TenthsOfSeconds(f.stop),
                           ", backoff ", TenthsOfSeconds(f.backoff), ", relaunch ",
                           TenthsOfSeconds(f.relaunch), ", first step ",
                           TenthsOfSeconds(f.first_step));
  e.figures = {{"detect_seconds", FigureSeconds(f.detect)},
               {"stop_seconds", FigureSeconds(f.stop)},
               {"backoff_seconds", FigureSeconds(f.backoff)},
               {"relaunch_seconds", FigureSeconds(f.relaunch)},
               {"first_step_seconds", FigureSeconds(f.first_step)},
               {"total_seconds", FigureSeconds(f.total)}};
  return e;
}

Event RendezvousEvent(absl::Time time, const EventJob& job, const RendezvousDecision& decision) {
  Event e = Make(time, job, EventKind::kRendezvous);
  e.node = decision.host;
  e.message = absl::StrCat("generation ", job.generation, " meets on ", decision.host, " (",
                           decision.address, ":", decision.port, ")");
  if (decision.moved()) absl::StrAppend(&e.message, ", moved from ", decision.previous_host);
  if (decision.kind == RendezvousKind::kStatic && decision.renumbered) {
    std::vector<std::string> ranks;
    for (size_t i = 0; i < decision.ranks.size(); ++i) {
      ranks.push_back(absl::StrCat(decision.ranks[i], "=", i));
    }
    absl::StrAppend(&e.message, "; node ranks ", ListSome(ranks));
  }
  e.figures = {{"port", static_cast<double>(decision.port)},
               {"nodes", static_cast<double>(decision.ranks.size())},
               {"moved", decision.moved() ? 1.0 : 0.0}};
  return e;
}

Event WorldSizeChangedEvent(absl::Time time, const EventJob& job, uint32_t old_world_size,
                            uint32_t new_world_size, uint64_t old_global_batch,
                            uint64_t new_global_batch) {
  Event e = Make(time, job, EventKind::kWorldSizeChanged);
  e.message = absl::StrCat("world size ", old_world_size, " -> ", new_world_size);
  if (old_global_batch > 0 && new_global_batch > 0) {
    absl::StrAppend(&e.message,
                    absl::StrFormat(": global batch %d -> %d samples (x%.2f); the learning "
                                    "rate the config names was tuned for the old batch",
                                    old_global_batch, new_global_batch,
                                    static_cast<double>(new_global_batch) / old_global_batch));
  } else {
    absl::StrAppend(&e.message, ": the global batch changes with it unless the script "
                                "rescales (report samples= in hb.step to see by how much)");
  }
  e.figures = {{"old_world_size", old_world_size},
               {"new_world_size", new_world_size},
               {"old_global_batch", static_cast<double>(old_global_batch)},
               {"new_global_batch", static_cast<double>(new_global_batch)}};
  return e;
}

HoldCause RestartLimitHold(int restarts, absl::Duration window, int limit,
                           const std::string& last_failure) {
  HoldCause cause;
  cause.reason = absl::StrCat("restart limit reached: ", restarts, " restarts within ",
                              absl::FormatDuration(window), " (--restart-limit ", limit,
                              "); last failure: ", last_failure);
  cause.figures = {{"restarts_in_window", restarts},
                   {"window_seconds", FigureSeconds(window)},
                   {"restart_limit", limit}};
  return cause;
}

HoldCause WorkloadHold(std::string why) {
  return HoldCause{std::move(why), {{"workload_repeat", 1}}};
}

HoldCause FallbackHold(const FallbackDecision& decision) {
  return HoldCause{decision.reason,
                   {{"checkpoint", static_cast<double>(decision.checkpoint)},
                    {"rollbacks", static_cast<double>(decision.rollbacks)},
                    {"cap", static_cast<double>(decision.cap)}}};
}

HoldCause EarlyFailureHold(std::string why) {
  return HoldCause{std::move(why), {{"early_failure", 1}}};
}

HoldCause VerdictHold(const Verdict& verdict, const std::string& failure,
                      const std::string& node) {
  return HoldCause{
      absl::StrCat(failure, node.empty() ? "" : absl::StrCat(" on ", node),
                   ": the job's own verdict is stop (", verdict.found_by,
                   verdict.reason.empty() ? "" : absl::StrCat(": ", verdict.reason),
                   "), not restarted"),
      {{"verdict", static_cast<double>(verdict.action)}}};
}

Event HoldEvent(absl::Time time, const EventJob& job, const HoldCause& cause,
                const std::string& resume) {
  Event e = Make(time, job, EventKind::kHold);
  e.message = absl::StrCat(cause.reason, ". `trainsupctl resume ", job.id, "` lifts it",
                           resume.empty() ? "" : absl::StrCat(": ", resume));
  e.figures = cause.figures;
  return e;
}

Event ResumeEvent(absl::Time time, const EventJob& job, JobState from, const std::string& reason) {
  Event e = Make(time, job, EventKind::kResume);
  e.message =
      absl::StrCat("resumed by an operator from ", JobStateName(from), " (", reason, ")");
  return e;
}

Event QuarantineEvent(absl::Time time, const EventJob& job, const std::string& node,
                      absl::string_view by, const std::string& reason,
                      const std::optional<FailureCount>& counted) {
  Event e = Make(time, job, EventKind::kQuarantine);
  e.node = node;
  e.message = absl::StrCat("node ", node, " quarantined by ", by, ": ", reason);
  if (counted) {
    e.figures = {{"failures", counted->failures}, {"window_seconds", FigureSeconds(counted->window)}};
  }
  return e;
}

Event UnquarantineEvent(absl::Time time, const EventJob& job, const std::string& node) {
  Event e = Make(time, job, EventKind::kUnquarantine);
  e.node = node;
  e.message = absl::StrCat("node ", node, " unquarantined by an operator");
  return e;
}

Event QuarantineSkippedEvent(absl::Time time, const EventJob& job, const std::string& node,
                             const std::string& reason, const FailureCount& counted,
                             size_t quarantined, double max_fraction, size_t nodes) {
  Event e = Make(time, job, EventKind::kQuarantineSkipped);
  e.node = node;
  e.message = absl::StrCat("node ", node, " qualifies for quarantine (", reason, ") but ",
                           quarantined,
                           " nodes are quarantined already, the most --quarantine-max-fraction ",
                           max_fraction, " of ", nodes, " allows");
  e.figures = {{"failures", counted.failures},
               {"window_seconds", FigureSeconds(counted.window)},
               {"quarantined_nodes", static_cast<double>(quarantined)},
               {"max_fraction", max_fraction},
               {"nodes", static_cast<double>(nodes)}};
  return e;
}

Event FenceEvent(absl::Time time, const EventJob& job, FenceAction action,
                 const std::string& node, bool ok, const std::string& detail) {
  Event e = Make(time, job,
                 action == FenceAction::kUnfence ? EventKind::kUnfence : EventKind::kFence);
  e.node = node;
  e.message = absl::StrCat(FenceActionName(action), " command for ", node,
                           ok ? " succeeded" : " FAILED", ": ", detail);
  e.figures = {{"ok", ok ? 1 : 0}};
  return e;
}

Event LeadershipEvent(absl::Time time, absl::string_view role, int64_t epoch,
                      const std::string& reason) {
  Event e = Make(time, EventJob{}, EventKind::kLeadership);
  e.message = epoch > 0 ? absl::StrFormat("%s (epoch %d): %s", role, epoch, reason)
                        : absl::StrFormat("%s: %s", role, reason);
  e.figures = {{"epoch", static_cast<double>(epoch)}};
  return e;
}

Event PersistFailedEvent(absl::Time time, const EventJob& job, const std::string& node,
                         const std::string& what) {
  Event e = Make(time, job, EventKind::kPersistFailed);
  e.node = node;
  e.message = what;
  return e;
}

Event CheckpointPlanEvent(absl::Time time, const EventJob& job, const CheckpointPlanSpec& plan,
                          const PlanBasis& basis) {
  Event e = PlanEvent(time, job, plan);
  e.message = absl::StrFormat(
      "checkpoint every %d steps (%s) from step %d: C=%s%s, M=%s (conservative; %d "
      "failures over %s), R=%s%s; expected waste %s",
      plan.interval_steps, HumanSeconds(basis.interval_seconds), plan.effective_from_step,
      HumanSeconds(basis.checkpoint_seconds), basis.checkpoint_measured ? " measured" : " prior",
      HumanSeconds(basis.mtbf_seconds), basis.failures, HumanSeconds(basis.exposure_seconds),
      HumanSeconds(basis.restart_seconds), basis.restart_measured ? " measured" : " prior",
      Percent(basis.expected_waste_fraction));
  if (!basis.verdict.empty()) absl::StrAppend(&e.message, "; ", basis.verdict);
  for (const std::string& w : basis.warnings) absl::StrAppend(&e.message, "; ", w);
  e.figures.insert(e.figures.end(),
                   {{"interval_seconds", basis.interval_seconds},
                    {"mtbf_seconds", basis.mtbf_seconds},
                    {"checkpoint_seconds", basis.checkpoint_seconds},
                    {"restart_seconds", basis.restart_seconds},
                    {"checkpoint_measured", basis.checkpoint_measured ? 1.0 : 0.0},
                    {"restart_measured", basis.restart_measured ? 1.0 : 0.0},
                    {"failures", static_cast<double>(basis.failures)},
                    {"exposure_seconds", basis.exposure_seconds},
                    {"expected_waste_fraction", basis.expected_waste_fraction}});
  return e;
}

Event PlanRevokedEvent(absl::Time time, const EventJob& job, const CheckpointPlanSpec& plan,
                       uint64_t revoked_plan_id, const std::string& node, int64_t guard_steps) {
  Event e = PlanEvent(time, job, plan);
  e.node = node;
  e.message = absl::StrFormat(
      "plan %d revoked: node %s did not hold it %d steps before its first step %d; the schedule "
      "before it (every %d steps) stays in force",
      revoked_plan_id, node, guard_steps, plan.effective_from_step, plan.interval_steps);
  e.figures.insert(e.figures.end(), {{"revoked_plan_id", static_cast<double>(revoked_plan_id)},
                                     {"guard_steps", static_cast<double>(guard_steps)}});
  return e;
}

Event CheckpointRequestedEvent(absl::Time time, const EventJob& job,
                               const CheckpointPlanSpec& plan, double ahead_seconds) {
  Event e = PlanEvent(time, job, plan);
  const int64_t step = plan.one_off_steps.front();
  e.message = absl::StrFormat("checkpoint requested by an operator at step %d (in about %.0fs)",
                              step, ahead_seconds);
  e.figures.insert(e.figures.end(), {{"one_off_step", static_cast<double>(step)},
                                     {"ahead_seconds", ahead_seconds}});
  return e;
}

namespace {

// The figures of a fallback decision: the checkpoint, what the next
// generation is told, and the count against the cap.
Event FallbackEvent(absl::Time time, const EventJob& job, EventKind kind,
                    const FallbackDecision& d) {
  Event e = Make(time, job, kind);
  e.message = d.reason;
  e.figures = {{"checkpoint", static_cast<double>(d.checkpoint)}};
  if (d.kind == FallbackDecision::Kind::kCut) {
    // Not counted against the fallback cap: nothing failed after a load.
    e.figures.emplace_back("non_finite_step", static_cast<double>(d.non_finite_step));
    e.figures.emplace_back("suspects", static_cast<double>(d.poisoned.size()));
  } else {
    e.figures.emplace_back("rollbacks", static_cast<double>(d.rollbacks));
    e.figures.emplace_back("cap", static_cast<double>(d.cap));
  }
  if (d.advice.limit) e.figures.emplace_back("resume_limit", *d.advice.limit);
  if (d.resume_at) e.figures.emplace_back("resume_at", *d.resume_at);
  if (d.advice.skip_first) {
    e.figures.emplace_back("skip_first", *d.advice.skip_first);
    e.figures.emplace_back("skip_last", *d.advice.skip_last);
  }
  return e;
}

}  // namespace

Event CheckpointSuspectEvent(absl::Time time, const EventJob& job, const FallbackDecision& d) {
  Event e = FallbackEvent(time, job, EventKind::kCheckpointSuspect, d);
  e.message = absl::StrCat(CheckpointName(d.checkpoint), " is suspect: ", d.reason);
  return e;
}

Event CheckpointFallbackEvent(absl::Time time, const EventJob& job, const FallbackDecision& d) {
  Event e = FallbackEvent(time, job, EventKind::kCheckpointFallback, d);
  e.message = absl::StrCat("falling back from ", CheckpointName(d.checkpoint),
                           ": generation ", job.generation + 1,
                           " loads the newest checkpoint at or below step ", *d.advice.limit,
                           d.resume_at ? absl::StrCat(" (step ", *d.resume_at, ")")
                                       : std::string(" (none seen: a fresh start)"));
  return e;
}

Event SpikeRollbackEvent(absl::Time time, const EventJob& job, const FallbackDecision& d) {
  return FallbackEvent(time, job, EventKind::kSpikeRollback, d);
}

Event KilledByCriterionEvent(absl::Time time, const EventJob& job, const KillFiring& f,
                             absl::string_view source, bool observe_only,
                             const KillSaving& saving) {
  Event e = Make(time, job, EventKind::kKilledByCriterion);
  const absl::string_view name = KillCriterionName(f.kind);
  e.message = absl::StrCat("kill criterion ", name, " (", source, ") met at step ", f.step, ": ");
  e.figures = {{"criterion", static_cast<double>(f.kind)},
               {"step", static_cast<double>(f.step)},
               {"onset_step", static_cast<double>(f.onset_step)}};
  if (f.kind == KillCriterionKind::kLossSpikes) {
    absl::StrAppend(&e.message, f.shifts.size(), " loss shifts in a row with no recovery (at steps");
    constexpr size_t kShown = 10;
    for (size_t i = 0; i < f.shifts.size() && i < kShown; ++i) {
      absl::StrAppend(&e.message, i == 0 ? " " : ", ", f.shifts[i].step,
                      absl::StrFormat(" to %.4g", f.shifts[i].loss));
      e.figures.emplace_back(absl::StrCat("shift_step_", i + 1),
                             static_cast<double>(f.shifts[i].step));
      e.figures.emplace_back(absl::StrCat("shift_loss_", i + 1), f.shifts[i].loss);
    }
    absl::StrAppend(&e.message, ")");
    e.figures.emplace_back("shifts", static_cast<double>(f.shifts.size()));
  } else {
    absl::StrAppend(&e.message,
                    absl::StrFormat("the median loss of steps %d-%d, %.4g, is above %.4g "
                                    "(ratio %.3g); above it since step %d",
                                    f.first_step, f.step, f.loss, f.limit, f.ratio, f.onset_step));
    e.figures.insert(e.figures.end(), {{"first_step", static_cast<double>(f.first_step)},
                                       {"window_steps", static_cast<double>(f.window)},
                                       {"loss", f.loss},
                                       {"limit", f.limit},
                                       {"ratio", f.ratio}});
  }
  e.figures.emplace_back("observe_only", observe_only ? 1 : 0);
  if (saving.total_steps) {
    const int64_t left = std::max<int64_t>(0, *saving.total_steps - f.step);
    absl::StrAppend(&e.message,
                    absl::StrFormat("; %d of %d steps left at %.3gs on %d ranks: %.4g GPU-seconds %s",
                                    left, *saving.total_steps, saving.step_seconds, saving.gpus,
                                    saving.gpu_seconds,
                                    observe_only ? "it would save" : "saved"));
    e.figures.insert(e.figures.end(),
                     {{"total_steps", static_cast<double>(*saving.total_steps)},
                      {"remaining_steps", static_cast<double>(left)},
                      {"step_seconds", saving.step_seconds},
                      {"gpus", static_cast<double>(saving.gpus)},
                      {"gpu_seconds_saved", saving.gpu_seconds}});
  }
  absl::StrAppend(&e.message, observe_only
                                  ? "; not acted on (observe-only)"
                                  : "; the job is stopped on every node and not restarted "
                                    "(`trainsupctl resume` undoes it)");
  return e;
}

}  // namespace trainsup
