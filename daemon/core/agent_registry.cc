#include "daemon/core/agent_registry.h"

#include <algorithm>
#include <utility>

#include "daemon/core/validation.h"

namespace trainsup {

AgentRegistry::Connection AgentRegistry::Connect(absl::Time now, const AgentHelloInfo& hello) {
  Connection c;
  c.node = FindOrAdd(hello.node);
  NodeRecord& node = nodes_[c.node];
  if (node.connected) {
    c.superseded = node.session;
    sessions_.erase(node.session);
  }
  if (node.incarnation != hello.incarnation) {
    // A new agent process: its cumulative counters start from zero.
    node.agent_rejected.clear();
    node.agent_dropped = 0;
  }
  c.session = next_session_++;
  sessions_.emplace(c.session, c.node);
  MoveToJob(c.node, hello.job);
  node.connected = true;
  node.session = c.session;
  node.incarnation = hello.incarnation;
  node.generation = hello.generation;
  node.launcher = hello.launcher;
  BoundLauncher(node.launcher);
  node.last_report = now;
  if (hello.report_interval > absl::ZeroDuration()) node.report_interval = hello.report_interval;
  node.min_nodes = hello.min_nodes;
  node.rendezvous = hello.rendezvous;
  // Checked before the hello was welcomed (CheckVerdictRules).
  node.verdict_rules = VerdictTable::FromRules(hello.verdict_rules).value_or(VerdictTable());
  node.told = NodeRecord::Told();  // a new stream has been told nothing yet
  node.plans_held_through = 0;     // until it says what it holds
  return c;
}

NodeIndex AgentRegistry::Disconnect(SessionId session) {
  auto it = sessions_.find(session);
  if (it == sessions_.end()) return kNoNode;
  const NodeIndex index = it->second;
  sessions_.erase(it);
  nodes_[index].connected = false;
  return index;
}

NodeIndex AgentRegistry::NodeOfSession(SessionId session) const {
  auto it = sessions_.find(session);
  return it == sessions_.end() ? kNoNode : it->second;
}

NodeIndex AgentRegistry::Find(absl::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? kNoNode : it->second;
}

NodeIndex AgentRegistry::FindOrAdd(const std::string& name) {
  auto it = by_name_.find(name);
  if (it != by_name_.end()) return it->second;
  const NodeIndex index = static_cast<NodeIndex>(nodes_.size());
  nodes_.emplace_back();
  nodes_.back().name = name;
  by_name_.emplace(name, index);
  return index;
}

NodeIndex AgentRegistry::Restore(const NodeRecord& record) {
  const NodeIndex index = FindOrAdd(record.name);
  NodeRecord& node = nodes_[index];
  const std::string joined = node.job;  // MoveToJob moves it from there
  node = record;
  node.job = joined;
  node.connected = false;
  node.session = 0;
  MoveToJob(index, record.job);
  return index;
}

const std::string& AgentRegistry::NameOf(NodeIndex index) const {
  static const std::string* const kNone = new std::string();
  return index == kNoNode || index >= nodes_.size() ? *kNone : nodes_[index].name;
}

const std::vector<NodeIndex>& AgentRegistry::NodesOf(absl::string_view job) const {
  static const std::vector<NodeIndex>* const kNone = new std::vector<NodeIndex>();
  auto it = by_job_.find(job);
  return it == by_job_.end() ? *kNone : it->second;
}

uint32_t AgentRegistry::AgentsWaiting(absl::string_view job) const {
  uint32_t waiting = 0;
  for (NodeIndex i : NodesOf(job)) {
    if (nodes_[i].connected && !nodes_[i].unreachable) ++waiting;
  }
  return waiting;
}

std::vector<NodeIndex> AgentRegistry::Compact(const std::vector<bool>& gone) {
  std::vector<NodeIndex> moved(nodes_.size(), kNoNode);
  std::vector<NodeRecord> kept;
  for (NodeIndex i = 0; i < nodes_.size(); ++i) {
    if (gone[i]) continue;
    moved[i] = static_cast<NodeIndex>(kept.size());
    kept.push_back(std::move(nodes_[i]));
  }
  nodes_ = std::move(kept);
  by_name_.clear();
  for (NodeIndex i = 0; i < nodes_.size(); ++i) by_name_.emplace(nodes_[i].name, i);
  // Each job keeps its nodes in the order they joined.
  for (auto it = by_job_.begin(); it != by_job_.end();) {
    std::vector<NodeIndex>& members = it->second;
    for (NodeIndex& i : members) i = moved[i];
    members.erase(std::remove(members.begin(), members.end(), kNoNode), members.end());
    if (members.empty()) {
      by_job_.erase(it++);
    } else {
      ++it;
    }
  }
  // Only disconnected nodes are forgotten, so every session keeps its node.
  for (auto& [session, index] : sessions_) index = moved[index];
  return moved;
}

void AgentRegistry::MoveToJob(NodeIndex index, const std::string& job) {
  NodeRecord& node = nodes_[index];
  if (node.job == job) return;
  if (!node.job.empty()) {
    std::vector<NodeIndex>& old = by_job_[node.job];
    old.erase(std::remove(old.begin(), old.end(), index), old.end());
    if (old.empty()) by_job_.erase(node.job);
  }
  node.job = job;
  by_job_[job].push_back(index);
}

}  // namespace trainsup
