#include "daemon/core/signal_detection.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/core/events.h"
#include "daemon/core/failure_classifier.h"

namespace trainsup {

const std::string& SignalDetection::NodeOfRank(const JobEntry& job, uint32_t rank) const {
  return agents_.NameOf(job.job().rank(rank).node);
}

bool SignalDetection::Sweep(absl::Time now, JobEntry& job) {
  SignalMonitor::ResumeTold told;
  told.limit = job.fallback().limit_at_start();
  if (told.limit) told.at = job.fallback().NewestAtOrBelow(*told.limit);
  const EventJob event_job = EventJobOf(job);
  // Named: the sweep's FunctionRef must not outlive it.
  auto node_name = [this](NodeIndex node) -> const std::string& { return agents_.NameOf(node); };
  const SignalSweep sweep{
      now, job.job(), event_job, node_name, options_.observe_only, job.plans().plans()};
  SignalFindings found = job.mutable_signals().Sweep(sweep, told);
  const SignalOptions& options = job.signals().options();
  if (found.loss_shift) {
    decisions_.Emit(&job, LossShiftEvent(now, event_job, *found.loss_shift, options.loss_shift));
  }
  for (SignalFinding& f : found.findings) Act(now, job, f);
  const ResumeFindings& resume = found.resume;
  if (resume.behind) decisions_.Emit(&job, ResumedBehindEvent(now, event_job, *resume.behind));
  if (resume.lr) decisions_.Emit(&job, LrMismatchEvent(now, event_job, *resume.lr, options.resume));
  if (resume.data) {
    decisions_.Emit(&job, DataPositionMismatchEvent(now, event_job, *resume.data, options.resume));
  }
  if (resume.spike) {
    decisions_.Emit(&job, ResumeSpikeEvent(now, event_job, *resume.spike, options.resume));
  }
  // Last: they may stop the job.
  if (found.non_finite && OnNonFinite(now, job, *found.non_finite)) return true;
  if (resume.spike && OnResumeSpike(now, job, resume.spike->peak_step)) return true;
  if (found.loss_shift && OnLossSpike(now, job, *found.loss_shift)) return true;
  return SweepKill(now, job, found.loss_shift);
}

bool SignalDetection::SweepKill(absl::Time now, JobEntry& job,
                                const std::optional<LossShiftFinding>& shift) {
  KillCriteria& kill = job.mutable_kill();
  const GenerationRecord& record = job.signals().record();
  const int64_t after = kill.generation() == record.generation() ? kill.last_step() : -1;
  record.ForEachAfter(after, [&](const StepSummary& s) {
    if (s.loss) kill.ObserveLoss(record.generation(), s.step, *s.loss);
  });
  if (shift) kill.ObserveShift(shift->step, shift->onset_step, shift->recent_min, shift->threshold);
  const KillCriteriaSpec* spec = kill.spec();
  if (spec == nullptr) return false;
  std::optional<KillFiring> fired = kill.Check();
  if (!fired) return false;
  const bool observe_only = options_.observe_only || spec->observe_only;
  KillSaving saving;
  saving.total_steps = spec->total_steps;
  saving.step_seconds = job.StepStats().median_rank_p50_s;
  saving.gpus = job.job().world_size();
  saving.gpu_seconds =
      GpuSecondsSaved(saving.total_steps, fired->step, saving.step_seconds, saving.gpus);
  decisions_.Emit(&job, KilledByCriterionEvent(now, EventJobOf(job), *fired, kill.source(),
                                               observe_only, saving));
  if (observe_only) return false;
  return restarts_.BeginKill(now, job, KillReason(fired->kind, fired->step));
}

bool SignalDetection::OnNonFinite(absl::Time now, JobEntry& job, const NonFiniteFinding& f) {
  const Job& observed = job.job();
  std::vector<std::string> nodes;
  for (const RankAt& at : f.ranks) nodes.push_back(NodeOfRank(job, at.rank));
  const bool act = job.signals().options().non_finite.action == NonFiniteAction::kRestart;
  // The same non-finite failure at the same step as the last generation's:
  // restarting from the same checkpoint would only repeat it.
  FailureFingerprint fingerprint;
  fingerprint.generation = observed.generation();
  fingerprint.signature = f.grad_norm ? "non-finite gradient norm" : "non-finite loss";
  fingerprint.step = f.first_step;
  if (!f.ranks.empty()) {
    fingerprint.rank = f.ranks.front().rank;
    fingerprint.node = observed.rank(fingerprint.rank).node;
  }
  std::optional<std::string> hold;
  Failure failure;
  if (act) {
    JobLifecycle& life = job.mutable_lifecycle();
    if (life.last_failure) hold = WorkloadRepeat(*life.last_failure, fingerprint);
    life.last_failure = fingerprint;
    if (hold) failure.hold = WorkloadHold(*hold);
    // Soon after loading the same checkpoint as the generation before, it
    // is the checkpoint's: the next generation loads the one before it (a
    // repeat is no bug of the training code then), or, past the cap, the
    // job is held naming it. A first such failure changes nothing: a
    // repeat of the last generation's failure that loaded no checkpoint is
    // the step's, not a checkpoint's, and older checkpoints would only
    // replay it. Whatever else, the next generations resume below the NaN
    // (a non-finite gradient norm with finite losses poisons nothing).
    failures_.JudgeCheckpoints(job, f.first_step,
                               f.grad_norm ? std::nullopt
                                           : std::optional(LoadFailureKind::kNonFinite),
                               failure);
  }
  const bool restart = act && !options_.observe_only;
  const std::optional<std::string> held =
      restart && failure.hold ? std::optional(failure.hold->reason) : std::nullopt;
  decisions_.Emit(&job, NotFiniteEvent(now, EventJobOf(job), f, nodes, restart, held,
                                       failure.cut.advice.limit));
  if (!act) return false;
  failure.kind = "not_finite";
  failure.node = fingerprint.node;
  failure.rank = f.ranks.empty() ? std::nullopt : std::optional<uint32_t>(fingerprint.rank);
  failure.failed_at = f.seen;
  failure.message = absl::StrCat(fingerprint.signature, " at step ", f.first_step);
  failures_.OnJobFailure(now, job, failure);  // under --observe-only: recorded only
  return restart;
}

bool SignalDetection::OnLossSpike(absl::Time now, JobEntry& job, const LossShiftFinding& f) {
  const FallbackOptions& options = job.signals().options().fallback;
  // Under --observe-only nothing is decided for a later generation either.
  if (options.on_loss_spike != LossSpikeAction::kRollback || options_.observe_only) return false;
  FallbackDecision d =
      job.mutable_fallback().OnLossSpike(job.job().generation(), f.onset_step, f.step, options);
  if (d.kind == FallbackDecision::Kind::kNone) {
    decisions_.Emit(&job, SpikeRollbackEvent(now, EventJobOf(job), d));
    return false;
  }
  Failure failure;
  failure.kind = "loss_spike";
  failure.failed_at = now;
  failure.message = absl::StrCat("loss shifted up from step ", f.onset_step);
  failure.fallback = d;
  FailureHandler::Attach(d, failure);
  failures_.OnJobFailure(now, job, failure);
  return true;
}

bool SignalDetection::OnResumeSpike(absl::Time now, JobEntry& job, int64_t step) {
  if (options_.observe_only) return false;
  FallbackDecision d = job.mutable_fallback().OnLoadFailure(job.job().generation(), step,
                                                            LoadFailureKind::kResumeSpike,
                                                            job.signals().options().fallback);
  if (d.kind == FallbackDecision::Kind::kNone) return false;
  if (d.kind == FallbackDecision::Kind::kRetry) {  // remembered; the job goes on
    decisions_.journal().fallbacks.push_back({job.id(), job.fallback().state()});
    return false;
  }
  Failure failure;
  failure.kind = "resume_spike";
  failure.failed_at = now;
  failure.message = absl::StrCat("resume spike at step ", step);
  failure.fallback = d;
  FailureHandler::Attach(d, failure);
  failures_.OnJobFailure(now, job, failure);
  return true;
}

void SignalDetection::NoteSlowedGpus(absl::Time now, const JobEntry& job, Event& e) const {
  constexpr size_t kNamed = 3;
  std::vector<std::string> named;
  size_t slowed = 0;
  for (NodeIndex i : agents_.NodesOf(job.id())) {
    const NodeRecord& node = agents_.node(i);
    if (!e.node.empty() && node.name != e.node) continue;  // the node that moved, when named
    for (const GpuHealthState& gpu : node.gpu_health) {
      // A GPU no rank of the job uses does not slow it.
      if (gpu.slowing == 0 || gpu.ranks.empty()) continue;
      if (++slowed <= kNamed) named.push_back(absl::StrCat(node.name, "'s ", SlowedGpuNote(gpu, now)));
    }
  }
  if (slowed == 0) return;
  absl::StrAppend(&e.message, "; slowed GPUs: ", absl::StrJoin(named, "; "),
                  slowed > kNamed ? absl::StrCat(" and ", slowed - kNamed, " more") : "");
  e.figures.emplace_back("slowed_gpus", static_cast<double>(slowed));
}

void SignalDetection::Act(absl::Time now, JobEntry& job, SignalFinding& f) {
  const std::string kind(EventKindName(f.event.kind));
  const std::optional<uint32_t> rank = f.event.rank;
  // A slowdown while a GPU of the job runs slowed (heat, power): said with it.
  if (f.event.kind == EventKind::kThroughputChange || f.event.kind == EventKind::kThroughputDecay) {
    NoteSlowedGpus(now, job, f.event);
  }
  decisions_.Emit(&job, std::move(f.event));
  if (f.action != SignalAction::kChargeNode || f.node == kNoNode) return;
  // Counted toward the node's quarantine like any failure attributed to a
  // node (under --observe-only: recorded only); the job goes on.
  Failure failure;
  failure.kind = kind;
  failure.node = f.node;
  failure.charged = true;
  failure.rank = rank;
  failure.failed_at = now;
  failure.message = std::move(f.failure);
  failures_.OnNodeFailure(now, job, failure);
}

}  // namespace trainsup
