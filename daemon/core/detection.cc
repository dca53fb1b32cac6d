#include "daemon/core/detection.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/format.h"

namespace trainsup {

void Detection::NoticeReport(absl::Time now, JobEntry& job, bool launcher_failed) {
  GenerationVerdicts& v = job.verdicts();
  if (v.failure_first_heard == absl::InfinitePast() &&
      (CrashDetector::HasFailure(job.job()) || launcher_failed)) {
    v.failure_first_heard = now;  // the crash settle clock starts
  }
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

bool Detection::SweepCrash(absl::Time now, JobEntry& job) {
  GenerationVerdicts& v = job.verdicts();
  if (v.crash_reported) return false;
  // Only a job that has heard of a failure has a failed command to look for.
  if (v.failure_first_heard == absl::InfinitePast()) return false;
  const std::optional<CrashVerdict> verdict =
      crash_.Check(job.job(), v.failure_first_heard, now, FailedLauncherOf(job));
  if (!verdict) return false;
  v.crash_reported = true;
  v.crash_culprit = verdict->rank;
  const std::string& node = agents_.NameOf(verdict->node);
  Event e;
  e.time = now;
  e.kind = EventKind::kCrash;
  e.node = node;
  Failure failure;
  failure.kind = "crash";
  failure.node = verdict->node;
  failure.rank = verdict->rank;
  failure.failed_at = verdict->death.time;
  const RankDeath& d = verdict->death;
  if (verdict->rank) {
    e.rank = *verdict->rank;
    e.message = absl::StrCat("rank ", *verdict->rank, " on ", node, " ", verdict->reason);
    e.figures = {{"exit_code", d.exit_code},
                 {"signal", d.signal},
                 {"failed_ranks", verdict->failed_ranks},
                 {"step", static_cast<double>(job.job().rank(*verdict->rank).step)}};
    failure.message = absl::StrCat("crash of rank ", *verdict->rank, " (",
                                   ExitStatusText(d.exit_known, d.exit_code, d.signal), ")");
  } else {
    e.message = absl::StrCat("the command on ", node, " ", verdict->reason);
    e.figures = {{"exit_code", d.exit_code}, {"signal", d.signal}};
    failure.message = e.message;
  }
  decisions_.Emit(&job, std::move(e));
  failures_.OnJobFailure(now, job, failure);
  return true;
}

bool Detection::SweepStall(absl::Time now, JobEntry& job, const JobStepStats& stats) {
  GenerationVerdicts& v = job.verdicts();
  // A stall is acted on at once (the job is stopped and restarted), so it
  // lasts until the next generation's verdicts.
  if (v.stalled) return false;
  const Job& observed = job.job();
  const StallVerdict verdict = stall_.Check(observed, now, stats);
  if (!verdict.stalled) return false;
  const Culprit culprit = FindCulprit(observed);
  v.stalled = true;
  v.stall_culprit = culprit.rank;
  Event e;
  e.time = now;
  e.kind = EventKind::kStall;
  e.message = verdict.reason;
  Failure failure;
  failure.kind = "stall";
  if (culprit.rank) {
    failure.node = observed.rank(*culprit.rank).node;
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
  decisions_.Emit(&job, std::move(e));
  // A hang burns its time from the last progress (or the generation start).
  failure.failed_at = now - verdict.silent;
  failure.message = culprit.rank ? absl::StrCat("hang at rank ", *culprit.rank) : "hang";
  failures_.OnJobFailure(now, job, failure);
  return true;
}

void Detection::SweepStragglers(absl::Time now, JobEntry& job) {
  for (const StragglerChange& change : job.verdicts().stragglers.Evaluate(job.job())) {
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
      failures_.OnNodeFailure(
          now, job,
          {"straggler", node, change.rank, now,
           absl::StrFormat("straggling rank %d (%.1fx)", change.rank, change.ratio)});
    }
  }
}

}  // namespace trainsup
