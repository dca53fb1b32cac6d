#include "daemon/core/detection.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/format.h"
#include "daemon/core/early_failure.h"
#include "daemon/core/events.h"
#include "daemon/core/failure_classifier.h"
#include "daemon/core/verdicts.h"

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
// message cut at 160 bytes; "caught" when the script caught it before its
// sys.exit) or its exit status, with the infrastructure fault its last
// stderr line names.
std::string FailureText(const RankState& r) {
  if (r.exception_type.empty()) {
    return absl::StrCat(FailureSignature(r), r.stderr_line.empty() ? "" : "; its stderr: ",
                        ClipText(r.stderr_line, 160));
  }
  return absl::StrCat(ClipText(absl::StrCat(r.exception_type, ": ", r.exception_message), 160),
                      r.exception_caught ? ", caught before its sys.exit" : "");
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
  decisions_.Emit(job,
                  NodeReachableEvent(now, EventJobOf(job), node.name, now - node.silent_since));
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

Failure Detection::CrashFailure(JobEntry& job, const CrashVerdict& verdict,
                                std::optional<JudgedEarlyFailure>* early) {
  Failure f;
  f.kind = "crash";
  f.node = verdict.node;
  f.rank = verdict.rank;
  f.failed_at = verdict.death.time;
  const RankDeath& d = verdict.death;
  switch (verdict.kind) {
    case CrashVerdict::Kind::kRank:
      f.message = absl::StrCat("crash of rank ", *verdict.rank, " (",
                               FailureText(job.job().rank(*verdict.rank)), ")");
      JudgeRankFailure(job, verdict, f);
      if (const GpuErrorSeen* gpu = job.verdicts().HardwareGpuError(agents_.NameOf(verdict.node));
          gpu != nullptr && !f.verdict) {
        // Its GPU said it failed (an Xid the GPU must be reset for): the
        // node's failure, whatever the rank's death looked like, and no
        // bug in the code to hold the job for.
        absl::StrAppend(&f.message, "; after Xid ", gpu->xid, " on its node's GPU");
        f.charged = true;
        f.hold.reset();
      }
      break;
    case CrashVerdict::Kind::kNoCulprit:
      f.message = absl::StrCat("crash with no rank failing on its own (rank ", *verdict.rank,
                               ": ", FailureSignature(job.job().rank(*verdict.rank)), ")");
      break;
    case CrashVerdict::Kind::kNodeLost:
      f.kind = "node_lost";
      f.charged = true;
      f.message = absl::StrCat("node lost with ranks ", ListSome(verdict.lost_ranks));
      break;
    case CrashVerdict::Kind::kLauncher: {
      const std::string status = ExitStatusText(true, d.exit_code, d.signal);
      f.charged = true;
      f.message = absl::StrCat("command failed (", status, ") with no rank death to name");
      std::optional<EarlyFailure> failed =
          EarlyFailureOf(job.job(), verdict.node, agents_.node(verdict.node).launcher);
      if (!failed) break;
      *early = JudgeEarly(job, *std::move(failed));
      const EarlyFailure& e = (*early)->failure;
      f.message = absl::StrCat("command failed (", status, ") before any rank reported",
                               e.cause.empty() ? "" : absl::StrCat(": ", ClipText(e.cause, 160)));
      const EarlyJudgement& judged = (*early)->judgement;
      f.charged = judged.kind == EarlyJudgement::Kind::kNode;
      if (judged.kind == EarlyJudgement::Kind::kWorkload) f.hold = EarlyFailureHold(judged.reason);
      break;
    }
  }
  return f;
}

void Detection::JudgeRankFailure(JobEntry& job, const CrashVerdict& verdict, Failure& f) const {
  const RankState& r = job.job().rank(*verdict.rank);
  f.exit_code = ExitCodeOf(r);
  const VerdictTable* job_rules =
      verdict.node == kNoNode ? nullptr : &agents_.node(verdict.node).verdict_rules;
  f.verdict = VerdictOn(r, job_rules, verdict_table_);
  if (f.verdict) {
    // The job's own word decides: never the training code's repeat, and
    // charged only by a restart-elsewhere verdict's own rule.
    if (f.verdict->action == VerdictAction::kRestartElsewhere && verdict.node != kNoNode) {
      f.kind = kRestartElsewhereFailure;
      f.charged = true;
    }
    return;
  }
  const FailureFingerprint fingerprint = FingerprintOf(job.job(), *verdict.rank);
  f.charged = ChargesNode(fingerprint);
  JobLifecycle& life = job.mutable_lifecycle();
  std::optional<std::string> repeat;
  if (life.last_failure) repeat = WorkloadRepeat(*life.last_failure, fingerprint);
  if (repeat) {
    f.hold = WorkloadHold(*std::move(repeat));
    f.charged = false;
  }
  life.last_failure = fingerprint;
}

void Detection::JudgeCrashForCheckpoints(JobEntry& job, const CrashVerdict& verdict,
                                         Failure& failure) {
  // A rank that failed on its own soon after a load is evidence against the
  // checkpoint, whatever form the failure took (an exception, a failing
  // exit, a crash signal), as a non-finite loss is: a script that raises on
  // its NaN is often heard of as a crash first. Not the hardware's own word
  // (an infrastructure error), not the job's own verdict, not a lost node.
  std::optional<LoadFailureKind> kind;
  int64_t step = job.job().max_step();
  if (verdict.kind == CrashVerdict::Kind::kRank && verdict.rank) {
    const RankState& r = job.job().rank(*verdict.rank);
    step = r.step;
    // A rank whose GPU reported it must be reset died of the GPU, not of
    // what it loaded.
    const bool gpu_failed = job.verdicts().HardwareGpuError(agents_.NameOf(verdict.node)) != nullptr;
    if (!failure.verdict && !gpu_failed && ClassifyRankFailure(r) != FailureClass::kInfrastructure) {
      kind = LoadFailureKind::kCrash;
    }
  }
  failures_.JudgeCheckpoints(job, step, kind, failure);
}

JudgedEarlyFailure Detection::JudgeEarly(JobEntry& job, EarlyFailure early) {
  JudgedEarlyFailure out;
  const uint64_t generation = job.job().generation();
  std::vector<EarlyFailure> all;
  std::vector<std::string> names;
  for (NodeIndex i : agents_.NodesOf(job.id())) {
    const NodeRecord& node = agents_.node(i);
    if (node.generation != generation) continue;
    ++out.ran;
    if (std::optional<EarlyFailure> f = EarlyFailureOf(job.job(), i, node.launcher); f) {
      all.push_back(*std::move(f));
      names.push_back(node.name);
    }
  }
  out.failed = all.size();
  JobLifecycle& life = job.mutable_lifecycle();
  out.judgement =
      JudgeEarlyFailure(generation, early, all, names, out.ran, life.last_early_failure);
  life.last_early_failure = EarlyFailureMemory{generation, early.signature};
  EarlyFailureCounts& counts = early_failures_;
  switch (out.judgement.kind) {
    case EarlyJudgement::Kind::kNode:
      ++counts.node;
      break;
    case EarlyJudgement::Kind::kWorkload:
      ++counts.workload;
      break;
    case EarlyJudgement::Kind::kFirst:
      ++counts.first;
      break;
  }
  out.failure = std::move(early);
  return out;
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
  std::optional<JudgedEarlyFailure> early;
  Failure failure = CrashFailure(job, *verdict, &early);
  JudgeCrashForCheckpoints(job, *verdict, failure);
  std::optional<std::string> repeat;
  if (failure.hold && !early) repeat = failure.hold->reason;
  Event event = early ? EarlyCrashEvent(now, EventJobOf(job), node, verdict->death, *early)
                      : CrashEvent(now, EventJobOf(job), *verdict, node, job.job(), repeat);
  if (const GpuErrorSeen* gpu = job.verdicts().HardwareGpuError(node);
      gpu != nullptr && verdict->kind == CrashVerdict::Kind::kRank && !failure.verdict) {
    absl::StrAppend(&event.message, "; its node's GPU reported Xid ", gpu->xid,
                    " before: the rank died of its GPU (docs/gpu.md)");
    event.figures.emplace_back("xid", gpu->xid);
  }
  decisions_.Emit(&job, std::move(event));
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

bool Detection::CheckpointCredible(const JobEntry& job) const {
  const Job& observed = job.job();
  if (!observed.any_in_checkpoint()) return true;
  bool unreachable = false;
  for (NodeIndex n : agents_.NodesOf(job.id())) unreachable |= agents_.node(n).unreachable;
  if (!unreachable) return true;  // the common case: no pass over the ranks
  for (const auto& [index, r] : observed.ranks()) {
    if (r.in_checkpoint && r.node != kNoNode && !agents_.node(r.node).unreachable) return true;
  }
  return false;
}

bool Detection::SweepStall(absl::Time now, JobEntry& job, const JobStepStats& stats) {
  GenerationVerdicts& v = job.verdicts();
  // A stall is acted on at once (the job is stopped and restarted), so it
  // lasts until the next generation's verdicts.
  if (v.stalled) return false;
  const Job& observed = job.job();
  // Just restored: until every rank's agent has said hello again, or had
  // the time to, a stall judged on the ranks seen would name no culprit,
  // or the wrong one (the hung rank may be on a node not back yet).
  if (observed.ranks_reporting() < observed.world_size() &&
      now - job.restored_at() < kRejoinGrace) {
    return false;
  }
  const StallVerdict verdict =
      stall_.Check(observed, now, stats, ReportIntervalOf(job), CheckpointCredible(job));
  if (!verdict.stalled) return false;
  // A node silent for half the stall's own silence did not just miss a
  // report: what it last said is no evidence.
  const absl::flat_hash_set<NodeIndex> silent = SilentNodes(job, now, verdict.silent / 2);
  const Culprit culprit = FindCulprit(observed, silent);
  v.stalled = true;
  job.mutable_lifecycle().collect_stacks = true;
  // A node that fell silent as the job stopped is why, before any rank still
  // heard: a host frozen or powered off mid-collective leaves its peers
  // waiting at uneven places (a ring all-reduce lets some finish their part),
  // so the rank furthest behind among those heard is a victim (e2e_lost_nodes'
  // frozen host, in the CI run of stop 40). Failing that, when every rank
  // heard waits at one place, ranks unheard are the only possible culprits.
  NodeIndex lost = FirstSilent(job, silent, /*with_the_job=*/true);
  if (lost == kNoNode && !culprit.rank && culprit.unseen_ranks > 0) {
    lost = FirstSilent(job, silent, /*with_the_job=*/false);
  }
  if (lost != kNoNode) {
    NodeLostInStall(now, job, verdict, lost);
    return true;
  }
  v.stall_culprit = culprit.rank;
  Failure failure;
  failure.kind = "stall";
  if (culprit.rank) {
    failure.node = observed.rank(*culprit.rank).node;
    failure.charged = true;
    failure.rank = culprit.rank;
  }
  v.stall_event_id =
      decisions_
          .Emit(&job, StallEvent(now, EventJobOf(job), verdict, observed.max_step(), culprit,
                                 agents_.NameOf(failure.node)))
          .id;
  // A hang burns its time from the last progress (or the generation start).
  failure.failed_at = now - verdict.silent;
  failure.message = culprit.rank ? absl::StrCat("hang at rank ", *culprit.rank) : "hang";
  failures_.OnJobFailure(now, job, failure);
  return true;
}

bool Detection::SweepStart(absl::Time now, JobEntry& job) {
  GenerationVerdicts& v = job.verdicts();
  const Job& observed = job.job();
  // Ranks that report are the stall rule's to judge (its startup grace).
  if (v.start_timed_out || observed.ranks_reporting() > 0 ||
      observed.first_progress() != absl::InfinitePast()) {
    return false;
  }
  const absl::Duration waited = now - observed.generation_start();
  if (waited <= start_timeout_) return false;
  int running = 0;
  for (NodeIndex i : agents_.NodesOf(job.id())) {
    const NodeRecord& node = agents_.node(i);
    if (node.generation == observed.generation() && node.running()) ++running;
  }
  if (running == 0) return false;  // nothing launched: nothing failed to start
  v.start_timed_out = true;
  const std::optional<RendezvousDecision>& met = job.rendezvous().current();
  const RendezvousDecision* rendezvous =
      met && met->generation == observed.generation() && !met->as_written ? &*met : nullptr;
  decisions_.Emit(&job, StartTimeoutEvent(now, EventJobOf(job), waited, start_timeout_, running,
                                          rendezvous));
  Failure failure;
  failure.kind = "start_timeout";
  failure.failed_at = observed.generation_start();
  failure.message = absl::StrCat("no first step within ", TenthsOfSeconds(start_timeout_));
  failures_.OnJobFailure(now, job, failure);
  return true;
}

NodeIndex Detection::FirstSilent(const JobEntry& job, const absl::flat_hash_set<NodeIndex>& silent,
                                 bool with_the_job) const {
  const Job& observed = job.job();
  NodeIndex first = kNoNode;
  for (const auto& [i, r] : observed.ranks()) {
    if (!r.seen || r.node == kNoNode || !silent.contains(r.node)) continue;
    const NodeRecord& node = agents_.node(r.node);
    if (with_the_job) {
      // Its last word may precede the job's last step by what its peers
      // could still finish without it: a collective's part it had sent, and
      // their agents' report interval. A node silent for longer than that
      // before the last step was not why: the job stepped without it being
      // heard (a partition), so its ranks took part.
      if (observed.last_progress() == absl::InfinitePast()) continue;
      const absl::Duration slack = std::max(absl::Seconds(1), 2 * ReportIntervalOf(job));
      if (node.last_report < observed.last_progress() - slack) continue;
    }
    if (first == kNoNode || node.last_report < agents_.node(first).last_report) first = r.node;
  }
  return first;
}

void Detection::NodeLostInStall(absl::Time now, JobEntry& job, const StallVerdict& verdict,
                                NodeIndex lost) {
  const Job& observed = job.job();
  const NodeRecord& node = agents_.node(lost);
  const std::vector<uint32_t> ranks = RanksOn(observed, lost);
  job.verdicts().stall_event_id =
      decisions_
          .Emit(&job, NodeLostInStallEvent(now, EventJobOf(job), verdict, observed.max_step(),
                                           node.name, now - node.last_report, ranks))
          .id;
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
    // Whether its GPU runs slowed (thermal, power): the straggler's cause,
    // not its input pipeline's.
    const GpuHealthState* slowed =
        node != kNoNode ? SlowedGpuOf(agents_.node(node).gpu_health, change.rank) : nullptr;
    decisions_.Emit(&job, StragglerEvent(now, EventJobOf(job), change, agents_.NameOf(node),
                                         job.verdicts().stragglers.options(), slowed));
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
      if (slowed != nullptr) absl::StrAppend(&failure.message, ", its ", SlowedGpuNote(*slowed, now));
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
    decisions_.Emit(&job, NodeUnreachableEvent(now, EventJobOf(job), node.name,
                                               now - node.last_report,
                                               node_loss_.LostAfter(node), ranks));
  }
}

void Detection::UpdateFigures(absl::Time now, JobEntry& job) {
  const JobStepStats& stats = job.StepStats();
  const Job& observed = job.job();
  GenerationVerdicts& v = job.verdicts();
  v.stall_threshold.reset();
  // No threshold where the stall rule does not judge: no rank reports, or
  // one ended (a crash, or the job's last step done and its ranks exiting).
  if (observed.ranks_reporting() == 0 || observed.has_dead_rank()) return;
  v.stall_threshold = stall_.Check(observed, now, stats, ReportIntervalOf(job)).threshold;
}

}  // namespace trainsup
