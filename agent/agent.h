#ifndef TRAINSUP_AGENT_AGENT_H_
#define TRAINSUP_AGENT_AGENT_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "agent/agent_state.h"
#include "agent/gpu_health_poller.h"
#include "agent/gpu_inventory.h"
#include "agent/kernel_log.h"
#include "agent/launcher.h"
#include "agent/nccl_dumps.h"
#include "agent/plan_file.h"
#include "agent/provenance.h"
#include "agent/rank_socket.h"
#include "agent/rank_watcher.h"
#include "agent/report_batcher.h"
#include "agent/stack_collection.h"
#include "agent/supervisor_link.h"
#include "agent/torchrun_args.h"

namespace trainsup {

struct AgentOptions {
  std::string supervisor;  // HOST:PORT of trainsupd
  // TLS to trainsupd; its certificate names this node (docs/security.md).
  ClientTlsOptions tls;
  std::string job;
  std::string node;
  std::vector<std::string> command;  // normally torchrun ...
  // Period of the reports to the supervisor, news or not. Default: 200ms.
  absl::Duration report_interval = absl::Milliseconds(200);
  // The connect, decision and hold timeouts, and the stop grace (a
  // supervisor's stop says its own): agent_state.h documents each.
  AgentStateOptions timeouts;
  // Heartbeats kept while the supervisor is away. Default: 65536.
  size_t max_backlog = 65536;
  // Cap of the reconnect backoff. Default: 5s.
  absl::Duration reconnect_max = absl::Seconds(5);
  // Parent of the private socket directory. Default: $XDG_RUNTIME_DIR or /tmp.
  std::string socket_parent;
  // While ranks send, the rank socket is read on this timer instead of the
  // agent waking for each datagram (DrainSchedule); zero: for each. Used
  // only where the socket queues enough datagrams between two reads
  // (net.unix.max_dgram_qlen >= kDrainMinQueue), unless `drain_forced`.
  // Default: 5ms.
  absl::Duration drain_interval = absl::Milliseconds(5);
  bool drain_forced = false;
  // The fewest nodes the job runs on, told to the supervisor; 0: as the
  // command says (torchrun's --nnodes), else unknown. Default: 0.
  uint32_t min_nodes = 0;
  // The job's own verdict rules (common/verdict_rule.h), before trainsupd's.
  std::vector<std::string> verdict_rules;
  // The address this node's peers reach it on; set: the supervisor may host
  // the job's rendezvous on this node, and this agent rewrites torchrun's
  // rendezvous arguments as the supervisor says for each generation
  // (docs/recovery.md, "Where a generation meets"). Default: "" (the
  // command's own rendezvous arguments always apply).
  std::string advertise_address;
  // The port a store this node's torchrun hosts listens on; 0: a free port
  // the agent finds at start. Default: 0.
  uint32_t rendezvous_port = 0;
  // What each launch's provenance records beyond the defaults
  // (docs/provenance.md): --provenance-env patterns, git's time limit.
  ProvenanceOptions provenance;
  // The kernel log followed for the GPU driver's Xid lines (docs/gpu.md):
  // "" or "none" follows none. Default: /dev/kmsg, when readable.
  std::string kernel_log = "/dev/kmsg";
  // nvidia-smi, asked at start which GPU is at which PCI address: "" or
  // "none" asks nothing (errors then name the address only). Default: the
  // one on PATH, when there is one.
  std::string nvidia_smi = "nvidia-smi";
  // dcgm-exporter's /metrics, read for the GPUs' health beside nvidia-smi
  // (docs/gpu.md, "GPU health"): "" or "none" reads none. Default: none.
  std::string dcgm_exporter;
  // How often the GPU health sources are read; zero reads none. Default: 10s.
  absl::Duration gpu_health_interval = absl::Seconds(10);
  // The node's health check, run with /bin/sh -c before the agent first
  // says hello (docs/gpu.md): "" runs none. A node whose check fails (or
  // outlasts its time limit) never joins, and is quarantined with its output.
  std::string preflight;
  absl::Duration preflight_timeout = absl::Minutes(10);
  // dcgm-exporter's HPC job-mapping directory (docs/gpu.md): "" writes none.
  std::string dcgm_job_mapping_dir;
};

// trainsup-agent's event loop: receives rank heartbeats, watches rank
// processes, reads signals and the supervisor's messages, and feeds them to
// an AgentStateMachine, which decides (launch, collect stacks, stop, wait,
// exit: fail-open when the supervisor is away); the loop carries its actions
// out. One thread, plus the link's.
class Agent {
 public:
  explicit Agent(AgentOptions options);
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Runs until the job is over for this node; returns the agent's exit code
  // (the command's, 128 + signal, kExitQuarantined, kExitNodeTaken, or
  // kExitFailure). REQUIRES: SIGCHLD,
  // SIGTERM, SIGINT and SIGHUP blocked in every thread (BlockAgentSignals)
  // before any thread starts.
  int Run();

 private:
  v1::AgentHello Hello() const;
  // Carries out what the state machine decided.
  void Do(const AgentAction& action);
  void Launch(uint64_t generation, const std::string& why);
  // Keeps where `generation` meets, as the supervisor told it (a welcome's
  // or a start's), for its launch.
  void NoteRendezvous(uint64_t generation, const v1::Rendezvous& rendezvous);
  // Reads every datagram queued on the rank socket (and notes the drain in
  // drain_).
  void OnDatagrams();
  // One record of a datagram (SplitRecords), read at `now`; `rode`: it came
  // in front of a later one.
  void OnRankRecord(absl::string_view record, absl::Duration now, bool* watched_changed,
                    bool rode);
  void OnSignals(int signal_fd);
  void OnSupervisorMessage(const v1::SupervisorMessage& message);
  // The supervisor refused the hello.
  void OnRefused(const grpc::Status& status);
  void OnCommandEnded();
  // Keeps a checkpoint plan and rewrites the ranks' plan file.
  void OnPlan(const v1::CheckpointPlan& plan);
  // Writes the plan file again after a failed write, at most once a second.
  void RetryPlanFile(absl::Duration now);
  // Asks the ranks of `generation` for their stacks (kCollectStacks).
  void BeginStackCollection(absl::Duration now, uint64_t generation);
  // Reads the stack files' sizes; tells the state machine once every rank answered.
  void ObserveStackFiles(absl::Duration now);
  // Sends what was collected up (before any signal to the ranks).
  void FinishStackCollection();
  std::string StackPath(uint32_t rank) const;
  bool done() const { return state_->phase() == AgentStateMachine::Phase::kDone; }
  void PublishProcesses();
  // The command's status; once it failed, with its last stderr lines.
  void PublishLauncher();
  // Looks in the command's last stderr lines for an infrastructure fault of
  // each rank that died at or after `since` without a word of its end.
  void NoteRankStderr(absl::Duration since);
  // The helper's start-up record (a PROVENANCE heartbeat): kept in the
  // generation's provenance, which goes up again.
  void OnRankProvenance(const v1::RankHeartbeat& hb);
  // Opens the kernel log and asks nvidia-smi for the node's GPUs (both
  // optional: a node without them runs as before).
  void StartGpuWatch();
  // Writes the job into dcgm-exporter's mapping files of its GPUs.
  void WriteDcgmJobMapping(uint64_t generation);
  // Runs --preflight, when given, and keeps its result for the hello.
  void RunPreflight();
  // Reads the flight recorder's dump at `path` into `stack` (or says why not).
  void AddFlightRecord(const std::string& path, v1::RankStack* stack);
  // One line of the kernel log: an Xid goes up as a GpuError.
  void OnKernelLine(absl::string_view line);
  // The GPU health poller's last reading goes up when it changed, or when
  // the ranks on the node did (a new generation's ranks, on the same GPUs).
  void SendGpuHealth(absl::Duration now);
  // The local ranks of the current generation (one more than the highest
  // seen), and the processes they run as.
  uint32_t LocalRankCount(const std::vector<ProcessObservation>& processes) const;

  // What the link's threads hand the event loop: a supervisor's message, or
  // the status of a refused hello.
  using LinkEvent = std::variant<v1::SupervisorMessage, grpc::Status>;
  class Inbox {
   public:
    Inbox();
    ~Inbox();
    int fd() const { return event_fd_; }
    void Push(LinkEvent event);
    std::deque<LinkEvent> TakeAll();

   private:
    const int event_fd_;
    absl::Mutex mu_;
    std::deque<LinkEvent> events_ ABSL_GUARDED_BY(mu_);
  };

  const AgentOptions options_;
  const uint64_t incarnation_;
  std::vector<std::string> command_;
  uint32_t min_nodes_ = 0;  // the fewest nodes the command runs on (0: unknown)
  std::string rank_log_dir_;  // torchrun's --log_dir, if given (rank_log.h)
  // The command's rendezvous and what this node offers for hosting it (no
  // kind: it offers nothing); where the next launch meets, for the
  // generation told (0: none told, the command as written).
  CommandRendezvous rendezvous_kind_ = CommandRendezvous::kNone;
  v1::RendezvousOffer rendezvous_offer_;
  uint64_t rendezvous_generation_ = 0;
  v1::Rendezvous rendezvous_;
  // Which checkpoint generation `resume_generation_` loads, which batches it
  // skips (the welcome's or the start's; empty: the script's own choice).
  uint64_t resume_generation_ = 0;
  v1::ResumeAdvice resume_;
  // The highest leader epoch obeyed (0: none; SupervisorMessage.epoch), and
  // how many messages of a lower one were dropped.
  uint64_t leader_epoch_ = 0;
  uint64_t stale_epoch_drops_ = 0;
  // The command failed: its last stderr lines that say why (StderrExcerpt).
  std::vector<std::string> failure_lines_;
  // What the current generation launched on this node (docs/provenance.md).
  v1::GenerationProvenance provenance_;
  ReportBatcher batcher_;
  Launcher launcher_;
  RankWatcher watcher_;
  // Per rank: the helper's give-ups last logged, so that a rank losing
  // datagrams (the socket queue full) is said once per rise, not per datagram.
  std::map<uint32_t, uint64_t> rank_drops_logged_;
  std::unique_ptr<RankSocket> socket_;
  DrainSchedule drain_;
  std::unique_ptr<SupervisorLink> link_;
  Inbox inbox_;
  std::unique_ptr<PlanFile> plans_;  // beside the rank socket; the link reads it for its hello
  absl::Duration plan_retry_at_ = absl::InfiniteDuration();
  // The stack collection under way (kCollecting), and when it began.
  std::unique_ptr<StackCollection> stacks_;
  absl::Duration stacks_began_;
  // The GPU driver's record (docs/gpu.md): the kernel log followed, the
  // node's GPUs, CUDA_VISIBLE_DEVICES as the ranks inherit it, and when
  // each (Xid, address) was last sent up (a storm of one error is sent
  // once every kXidResendInterval).
  std::unique_ptr<KernelLogFollower> kernel_log_;
  GpuInventory gpus_;
  std::optional<std::string> cuda_visible_;
  std::map<std::pair<uint32_t, std::string>, absl::Duration> xid_sent_;
  uint64_t kernel_lines_refused_ = 0;
  uint64_t xids_suppressed_ = 0;
  // The GPUs' health (docs/gpu.md, "GPU health"), read in the poller's
  // thread; what was last sent of it, and for which ranks.
  std::unique_ptr<GpuHealthPoller> health_;
  // What --preflight said, sent with every hello (set before the first).
  std::optional<v1::PreflightResult> preflight_;
  // Where the ranks' flight recorders write and are asked (set with the socket).
  NcclDumpPaths nccl_dumps_;
  // The GPUs whose dcgm-exporter job-mapping files name this job.
  std::vector<int> job_mapping_gpus_;
  absl::Duration health_checked_ = -absl::InfiniteDuration();
  std::pair<uint64_t, size_t> health_ranks_sent_{0, 0};  // (generation, rank processes)
  // The decisions, in steady time; created when Run starts.
  std::unique_ptr<AgentStateMachine> state_;
};

// Blocks the signals the agent reads through its signalfd. Call first in main.
void BlockAgentSignals();

}  // namespace trainsup

#endif  // TRAINSUP_AGENT_AGENT_H_
