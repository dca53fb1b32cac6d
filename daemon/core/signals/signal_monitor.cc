#include "daemon/core/signals/signal_monitor.h"

#include <algorithm>
#include <utility>

namespace trainsup {
namespace {

// A step whose ranks have not all reported this long after its first one
// is handed over without them (a rank died, or reports late: its STEP is
// then left out). Longer than any report interval (5s at most).
constexpr absl::Duration kStepExpiry = absl::Seconds(10);

// Checkpoints of a generation followed at once until they complete (a
// script that checkpoints on some ranks only never completes one).
constexpr size_t kOpenCheckpoints = 8;

}  // namespace

SignalMonitor::SignalMonitor(const SignalOptions& defaults)
    : defaults_(defaults), options_(defaults) {}

void SignalMonitor::Roll(const Job& job) {
  if (job.generation() == generation_ && rules_) return;
  if (job.generation() != generation_) {
    generation_ = job.generation();
    resume_.reset();  // before previous_ moves: it points there
    first_step_.reset();
    first_candidate_.reset();
    first_tries_ = 0;
    world_size_ = 0;
    checkpoint_ends_.clear();
    if (record_.size() > 0) previous_ = std::move(record_);
    record_ = GenerationRecord(generation_);
    settings_.clear();
    settings_applied_ = false;
    options_ = defaults_;
    last_.reset();
    last_step_time_s_ = 0;
  }
  aggregator_.Clear();
  Reconfigure();
}

void SignalMonitor::Reconfigure() {
  rules_.emplace(options_);
  nodes_.clear();
  pending_node_.reset();
  pending_job_.reset();
}

void SignalMonitor::OnStart(const Job& job, const Heartbeat& hb) {
  Roll(job);
  if (hb.signal_settings.empty() || settings_applied_) return;
  SignalOptions options = defaults_;
  // CheckHeartbeat let only valid settings through.
  if (!ApplySignalSettings(hb.signal_settings, &options).ok()) return;
  settings_applied_ = true;
  settings_ = hb.signal_settings;
  options_ = options;
  Reconfigure();
}

void SignalMonitor::OnCheckpoint(const Job& job, const Heartbeat& hb) {
  Roll(job);
  uint32_t& ended = checkpoint_ends_[hb.step];
  if (++ended < std::max<uint32_t>(1, job.ranks_reporting())) {
    if (checkpoint_ends_.size() > kOpenCheckpoints) {
      auto oldest = checkpoint_ends_.begin();
      for (auto it = checkpoint_ends_.begin(); it != checkpoint_ends_.end(); ++it) {
        if (it->first < oldest->first) oldest = it;
      }
      checkpoint_ends_.erase(oldest);
    }
    return;
  }
  // The last one seen complete, a newer or an older step (a generation that
  // resumed from an older one checkpoints below the last).
  last_checkpoint_step_ = hb.step;
  checkpoint_ends_.erase(hb.step);
}

void SignalMonitor::OnStep(absl::Time now, const Job& job, const RankState& r,
                           const Heartbeat& hb, double checkpoint_s) {
  Roll(job);
  world_size_ = std::max(world_size_, hb.world_size);
  const RankAt at{r.rank, r.node};
  if (hb.loss && options_.non_finite.action != NonFiniteAction::kOff) {
    rules_->non_finite.ObserveLoss(now, hb.step, at, *hb.loss);
  }
  if (hb.compute_s && *hb.compute_s > 0 && options_.throughput.enabled && r.node != kNoNode) {
    ObserveCompute(now, r.node, hb.step, *hb.compute_s);
  }
  aggregator_.Add(now, at, hb, checkpoint_s, job.ranks_reporting());
  Drain();
}

void SignalMonitor::ObserveCompute(absl::Time now, NodeIndex node, int64_t step, double seconds) {
  NodeCompute& n = nodes_.try_emplace(node, options_.throughput).first->second;
  if (step > n.step) {
    // The node's previous step is complete: its ranks report in order.
    if (n.n > 0) n.rule.Observe(n.step, n.time, n.sum / n.n);
    n.step = step;
    n.time = now;
    n.sum = 0;
    n.n = 0;
  }
  if (step != n.step) return;  // a rank behind its node's others: left out
  n.sum += seconds;
  ++n.n;
}

void SignalMonitor::Drain() {
  for (const StepSignals& s : aggregator_.ready()) Feed(s);
  aggregator_.ready().clear();
  for (const ReplicaDisagreement& d : aggregator_.disagreements()) {
    totals_.mismatches += d.disagreeing;
    if (options_.replica.enabled) rules_->replica.Observe(d);
  }
  aggregator_.disagreements().clear();
}

void SignalMonitor::Feed(const StepSignals& s) {
  Rules& rules = *rules_;
  last_ = s;
  if (s.step_time_s && *s.step_time_s > 0) last_step_time_s_ = *s.step_time_s;
  const StepSummary summary{s.step, s.loss, s.learning_rate, s.samples, s.tokens, s.ranks};
  if (!resume_) resume_.emplace(options_.resume, generation_, &previous_, last_checkpoint_step_);
  if (!first_step_) {
    if (!first_candidate_ || summary.ranks > first_candidate_->ranks) first_candidate_ = summary;
    if (summary.ranks >= world_size_ || ++first_tries_ >= kFirstStepTries) {
      first_step_ = first_candidate_;
    }
  }
  resume_->Observe(summary);
  record_.Add(summary);
  if (s.loss_nonfinite > 0) ++totals_.loss_steps;
  if (s.grad_nonfinite > 0 && s.loss_nonfinite == 0) ++totals_.overflow_steps;
  rules.non_finite.ObserveStep(s);
  if (s.loss && s.loss_nonfinite == 0) {
    if (options_.loss_shift.enabled) rules.loss_shift.Observe(s.step, *s.loss);
    if (options_.loss_flat.enabled) rules.loss_flat.Observe(s.step, *s.loss);
  }
  if (s.grad_norm && s.grad_nonfinite == 0 && (options_.grad.spike || options_.grad.collapse)) {
    rules.grad.Observe(s.step, *s.grad_norm, s.grad_norm_at);
  }
  if (s.step_time_s && options_.throughput.enabled) {
    rules.throughput.Observe(s.step, s.time, *s.step_time_s);
  }
  if (options_.memory.enabled) {
    if (s.device_memory_bytes) {
      rules.device.Observe(s.step, *s.device_memory_bytes, s.device_memory_at,
                           s.device_capacity_bytes.value_or(0));
    }
    if (s.host_rss_bytes) rules.host.Observe(s.step, *s.host_rss_bytes, s.host_rss_at, 0);
  }
}

SignalFindings SignalMonitor::Sweep(absl::Time now, const Job& job,
                                    const ResumeTold& told) {
  SignalFindings out;
  Roll(job);
  aggregator_.Expire(now, kStepExpiry);
  Drain();
  Rules& rules = *rules_;
  out.non_finite = rules.non_finite.Check(now);
  if (options_.loss_shift.enabled) out.loss_shift = rules.loss_shift.Check();
  if (options_.loss_flat.enabled) out.loss_flat = rules.loss_flat.Check();
  out.grad = rules.grad.Take();
  if (options_.throughput.enabled) SweepThroughput(now, out);
  if (options_.memory.enabled) {
    // The last step that measured one: a step whose ranks sent no duration
    // (a restart's first) must not leave the time to the limit unknown.
    const double step_s = last_step_time_s_;
    for (MemoryGrowthRule* rule : {&rules.device, &rules.host}) {
      if (std::optional<MemoryGrowthFinding> f = rule->Check(step_s)) out.memory.push_back(*f);
    }
  }
  out.replica = rules.replica.Take();
  if (resume_) {
    out.resume = resume_->Take();
    if (out.resume.behind && told.limit) {
      ResumeBehindFinding& behind = *out.resume.behind;
      if (!told.at || behind.resumed_step >= *told.at) {
        out.resume.behind.reset();  // behind on purpose
      } else {
        behind.checkpoint_step = *told.at;  // behind what it was told to load
        behind.repeated_steps = *told.at - behind.resumed_step;
      }
    }
    Totals& t = totals_;
    if (out.resume.behind) {
      ++t.resume.behind;
      t.resume.repeated_steps += static_cast<uint64_t>(out.resume.behind->repeated_steps);
    }
    t.resume.lr += out.resume.lr ? 1 : 0;
    t.resume.data += out.resume.data ? 1 : 0;
    t.resume.spike += out.resume.spike ? 1 : 0;
    if (out.resume.spike) resume_spike_ = out.resume.spike;
  }
  return out;
}

void SignalMonitor::SweepThroughput(absl::Time now, SignalFindings& out) {
  ThroughputRule& job_rule = rules_->throughput;
  // How long one side's finding waits for the other's.
  const absl::Time wait_until = now + std::max(options_.throughput.confirm_time, absl::Seconds(5));
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
      out.throughput.push_back({true, confirmed[0].first, pending_job_->finding, confirmed[0].second, 1});
      pending_job_.reset();
    } else if (job_rule.Moving() > 0) {
      pending_node_ = PendingNode{confirmed[0].first, confirmed[0].second, wait_until};
    } else {
      out.throughput.push_back({false, confirmed[0].first, confirmed[0].second, std::nullopt, 1});
    }
  }
  if (std::optional<ThroughputFinding> f = job_rule.Check(now)) {
    ThroughputSignal signal{true, kNoNode, *f, std::nullopt, moving};
    if (pending_node_) {
      signal.node = pending_node_->node;
      signal.node_finding = pending_node_->finding;
      signal.nodes_moving = std::max<uint32_t>(moving, 1);
      pending_node_.reset();
      out.throughput.push_back(signal);
    } else if (moving <= 1 && confirmed.empty()) {
      // No node's compute confirmed yet, and at most one building: the job's
      // step time can confirm first (a node's compute reaches its rule with
      // the node's ranks' reports, a sweep or two apart from the step
      // records). Wait for a node's rather than name none; a change of
      // the job's own (the collective, the input) goes out when the wait
      // ends, naming none.
      pending_job_ = PendingJob{*f, wait_until};
    } else {
      out.throughput.push_back(signal);
    }
  }
  if (pending_node_ && now >= pending_node_->until) {
    out.throughput.push_back({false, pending_node_->node, pending_node_->finding, std::nullopt, 1});
    pending_node_.reset();
  }
  if (pending_job_ && now >= pending_job_->until) {
    // The node's never confirmed: the job's change alone.
    out.throughput.push_back({true, kNoNode, pending_job_->finding, std::nullopt, moving});
    pending_job_.reset();
  }
}

std::optional<int64_t> SignalMonitor::NonFiniteLossStep(uint64_t generation) const {
  if (!rules_ || generation != generation_) return std::nullopt;
  return rules_->non_finite.first_loss_step();
}

bool SignalMonitor::loss_shifted() const { return rules_ && rules_->loss_shift.shifted(); }

bool SignalMonitor::loss_flat() const { return rules_ && rules_->loss_flat.flat(); }

std::optional<double> SignalMonitor::step_time_ratio() const {
  if (!rules_) return std::nullopt;
  return rules_->throughput.Ratio();
}

const MemoryGrowthRule* SignalMonitor::memory(bool host) const {
  if (!rules_) return nullptr;
  return host ? &rules_->host : &rules_->device;
}

}  // namespace trainsup
