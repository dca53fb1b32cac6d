#include "daemon/core/signals/signal_rules.h"

#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/core/events.h"
#include "daemon/core/signals/checkpoint_rule.h"
#include "daemon/core/signals/grad_norm_rule.h"
#include "daemon/core/signals/loss_flat_rule.h"
#include "daemon/core/signals/memory_growth_rule.h"
#include "daemon/core/signals/replica_rule.h"
#include "daemon/core/signals/throughput_signal.h"

namespace trainsup {
namespace {

// kLossFlat: the generation's loss did not go down over its first steps.
// Gauge loss_flat (1 once found).
class LossFlatSignal : public SignalRule {
 public:
  explicit LossFlatSignal(const LossFlatOptions& options)
      : min_drop_(options.min_drop), rule_(options) {}

  void ObserveStep(const StepSignals& s) override {
    if (s.loss && s.loss_nonfinite == 0) rule_.Observe(s.step, *s.loss);
  }
  void Sweep(const SignalSweep& sweep, std::vector<SignalFinding>& out) override {
    if (std::optional<LossFlatFinding> f = rule_.Check()) {
      out.push_back(Report(LossFlatEvent(sweep.now, sweep.event_job, *f, min_drop_)));
    }
  }
  void Gauges(std::vector<std::pair<std::string, double>>& out) const override {
    out.emplace_back("loss_flat", rule_.flat() ? 1 : 0);
  }

 private:
  const double min_drop_;
  LossFlatRule rule_;
};

// kGradSpike, kGradCollapse: the step's largest finite gradient norm against
// its baseline, naming the rank that sent it.
class GradNormSignal : public SignalRule {
 public:
  explicit GradNormSignal(const GradNormOptions& options) : rule_(options) {}

  void ObserveStep(const StepSignals& s) override {
    if (s.grad_norm && s.grad_nonfinite == 0) rule_.Observe(s.step, *s.grad_norm, s.grad_norm_at);
  }
  void Sweep(const SignalSweep& sweep, std::vector<SignalFinding>& out) override {
    for (const GradNormFinding& f : rule_.Take()) {
      out.push_back(
          Report(GradNormEvent(sweep.now, sweep.event_job, f, sweep.NodeOfRank(f.at.rank))));
    }
  }

 private:
  GradNormRule rule_;
};

// kMemoryGrowth of the device's memory or of the host's RSS (`host`), naming
// the rank using the most. Once the script sent any, the gauges
// <device|host>_memory_growth_bytes_per_second and, growing with the capacity
// known, <device|host>_memory_seconds_to_limit.
class MemoryGrowthSignal : public SignalRule {
 public:
  MemoryGrowthSignal(const MemoryGrowthOptions& options, bool host)
      : host_(host), rule_(options, host) {}

  void ObserveStep(const StepSignals& s) override {
    // The last step that measured one: a step whose ranks sent no duration
    // (a restart's first) must not leave the time to the limit unknown.
    if (s.step_time_s && *s.step_time_s > 0) step_s_ = *s.step_time_s;
    if (host_) {
      if (!s.host_rss_bytes) return;
      rule_.Observe(s.step, *s.host_rss_bytes, s.host_rss_at, 0);
    } else {
      if (!s.device_memory_bytes) return;
      rule_.Observe(s.step, *s.device_memory_bytes, s.device_memory_at,
                    s.device_capacity_bytes.value_or(0));
    }
    observed_ = true;
  }
  void Sweep(const SignalSweep& sweep, std::vector<SignalFinding>& out) override {
    if (std::optional<MemoryGrowthFinding> f = rule_.Check(step_s_)) {
      out.push_back(
          Report(MemoryGrowthEvent(sweep.now, sweep.event_job, *f, sweep.NodeOfRank(f->at.rank))));
    }
  }
  void Gauges(std::vector<std::pair<std::string, double>>& out) const override {
    if (!observed_) return;  // the script sends none
    const std::string prefix = host_ ? "host_memory" : "device_memory";
    out.emplace_back(prefix + "_growth_bytes_per_second", rule_.slope_bytes_per_second());
    const std::optional<MemoryGrowthFinding>& growing = rule_.growing();
    if (growing && growing->seconds_to_limit > 0) {
      out.emplace_back(prefix + "_seconds_to_limit", growing->seconds_to_limit);
    }
  }

 private:
  const bool host_;
  MemoryGrowthRule rule_;
  double step_s_ = 0;
  bool observed_ = false;
};

// kReplicaMismatch: a rank whose digest disagrees with its replica group's
// majority. Silent data corruption is its node's: the finding charges the
// node toward quarantine like any failure attributed to a node, without
// restarting the job (none named without a majority).
class ReplicaSignal : public SignalRule {
 public:
  explicit ReplicaSignal(const ReplicaOptions& options) : rule_(options) {}

  void ObserveDisagreement(const ReplicaDisagreement& d) override { rule_.Observe(d); }
  void Sweep(const SignalSweep& sweep, std::vector<SignalFinding>& out) override {
    for (const ReplicaFinding& f : rule_.Take()) {
      const NodeIndex node = f.no_majority ? kNoNode : sweep.job.rank(f.at.rank).node;
      const bool charged = node != kNoNode && !sweep.observe_only;
      SignalFinding finding = Report(ReplicaMismatchEvent(sweep.now, sweep.event_job, f,
                                                          sweep.node_name(node), charged));
      if (node != kNoNode) {
        finding.action = SignalAction::kChargeNode;
        finding.node = node;
        finding.failure = absl::StrCat("rank ", f.at.rank, " disagreed with its replica group ",
                                       f.group, " at step ", f.step);
      }
      out.push_back(std::move(finding));
    }
  }

 private:
  ReplicaRule rule_;
};

}  // namespace

std::vector<std::unique_ptr<SignalRule>> MakeSignalRules(const SignalOptions& o) {
  std::vector<std::unique_ptr<SignalRule>> rules;
  if (o.loss_flat.enabled) rules.push_back(std::make_unique<LossFlatSignal>(o.loss_flat));
  if (o.grad.spike || o.grad.collapse) rules.push_back(std::make_unique<GradNormSignal>(o.grad));
  if (o.throughput.enabled) rules.push_back(std::make_unique<ThroughputSignalRule>(o.throughput));
  if (o.memory.enabled) {
    rules.push_back(std::make_unique<MemoryGrowthSignal>(o.memory, /*host=*/false));
    rules.push_back(std::make_unique<MemoryGrowthSignal>(o.memory, /*host=*/true));
  }
  if (o.replica.enabled) rules.push_back(std::make_unique<ReplicaSignal>(o.replica));
  // Always: a failed save is reported whatever the switch (it only turns
  // checkpoint_overdue off).
  rules.push_back(std::make_unique<CheckpointSignal>(o.checkpoint));
  return rules;
}

}  // namespace trainsup
