#include "sim/goodput_sim.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <queue>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "calc/checkpoint_planner.h"
#include "daemon/core/mtbf_estimator.h"
#include "daemon/core/node_loss_detector.h"
#include "daemon/core/signals/signal_options.h"

namespace trainsup::sim {

namespace {

constexpr double kHour = 3600;
constexpr double kDay = 86400;

absl::Time At(double seconds) { return absl::UnixEpoch() + absl::Seconds(seconds); }

// From a failure to its detection, as the core's rules have it (the policy's
// crash and stall options; the node-loss and loss-shift rules' defaults).
double DetectionSeconds(FailureKind kind, const SimJob& job, const SimPolicy& policy) {
  switch (kind) {
    case FailureKind::kCrash:
      return absl::ToDoubleSeconds(policy.crash.settle);
    case FailureKind::kHang:
      return std::max(absl::ToDoubleSeconds(policy.stall.floor),
                      policy.stall.factor * job.step_seconds);
    case FailureKind::kNodeLost:
      return absl::ToDoubleSeconds(NodeLossOptions{}.lost_after);
    case FailureKind::kLossSpike:
      return LossShiftOptions{}.window * job.step_seconds;
    case FailureKind::kCorruption:  // its delay is in the detection's time
    case FailureKind::kSlow:
      return 0;
  }
  return 0;
}

// A failure the simulation made: a deterministic bug failing again in the
// next generation, or silent corruption found later.
struct Synthetic {
  double time = 0;
  FailureEvent event;
  int64_t generation = -1;  // valid only in this generation (-1: in any)
  double rollback_to = -1;  // checkpoints committed after this are bad (-1: none)
  bool operator>(const Synthetic& o) const { return time > o.time; }
};

class Simulation {
 public:
  Simulation(const SimJob& job, const SimPolicy& policy, uint32_t cluster_nodes,
             const std::vector<uint32_t>& lemons)
      : job_(job),
        policy_(policy),
        cluster_nodes_(std::max(cluster_nodes, job.nodes)),
        end_(job.days * kDay),
        governor_(policy.restart),
        quarantine_(policy.quarantine_options),
        estimator_(MtbfOptions{}),
        in_job_(cluster_nodes_, false),
        lemon_(cluster_nodes_, false) {
    for (uint32_t n = 0; n < job.nodes; ++n) in_job_[n] = true;
    for (uint32_t n = job.nodes; n < cluster_nodes_; ++n) pool_.push_back(n);
    for (uint32_t n : lemons) {
      if (n < cluster_nodes_) lemon_[n] = true;
    }
  }

  SimResult Run(const std::vector<FailureEvent>& trace) {
    StartGeneration(0);
    size_t next = 0;
    for (;;) {
      // The next generation starts before any later event (it may bring its
      // own: a bug that fails again).
      if (!running_ && down_until_ < end_) {
        double next_time = end_;
        if (next < trace.size()) next_time = std::min(next_time, trace[next].time_seconds);
        if (!synthetic_.empty()) next_time = std::min(next_time, synthetic_.top().time);
        if (down_until_ <= next_time) {
          StartGeneration(down_until_);
          continue;
        }
      }
      const bool from_trace =
          next < trace.size() &&
          (synthetic_.empty() || trace[next].time_seconds <= synthetic_.top().time);
      if (!from_trace && synthetic_.empty()) break;
      Synthetic s;
      if (from_trace) {
        s.time = trace[next].time_seconds;
        s.event = trace[next++];
      } else {
        s = synthetic_.top();
        synthetic_.pop();
      }
      if (s.time >= end_) break;
      Handle(s);
    }
    Finish();
    return result_;
  }

 private:
  void Handle(const Synthetic& s) {
    const FailureEvent& e = s.event;
    const bool node_event = e.node != kNoNode;
    if (!running_ || (s.generation >= 0 && s.generation != generation_) ||
        (node_event && (e.node >= cluster_nodes_ || !in_job_[e.node]))) {
      ++result_.ignored;
      return;
    }
    switch (e.kind) {
      case FailureKind::kSlow:
        slow_ += std::min(job_.slow_hours * kHour, end_ - s.time) * (1 - 1 / job_.slow_factor);
        return;
      case FailureKind::kCorruption:
        if (s.rollback_to < 0) {  // it happens now; it is found later
          Synthetic found = s;
          found.time = s.time + job_.sdc_detection_hours * kHour;
          found.rollback_to = s.time;
          found.generation = -1;
          synthetic_.push(found);
          return;
        }
        Fail(s.time, e, s.rollback_to);
        return;
      case FailureKind::kLossSpike:
        Fail(s.time, e, s.time - job_.spike_rollback_steps * job_.step_seconds);
        return;
      default:
        Fail(s.time, e, -1);
    }
  }

  void StartGeneration(double at) {
    running_ = true;
    ++generation_;
    generation_start_ = at;
    interval_ = PlanInterval();
    if (bug_failures_ > 0) {  // the bug is still in the code
      Synthetic again;
      again.time = at + job_.bug_refail_seconds;
      again.event = bug_;
      again.generation = generation_;
      synthetic_.push(again);
    }
  }

  double PlanInterval() const {
    if (policy_.fixed_interval_seconds.has_value()) return *policy_.fixed_interval_seconds;
    const MtbfEstimate estimate = estimator_.Estimate(exposure_, mtbf_failures_);
    CheckpointPlanInputs in;
    in.checkpoint_seconds = job_.checkpoint_seconds;
    in.mtbf_seconds = estimate.conservative_seconds;
    in.restart_seconds = job_.restart_seconds;
    absl::StatusOr<CheckpointPlan> plan = PlanCheckpoints(in);
    return plan.ok() ? plan->interval_seconds : kHour;
  }

  // The generation's training up to `at`: its checkpoints committed, and
  // what was trained since the last one (lost at a failure; counted as
  // useful at the end of the simulation, where the run goes on).
  double EndGeneration(double at) {
    const double length = at - generation_start_;
    const double cycle = interval_ + job_.checkpoint_seconds;
    const auto cycles = static_cast<int64_t>(std::floor(length / cycle));
    for (int64_t k = 1; k <= cycles; ++k) {
      commits_.push_back({generation_start_ + k * cycle, interval_});
      ledger_.useful += interval_;
    }
    ledger_.checkpoint += cycles * job_.checkpoint_seconds;
    interval_time_ += interval_ * length;
    exposure_ += length;
    running_ = false;
    return length - cycles * cycle;
  }

  // Checkpoints committed after `time` are bad: their training is lost.
  void RollBack(double time) {
    while (!commits_.empty() && commits_.back().first > time) {
      ledger_.useful -= commits_.back().second;
      ledger_.rework += commits_.back().second;
      commits_.pop_back();
    }
  }

  void Fail(double at, const FailureEvent& e, double rollback_to) {
    const double rework_before = ledger_.rework;
    ledger_.rework += EndGeneration(at);
    if (rollback_to >= 0) RollBack(rollback_to);
    double t = at + DetectionSeconds(e.kind, job_, policy_);
    ledger_.detection += t - at;
    if (e.kind == FailureKind::kLossSpike) {
      ++result_.spikes;
    } else {
      ++result_.failures;
      ++mtbf_failures_;
    }
    const double replaced_at = ReplaceIfItLeaves(t, e);

    bool hold = false;
    if (e.deterministic) {
      bug_ = e;
      ++bug_failures_;
      hold = policy_.hold_code_bugs && bug_failures_ >= 2;
    }
    double ready = t;  // when the restart proper may begin
    if (!hold) {
      const RestartGovernor::Decision d = governor_.Decide(At(t));
      hold = !d.allowed;
      if (d.allowed) {
        ready = t + absl::ToDoubleSeconds(d.backoff);
        ledger_.restart += ready - t;
      }
    }
    if (hold) {
      double wait = job_.human_hours * kHour;
      if (bug_failures_ > 0) wait += job_.bug_fix_hours * kHour;
      bug_failures_ = 0;  // the person fixes the bug, or clears the cause
      ledger_.held += wait;
      ready = t + wait;
      ++result_.holds;
      governor_.Forgive(At(ready));
    }
    if (replaced_at > ready) {
      ledger_.replacement += replaced_at - ready;
      ready = replaced_at;
    }
    governor_.RecordRestart(At(ready));
    ++result_.restarts;
    const double restart =
        job_.restart_seconds + (e.kind == FailureKind::kHang ? job_.hang_stop_seconds : 0);
    ledger_.restart += restart;
    down_until_ = ready + restart;
    result_.failure_log.push_back(
        {at, e.kind, e.node, ledger_.rework - rework_before, t - at, down_until_ - at});
  }

  // A lost node leaves the job; so does a node the quarantine policy takes.
  // Returns when its replacement is in (`at` when none was needed).
  double ReplaceIfItLeaves(double at, const FailureEvent& e) {
    // The workload's failures charge no node; nor does a deterministic
    // one (the same failure again is a bug in the code, held, not charged).
    if (e.node >= cluster_nodes_ || e.deterministic || e.kind == FailureKind::kLossSpike) {
      return at;
    }
    bool leaves = e.kind == FailureKind::kNodeLost;
    if (policy_.quarantine) {
      const QuarantinePolicy::Verdict v =
          quarantine_.Attribute(At(at), NodeName(e.node), e.cause, cluster_nodes_);
      if (v.quarantine) {  // Attribute quarantined it
        ++result_.quarantines;
        if (lemon_[e.node]) ++result_.lemons_quarantined;
        leaves = true;
      }
    }
    if (!leaves) return at;
    in_job_[e.node] = false;
    returns_.push({at + job_.repair_hours * kHour, e.node});
    ++result_.nodes_replaced;
    TakeReturns(at);
    double in_at = at + (policy_.hot_spares ? 0 : job_.replace_minutes * 60);
    if (pool_.empty()) {  // every other node is out: wait for a repair
      in_at = std::max(in_at, returns_.top().first);
      TakeReturns(returns_.top().first);
    }
    in_job_[pool_.front()] = true;
    pool_.pop_front();
    return in_at;
  }

  // Nodes repaired by `at` are back in the pool, their quarantine lifted.
  void TakeReturns(double at) {
    while (!returns_.empty() && returns_.top().first <= at) {
      const uint32_t node = returns_.top().second;
      returns_.pop();
      if (quarantine_.IsQuarantined(NodeName(node))) quarantine_.Unquarantine(NodeName(node));
      lemon_[node] = false;  // repaired
      pool_.push_back(node);
    }
  }

  static std::string NodeName(uint32_t node) { return absl::StrCat("n", node); }

  void Finish() {
    if (!running_ && down_until_ < end_) StartGeneration(down_until_);
    if (running_) {
      ledger_.useful += EndGeneration(end_);  // the run goes on: not lost
      ledger_.wall = end_;
    } else {
      // The last failure's downtime, whole, even past the end.
      ledger_.wall = std::max(end_, down_until_);
    }
    const double slow = std::min(slow_, ledger_.useful);
    ledger_.useful -= slow;
    ledger_.slow = slow;
    result_.ledger = ledger_;
    result_.mean_interval_seconds = exposure_ > 0 ? interval_time_ / exposure_ : interval_;
  }

  const SimJob& job_;
  const SimPolicy& policy_;
  const uint32_t cluster_nodes_;
  const double end_;
  RestartGovernor governor_;
  QuarantinePolicy quarantine_;
  MtbfEstimator estimator_;

  std::vector<bool> in_job_;
  std::vector<bool> lemon_;
  std::deque<uint32_t> pool_;  // nodes ready to join
  // (back in the pool at, node), earliest first.
  std::priority_queue<std::pair<double, uint32_t>, std::vector<std::pair<double, uint32_t>>,
                      std::greater<>>
      returns_;
  std::priority_queue<Synthetic, std::vector<Synthetic>, std::greater<>> synthetic_;

  bool running_ = false;
  int64_t generation_ = 0;
  double generation_start_ = 0;
  double interval_ = kHour;
  double down_until_ = 0;
  double exposure_ = 0;  // running time, for the MTBF
  int mtbf_failures_ = 0;
  double interval_time_ = 0;  // sum of interval x running time
  FailureEvent bug_;          // the software bug in the code, if any
  int bug_failures_ = 0;      // its failures since it appeared
  double slow_ = 0;
  std::vector<std::pair<double, double>> commits_;  // (committed at, training it holds)
  SimLedger ledger_;
  SimResult result_;
};

}  // namespace

SimResult Simulate(const SimJob& job, const SimPolicy& policy,
                   const std::vector<FailureEvent>& trace, uint32_t cluster_nodes,
                   const std::vector<uint32_t>& lemons) {
  Simulation sim(job, policy, cluster_nodes, lemons);
  return sim.Run(trace);
}

}  // namespace trainsup::sim
