#ifndef TRAINSUP_DAEMON_CORE_SIGNALS_SIGNAL_MONITOR_H_
#define TRAINSUP_DAEMON_CORE_SIGNALS_SIGNAL_MONITOR_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "daemon/core/heartbeat.h"
#include "daemon/core/job.h"
#include "daemon/core/signals/generation_record.h"
#include "daemon/core/signals/loss_shift_rule.h"
#include "daemon/core/signals/non_finite_rule.h"
#include "daemon/core/signals/resume_rule.h"
#include "daemon/core/signals/signal_options.h"
#include "daemon/core/signals/signal_rule.h"
#include "daemon/core/signals/step_aggregator.h"

namespace trainsup {

// What the rules found in one sweep.
struct SignalFindings {
  // The rules that may stop the job, as SignalDetection acts on each: a
  // non-finite loss, a loss shift (a spike's rollback; the kill criteria),
  // what the generation's first steps showed of its resume.
  std::optional<NonFiniteFinding> non_finite;
  std::optional<LossShiftFinding> loss_shift;
  ResumeFindings resume;
  // The registry's (signal_rules.h), in its order: events and their actions.
  std::vector<SignalFinding> findings;
};

// The training signals of one job (docs/signals.md): every STEP feeds a
// per-step aggregate in O(1), each step's record feeds the rules once, and
// the sweep asks them what they found. Every rule and baseline belongs to
// the job's current generation (a new generation starts them over, so a
// resume is never read as a change); the record of the generation before
// stays readable (previous_record()). Options are trainsupd's, with the
// settings a rank's START carried applied for the generation (the first
// START with settings wins). Per job: the rules' series, one compute series
// per node, and no state per rank. Thread-compatible.
class SignalMonitor : public StepObserver {
 public:
  explicit SignalMonitor(const SignalOptions& defaults);
  SignalMonitor(const SignalMonitor&) = delete;
  SignalMonitor& operator=(const SignalMonitor&) = delete;

  void OnStep(absl::Time now, const Job& job, const RankState& r, const Heartbeat& hb,
              double checkpoint_s) override;
  // A START with settings (validated by CheckHeartbeat).
  void OnStart(const Job& job, const Heartbeat& hb);
  // A CHECKPOINT_END applied: the checkpoint of hb.step is complete once
  // every rank reporting in the generation has ended it; one with an
  // exception is a failed save (never complete; an asynchronous write that
  // failed after its checkpoint was complete takes that back).
  void OnCheckpoint(const Job& job, const Heartbeat& hb);
  // Where trainsupd told the current generation to resume (a fallback from
  // a suspect checkpoint or below a non-finite loss, a spike rollback): the
  // step at or below which to load (`limit`), and the newest checkpoint it
  // saw there (`at`; nullopt: none, a fresh start).
  struct ResumeTold {
    std::optional<int64_t> limit;
    std::optional<int64_t> at;
  };
  // Hands over steps whose ranks stopped reporting, and runs the rules at
  // `sweep` (its job: the one observed). A resume behind the last checkpoint
  // as `told` is no finding, neither an event nor a count; one behind the
  // checkpoint it was told to load is judged against that one.
  SignalFindings Sweep(const SignalSweep& sweep, const ResumeTold& told = {});

  // The supervisor renumbered its nodes: `move(NodeIndex&)` for each.
  void MoveNodes(absl::FunctionRef<void(NodeIndex&)> move);

  // The options in force for the current generation, and the settings its
  // script gave (empty: trainsupd's).
  const SignalOptions& options() const { return options_; }
  const std::vector<std::pair<std::string, double>>& settings() const { return settings_; }

  // For the metrics: the last step's record; the rules' states (the loss
  // shift's, and the registry's named gauges: SignalRule::Gauges).
  const std::optional<StepSignals>& last_step() const { return last_; }
  bool loss_shifted() const;
  std::vector<std::pair<std::string, double>> Gauges() const;
  // All of the rules' state by name: loss_shifted, then Gauges(). What an
  // ended job's record keeps (ended_job.h).
  std::vector<std::pair<std::string, double>> State() const;
  // An ended job restored after trainsupd's restart: its rules are gone, so
  // loss_shifted() and Gauges() answer what `state` (its State() when it
  // ended) says, until the job is heard from again.
  void RestoreEnded(uint64_t generation, std::vector<std::pair<std::string, double>> state);
  // Across the job's generations: steps with a non-finite loss, overflow
  // steps (a non-finite gradient norm, finite losses), ranks x steps that
  // disagreed with their replica group.
  uint64_t nonfinite_loss_steps() const { return totals_.loss_steps; }
  uint64_t overflow_steps() const { return totals_.overflow_steps; }
  uint64_t replica_mismatches() const { return totals_.mismatches; }
  // The step of the checkpoint last seen complete (any generation's; -1:
  // none), and the resume findings so far, by check.
  int64_t last_checkpoint_step() const { return last_checkpoint_step_; }
  struct ResumeCounts {
    uint64_t behind = 0;
    uint64_t lr = 0;
    uint64_t data = 0;
    uint64_t spike = 0;
    uint64_t repeated_steps = 0;  // of resumed_behind's, summed
  };
  const ResumeCounts& resume_counts() const { return totals_.resume; }
  // The job's latest resume spike (any generation's): which checkpoint was
  // loaded (resumed_step), in which generation, and how many steps after.
  const std::optional<ResumeSpikeFinding>& resume_spike() const { return resume_spike_; }

  // The least step at which a rank of `generation` sent a non-finite loss,
  // while that is the generation the rules follow and the non-finite rule
  // is on; nullopt otherwise.
  std::optional<int64_t> NonFiniteLossStep(uint64_t generation) const;

  // The current generation's first step (docs/provenance.md), of
  // record().generation(): the first one with every rank's STEP in it (a
  // generation's first steps may be handed over before some rank's first
  // report arrived), or, when none of its first kFirstStepTries steps has
  // them all, the first of those with the most. Unset before it.
  static constexpr int kFirstStepTries = 8;
  const std::optional<StepSummary>& first_step() const { return first_step_; }

  // The current and the previous generation's last steps.
  const GenerationRecord& record() const { return record_; }
  const GenerationRecord& previous_record() const { return previous_; }

 private:
  // Every rule of one generation, made from its options: the two that may
  // stop the job by name, the registry's behind their interface.
  struct Rules {
    explicit Rules(const SignalOptions& o);
    NonFiniteRule non_finite;
    LossShiftRule loss_shift;
    std::vector<std::unique_ptr<SignalRule>> registry;
  };
  struct Totals {
    uint64_t loss_steps = 0;
    uint64_t overflow_steps = 0;
    uint64_t mismatches = 0;
    ResumeCounts resume;
  };

  void Roll(const Job& job);
  void Reconfigure();
  void Drain();
  void Feed(const StepSignals& s);

  const SignalOptions defaults_;
  SignalOptions options_;
  std::vector<std::pair<std::string, double>> settings_;
  uint64_t generation_ = 0;
  bool settings_applied_ = false;
  StepAggregator aggregator_;
  std::optional<Rules> rules_;
  // An ended job's state as it ended (RestoreEnded), while no new
  // generation has been observed.
  std::optional<std::vector<std::pair<std::string, double>>> ended_;
  std::optional<StepSignals> last_;
  GenerationRecord record_;
  GenerationRecord previous_;
  // Made at the generation's first step, against previous_ (so not
  // remade when a START's settings arrive after it).
  std::optional<ResumeRule> resume_;
  std::optional<StepSummary> first_step_;
  // Until first_step_ is set: the best step so far, how many were tried,
  // and the world size the generation's STEPs say.
  std::optional<StepSummary> first_candidate_;
  int first_tries_ = 0;
  uint32_t world_size_ = 0;
  std::optional<ResumeSpikeFinding> resume_spike_;
  int64_t last_checkpoint_step_ = -1;
  int64_t checkpoint_step_before_ = -1;  // the one complete before it
  // The generation's checkpoints not yet complete: step -> ranks that ended it.
  absl::flat_hash_map<int64_t, uint32_t> checkpoint_ends_;
  Totals totals_;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_SIGNALS_SIGNAL_MONITOR_H_
