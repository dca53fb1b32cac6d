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
#include "daemon/core/crash_detector.h"
#include "daemon/core/event_log.h"
#include "daemon/core/heartbeat.h"
#include "daemon/core/job.h"
#include "daemon/core/reject_reason.h"
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
};

// Identifies one agent stream (one Hello). A reconnecting agent gets a new one.
using SessionId = uint64_t;

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

  // Runs every detector over every job; records and returns the new events.
  // The driver calls it on a timer, so a condition is acted on at most one
  // sweep interval after it holds.
  std::vector<Event> Sweep(absl::Time now);

  // Queries. Pointers stay valid until the next mutating call.
  const Job* FindJob(absl::string_view job_id) const;
  std::vector<const Job*> Jobs() const;  // sorted by id
  const std::vector<NodeRecord>& nodes() const { return nodes_; }
  const NodeRecord& node(NodeIndex index) const { return nodes_[index]; }
  uint32_t agents_connected() const;

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
  // True when some node of `job` reports its command ended with a failure.
  bool AnyLauncherFailed(const Job& job) const;
  const std::string& NodeName(NodeIndex index) const;

  void SweepCrash(absl::Time now, Job& job, std::vector<Event>& out);
  void SweepStall(absl::Time now, Job& job, std::vector<Event>& out);
  void SweepStragglers(absl::Time now, Job& job, std::vector<Event>& out);
  // Appends to the log, counts it on the job, and adds it to `out`.
  void Emit(Job& job, Event event, std::vector<Event>& out);

  const SupervisorOptions options_;
  const StallDetector stall_detector_;
  const CrashDetector crash_detector_;
  absl::flat_hash_map<std::string, std::unique_ptr<Job>> jobs_;
  // Per job: straggler streaks, and the generation they belong to.
  struct StragglerState {
    uint64_t generation = 0;
    StragglerDetector detector;
  };
  absl::flat_hash_map<std::string, std::unique_ptr<StragglerState>> stragglers_;
  EventLog events_;
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
