#include "daemon/core/signals/signal_monitor.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/core/signals/signal_rules.h"

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

SignalMonitor::Rules::Rules(const SignalOptions& o)
    : non_finite(o.non_finite), loss_shift(o.loss_shift), registry(MakeSignalRules(o)) {}

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
  }
  aggregator_.Clear();
  ended_.reset();  // live rules answer from here on
  Reconfigure();
}

void SignalMonitor::Reconfigure() { rules_.emplace(options_); }

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
  if (hb.save_failed()) {  // never complete
    checkpoint_ends_.erase(hb.step);
    if (last_checkpoint_step_ == hb.step) last_checkpoint_step_ = checkpoint_step_before_;
    CheckpointOutcome failed;
    failed.step = hb.step;
    failed.at = RankAt{hb.rank, job.rank(hb.rank).node};
    failed.error = hb.exception_message.empty()
                       ? hb.exception_type
                       : absl::StrCat(hb.exception_type, ": ", hb.exception_message);
    for (const std::unique_ptr<SignalRule>& rule : rules_->registry) {
      rule->ObserveCheckpoint(failed);
    }
    return;
  }
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
  checkpoint_step_before_ = last_checkpoint_step_;
  last_checkpoint_step_ = hb.step;
  checkpoint_ends_.erase(hb.step);
  CheckpointOutcome committed;
  committed.step = hb.step;
  committed.committed = true;
  for (const std::unique_ptr<SignalRule>& rule : rules_->registry) {
    rule->ObserveCheckpoint(committed);
  }
}

void SignalMonitor::OnStep(absl::Time now, const Job& job, const RankState& r,
                           const Heartbeat& hb, double checkpoint_s) {
  Roll(job);
  world_size_ = std::max(world_size_, hb.world_size);
  const RankAt at{r.rank, r.node};
  if (hb.loss && options_.non_finite.action != NonFiniteAction::kOff) {
    rules_->non_finite.ObserveLoss(now, hb.step, at, *hb.loss);
  }
  for (const std::unique_ptr<SignalRule>& rule : rules_->registry) rule->ObserveRank(now, at, hb);
  aggregator_.Add(now, at, hb, checkpoint_s, job.ranks_reporting());
  Drain();
}

void SignalMonitor::Drain() {
  for (const StepSignals& s : aggregator_.ready()) Feed(s);
  aggregator_.ready().clear();
  for (const ReplicaDisagreement& d : aggregator_.disagreements()) {
    totals_.mismatches += d.disagreeing;
    for (const std::unique_ptr<SignalRule>& rule : rules_->registry) rule->ObserveDisagreement(d);
  }
  aggregator_.disagreements().clear();
}

void SignalMonitor::Feed(const StepSignals& s) {
  Rules& rules = *rules_;
  last_ = s;
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
  if (s.loss && s.loss_nonfinite == 0 && options_.loss_shift.enabled) {
    rules.loss_shift.Observe(s.step, *s.loss);
  }
  for (const std::unique_ptr<SignalRule>& rule : rules.registry) rule->ObserveStep(s);
}

SignalFindings SignalMonitor::Sweep(const SignalSweep& sweep, const ResumeTold& told) {
  SignalFindings out;
  Roll(sweep.job);
  aggregator_.Expire(sweep.now, kStepExpiry);
  Drain();
  Rules& rules = *rules_;
  out.non_finite = rules.non_finite.Check(sweep.now);
  if (options_.loss_shift.enabled) out.loss_shift = rules.loss_shift.Check();
  for (const std::unique_ptr<SignalRule>& rule : rules.registry) rule->Sweep(sweep, out.findings);
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

void SignalMonitor::MoveNodes(absl::FunctionRef<void(NodeIndex&)> move) {
  if (!rules_) return;
  for (const std::unique_ptr<SignalRule>& rule : rules_->registry) rule->MoveNodes(move);
}

std::optional<int64_t> SignalMonitor::NonFiniteLossStep(uint64_t generation) const {
  if (!rules_ || generation != generation_) return std::nullopt;
  return rules_->non_finite.first_loss_step();
}

bool SignalMonitor::loss_shifted() const {
  if (ended_) {
    for (const auto& [name, value] : *ended_) {
      if (name == "loss_shifted") return value > 0;
    }
    return false;
  }
  return rules_ && rules_->loss_shift.shifted();
}

std::vector<std::pair<std::string, double>> SignalMonitor::State() const {
  std::vector<std::pair<std::string, double>> state = {{"loss_shifted", loss_shifted() ? 1 : 0}};
  for (auto& gauge : Gauges()) state.push_back(std::move(gauge));
  return state;
}

void SignalMonitor::RestoreEnded(uint64_t generation,
                                 std::vector<std::pair<std::string, double>> state) {
  generation_ = generation;
  ended_ = std::move(state);
}

std::vector<std::pair<std::string, double>> SignalMonitor::Gauges() const {
  std::vector<std::pair<std::string, double>> gauges;
  if (ended_) {
    for (const auto& [name, value] : *ended_) {
      if (name != "loss_shifted") gauges.emplace_back(name, value);
    }
    return gauges;
  }
  if (!rules_) return gauges;
  for (const std::unique_ptr<SignalRule>& rule : rules_->registry) rule->Gauges(gauges);
  return gauges;
}

}  // namespace trainsup
