#ifndef TRAINSUP_DAEMON_CORE_JOB_ENTRY_H_
#define TRAINSUP_DAEMON_CORE_JOB_ENTRY_H_

#include <array>
#include <deque>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/core/checkpoint_fallback.h"
#include "daemon/core/checkpoint_publisher.h"
#include "daemon/core/early_failure.h"
#include "daemon/core/event_log.h"
#include "daemon/core/events.h"
#include "daemon/core/failure_classifier.h"
#include "daemon/core/goodput_ledger.h"
#include "daemon/core/job.h"
#include "daemon/core/job_costs.h"
#include "daemon/core/job_state.h"
#include "daemon/core/job_stats.h"
#include "daemon/core/journal.h"
#include "daemon/core/kill_criteria.h"
#include "daemon/core/recovery_timer.h"
#include "daemon/core/rendezvous.h"
#include "daemon/core/restart_governor.h"
#include "daemon/core/signals/signal_monitor.h"
#include "daemon/core/stacks.h"
#include "daemon/core/straggler_detector.h"
#include "daemon/core/supervisor_options.h"
#include "daemon/core/xid_catalog.h"

namespace trainsup {

// Where the supervisor, the job's only restart authority, has taken it.
struct JobLifecycle {
  explicit JobLifecycle(const RestartPolicy& policy) : governor(policy) {}

  JobState state = JobState::kPending;
  std::string reason;  // why it is in `state`
  absl::Time since = absl::InfinitePast();
  // Stopping: go on without the agents that have not stopped by then.
  absl::Time stop_deadline = absl::InfinitePast();
  // Restarting: start the next generation then.
  absl::Time restart_at = absl::InfinitePast();
  uint64_t restarts = 0;  // since this supervisor started
  // The current generation was adopted from an agent's word (this
  // supervisor lost its state), not started or restored by it. Only then is
  // a later generation an agent names adopted too; once the supervisor
  // started one itself, a generation it never started is refused.
  bool generation_adopted = false;
  RestartGovernor governor;
  // The world size and global batch of the previous generation, to tell
  // when a restart changed them (once per generation).
  uint32_t last_world_size = 0;
  uint64_t last_global_batch = 0;
  bool world_size_checked = false;
  // When its JobRow was last journaled (the MTBF exposure is kept fresh).
  absl::Time journaled_at = absl::InfinitePast();
  // Stopping: the stop asks the agents for their ranks' Python stacks first
  // (the job hung: the stacks are the evidence).
  bool collect_stacks = false;
  // Stopping: hold the job for this cause once stopped, instead of
  // restarting it (its failure is the training code's own, or the job's own
  // verdict is stop).
  std::optional<HoldCause> hold_after_stop;
  // Stopping: the job is killed once stopped (a kill criterion was met),
  // for this reason, instead of restarted.
  std::optional<std::string> kill_after_stop;
  // The job's last job-killing failure with a culprit rank, to tell one that
  // repeats (the training code's) from one that follows a node.
  std::optional<FailureFingerprint> last_failure;
  // The last job-killing failure recorded (as journaled; not a straggler's
  // charge), for the read model: what failed, whether its node was charged.
  std::optional<FailureRow> last_recorded_failure;
  // Its last command that failed before any rank reported, to tell one that
  // comes again (early_failure.h).
  std::optional<EarlyFailureMemory> last_early_failure;
  // A restart-elsewhere verdict named this node: the next generation runs
  // without it when the job can run on the others ("": none).
  std::string leave_out_next;
};

// How a node's command last stood in a generation, as its agent said it
// for the job.
struct GenerationNode {
  LauncherState state = LauncherState::kUnspecified;
  int32_t exit_code = 0;
  int32_t signal = 0;

  bool succeeded() const {
    return state == LauncherState::kExited && exit_code == 0 && signal == 0;
  }
};

// An Xid a node's GPU driver reported while the generation ran, and what
// the catalog said of it (docs/gpu.md).
struct GpuErrorSeen {
  std::string node;
  uint32_t xid = 0;
  XidAction action = XidAction::kReport;
};

// The rules' verdicts on the job's current generation. A new generation
// starts with none.
struct GenerationVerdicts {
  GenerationVerdicts(uint64_t generation, const StragglerOptions& straggler)
      : generation(generation), stragglers(straggler) {}

  uint64_t generation;
  // Crash: when the supervisor first heard of a certain failure or a failed
  // command (the settle clock), and the verdict once given.
  absl::Time failure_first_heard = absl::InfinitePast();
  bool crash_reported = false;
  std::optional<uint32_t> crash_culprit;
  // The nodes the generation runs without for a restart-elsewhere verdict:
  // not waited for to finish it.
  std::vector<std::string> left_out;
  // The nodes that ran the generation, by name, with their commands' last
  // state there (JobEntry::NoteLauncher): the job's own record of them. A
  // node's name passes to another job as soon as that job's agent says hello
  // with it (back-to-back jobs on the same hosts), and the generation's end
  // is still judged from what its own nodes said.
  absl::flat_hash_map<std::string, GenerationNode> nodes_ran;
  // Stall: held until the next generation (a stall is acted on at once).
  bool stalled = false;
  std::optional<uint32_t> stall_culprit;
  uint64_t stall_event_id = 0;  // the stall (or node_lost) event, for its stacks
  // Start timeout: held until the next generation (acted on at once).
  bool start_timed_out = false;
  // Straggler streaks, and the ranks flagged now.
  StragglerDetector stragglers;
  StragglerSet straggler_ranks;
  // What the rules measured at the last sweep (and when the generation began
  // to run), for the read model: the step statistics (JobEntry::StepStats)
  // and the stall threshold in force (absent while no rank reports).
  JobStepStats step_stats;
  uint64_t step_stats_heartbeats = UINT64_MAX;  // Job::heartbeats_received() then
  std::optional<absl::Duration> stall_threshold;
  // The GPU errors heard from its nodes (the first kMaxGpuErrorsKept): a
  // crash on a node whose GPU reported the application's error is the
  // workload's, not the node's.
  static constexpr size_t kMaxGpuErrorsKept = 64;
  std::vector<GpuErrorSeen> gpu_errors;
  // Whether `node`'s GPU reported an error the catalog calls the workload's.
  bool WorkloadGpuError(absl::string_view node) const;
  // The first error `node`'s GPU reported this generation that the catalog
  // says the GPU or the machine must be reset for (leave or drain): a rank
  // of that node that died died of its GPU. Null when none.
  const GpuErrorSeen* HardwareGpuError(absl::string_view node) const;
};

// Everything the supervisor holds about one job: what it observed (Job), the
// rules' verdicts on the current generation, its lifecycle, its recovery in
// progress, its checkpoint plans, costs and goodput ledger.
// Thread-compatible.
class JobEntry {
 public:
  JobEntry(std::string id, const SupervisorOptions& options);
  JobEntry(const JobEntry&) = delete;
  JobEntry& operator=(const JobEntry&) = delete;

  const std::string& id() const { return job_.id(); }
  Job& job() { return job_; }
  const Job& job() const { return job_; }

  // Starts the verdicts afresh when the job moved to a new generation since
  // the last call. Call after every observation that may move it.
  void SyncGeneration();

  // What a heartbeat just applied to job() tells the job's other parts: the
  // signal rules (the script's settings, a completed checkpoint), the
  // checkpoint fallback (steps, checkpoints), the script's kill criteria.
  // What must be committed goes into `journal`.
  void ObserveApplied(absl::Time now, const Heartbeat& hb, Journal& journal);
  GenerationVerdicts& verdicts() { return verdicts_; }
  const GenerationVerdicts& verdicts() const { return verdicts_; }
  // The agent of `node` says (in a report or a hello) that its command
  // stands as `launcher` in `generation`: kept in the verdicts' nodes_ran
  // when that is the job's current generation. O(1).
  void NoteLauncher(const std::string& node, uint64_t generation, const LauncherInfo& launcher);
  // The generation's step statistics, kept in its verdicts and computed
  // again only when heartbeats arrived since: one pass over every rank's
  // window serves a sweep's rules and the read model.
  const JobStepStats& StepStats();

  // Events of each kind about this job, across generations.
  uint64_t event_count(EventKind kind) const { return event_counts_[static_cast<int>(kind)]; }
  void CountEvent(EventKind kind) { ++event_counts_[static_cast<int>(kind)]; }
  // As counted before the supervisor restarted (state_restore.h).
  void RestoreEventCount(EventKind kind, uint64_t count) {
    event_counts_[static_cast<int>(kind)] = count;
  }

  // When an agent last spoke for the job (a hello or a report), or when it
  // was restored: a job no agent spoke for in --job-retention leaves memory.
  absl::Time last_heard() const { return last_heard_; }
  void NoteHeard(absl::Time now) { last_heard_ = now; }
  // When the job was put back from the state store (a restart, or an
  // elected trainsupd that starts leading): its agents are saying hello
  // again. InfinitePast: never.
  absl::Time restored_at() const { return restored_at_; }
  void NoteRestored(absl::Time now) { restored_at_ = now; }

  // The job's parts. The read side (read model, ended-job record, journal,
  // diagnose, planner inputs) reads them const; a part changes only through
  // its mutable_ accessor, so who changes what is one grep. Each names who
  // changes it (StateRestore puts every part back at a restart).
  //
  // Where the supervisor has taken the job: RestartCoordinator, and the
  // rules that stop it (Detection, SignalDetection, FailureHandler),
  // Admission (an adopted generation), Supervisor (a node's index moves).
  const JobLifecycle& lifecycle() const { return lifecycle_; }
  JobLifecycle& mutable_lifecycle() { return lifecycle_; }
  // How long its recoveries take: RestartCoordinator.
  const RecoveryTimer& recovery() const { return recovery_; }
  RecoveryTimer& mutable_recovery() { return recovery_; }
  // Where its GPU time went: Supervisor (each report), Admission (a new
  // run under the same id starts it afresh).
  const GoodputLedger& ledger() const { return ledger_; }
  GoodputLedger& mutable_ledger() { return ledger_; }
  // Its measured checkpoint and restart costs, and failures (the MTBF's):
  // Supervisor, RestartCoordinator, FailureHandler.
  const JobCosts& costs() const { return costs_; }
  JobCosts& mutable_costs() { return costs_; }
  // The checkpoint plans published to its agents: JobPlanner, Admission
  // and the ended-job record (the plans its agents already hold).
  const CheckpointPublisher& plans() const { return plans_; }
  CheckpointPublisher& mutable_plans() { return plans_; }
  // The training signals of the job's current generation (and the record
  // of the one before); told of every step the job applies, swept by
  // SignalDetection.
  const SignalMonitor& signals() const { return signals_; }
  SignalMonitor& mutable_signals() { return signals_; }
  // Where each generation meets (the node hosting torchrun's rendezvous):
  // Admission (a node's offer), RestartCoordinator (the next generation's).
  const RendezvousPlan& rendezvous() const { return rendezvous_; }
  RendezvousPlan& mutable_rendezvous() { return rendezvous_; }
  // Which checkpoint its generations must load (a suspect one, a spike's):
  // ObserveApplied, FailureHandler, SignalDetection.
  const CheckpointFallback& fallback() const { return fallback_; }
  CheckpointFallback& mutable_fallback() { return fallback_; }
  // When to stop the run for good (the script's and the operator's
  // criteria): ObserveApplied, Supervisor (the operator's), SignalDetection,
  // RestartCoordinator (re-armed each generation).
  const KillCriteria& kill() const { return kill_; }
  KillCriteria& mutable_kill() { return kill_; }
  // The stacks of the job's recent hung generations: Supervisor.
  static constexpr size_t kMaxStackSets = 8;
  const StackShelf& stacks() const { return stacks_; }
  StackShelf& mutable_stacks() { return stacks_; }

 private:
  absl::Time last_heard_ = absl::InfinitePast();
  absl::Time restored_at_ = absl::InfinitePast();
  JobLifecycle lifecycle_;
  RecoveryTimer recovery_;
  GoodputLedger ledger_;
  JobCosts costs_;
  CheckpointPublisher plans_;
  SignalMonitor signals_;  // job_'s step observer: declared first, outlives it
  RendezvousPlan rendezvous_;
  CheckpointFallback fallback_;
  KillCriteria kill_;
  StackShelf stacks_{kMaxStackSets};
  const StragglerOptions straggler_options_;
  Job job_;
  GenerationVerdicts verdicts_;
  std::array<uint64_t, kEventKindCount> event_counts_{};
};

// `job` as its events name it now (events.h): its id and generation; none
// for nullptr.
EventJob EventJobOf(const JobEntry* job);
inline EventJob EventJobOf(const JobEntry& job) { return EventJobOf(&job); }

// Every job the supervisor knows, by id. Thread-compatible.
class JobTable {
 public:
  explicit JobTable(const SupervisorOptions& options) : options_(options) {}
  JobTable(const JobTable&) = delete;
  JobTable& operator=(const JobTable&) = delete;

  // The job `id`, created when new (`*created` says which).
  JobEntry& FindOrAdd(const std::string& id, bool* created = nullptr);
  JobEntry* Find(absl::string_view id);
  // Forgets the job `id` (nothing happens when there is none).
  void Erase(absl::string_view id) { jobs_.erase(id); }
  const JobEntry* Find(absl::string_view id) const;
  // Every job, sorted by id.
  std::vector<const JobEntry*> Sorted() const;
  size_t size() const { return jobs_.size(); }

  template <typename Fn>
  void ForEach(Fn fn) {
    for (auto& [id, entry] : jobs_) fn(*entry);
  }
  template <typename Fn>
  void ForEach(Fn fn) const {
    for (const auto& [id, entry] : jobs_) fn(static_cast<const JobEntry&>(*entry));
  }

 private:
  const SupervisorOptions& options_;
  absl::flat_hash_map<std::string, std::unique_ptr<JobEntry>> jobs_;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_JOB_ENTRY_H_
