#include "daemon/core/job_entry.h"

#include <algorithm>
#include <utility>

namespace trainsup {
namespace {

// Tells `fallback` of a step or a completed checkpoint of `generation`;
// true when its state to persist changed.
bool ObserveForFallback(CheckpointFallback& fallback, uint64_t generation, const Heartbeat& hb) {
  switch (hb.kind) {
    case HeartbeatKind::kStep:
      return fallback.OnStep(generation, hb.step);
    case HeartbeatKind::kCheckpointEnd:  // a failed save is no checkpoint to load
      return !hb.save_failed() && fallback.OnCheckpoint(generation, hb.step);
    default:
      return false;
  }
}

}  // namespace

JobEntry::JobEntry(std::string id, const SupervisorOptions& options)
    : lifecycle_(options.restart),
      plans_(options.publish),
      signals_(options.signals),
      kill_(options.signals.loss_shift.window),
      straggler_options_(options.straggler),
      job_(std::move(id), options.step_window, options.straggler.window),
      verdicts_(0, options.straggler) {
  job_.set_step_observer(&signals_);
}

bool GenerationVerdicts::WorkloadGpuError(absl::string_view node) const {
  for (const GpuErrorSeen& e : gpu_errors) {
    if (e.node == node && e.action == XidAction::kWorkload) return true;
  }
  return false;
}

const GpuErrorSeen* GenerationVerdicts::HardwareGpuError(absl::string_view node) const {
  for (const GpuErrorSeen& e : gpu_errors) {
    if (e.node == node && (e.action == XidAction::kLeave || e.action == XidAction::kDrain)) {
      return &e;
    }
  }
  return nullptr;
}

void JobEntry::SyncGeneration() {
  if (verdicts_.generation == job_.generation()) return;
  verdicts_ = GenerationVerdicts(job_.generation(), straggler_options_);
}

void JobEntry::NoteLauncher(const std::string& node, uint64_t generation,
                            const LauncherInfo& launcher) {
  if (generation == 0 || generation != job_.generation()) return;
  SyncGeneration();
  GenerationNode& ran = verdicts_.nodes_ran[node];
  ran.state = launcher.state;
  ran.exit_code = launcher.exit_code;
  ran.signal = launcher.signal;
}

const JobStepStats& JobEntry::StepStats() {
  if (verdicts_.step_stats_heartbeats != job_.heartbeats_received()) {
    verdicts_.step_stats = ComputeJobStepStats(job_);
    verdicts_.step_stats_heartbeats = job_.heartbeats_received();
  }
  return verdicts_.step_stats;
}

JobEntry& JobTable::FindOrAdd(const std::string& id, bool* created) {
  std::unique_ptr<JobEntry>& slot = jobs_[id];
  if (created != nullptr) *created = slot == nullptr;
  if (slot == nullptr) slot = std::make_unique<JobEntry>(id, options_);
  return *slot;
}

JobEntry* JobTable::Find(absl::string_view id) {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : it->second.get();
}

const JobEntry* JobTable::Find(absl::string_view id) const {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : it->second.get();
}

std::vector<const JobEntry*> JobTable::Sorted() const {
  std::vector<const JobEntry*> out;
  out.reserve(jobs_.size());
  for (const auto& [id, entry] : jobs_) out.push_back(entry.get());
  std::sort(out.begin(), out.end(),
            [](const JobEntry* a, const JobEntry* b) { return a->id() < b->id(); });
  return out;
}

void JobEntry::ObserveApplied(absl::Time now, const Heartbeat& hb, Journal& journal) {
  if (!hb.signal_settings.empty()) signals_.OnStart(job_, hb);
  if (hb.kind == HeartbeatKind::kCheckpointEnd) signals_.OnCheckpoint(job_, hb);
  if (ObserveForFallback(fallback_, job_.generation(), hb)) {
    journal.fallbacks.push_back({id(), fallback_.state()});
  }
  if (hb.kill_criteria && !(kill_.script() && *kill_.script() == *hb.kill_criteria)) {
    kill_.SetScript(*hb.kill_criteria);
    journal.kill_criteria.push_back({id(), "script", hb.kill_criteria, now});
  }
}

EventJob EventJobOf(const JobEntry* job) {
  if (job == nullptr) return EventJob();
  return EventJob{job->id(), job->job().generation()};
}

}  // namespace trainsup
