#ifndef TRAINSUP_DAEMON_CORE_AGENT_REGISTRY_H_
#define TRAINSUP_DAEMON_CORE_AGENT_REGISTRY_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/core/gpu_health.h"
#include "daemon/core/heartbeat.h"
#include "daemon/core/job.h"
#include "daemon/core/verdicts.h"

namespace trainsup {

// Identifies one agent stream (one Hello). A reconnecting agent gets a new one.
using SessionId = uint64_t;

// A node as the supervisor knows it: the agent that speaks for it. Whether
// the node is quarantined is the QuarantinePolicy's to say, not the record's.
struct NodeRecord {
  std::string name;
  std::string job;
  bool connected = false;
  SessionId session = 0;
  uint64_t incarnation = 0;
  uint64_t generation = 0;
  absl::Time last_report = absl::InfinitePast();  // supervisor receive time of its last word
  // How often the agent says it reports, idle or not (from its hello).
  absl::Duration report_interval = absl::Milliseconds(200);
  // Not heard for --node-lost-after while it ran the job's generation; set
  // and cleared by the node-loss rule.
  bool unreachable = false;
  absl::Time silent_since = absl::InfinitePast();  // when unreachable: last heard then
  // The latest generation the supervisor started (or adopted) on this node:
  // a node cut from a generation never joins it, only a later one.
  uint64_t member_generation = 0;
  // The highest checkpoint plan id its agent holds (every plan up to it).
  uint64_t plans_held_through = 0;
  // From its hello: the fewest nodes its command runs on (0: unknown), and
  // the job's own verdict rules (verdicts.h), before trainsupd's table.
  uint32_t min_nodes = 0;
  VerdictTable verdict_rules;
  // From its hello: how it can host its job's rendezvous (unset: it leaves
  // the rendezvous to its command).
  std::optional<RendezvousOffer> rendezvous;
  LauncherInfo launcher;
  // The last Xid its GPU driver reported (docs/gpu.md): "Xid 79 (leave)";
  // "" when none since this trainsupd started.
  std::string last_gpu_error;
  absl::Time last_gpu_error_at = absl::InfinitePast();
  // Its agent's health check (--preflight) failed at its last hello: it does
  // not join the job (quarantined with the check's output, or, past the
  // quarantine cap, left out of every generation) until an agent whose check
  // passes says hello.
  bool preflight_failed = false;
  // What its GPU health sources last said of each GPU (docs/gpu.md, "GPU
  // health"); empty when its agent reads none.
  std::vector<GpuHealthState> gpu_health;
  uint64_t heartbeats_received = 0;
  uint64_t reports_received = 0;
  // The agent's cumulative counters as last reported, to count only the new part.
  absl::flat_hash_map<std::string, uint64_t> agent_rejected;
  uint64_t agent_dropped = 0;
  // What this session was already told, so that decisions go out once.
  struct Told {
    uint64_t stop_generation = 0;  // stop sent for this generation (+1; 0: none)
    uint64_t start_generation = 0;
    bool hold = false;
    bool quarantine = false;
    uint64_t plan_id = 0;  // plans up to this id were sent
  } told;

  // The command ended and has not been started again.
  bool stopped() const {
    return launcher.state == LauncherState::kExited || launcher.state == LauncherState::kWaiting;
  }
  // The command runs (or is being stopped).
  bool running() const {
    return launcher.state == LauncherState::kRunning || launcher.state == LauncherState::kStopping;
  }
};

// Every node an agent ever spoke for, the live sessions, and which nodes
// belong to which job: a report, a hello or a sweep looks at one job's nodes,
// never at every node of every job. Pure; thread-compatible.
class AgentRegistry {
 public:
  AgentRegistry() = default;
  AgentRegistry(const AgentRegistry&) = delete;
  AgentRegistry& operator=(const AgentRegistry&) = delete;

  struct Connection {
    NodeIndex node = kNoNode;
    SessionId session = 0;
    SessionId superseded = 0;  // the node's previous live session (0: none)
  };
  // A new session for `hello.node` (created if new), which now speaks for
  // `hello.job`; a node that spoke for another job starts its counts and
  // its standing in a generation afresh. REQUIRES: the names are valid.
  Connection Connect(absl::Time now, const AgentHelloInfo& hello);

  // Ends `session`; returns its node, or kNoNode when the session is unknown
  // or was superseded.
  NodeIndex Disconnect(SessionId session);

  // The node of a live session, or kNoNode.
  NodeIndex NodeOfSession(SessionId session) const;
  // The node named `name`, or kNoNode.
  NodeIndex Find(absl::string_view name) const;
  // A node by name, created (with no job) if new: for state restored from
  // the store before any agent speaks.
  NodeIndex FindOrAdd(const std::string& name);
  // A node as its ended job last showed it, restored from the store before
  // any agent speaks: `record`, in `record.job`, not connected.
  NodeIndex Restore(const NodeRecord& record);

  // REQUIRES: index < size().
  const NodeRecord& node(NodeIndex index) const { return nodes_[index]; }
  NodeRecord& mutable_node(NodeIndex index) { return nodes_[index]; }
  const std::vector<NodeRecord>& nodes() const { return nodes_; }
  size_t size() const { return nodes_.size(); }
  // "" for kNoNode.
  const std::string& NameOf(NodeIndex index) const;

  // The nodes whose agent last spoke for `job`, in the order they joined.
  const std::vector<NodeIndex>& NodesOf(absl::string_view job) const;

  uint32_t connected() const { return static_cast<uint32_t>(sessions_.size()); }
  // The nodes of `job` whose agent is connected and heard (not unreachable):
  // those that can run its next generation. A held job with none cannot be
  // resumed: its agents have left.
  uint32_t AgentsWaiting(absl::string_view job) const;

  // Forgets every node without a connected agent, last heard before
  // `cutoff`, for which `keep(record)` is false. The remaining nodes move
  // down to fill the gaps: returns each old index's new one (kNoNode for a
  // forgotten node), empty when none was forgotten. REQUIRES: the caller
  // moves every NodeIndex it holds by the returned map.
  template <typename Keep>
  std::vector<NodeIndex> Forget(absl::Time cutoff, Keep keep) {
    std::vector<bool> gone(nodes_.size(), false);
    bool any = false;
    for (NodeIndex i = 0; i < nodes_.size(); ++i) {
      const NodeRecord& n = nodes_[i];
      gone[i] = !n.connected && n.last_report < cutoff && !keep(n);
      any = any || gone[i];
    }
    if (!any) return {};
    return Compact(gone);
  }

  // The last session id handed out (0: none yet), and the ids to hand out
  // after it: a registry that replaces another (the host's core rebuilt
  // from the store) never gives an agent an id a stream of the old one may
  // still use.
  SessionId last_session() const { return next_session_ - 1; }
  void StartSessionsAfter(SessionId last) { next_session_ = std::max(next_session_, last + 1); }

 private:
  void MoveToJob(NodeIndex index, const std::string& job);
  std::vector<NodeIndex> Compact(const std::vector<bool>& gone);

  std::vector<NodeRecord> nodes_;
  absl::flat_hash_map<std::string, NodeIndex> by_name_;
  absl::flat_hash_map<SessionId, NodeIndex> sessions_;
  absl::flat_hash_map<std::string, std::vector<NodeIndex>> by_job_;
  SessionId next_session_ = 1;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_AGENT_REGISTRY_H_
