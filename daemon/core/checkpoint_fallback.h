#ifndef TRAINSUP_DAEMON_CORE_CHECKPOINT_FALLBACK_H_
#define TRAINSUP_DAEMON_CORE_CHECKPOINT_FALLBACK_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "daemon/core/signals/signal_options.h"

namespace trainsup {

// What the next generations of a job are told about where to resume
// (hb.resume_limit(), hb.skip_range()); empty: the script's own choice.
struct ResumeAdvice {
  // Load the newest checkpoint at or below this step.
  std::optional<int64_t> limit;
  // Skip the batches of steps first..last (inclusive).
  std::optional<int64_t> skip_first;
  std::optional<int64_t> skip_last;

  bool empty() const { return !limit && !skip_first; }
  bool operator==(const ResumeAdvice& o) const {
    return limit == o.limit && skip_first == o.skip_first && skip_last == o.skip_last;
  }
};

// A failure soon after a generation loaded a checkpoint.
struct LoadFailure {
  uint64_t generation = 0;
  int64_t checkpoint = 0;  // the step it resumed from
};

// Everything CheckpointFallback keeps, as the state store keeps it.
struct FallbackState {
  // The current generation and the least step it reported (-1: none yet).
  uint64_t generation = 0;
  int64_t first_step = -1;
  // Checkpoints seen completed (a CHECKPOINT_END), ascending, the newest
  // CheckpointFallback::kMaxCheckpoints.
  std::vector<int64_t> checkpoints;
  // Checkpoints found suspect, in the order found.
  std::vector<int64_t> suspects;
  std::optional<LoadFailure> last_load_failure;
  // The advice in force, and the generation it was decided in (the
  // generations after it follow it until a checkpoint past it completes).
  ResumeAdvice advice;
  uint64_t advice_generation = 0;
  int rollbacks = 0;        // checkpoints fallen back from, over the job's life
  int spike_rollbacks = 0;  // spike rollbacks in a row
};

// What kind of failure counts against the checkpoint a generation loaded:
// the same evidence, whatever form the failure takes.
enum class LoadFailureKind {
  kNonFinite,    // a NaN/Inf loss (signals/non_finite_rule.h)
  kResumeSpike,  // a loss at resume far above the loss before the failure
  kCrash,        // a rank that failed on its own: an exception, a failing exit, a crash
};

// What is done about a failure soon after a load, or about a loss spike.
struct FallbackDecision {
  enum class Kind {
    kNone,      // not the checkpoint's: as without this rule
    kRetry,     // the first such failure on this checkpoint: as without this rule
    kFallBack,  // the checkpoint is suspect: restart from the one before it
    kRollBack,  // a loss spike: restart before it, skipping its batches
    kHold,      // past the cap: hold the job
    kCut,       // the generation went non-finite: the next resume below it
  };
  Kind kind = Kind::kNone;
  // The checkpoint the failure is about (kRetry, kFallBack, kHold after a
  // load failure), the one rolled back to (kRollBack), or the first the
  // generation committed at or after its non-finite step (kCut; -1: none
  // seen yet).
  int64_t checkpoint = -1;
  // kCut: the generation's first step with a non-finite loss, and the
  // checkpoints it committed from that step on, seen so far.
  int64_t non_finite_step = -1;
  std::vector<int64_t> poisoned;
  // kFallBack, kRollBack, kCut: what the next generation is told; and the
  // newest checkpoint seen at or below its limit (nullopt: none seen).
  ResumeAdvice advice;
  std::optional<int64_t> resume_at;
  int rollbacks = 0;  // counted so far, this decision included
  int cap = 0;
  std::string reason;  // for people: what was found and what is done
};

// Which checkpoint a job's generations must load (docs/recovery.md, "Bad
// checkpoints and spike rollback"). A generation stopped for a non-finite
// loss poisons what it committed from that step on: the next generations are
// told to load the newest checkpoint below it. A failure of any form (a
// non-finite loss, a resume spike, a rank's crash) within `load_steps` of
// loading the same checkpoint in two generations in a row makes that
// checkpoint suspect: the next generations are told to load the newest
// checkpoint at or below the step before it. Either limit holds until a
// later generation completes a checkpoint past it; after `max_rollbacks`
// suspects fallen back from the job is held, naming the checkpoint. A loss spike (with on_loss_spike=rollback)
// rolls back to the newest checkpoint before its onset and skips the
// batches that led into it; `max_spike_rollbacks` in a row hold the job.
// Pure; fed by the job's heartbeats (steps and completed checkpoints).
// Thread-compatible.
class CheckpointFallback {
 public:
  static constexpr size_t kMaxCheckpoints = 64;

  CheckpointFallback() = default;
  CheckpointFallback(const CheckpointFallback&) = delete;
  CheckpointFallback& operator=(const CheckpointFallback&) = delete;

  // A STEP of `generation` at `step`. O(1). Returns true when the state to
  // persist changed (a new generation's first step).
  bool OnStep(uint64_t generation, int64_t step);
  // A CHECKPOINT_END of `generation` at `step`: the checkpoint completed.
  // O(kMaxCheckpoints) for a new one, O(1) for the latest again (every
  // rank ends it). Returns true when the state to persist changed (a new
  // checkpoint; a new suspect; advice lifted).
  bool OnCheckpoint(uint64_t generation, int64_t step);

  // A failure of `kind` at `step` of `generation`.
  FallbackDecision OnLoadFailure(uint64_t generation, int64_t step, LoadFailureKind kind,
                                 const FallbackOptions& options);
  // `generation`, the current one, is stopped for a non-finite loss first
  // seen at `step`: a checkpoint it committed at or after `step` may hold
  // the NaN (the one written between the NaN and the stop), now or while
  // it stops. The next generations load the newest checkpoint at or below
  // step - 1 (kCut); what it commits from `step` on is suspect. Not counted
  // against `max_rollbacks`: nothing failed after a load. kNone for another
  // generation.
  FallbackDecision OnNonFinite(uint64_t generation, int64_t step);
  // A loss spike that began at `onset_step`, found at `step`, in
  // `generation`, when on_loss_spike is rollback.
  FallbackDecision OnLossSpike(uint64_t generation, int64_t onset_step, int64_t step,
                               const FallbackOptions& options);

  // The step the current generation resumed from: its first step - 1 (0: a
  // fresh start); nullopt before its first step.
  std::optional<int64_t> resumed_from() const;
  // The newest checkpoint seen at or below `step`.
  std::optional<int64_t> NewestAtOrBelow(int64_t step) const;
  // What the next generation is told.
  const ResumeAdvice& advice() const { return state_.advice; }
  // The limit the current generation was told at its first step. The advice
  // lifts once that generation saves past it, which may come before the
  // sweep that judges where it resumed: that judgement needs this.
  std::optional<int64_t> limit_at_start() const { return limit_at_start_; }
  const FallbackState& state() const { return state_; }
  // Puts back what the state store kept.
  // The current generation, if it came after the advice, was told it (unless
  // it already lifted: then a resume it judges is judged without it).
  void Restore(FallbackState state) {
    state_ = std::move(state);
    limit_at_start_.reset();
    if (state_.generation > state_.advice_generation) limit_at_start_ = state_.advice.limit;
  }

 private:
  void Advise(uint64_t generation, ResumeAdvice advice);
  // Notes `step` among the suspects (once; the newest kMaxCheckpoints).
  bool AddSuspect(int64_t step);

  FallbackState state_;
  // Not kept by the state store (they matter for seconds, while a
  // generation stops; the advice they led to is kept): the checkpoints the
  // current generation committed (the newest kMaxCheckpoints), the limit it
  // was told (a restore puts back the advice's), and the generation stopped
  // for a non-finite loss with its first step.
  std::vector<int64_t> committed_;
  std::optional<int64_t> limit_at_start_;
  uint64_t cut_generation_ = 0;
  int64_t cut_step_ = -1;
};

// "checkpoint step 40"; "a fresh start" for 0.
std::string CheckpointName(int64_t step);

// Where the next generation is told to resume, for people: "the next
// generation loads the newest checkpoint at or below step 59 (step 59)",
// with ", skipping the batches of steps 100 to 113" for a skip range; ""
// without advice.
std::string ResumeAdviceText(const CheckpointFallback& fallback);

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_CHECKPOINT_FALLBACK_H_
