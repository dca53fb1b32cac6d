#ifndef TRAINSUP_DAEMON_CORE_SIGNALS_RESUME_RULE_H_
#define TRAINSUP_DAEMON_CORE_SIGNALS_RESUME_RULE_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "daemon/core/signals/generation_record.h"
#include "daemon/core/signals/signal_options.h"

namespace trainsup {

// The generation resumed from an older step than the last checkpoint
// trainsupd saw complete (or from the start with one on record).
struct ResumeBehindFinding {
  int64_t first_step = -1;       // the generation's first step
  int64_t resumed_step = -1;     // the step it resumed after: first_step - 1
  int64_t checkpoint_step = -1;  // the last checkpoint seen complete
  int64_t repeated_steps = 0;    // checkpoint_step - resumed_step: re-done for nothing
};

// The learning rate at the generation's first steps is not the one the
// generation before had at the same steps: its scheduler did not restore.
struct LrMismatchFinding {
  int64_t step = -1;  // the first step that differs
  double lr_before = 0;
  double lr_after = 0;
  double relative = 0;  // |after - before| / |before| at that step
  uint32_t compared = 0;
  uint32_t differing = 0;
  int64_t judged_step = -1;  // the step at which it was judged
};

// The samples or tokens per step (summed over the ranks) at the first steps
// differ from the same steps before: the data position did not restore.
struct DataPositionFinding {
  int64_t step = -1;  // the first step that differs
  uint64_t samples_before = 0;
  uint64_t samples_after = 0;
  uint64_t tokens_before = 0;
  uint64_t tokens_after = 0;
  uint32_t compared = 0;
  uint32_t differing = 0;
  int64_t judged_step = -1;
};

// The loss at the generation's first steps far above the loss at the same
// steps before the failure: the checkpoint may be incomplete (optimizer
// state, RNG, data position). A fact other code reads too (a checkpoint
// whose load is followed by a spike is suspect).
struct ResumeSpikeFinding {
  uint64_t generation = 0;
  int64_t resumed_step = -1;  // the checkpoint it loaded: first_step - 1
  int64_t first_step = -1;
  int64_t step = -1;          // the last step judged (within the first `steps`)
  int64_t peak_step = -1;     // the step whose loss rose the most
  double peak_excess = 0;
  double loss_before = 0;     // median loss at the compared steps, before
  double loss_after = 0;      // ... and after
  double excess = 0;          // median of (after - before) per step
  double sigma = 0;           // 1.4826 x MAD of the generation before's step-to-step changes
  double threshold = 0;       // max(floor, sigmas x sigma)
  uint32_t compared = 0;
};

// What the rule found; each at most once per generation.
struct ResumeFindings {
  std::optional<ResumeBehindFinding> behind;
  std::optional<LrMismatchFinding> lr;
  std::optional<DataPositionFinding> data;
  std::optional<ResumeSpikeFinding> spike;
  bool any() const { return behind || lr || data || spike; }
};

// Resume verification (docs/signals.md, "Resume"): compares the first
// `steps` steps of a generation with what the generation before left (its
// record of its last steps) and with the last checkpoint seen complete.
// At the generation's first step: the step it resumed after against that
// checkpoint. Once `steps` steps are in (or earlier, at the first step
// past the generation before's last): the learning rate, the samples and
// tokens and the loss at the steps both generations did. A fresh start (no
// generation before, no checkpoint) and a resume whose steps the generation
// before never did are judged on what exists: nothing to compare, nothing
// found. Thread-compatible.
class ResumeRule {
 public:
  // `previous`: the generation before's record (empty for a fresh start),
  // which must outlive the rule; `checkpoint_step`: the last checkpoint
  // seen complete (-1: none).
  ResumeRule(const ResumeOptions& options, uint64_t generation, const GenerationRecord* previous,
             int64_t checkpoint_step);

  // The generation's steps, in step order.
  void Observe(const StepSummary& s);
  // What was found since the last call.
  ResumeFindings Take();
  // Done: every check judged (or nothing left to judge).
  bool done() const { return done_; }

 private:
  struct Pair {
    StepSummary before;
    StepSummary after;
  };
  void Judge(int64_t step);
  void JudgeLr(int64_t step);
  void JudgeData(int64_t step);
  void JudgeSpike();

  const ResumeOptions options_;
  const uint64_t generation_;
  const GenerationRecord* const previous_;
  const int64_t checkpoint_step_;
  int64_t first_step_ = -1;
  int seen_ = 0;  // steps of the generation observed
  bool done_ = false;
  std::vector<Pair> pairs_;  // the first steps both generations did
  ResumeFindings found_;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_SIGNALS_RESUME_RULE_H_
