#include "daemon/core/signals/throughput_signal.h"

#include <algorithm>

#include "daemon/core/events.h"

namespace trainsup {

void ThroughputSignalRule::ObserveRank(absl::Time now, const RankAt& at, const Heartbeat& hb) {
  if (!hb.compute_s || *hb.compute_s <= 0 || at.node == kNoNode) return;
  NodeCompute& n = nodes_.try_emplace(at.node, options_).first->second;
  if (hb.step > n.step) {
    // The node's previous step is complete: its ranks report in order.
    if (n.n > 0) n.rule.Observe(n.step, n.time, n.sum / n.n);
    n.step = hb.step;
    n.time = now;
    n.sum = 0;
    n.n = 0;
  }
  if (hb.step != n.step) return;  // a rank behind its node's others: left out
  n.sum += *hb.compute_s;
  ++n.n;
}

void ThroughputSignalRule::ObserveStep(const StepSignals& s) {
  if (s.step_time_s) job_rule_.Observe(s.step, s.time, *s.step_time_s);
}

void ThroughputSignalRule::Sweep(const SignalSweep& sweep, std::vector<SignalFinding>& out) {
  for (const ThroughputSignal& s : Check(sweep.now)) {
    out.push_back(Report(ThroughputEvent(sweep.now, sweep.event_job, s, sweep.node_name(s.node))));
  }
}

std::vector<ThroughputSignal> ThroughputSignalRule::Check(absl::Time now) {
  std::vector<ThroughputSignal> out;
  // How long one side's finding waits for the other's.
  const absl::Time wait_until = now + std::max(options_.confirm_time, absl::Seconds(5));
  // The nodes whose compute slowed, confirmed now or building.
  std::vector<std::pair<NodeIndex, ThroughputFinding>> confirmed;
  uint32_t moving = 0;
  for (auto& [node, series] : nodes_) {
    std::optional<ThroughputFinding> f = series.rule.Check(now);
    if (f) confirmed.emplace_back(node, *f);
    if (f || series.rule.Moving() > 0) ++moving;
  }
  // Several nodes slowing together is the job's change, not a node's.
  if (confirmed.size() == 1 && moving == 1) {
    if (pending_job_) {
      // The job's finding waited for this node: they are one.
      out.push_back({true, confirmed[0].first, pending_job_->finding, confirmed[0].second, 1});
      pending_job_.reset();
    } else if (job_rule_.Moving() > 0) {
      pending_node_ = PendingNode{confirmed[0].first, confirmed[0].second, wait_until};
    } else {
      out.push_back({false, confirmed[0].first, confirmed[0].second, std::nullopt, 1});
    }
  }
  if (std::optional<ThroughputFinding> f = job_rule_.Check(now)) {
    ThroughputSignal signal{true, kNoNode, *f, std::nullopt, moving};
    if (pending_node_) {
      signal.node = pending_node_->node;
      signal.node_finding = pending_node_->finding;
      signal.nodes_moving = std::max<uint32_t>(moving, 1);
      pending_node_.reset();
      out.push_back(signal);
    } else if (moving <= 1 && confirmed.empty()) {
      // No node's compute confirmed yet, and at most one building: the job's
      // step time can confirm first (a node's compute reaches its rule with
      // the node's ranks' reports, a sweep or two apart from the step
      // records). Wait for a node's rather than name none; a change of
      // the job's own (the collective, the input) goes out when the wait
      // ends, naming none.
      pending_job_ = PendingJob{*f, wait_until};
    } else {
      out.push_back(signal);
    }
  }
  if (pending_node_ && now >= pending_node_->until) {
    out.push_back({false, pending_node_->node, pending_node_->finding, std::nullopt, 1});
    pending_node_.reset();
  }
  if (pending_job_ && now >= pending_job_->until) {
    // The node's never confirmed: the job's change alone.
    out.push_back({true, kNoNode, pending_job_->finding, std::nullopt, moving});
    pending_job_.reset();
  }
  return out;
}

void ThroughputSignalRule::Gauges(std::vector<std::pair<std::string, double>>& out) const {
  if (std::optional<double> ratio = job_rule_.Ratio()) out.emplace_back("step_time_ratio", *ratio);
}

void ThroughputSignalRule::MoveNodes(absl::FunctionRef<void(NodeIndex&)> move) {
  absl::flat_hash_map<NodeIndex, NodeCompute> moved;
  for (auto& [node, series] : nodes_) {
    NodeIndex to = node;
    move(to);
    if (to != kNoNode) moved.emplace(to, std::move(series));
  }
  nodes_ = std::move(moved);
  if (pending_node_) move(pending_node_->node);
}

}  // namespace trainsup
