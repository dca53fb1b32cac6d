#include "daemon/core/detection.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/format.h"

namespace trainsup {
namespace {

// The ranks of `job` heard from on `node`, by rank.
std::vector<uint32_t> RanksOn(const Job& job, NodeIndex node) {
  std::vector<uint32_t> ranks;
  for (uint32_t i : job.RanksOn(node)) {
    if (job.rank(i).seen) ranks.push_back(i);
  }
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

// How a rank failed, for people: "RuntimeError: CUDA error: ..." (the
// message cut at 160 bytes) or its exit status.
std::string FailureText(const RankState& r) {
  if (r.exception_type.empty()) return FailureSignature(r);
  return ClipText(absl::StrCat(r.exception_type, ": ", r.exception_message), 160);
}

}  // namespace

void Detection::NoticeReport(absl::Time now, JobEntry& job, bool launcher_failed) {
  GenerationVerdicts& v = job.verdicts();
  if (v.failure_first_heard == absl::InfinitePast() &&
      (CrashDetector::HasFailure(job.job()) || launcher_failed)) {
    v.failure_first_heard = now;  // the crash settle clock starts
  }
}

void Detection::NoticeHeard(absl::Time now, JobEntry* job, NodeIndex index) {
  NodeRecord& node = agents_.mutable_node(index);
  if (!node.unreachable) return;
  node.unreachable = false;
  Event e;
  e.time = now;
  e.kind = EventKind::kNodeReachable;
  e.node = node.name;
  e.message = absl::StrCat("node ", node.name, " heard again after ",
                           TenthsOfSeconds(now - node.silent_since), " of silence");
  e.figures = {{"silent_seconds", absl::ToDoubleSeconds(now - node.silent_since)}};
  decisions_.Emit(job, std::move(e));
}

absl::flat_hash_set<NodeIndex> Detection::SilentNodes(const JobEntry& job, absl::Time now,
                                                      absl::Duration at_least) const {
  absl::flat_hash_set<NodeIndex> silent;
  for (NodeIndex i : agents_.NodesOf(job.id())) {
    if (NodeLossDetector::IsSilent(agents_.node(i), now, at_least)) silent.insert(i);
  }
  return silent;
}

std::optional<FailedLauncher> Detection::FailedLauncherOf(const JobEntry& job) const {
  for (NodeIndex i : agents_.NodesOf(job.id())) {
    const NodeRecord& node = agents_.node(i);
    if (node.generation == job.job().generation() && node.launcher.failed()) {
      return FailedLauncher{i, node.launcher};
    }
  }
  return std::nullopt;
}

Failure Detection::CrashFailure(JobEntry& job, const CrashVerdict& verdict) const {
  Failure f;
  f.kind = "crash";
  f.node = verdict.node;
  f.rank = verdict.rank;
  f.failed_at = verdict.death.time;
  const RankDeath& d = verdict.death;
  switch (verdict.kind) {
    case CrashVerdict::Kind::kRank: {
      const FailureFingerprint fingerprint = FingerprintOf(job.job(), *verdict.rank);
      f.charged = ChargesNode(fingerprint);
      JobLifecycle& life = job.lifecycle;
      if (life.last_failure) f.hold = WorkloadRepeat(*life.last_failure, fingerprint);
      if (f.hold) f.charged = false;
      life.last_failure = fingerprint;
      f.message = absl::StrCat("crash of rank ", *verdict.rank, " (",
                               FailureText(job.job().rank(*verdict.rank)), ")");
      break;
    }
    case CrashVerdict::Kind::kNoCulprit:
      f.message = absl::StrCat("crash with no rank failing on its own (rank ", *verdict.rank,
                               ": ", FailureSignature(job.job().rank(*verdict.rank)), ")");
      break;
    case CrashVerdict::Kind::kNodeLost:
      f.kind = "node_lost";
      f.charged = true;
      f.message = absl::StrCat("node lost with ranks ", ListSome(verdict.lost_ranks));
      break;
    case CrashVerdict::Kind::kLauncher:
      f.charged = true;
      f.message = absl::StrCat("command failed (", ExitStatusText(true, d.exit_code, d.signal),
                               ") with no rank death to name");
      break;
  }
  return f;
}

bool Detection::SweepCrash(absl::Time now, JobEntry& job) {
  GenerationVerdicts& v = job.verdicts();
  if (v.crash_reported) return false;
  // Only a job that has heard of a failure has a failed command to look for.
  if (v.failure_first_heard == absl::InfinitePast()) return false;
  const std::optional<CrashVerdict> verdict =
      crash_.Check(job.job(), v.failure_first_heard, now, FailedLauncherOf(job),
                   SilentNodes(job, now, absl::ZeroDuration()));
  if (!verdict) return false;
  v.crash_reported = true;
  if (verdict->kind == CrashVerdict::Kind::kRank) v.crash_culprit = verdict->rank;
  const std::string& node = agents_.NameOf(verdict->node);
  const RankDeath& d = verdict->death;
  Event e;
  e.time = now;
  e.kind = EventKind::kCrash;
  e.node = node;
  e.figures = {{"exit_code", d.exit_code},
               {"signal", d.signal},
               {"failed_ranks", verdict->failed_ranks},
               {"victims", verdict->victims}};
  switch (verdict->kind) {
    case CrashVerdict::Kind::kRank:
    case CrashVerdict::Kind::kNoCulprit:
      e.rank = *verdict->rank;
      e.message = absl::StrCat("rank ", *verdict->rank, " on ", node, " ", verdict->reason);
      e.figures.emplace_back("step", static_cast<double>(job.job().rank(*verdict->rank).step));
      break;
    case CrashVerdict::Kind::kNodeLost:
      e.kind = EventKind::kNodeLost;
      e.message = absl::StrCat("node ", node, " lost: its agent ", verdict->reason);
      e.figures = {{"lost_ranks", static_cast<double>(verdict->lost_ranks.size())},
                   {"failed_ranks", verdict->failed_ranks},
                   {"victims", verdict->victims}};
      break;
    case CrashVerdict::Kind::kLauncher:
      e.message = absl::StrCat("the command on ", node, " ", verdict->reason);
      e.figures.resize(2);
      break;
  }
  Failure failure = CrashFailure(job, *verdict);
  if (failure.hold) absl::StrAppend(&e.message, "; ", *failure.hold);
  decisions_.Emit(&job, std::move(e));
  failures_.OnJobFailure(now, job, failure);
  return true;
}

absl::Duration Detection::ReportIntervalOf(const JobEntry& job) const {
  absl::Duration longest;
  for (NodeIndex i : agents_.NodesOf(job.id())) {
    const NodeRecord& node = agents_.node(i);
    if (node.connected) longest = std::max(longest, node.report_interval);
  }
  return longest;
}

bool Detection::SweepStall(absl::Time now, JobEntry& job, const JobStepStats& stats) {
  GenerationVerdicts& v = job.verdicts();
  // A stall is acted on at once (the job is stopped and restarted), so it
  // lasts until the next generation's verdicts.
  if (v.stalled) return false;
  const Job& observed = job.job();
  const StallVerdict verdict = stall_.Check(observed, now, stats, ReportIntervalOf(job));
  if (!verdict.stalled) return false;
  // A node silent for half the stall's own silence did not just miss a
  // report: what it last said is no evidence.
  const absl::flat_hash_set<NodeIndex> silent = SilentNodes(job, now, verdict.silent / 2);
  const Culprit culprit = FindCulprit(observed, silent);
  v.stalled = true;
  v.stall_culprit = culprit.rank;
  job.lifecycle.collect_stacks = true;
  if (!culprit.rank && culprit.unseen_ranks > 0) {
    NodeLostInStall(now, job, verdict, silent);
    return true;
  }
  Event e;
  e.time = now;
  e.kind = EventKind::kStall;
  e.message = verdict.reason;
  Failure failure;
  failure.kind = "stall";
  if (culprit.rank) {
    failure.node = observed.rank(*culprit.rank).node;
    failure.charged = true;
    failure.rank = culprit.rank;
    e.rank = *culprit.rank;
    e.node = agents_.NameOf(failure.node);
    absl::StrAppend(&e.message, "; suspect rank ", *culprit.rank, " on ", e.node, ", ",
                    culprit.reason);
  } else {
    absl::StrAppend(&e.message, "; culprit: ", culprit.reason);
  }
  e.figures = {{"silent_seconds", absl::ToDoubleSeconds(verdict.silent)},
               {"threshold_seconds", absl::ToDoubleSeconds(verdict.threshold)},
               {"step", static_cast<double>(observed.max_step())}};
  v.stall_event_id = decisions_.Emit(&job, std::move(e)).id;
  // A hang burns its time from the last progress (or the generation start).
  failure.failed_at = now - verdict.silent;
  failure.message = culprit.rank ? absl::StrCat("hang at rank ", *culprit.rank) : "hang";
  failures_.OnJobFailure(now, job, failure);
  return true;
}

void Detection::NodeLostInStall(absl::Time now, JobEntry& job, const StallVerdict& verdict,
                                const absl::flat_hash_set<NodeIndex>& silent) {
  const Job& observed = job.job();
  // The node the supervisor lost sight of first.
  NodeIndex lost = kNoNode;
  for (const auto& [i, r] : observed.ranks()) {
    if (!r.seen || r.node == kNoNode || !silent.contains(r.node)) continue;
    if (lost == kNoNode || agents_.node(r.node).last_report < agents_.node(lost).last_report) {
      lost = r.node;
    }
  }
  const NodeRecord& node = agents_.node(lost);
  const std::vector<uint32_t> ranks = RanksOn(observed, lost);
  Event e;
  e.time = now;
  e.kind = EventKind::kNodeLost;
  e.node = node.name;
  e.message = absl::StrCat("node ", node.name, " lost: not heard for ",
                           TenthsOfSeconds(now - node.last_report), " (ranks ",
                           ListSome(ranks), ") while ", verdict.reason,
                           " and every rank that can be seen waits for it");
  e.figures = {{"silent_seconds", absl::ToDoubleSeconds(verdict.silent)},
               {"threshold_seconds", absl::ToDoubleSeconds(verdict.threshold)},
               {"unheard_seconds", absl::ToDoubleSeconds(now - node.last_report)},
               {"lost_ranks", static_cast<double>(ranks.size())},
               {"step", static_cast<double>(observed.max_step())}};
  job.verdicts().stall_event_id = decisions_.Emit(&job, std::move(e)).id;
  Failure failure;
  failure.kind = "node_lost";
  failure.node = lost;
  failure.charged = true;
  failure.failed_at = now - verdict.silent;
  failure.message = absl::StrCat("node lost with ranks ", ListSome(ranks));
  failures_.OnJobFailure(now, job, failure);
}

void Detection::SweepStragglers(absl::Time now, JobEntry& job) {
  GenerationVerdicts& v = job.verdicts();
  for (const StragglerChange& change : v.stragglers.Evaluate(job.job(), &v.straggler_ranks)) {
    const NodeIndex node = job.job().rank(change.rank).node;
    Event e;
    e.time = now;
    e.kind = change.flagged ? EventKind::kStraggler : EventKind::kStragglerCleared;
    e.rank = change.rank;
    e.node = agents_.NameOf(node);
    e.message = absl::StrCat("rank ", change.rank, " on ", e.node, ": ", change.reason);
    e.figures = {{"rank_p99_seconds", change.rank_p99_s},
                 {"job_median_p99_seconds", change.job_median_p99_s},
                 {"ratio", change.ratio}};
    decisions_.Emit(&job, std::move(e));
    if (change.flagged && node != kNoNode) {
      // A persistent straggler counts against its node, like a failure, but
      // does not restart the job by itself.
      Failure failure;
      failure.kind = "straggler";
      failure.node = node;
      failure.charged = true;
      failure.rank = change.rank;
      failure.failed_at = now;
      failure.message = absl::StrFormat("straggling rank %d (%.1fx)", change.rank, change.ratio);
      failures_.OnNodeFailure(now, job, failure);
    }
  }
}

void Detection::SweepNodes(absl::Time now, JobEntry& job) {
  Job& observed = job.job();
  for (NodeIndex i : agents_.NodesOf(job.id())) {
    NodeRecord& node = agents_.mutable_node(i);
    if (node.unreachable || node.generation != observed.generation() || !node.running()) continue;
    if (!node_loss_.IsLost(node, now)) continue;
    node.unreachable = true;
    node.silent_since = node.last_report;
    observed.ForgetLiveness(i);
    const std::vector<uint32_t> ranks = RanksOn(observed, i);
    Event e;
    e.time = now;
    e.kind = EventKind::kNodeUnreachable;
    e.node = node.name;
    e.message = absl::StrCat(
        "node ", node.name, " not heard for ", TenthsOfSeconds(now - node.last_report),
        " (threshold ", TenthsOfSeconds(node_loss_.LostAfter(node)), "); ",
        ranks.empty() ? std::string("it has no rank") : absl::StrCat("ranks ", ListSome(ranks)),
        " unknown; nothing is stopped while the job steps");
    e.figures = {{"unheard_seconds", absl::ToDoubleSeconds(now - node.last_report)},
                 {"ranks", static_cast<double>(ranks.size())}};
    decisions_.Emit(&job, std::move(e));
  }
}

void Detection::UpdateFigures(absl::Time now, JobEntry& job) {
  const JobStepStats& stats = job.StepStats();
  const Job& observed = job.job();
  GenerationVerdicts& v = job.verdicts();
  v.stall_threshold.reset();
  if (observed.ranks_reporting() == 0) return;
  v.stall_threshold = stall_.Check(observed, now, stats, ReportIntervalOf(job)).threshold;
}

}  // namespace trainsup
