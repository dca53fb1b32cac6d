#ifndef TRAINSUP_DAEMON_CORE_HEARTBEAT_H_
#define TRAINSUP_DAEMON_CORE_HEARTBEAT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "daemon/core/kill_criteria_spec.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/collective_record.h"
#include "common/verdict_rule.h"
#include "daemon/core/checkpoint_schedule.h"
#include "daemon/core/reject_reason.h"
#include "daemon/core/rendezvous.h"

namespace trainsup {

// The core's own copy of the wire types (proto/trainsup/v1), so that the core
// depends on Abseil only. The adapters convert; field meanings and units are
// documented in heartbeat.proto and agent.proto.

enum class HeartbeatKind {
  kUnspecified = 0,
  kStep = 1,
  kComputeBegin = 2,
  kComputeEnd = 3,
  kCheckpointBegin = 4,
  kCheckpointEnd = 5,
  kException = 6,
  kStart = 7,
  kExit = 8,
  kVerdict = 9,
  kKillCriteria = 20,
};

struct Heartbeat {
  HeartbeatKind kind = HeartbeatKind::kUnspecified;
  std::string job;
  uint32_t rank = 0;
  uint32_t local_rank = 0;
  uint32_t world_size = 0;
  uint32_t pid = 0;
  int64_t step = 0;
  double step_duration_s = 0;
  double data_wait_s = 0;
  std::optional<double> compute_s;
  std::optional<double> loss;
  std::optional<double> learning_rate;
  std::optional<double> grad_norm;
  std::optional<uint64_t> samples;
  std::optional<uint64_t> device_memory_bytes;
  double checkpoint_blocking_s = 0;
  double checkpoint_async_s = 0;
  std::string exception_type;
  std::string exception_message;
  uint64_t generation = 0;
  uint32_t restart_count = 0;
  // EXIT: the code the rank is exiting with, when its helper knows it.
  std::optional<int32_t> exit_code;
  // Datagrams the rank's helper could not hand to its agent, since it started.
  uint64_t datagrams_dropped = 0;
  // START: the signal that makes the rank write its Python stack (0: none).
  int32_t stack_signal = 0;
  // How long the rank's agent held the heartbeat before sending it.
  double queued_s = 0;
  // VERDICT: what the script asks for when the rank fails, and why.
  VerdictAction verdict = VerdictAction::kUnspecified;
  std::string verdict_reason;
  // Training signals (docs/signals.md).
  std::optional<uint64_t> host_rss_bytes;
  std::optional<uint64_t> tokens;
  std::optional<uint64_t> replica_digest;
  uint32_t replica_group = 0;
  std::optional<uint64_t> device_memory_capacity_bytes;
  // START: the script's settings of the signal rules, by name, in the
  // order received.
  std::vector<std::pair<std::string, double>> signal_settings;
  // KILL_CRITERIA: the script's kill criteria (kill_criteria_spec.h).
  std::optional<KillCriteriaSpec> kill_criteria;

  // A CHECKPOINT_END whose exception says the save failed (docs/signals.md,
  // "Checkpoint saves"): never a committed checkpoint.
  bool save_failed() const {
    return kind == HeartbeatKind::kCheckpointEnd && !exception_type.empty();
  }
};

enum class LauncherState { kUnspecified, kWaiting, kRunning, kStopping, kExited };
absl::string_view LauncherStateName(LauncherState state);

struct LauncherInfo {
  LauncherState state = LauncherState::kUnspecified;
  uint32_t pid = 0;
  int32_t exit_code = 0;
  int32_t signal = 0;
  // Exited with a failure: the last lines the command wrote to stderr that
  // say what failed (the last one names it), as its agent sent them.
  std::vector<std::string> stderr_lines;

  // The command ended with a non-zero exit code or a signal.
  bool failed() const { return state == LauncherState::kExited && (exit_code != 0 || signal != 0); }
  // The command ended with exit code 0.
  bool succeeded() const { return state == LauncherState::kExited && exit_code == 0 && signal == 0; }
};

struct RankProcessInfo {
  uint32_t rank = 0;
  uint32_t local_rank = 0;
  uint32_t pid = 0;
  uint64_t generation = 0;
  bool alive = true;
  bool exit_known = false;
  int32_t exit_code = 0;
  int32_t signal = 0;
  double died_seconds_ago = 0;
  bool exception_seen = false;
  double exception_seconds_ago = 0;
  // Dead without a word of its end: the last line it wrote to stderr that
  // names an infrastructure fault, as its agent sent it ("": none).
  std::string stderr_line;
};

// A node's health check, run by its agent before it says hello.
struct PreflightInfo {
  bool passed = false;
  int32_t exit_code = -1;  // -1: killed, or at its time limit
  bool timed_out = false;
  double seconds = 0;
  std::string output;  // its end, at most kMaxPreflightOutputBytes
};
constexpr size_t kMaxPreflightOutputBytes = 4096;

struct AgentHelloInfo {
  std::string node;
  std::string job;
  uint64_t incarnation = 0;
  uint64_t generation = 0;
  LauncherInfo launcher;
  std::string agent_version;
  std::vector<CheckpointPlanSpec> plans;  // the plans its ranks hold
  // How often it reports, idle or not (zero: not said; 200ms is assumed).
  absl::Duration report_interval;
  // The fewest nodes its command runs on (0: unknown).
  uint32_t min_nodes = 0;
  // The job's own verdict rules, as the agent was given them.
  std::vector<std::string> verdict_rules;
  // How the node can host its job's rendezvous; unset: its agent leaves the
  // rendezvous to the command.
  std::optional<RendezvousOffer> rendezvous;
  // Its --preflight check, when it ran one before this hello.
  std::optional<PreflightInfo> preflight;
};

// A rank's Python stack, as its agent collected it before a stop.
struct RankStackInfo {
  uint32_t rank = 0;
  uint32_t local_rank = 0;
  uint32_t pid = 0;
  bool answered = false;  // false: it wrote nothing in time
  std::string text;       // faulthandler's dump of every thread
  // What its NCCL flight recorder's dump said, when it wrote one; or why a
  // dump it wrote was not read (at most 512 bytes).
  std::optional<FlightRecord> flight_record;
  std::string flight_record_error;
};
// The most groups, and operations a group, a rank's flight record may bring.
constexpr size_t kMaxFlightRecordGroupsReported = 64;
constexpr size_t kMaxFlightRecordOpsReported = 8;
constexpr size_t kMaxFlightRecordErrorBytes = 512;

// One agent's stacks of its ranks.
struct StacksInfo {
  uint64_t generation = 0;
  double collect_seconds = 0;  // stop received -> last stack read
  std::vector<RankStackInfo> stacks;
};

// An Xid the node's GPU driver reported (agent.proto's GpuError).
struct GpuErrorInfo {
  uint64_t generation = 0;
  uint32_t xid = 0;
  std::string pci_bus_id;  // "" when not known
  int32_t gpu_index = -1;  // -1 when not known
  std::string gpu_uuid;
  std::vector<uint32_t> local_ranks;
  std::vector<uint32_t> ranks;
  uint32_t pid = 0;  // 0: none named
  std::string process;
  std::string message;
};
// The most an agent may say of one GPU error (what its parser keeps, and
// no more than a node's GPUs and ranks).
constexpr size_t kMaxGpuErrorMessageBytes = 512;
constexpr size_t kMaxGpuErrorRanks = 64;

// One GPU as its node's health sources describe it (agent.proto's
// GpuHealthSample).
struct GpuHealthSampleInfo {
  int32_t index = -1;  // -1 when not known
  std::string uuid;
  std::string pci_bus_id;
  std::optional<uint64_t> clock_event_reasons;  // NVML's bits (common/gpu_clock_reasons.h)
  std::optional<double> temperature_c;
  std::optional<double> pcie_replays;
  std::optional<double> ecc_uncorrectable;
  std::optional<double> uncorrectable_remapped_rows;
  std::optional<double> row_remap_failure;
  std::optional<bool> row_remap_pending;
  std::optional<double> last_xid;
  std::vector<uint32_t> local_ranks;
  std::vector<uint32_t> ranks;
};

// What a node's GPU health sources said (agent.proto's GpuHealthReport).
struct GpuHealthInfo {
  uint64_t generation = 0;
  std::string source;
  std::vector<GpuHealthSampleInfo> gpus;
};
// The most GPUs one report may describe.
constexpr size_t kMaxGpusPerNode = 64;

struct NodeReportInfo {
  uint64_t sequence = 0;
  uint64_t generation = 0;
  LauncherInfo launcher;
  std::vector<Heartbeat> heartbeats;
  std::vector<RankProcessInfo> processes;
  // Cumulative since the agent started, by reason: at most one entry per
  // reason (the adapter adds up what it maps to the same one, e.g. kOther).
  std::vector<std::pair<RejectReason, uint64_t>> rejected;
  uint64_t dropped_total = 0;
  // The highest checkpoint plan id the agent holds (every plan up to it).
  uint64_t plans_held_through = 0;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_HEARTBEAT_H_
