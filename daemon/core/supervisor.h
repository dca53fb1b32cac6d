#ifndef TRAINSUP_DAEMON_CORE_SUPERVISOR_H_
#define TRAINSUP_DAEMON_CORE_SUPERVISOR_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/core/admission.h"
#include "daemon/core/agent_registry.h"
#include "daemon/core/decisions.h"
#include "daemon/core/detection.h"
#include "daemon/core/event_log.h"
#include "daemon/core/failure_handler.h"
#include "daemon/core/gpu_errors.h"
#include "daemon/core/heartbeat.h"
#include "daemon/core/job.h"
#include "daemon/core/job_entry.h"
#include "daemon/core/job_planner.h"
#include "daemon/core/job_view.h"
#include "daemon/core/journal.h"
#include "daemon/core/quarantine_policy.h"
#include "daemon/core/diagnose.h"
#include "daemon/core/read_model.h"
#include "daemon/core/reconciler.h"
#include "daemon/core/report_cadence.h"
#include "daemon/core/reject_reason.h"
#include "daemon/core/restart_coordinator.h"
#include "daemon/core/signal_detection.h"
#include "daemon/core/supervisor_options.h"

namespace trainsup {

// The supervisor's pure core: every decision, no threads, gRPC or I/O. The
// adapters feed it (time, observation) pairs; time is always a parameter.
// A facade: the agents' registry, the jobs and the rules live in their own
// classes (docs/DESIGN.md maps them); this class routes observations to them
// and runs the sweep. Thread-compatible: the caller serializes access.
class Supervisor {
 public:
  explicit Supervisor(SupervisorOptions options);

  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  struct HelloResult {
    SessionId session = 0;
    // The node's previous session, now superseded (0: none). Its stream
    // should be closed; its reports are refused from now on.
    SessionId superseded = 0;
    // The job's current generation.
    uint64_t generation = 0;
    // Whether an agent that has not launched yet should launch now (false:
    // wait for a start command).
    bool launch = true;
    // Whether the supervisor restarts failed jobs (false: --observe-only; the
    // agent then exits when its command ends).
    bool restarts = true;
    // How often the agent is to report (zero: as it likes).
    absl::Duration report_interval;
    // With launch: where the generation meets (unset: as the command says).
    std::optional<RendezvousSpec> rendezvous;
    // With launch: which checkpoint to load, which batches to skip.
    ResumeAdvice resume;
  };
  // An agent opened a stream and said hello. InvalidArgument on a bad node
  // name or job id; AlreadyExists while another agent (another incarnation)
  // serves the node and is heard. A second hello of the same agent, or one
  // for a node whose agent went silent, supersedes the first session.
  absl::StatusOr<HelloResult> Hello(absl::Time now, const AgentHelloInfo& hello);

  // The stream of `session` ended. Unknown or superseded sessions are ignored.
  void Disconnected(absl::Time now, SessionId session);

  // A node report. FailedPrecondition when `session` is unknown or was
  // superseded by a newer hello of the same node. Bad heartbeats inside an
  // accepted report are counted by reason and skipped; they never fail it.
  absl::Status Report(absl::Time now, SessionId session, const NodeReportInfo& report);

  // An agent sent its ranks' Python stacks (collected on a stop that asked
  // for them). Kept with the job's generation and the stall event they
  // explain. FailedPrecondition for an unknown session; InvalidArgument for
  // ranks outside the world or a stack beyond kMaxStackBytes.
  absl::Status Stacks(absl::Time now, SessionId session, const StacksInfo& stacks);
  // An agent read an Xid in its node's kernel log (docs/gpu.md): a gpu_error
  // event, and what NVIDIA's catalog says (the node leaves the job, is
  // drained, or its next crash is the workload's). FailedPrecondition for
  // an unknown session; InvalidArgument for an Xid of 0, a message beyond
  // kMaxGpuErrorMessageBytes or more than kMaxGpuErrorRanks ranks.
  absl::Status GpuError(absl::Time now, SessionId session, const GpuErrorInfo& error);
  // An agent read its GPUs' health (docs/gpu.md, "GPU health"): kept for the
  // node; a rise of an uncorrectable error counter counts against it.
  // InvalidArgument for more than kMaxGpusPerNode GPUs, a GPU with more than
  // kMaxGpuErrorRanks ranks, or a rank outside the job's world.
  absl::Status GpuHealth(absl::Time now, SessionId session, const GpuHealthInfo& report);
  // The node of a live session; null when it is unknown or superseded.
  const NodeRecord* NodeOfSession(SessionId session) const;

  // Runs every rule over every job and moves each job's lifecycle on (stop,
  // restart, hold, finish); returns the new events (also in the output). The
  // driver calls it on a timer, so a condition is acted on at most one sweep
  // interval after it holds.
  std::vector<Event> Sweep(absl::Time now);

  // Operator actions. Each returns what happened in words ("job j resumed",
  // "node n already quarantined") or NotFound / FailedPrecondition.
  absl::StatusOr<std::string> Resume(absl::Time now, absl::string_view job_id);
  // Quarantine obeys --quarantine-max-fraction unless `force`.
  absl::StatusOr<std::string> Quarantine(absl::Time now, absl::string_view node,
                                         absl::string_view reason, bool force = false);
  absl::StatusOr<std::string> Unquarantine(absl::Time now, absl::string_view node);
  // `trainsupctl kill-criteria JOB set|clear`: the operator's kill criteria
  // for `job_id` (nullopt: cleared; the script's are in force again),
  // journaled. NotFound for no such job; InvalidArgument for criteria
  // CheckKillCriteria refuses.
  absl::StatusOr<std::string> SetKillCriteria(absl::Time now, absl::string_view job_id,
                                              const std::optional<KillCriteriaSpec>& spec);
  // `trainsupctl kill-criteria list`: the criteria in force of `job_id`, or
  // of every job that has some (empty id), by id. NotFound for no such job.
  absl::StatusOr<std::vector<KillCriteriaView>> KillCriteriaOf(absl::string_view job_id) const;
  // A one-off checkpoint at a step every rank reaches after the plan horizon.
  absl::StatusOr<std::string> RequestCheckpoint(absl::Time now, absl::string_view job_id);

  // The fence (or unfence) command for `request` ended (the driver ran it).
  void FenceDone(absl::Time now, const FenceRequest& request, bool ok, const std::string& detail);

  // The driver could not persist what was decided and did not act on it
  // (`what` says which commands and fences, and why); `node` is the first
  // node concerned, if any.
  void PersistFailed(absl::Time now, const std::string& node, const std::string& what);
  // Under an election (docs/ha.md): the driver's role changed; an event.
  void LeadershipChanged(absl::Time now, absl::string_view role, int64_t epoch,
                         const std::string& reason);

  // Takes what was decided since the last call.
  SupervisorOutput TakeOutput() { return decisions_.Take(); }

  // Puts back what the state store kept (call once, before any agent).
  void Restore(absl::Time now, const PersistedState& state);
  // A core that replaces `last_session`'s (rebuilt from the store) hands
  // out session ids after it: a stream of the old core is never mistaken
  // for an agent of this one.
  SessionId last_session() const { return agents_.last_session(); }
  void StartSessionsAfter(SessionId last_session) { agents_.StartSessionsAfter(last_session); }

  // The read model (job_view.h): what the adapters render, as values the
  // core computed, most of them at the sweep.
  std::vector<JobView> JobViews(absl::Time now) const { return views_.JobViews(now); }
  std::optional<JobView> ViewOf(absl::string_view job_id, absl::Time now) const;
  // The ranks of `job_id` heard from in its current generation, by rank
  // (ReadModel::RankViewsOf); false when there is no such job.
  bool RankViewsOf(absl::string_view job_id, std::vector<RankView>* rows,
                   std::vector<RankTexts>* texts) const;
  std::vector<NodeView> NodeViews() const { return views_.NodeViews(); }
  ClusterView Cluster(absl::Time now) const { return views_.Cluster(now); }
  // The stacks of `job_id`'s generation `generation` (0: the latest with
  // stacks), grouped; NotFound when there is no such job, nullopt when it
  // has none.
  absl::StatusOr<std::optional<StacksView>> StacksOf(absl::string_view job_id,
                                                     uint64_t generation) const;

  // `trainsupctl diagnose`: the triage of `job_id` as of `now`
  // (diagnose.h), over its views, stacks and kept events. NotFound when
  // there is no such job. Walks the job's ranks and the nodes once: for an
  // operator's occasional call, not for every snapshot.
  absl::StatusOr<Diagnosis> Diagnose(absl::string_view job_id, absl::Time now) const;

  // The core's own state, for its tests and the fuzzers (adapters read the
  // views above). Pointers stay valid until the next mutating call.
  const JobEntry* FindEntry(absl::string_view job_id) const { return jobs_.Find(job_id); }
  const Job* FindJob(absl::string_view job_id) const;
  std::vector<const JobEntry*> Jobs() const { return jobs_.Sorted(); }  // by id
  MtbfEstimate JobMtbf(const JobEntry& job, absl::Time now) const {
    return planner_.JobMtbf(job, now);
  }
  MtbfEstimate ClusterMtbf(absl::Time now) const { return planner_.ClusterMtbf(jobs_, now); }
  const std::vector<NodeRecord>& nodes() const { return agents_.nodes(); }
  const NodeRecord& node(NodeIndex index) const { return agents_.node(index); }
  const QuarantinePolicy& quarantine() const { return quarantine_; }

  // Counters and settings.
  uint32_t agents_connected() const { return agents_.connected(); }
  // The report interval agents are told (zero: adaptive reporting is off).
  absl::Duration report_interval() const { return cadence_.current(); }
  const EventLog& events() const { return decisions_.events(); }
  const RejectCounts& rejected() const { return rejected_; }
  uint64_t heartbeats_received() const { return heartbeats_received_; }
  uint64_t heartbeats_dropped_by_agents() const { return agent_dropped_; }
  uint64_t reports_received() const { return reports_received_; }
  // Reports refused whole: about a generation this supervisor never started.
  uint64_t reports_refused() const { return reports_refused_; }
  // Hellos of new jobs (nodes) refused past --max-jobs (--max-nodes).
  uint64_t jobs_refused() const { return admission_.jobs_refused(); }
  uint64_t nodes_refused() const { return admission_.nodes_refused(); }
  // Jobs and nodes that left memory after --job-retention without an agent.
  uint64_t jobs_forgotten() const { return jobs_forgotten_; }
  uint64_t nodes_forgotten() const { return nodes_forgotten_; }
  // The job's own verdicts acted on, and early failures judged, since start.
  const VerdictCounts& verdicts_acted() const { return failures_.verdicts(); }
  const EarlyFailureCounts& early_failures() const { return detection_.early_failures(); }
  // Lifecycle moves the transition table refused (0 unless a rule is wrong).
  uint64_t refused_transitions() const { return restarts_.refused_transitions(); }

 private:
  void SweepJob(absl::Time now, JobEntry& job);
  // Forgets the jobs and nodes no agent spoke for in --job-retention.
  void ForgetIdle(absl::Time now);
  void CountAgentRejects(NodeRecord& node, const NodeReportInfo& report);
  // Re-decides the report interval for the agents connected now; when it
  // changes, every connected agent but `welcomed` (its welcome says it) is
  // told.
  void UpdateCadence(absl::Time now, SessionId welcomed = 0);

  const SupervisorOptions options_;
  Decisions decisions_;
  AgentRegistry agents_;
  QuarantinePolicy quarantine_;
  JobTable jobs_;
  RestartCoordinator restarts_;
  Admission admission_;
  FailureHandler failures_;
  GpuErrorHandler gpu_errors_;
  Detection detection_;
  SignalDetection signal_detection_;
  JobPlanner planner_;
  Reconciler reconciler_;
  ReportCadence cadence_;
  ReadModel views_;

  RejectCounts rejected_;
  uint64_t heartbeats_received_ = 0;
  uint64_t agent_dropped_ = 0;
  uint64_t reports_received_ = 0;
  uint64_t reports_refused_ = 0;
  uint64_t jobs_forgotten_ = 0;
  uint64_t nodes_forgotten_ = 0;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_SUPERVISOR_H_
