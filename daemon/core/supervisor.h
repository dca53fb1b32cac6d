#ifndef TRAINSUP_DAEMON_CORE_SUPERVISOR_H_
#define TRAINSUP_DAEMON_CORE_SUPERVISOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/core/checkpoint_planner.h"
#include "daemon/core/checkpoint_schedule.h"
#include "daemon/core/crash_detector.h"
#include "daemon/core/event_log.h"
#include "daemon/core/heartbeat.h"
#include "daemon/core/job.h"
#include "daemon/core/job_state.h"
#include "daemon/core/goodput_ledger.h"
#include "daemon/core/journal.h"
#include "daemon/core/mtbf_estimator.h"
#include "daemon/core/quarantine_policy.h"
#include "daemon/core/reject_reason.h"
#include "daemon/core/restart_governor.h"
#include "daemon/core/stall_detector.h"
#include "daemon/core/straggler_detector.h"

namespace trainsup {

struct SupervisorOptions {
  // Step durations kept per rank for p50/p99. Default: 128.
  size_t step_window = 128;
  StallOptions stall;
  CrashOptions crash;
  StragglerOptions straggler;
  // Events kept in memory for `trainsupctl events`. Default: 10000.
  size_t event_log_size = 10000;
  RestartPolicy restart;
  QuarantineOptions quarantine;
  // After sending stop, wait at most this long for every agent to report its
  // command ended before going on without the stragglers. Default: 60s.
  absl::Duration stop_timeout = absl::Seconds(60);
  // The agents' SIGTERM -> SIGKILL grace on a stop. Default: 10s.
  absl::Duration stop_grace = absl::Seconds(10);

  // Checkpoint planning. The MTBF prior (one pseudo-failure over it) and the
  // confidence of its interval; the planner uses its lower bound.
  MtbfOptions mtbf;
  // C and R until the job has measured them. Defaults: 60s, 5m.
  absl::Duration checkpoint_cost_prior = absl::Seconds(60);
  absl::Duration restart_cost_prior = absl::Minutes(5);
  // A new plan takes effect this far ahead (and at least 5 steps ahead), so
  // that every rank holds it before its first step. Default: 10s.
  absl::Duration plan_horizon = absl::Seconds(10);
  // Publish a new plan only when the interval moves by more than this
  // fraction. Default: 0.2.
  double replan_threshold = 0.2;
  // Publish checkpoint plans at all. Default: true.
  bool plan_checkpoints = true;
  // Detect and report only: never stop, restart or quarantine (a way to roll
  // trainsup out, or to watch a job's own failure handling). Agents then exit
  // with their command's code, as without a supervisor. Default: false.
  bool observe_only = false;
};

// Identifies one agent stream (one Hello). A reconnecting agent gets a new one.
using SessionId = uint64_t;

// A decision for one agent, to send down its stream.
struct AgentCommand {
  enum class Kind {
    kStop,        // SIGTERM the command's group (SIGKILL after `grace`), then wait
    kStart,       // launch the command as `generation`
    kHold,        // the job is held: stay stopped, wait for a start
    kQuarantine,  // this node is quarantined: stop, do not launch, exit
    kPlan,        // a checkpoint plan (in `plan`) for the ranks
  };
  SessionId session = 0;
  std::string node;
  Kind kind = Kind::kStop;
  uint64_t generation = 0;
  std::string reason;
  absl::Duration grace;
  CheckpointPlanSpec plan;  // kPlan
};

// Ask the cluster scheduler to fence a node (the driver runs --fence-command).
struct FenceRequest {
  std::string node;
  std::string reason;
};

// Everything the core decided since it was last asked: the driver persists
// `journal` first, then sends `commands`, runs `fences` and logs `events`.
struct SupervisorOutput {
  std::vector<Event> events;
  std::vector<AgentCommand> commands;
  std::vector<FenceRequest> fences;
  Journal journal;
};

// The supervisor's decisions about one job across its generations.
struct JobControl {
  explicit JobControl(const RestartPolicy& policy) : governor(policy) {}
  JobState state = JobState::kPending;
  std::string reason;  // why it is in `state`
  absl::Time since = absl::InfinitePast();
  RestartGovernor governor;
  absl::Time stop_deadline = absl::InfinitePast();
  absl::Time restart_at = absl::InfinitePast();
  uint64_t restarts = 0;  // since this supervisor started
  // The world size and global batch of the previous generation.
  uint32_t last_world_size = 0;
  uint64_t last_global_batch = 0;
  bool world_size_checked = false;  // for the current generation
  // Timing of the restart in progress, for the `recovered` event.
  struct Recovery {
    absl::Time failed;     // the failure happened (death, or last progress of a hang)
    absl::Time detected;   // the supervisor decided to restart
    absl::Time stopped = absl::InfinitePast();  // every agent stopped
    absl::Time started = absl::InfinitePast();  // start sent
    std::string cause;
  };
  std::optional<Recovery> recovery;

  // Where its wall time went, across generations.
  GoodputLedger ledger;
  // What its checkpoints and restarts cost, as measured (recent values).
  StepWindow checkpoint_costs{32};  // blocking seconds per rank checkpoint
  StepWindow checkpoint_async{32};  // background write seconds
  StepWindow restart_costs{16};     // failure -> first step of the next generation
  // Exposure for the MTBF: seconds in `running` before `running_since`.
  double exposure_seconds = 0;
  absl::Time running_since = absl::InfinitePast();
  int failures = 0;  // job-killing: crashes and stalls
  double ExposureSeconds(absl::Time now) const {
    return exposure_seconds + (running_since == absl::InfinitePast()
                                   ? 0
                                   : std::max(0.0, absl::ToDoubleSeconds(now - running_since)));
  }
  // The checkpoint plans published, in order (the ranks hold the same).
  std::vector<CheckpointPlanSpec> plans;
  std::optional<CheckpointPlan> plan_figures;  // the figures behind the last plan
  absl::Time planned_at = absl::InfinitePast();
  absl::Time journaled_at = absl::InfinitePast();  // its JobRow was last written
};

// A node as the supervisor knows it: the agent that speaks for it.
struct NodeRecord {
  std::string name;
  std::string job;
  bool connected = false;
  SessionId session = 0;
  uint64_t incarnation = 0;
  uint64_t generation = 0;
  absl::Time last_report = absl::InfinitePast();
  LauncherInfo launcher;
  uint64_t heartbeats_received = 0;
  uint64_t reports_received = 0;
  // The agent's cumulative counters as last reported, to count only the new part.
  absl::flat_hash_map<std::string, uint64_t> agent_rejected;
  uint64_t agent_dropped = 0;
  bool quarantined = false;
  std::string quarantine_reason;
  // What this session was already told, so that decisions go out once.
  struct Told {
    uint64_t stop_generation = 0;  // stop sent for this generation (+1; 0: none)
    uint64_t start_generation = 0;
    bool hold = false;
    bool quarantine = false;
    uint64_t plan_id = 0;  // plans up to this id were sent
  } told;
};

// The supervisor's pure core: every decision, no threads, gRPC or I/O. The
// adapters feed it (time, observation) pairs; time is always a parameter.
// Thread-compatible: the caller serializes access.
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
  };
  // An agent opened a stream and said hello. InvalidArgument on a bad node
  // name or job id. A second hello for a node supersedes the first session.
  absl::StatusOr<HelloResult> Hello(absl::Time now, const AgentHelloInfo& hello);

  // The stream of `session` ended. Unknown or superseded sessions are ignored.
  void Disconnected(absl::Time now, SessionId session);

  // A node report. FailedPrecondition when `session` is unknown or was
  // superseded by a newer hello of the same node. Bad heartbeats inside an
  // accepted report are counted by reason and skipped; they never fail it.
  absl::Status Report(absl::Time now, SessionId session, const NodeReportInfo& report);

  // Runs every detector over every job and moves each job's lifecycle on
  // (stop, restart, hold, finish); returns the new events (also in the
  // output). The driver calls it on a timer, so a condition is acted on at
  // most one sweep interval after it holds.
  std::vector<Event> Sweep(absl::Time now);

  // Operator actions. Each returns what happened in words ("job j resumed",
  // "node n already quarantined") or NotFound / FailedPrecondition.
  absl::StatusOr<std::string> Resume(absl::Time now, absl::string_view job_id);
  absl::StatusOr<std::string> Quarantine(absl::Time now, absl::string_view node,
                                         absl::string_view reason);
  absl::StatusOr<std::string> Unquarantine(absl::Time now, absl::string_view node);
  // A one-off checkpoint at a step every rank reaches after the plan horizon.
  absl::StatusOr<std::string> RequestCheckpoint(absl::Time now, absl::string_view job_id);

  // MTBF of one job, and of the whole cluster (all jobs' exposure and
  // failures), at `now`.
  MtbfEstimate JobMtbf(const JobControl& control, absl::Time now) const;
  MtbfEstimate ClusterMtbf(absl::Time now) const;
  // The checkpoint cost C and restart cost R the planner uses for a job:
  // measured (median of recent values) or the prior; `measured` says which.
  double CheckpointCost(const JobControl& control, bool* measured) const;
  double RestartCost(const JobControl& control, bool* measured) const;

  // The fence command for `node` ended (the driver ran it).
  void FenceDone(absl::Time now, const std::string& node, bool ok, const std::string& detail);

  // Takes what was decided since the last call.
  SupervisorOutput TakeOutput();

  // Puts back what the state store kept (call once, before any agent).
  void Restore(absl::Time now, const PersistedState& state);

  // Queries. Pointers stay valid until the next mutating call.
  const Job* FindJob(absl::string_view job_id) const;
  std::vector<const Job*> Jobs() const;  // sorted by id
  const std::vector<NodeRecord>& nodes() const { return nodes_; }
  const NodeRecord& node(NodeIndex index) const { return nodes_[index]; }
  uint32_t agents_connected() const;

  const JobControl* FindControl(absl::string_view job_id) const;
  const QuarantinePolicy& quarantine() const { return quarantine_; }
  const EventLog& events() const { return events_; }
  const StallDetector& stall_detector() const { return stall_detector_; }
  const RejectCounts& rejected() const { return rejected_; }
  uint64_t heartbeats_received() const { return heartbeats_received_; }
  uint64_t heartbeats_dropped_by_agents() const { return agent_dropped_; }
  uint64_t reports_received() const { return reports_received_; }

 private:
  Job& JobFor(const std::string& job_id);
  NodeIndex NodeFor(const std::string& name);
  // The node index of a live session, or kNoNode.
  NodeIndex NodeOfSession(SessionId session) const;
  void CountAgentRejects(NodeRecord& node, const NodeReportInfo& report);
  // The first node of `job` whose command failed in the job's current
  // generation, or kNoNode.
  NodeIndex FailedLauncherNode(const Job& job) const;
  const std::string& NodeName(NodeIndex index) const;

  JobControl& ControlFor(const Job& job);
  void AdoptPlans(JobControl& control, const std::vector<CheckpointPlanSpec>& held);

  // Detectors (supervisor.cc). Each returns true when it found a failure
  // that it handed to OnFailure.
  bool SweepCrash(absl::Time now, Job& job);
  bool SweepStall(absl::Time now, Job& job, const JobStepStats& stats);
  void SweepStragglers(absl::Time now, Job& job);

  // Lifecycle (supervisor_lifecycle.cc).
  void SweepLifecycle(absl::Time now, Job& job);
  void Transition(absl::Time now, Job& job, JobState to, const std::string& reason);
  // A failure attributed to `node` (kNoNode: none): persisted, counted by the
  // quarantine policy, and the job restarted everywhere.
  void OnFailure(absl::Time now, Job& job, absl::string_view kind, NodeIndex node,
                 std::optional<uint32_t> rank, absl::Time failed_at, const std::string& message);
  void AttributeToNode(absl::Time now, NodeIndex node, absl::string_view kind,
                       const std::string& what);
  void QuarantineNode(absl::Time now, NodeIndex node, const std::string& reason,
                      absl::string_view by);
  void BeginRestart(absl::Time now, Job& job, absl::Time failed_at, const std::string& cause);
  void SweepStopping(absl::Time now, Job& job);
  void StartNextGeneration(absl::Time now, Job& job);
  void CheckFinished(absl::Time now, Job& job);
  void TrackRecovery(absl::Time now, Job& job);
  void Replan(absl::Time now, Job& job, const JobStepStats& stats);
  // Appends a plan and announces it; Reconcile sends it to the agents.
  void Publish(absl::Time now, Job& job, CheckpointPlanSpec spec, const std::string& why,
               std::vector<std::pair<std::string, double>> figures);
  // Sends each agent of `job` what the job's state wants of it, once.
  void Reconcile(Job& job);
  void Command(const NodeRecord& node, AgentCommand::Kind kind, uint64_t generation,
               const std::string& reason);
  void JournalJob(absl::Time now, const Job& job);

  // Appends to the log (and the journal), counts it on `job` (if any).
  void Emit(Job* job, Event event);

  const SupervisorOptions options_;
  const StallDetector stall_detector_;
  const CrashDetector crash_detector_;
  const MtbfEstimator mtbf_;
  absl::flat_hash_map<std::string, std::unique_ptr<Job>> jobs_;
  // Per job: straggler streaks, and the generation they belong to.
  struct StragglerState {
    uint64_t generation = 0;
    StragglerDetector detector;
  };
  absl::flat_hash_map<std::string, std::unique_ptr<StragglerState>> stragglers_;
  absl::flat_hash_map<std::string, std::unique_ptr<JobControl>> controls_;
  QuarantinePolicy quarantine_;
  EventLog events_;
  SupervisorOutput output_;
  std::vector<NodeRecord> nodes_;
  absl::flat_hash_map<std::string, NodeIndex> node_index_;
  absl::flat_hash_map<SessionId, NodeIndex> sessions_;
  SessionId next_session_ = 1;

  RejectCounts rejected_;
  uint64_t heartbeats_received_ = 0;
  uint64_t agent_dropped_ = 0;
  uint64_t reports_received_ = 0;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_SUPERVISOR_H_
