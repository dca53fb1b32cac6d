#include "daemon/core/supervisor.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/core/validation.h"

namespace trainsup {

Supervisor::Supervisor(SupervisorOptions options) : options_(options) {}

Job& Supervisor::JobFor(const std::string& job_id) {
  std::unique_ptr<Job>& slot = jobs_[job_id];
  if (slot == nullptr) slot = std::make_unique<Job>(job_id, options_.step_window);
  return *slot;
}

NodeIndex Supervisor::NodeFor(const std::string& name) {
  auto it = node_index_.find(name);
  if (it != node_index_.end()) return it->second;
  NodeIndex index = static_cast<NodeIndex>(nodes_.size());
  nodes_.emplace_back();
  nodes_.back().name = name;
  node_index_.emplace(name, index);
  return index;
}

NodeIndex Supervisor::NodeOfSession(SessionId session) const {
  auto it = sessions_.find(session);
  return it == sessions_.end() ? kNoNode : it->second;
}

absl::StatusOr<Supervisor::HelloResult> Supervisor::Hello(absl::Time now, const AgentHelloInfo& hello) {
  if (!IsValidName(hello.node)) {
    return absl::InvalidArgumentError(
        absl::StrCat("node name must be 1..", kMaxNameLength, " characters of [A-Za-z0-9._-]"));
  }
  if (!IsValidName(hello.job)) {
    return absl::InvalidArgumentError(
        absl::StrCat("job id must be 1..", kMaxNameLength, " characters of [A-Za-z0-9._-]"));
  }
  NodeIndex index = NodeFor(hello.node);
  NodeRecord& node = nodes_[index];
  HelloResult result;
  if (node.connected) {
    result.superseded = node.session;
    sessions_.erase(node.session);
  }
  if (node.incarnation != hello.incarnation) {
    // A new agent process: its cumulative counters start from zero.
    node.agent_rejected.clear();
    node.agent_dropped = 0;
  }
  SessionId session = next_session_++;
  sessions_.emplace(session, index);
  node.job = hello.job;
  node.connected = true;
  node.session = session;
  node.incarnation = hello.incarnation;
  node.generation = hello.generation;
  node.launcher = hello.launcher;
  node.last_report = now;
  Job& job = JobFor(hello.job);
  job.ObserveGeneration(hello.generation);
  result.session = session;
  result.generation = job.generation();
  return result;
}

void Supervisor::Disconnected(absl::Time now, SessionId session) {
  NodeIndex index = NodeOfSession(session);
  if (index == kNoNode) return;
  sessions_.erase(session);
  NodeRecord& node = nodes_[index];
  node.connected = false;
  auto it = jobs_.find(node.job);
  if (it != jobs_.end()) it->second->ForgetLiveness(index);
}

void Supervisor::CountAgentRejects(NodeRecord& node, const NodeReportInfo& report) {
  for (const auto& [reason, count] : report.rejected) {
    uint64_t& seen = node.agent_rejected[reason];
    if (count > seen) {
      rejected_.Add(RejectReasonFromName(reason), count - seen);
      seen = count;
    }
  }
  if (report.dropped_total > node.agent_dropped) {
    agent_dropped_ += report.dropped_total - node.agent_dropped;
    node.agent_dropped = report.dropped_total;
  }
}

absl::Status Supervisor::Report(absl::Time now, SessionId session, const NodeReportInfo& report) {
  NodeIndex index = NodeOfSession(session);
  if (index == kNoNode) {
    return absl::FailedPreconditionError("unknown or superseded agent session; reconnect");
  }
  NodeRecord& node = nodes_[index];
  node.last_report = now;
  node.launcher = report.launcher;
  node.generation = report.generation;
  ++node.reports_received;
  ++reports_received_;
  CountAgentRejects(node, report);

  Job& job = JobFor(node.job);
  job.ObserveGeneration(report.generation);
  for (const Heartbeat& hb : report.heartbeats) {
    std::optional<RejectReason> reason = CheckHeartbeat(hb, node.job);
    if (!reason) reason = job.Apply(now, index, hb);
    if (reason) {
      rejected_.Add(*reason);
      continue;
    }
    ++node.heartbeats_received;
    ++heartbeats_received_;
  }
  for (const RankProcessInfo& process : report.processes) job.ApplyProcess(index, process);
  return absl::OkStatus();
}

const Job* Supervisor::FindJob(absl::string_view job_id) const {
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? nullptr : it->second.get();
}

std::vector<const Job*> Supervisor::Jobs() const {
  std::vector<const Job*> out;
  out.reserve(jobs_.size());
  for (const auto& [id, job] : jobs_) out.push_back(job.get());
  std::sort(out.begin(), out.end(), [](const Job* a, const Job* b) { return a->id() < b->id(); });
  return out;
}

uint32_t Supervisor::agents_connected() const { return static_cast<uint32_t>(sessions_.size()); }

}  // namespace trainsup
