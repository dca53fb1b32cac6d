#include "daemon/core/signals/resume_rule.h"

#include <algorithm>
#include <cmath>

#include "daemon/core/signals/series.h"

namespace trainsup {
namespace {

// The spike check needs at least this many steps both generations did (a
// median of fewer is one noisy step).
constexpr size_t kMinSpikeSteps = 3;

double Relative(double before, double after) {
  const double scale = std::fabs(before);
  if (scale == 0) return after == 0 ? 0 : INFINITY;
  return std::fabs(after - before) / scale;
}

// A count both sides sent, from the same number of ranks, that differs by
// more than `tolerance` of it.
bool CountDiffers(uint64_t before, uint64_t after, double tolerance) {
  if (before == 0 || after == 0) return false;
  return Relative(static_cast<double>(before), static_cast<double>(after)) > tolerance;
}

}  // namespace

ResumeRule::ResumeRule(const ResumeOptions& options, uint64_t generation,
                       const GenerationRecord* previous, int64_t checkpoint_step)
    : options_(options),
      generation_(generation),
      previous_(previous),
      checkpoint_step_(checkpoint_step) {}

void ResumeRule::Observe(const StepSummary& s) {
  if (done_) return;
  if (first_step_ < 0) {
    first_step_ = s.step;
    const int64_t resumed = s.step - 1;
    if (options_.behind && checkpoint_step_ >= 0 && resumed < checkpoint_step_) {
      found_.behind = ResumeBehindFinding{s.step, resumed, checkpoint_step_,
                                          checkpoint_step_ - resumed};
    }
  }
  ++seen_;
  const bool before_kept = previous_ != nullptr && previous_->size() > 0;
  if (before_kept) {
    if (std::optional<StepSummary> before = previous_->Find(s.step)) pairs_.push_back({*before, s});
  }
  // Judged once the first `steps` are in, or once no later step can have
  // been done before.
  if (seen_ >= options_.steps || !before_kept || s.step >= previous_->last_step()) Judge(s.step);
}

void ResumeRule::Judge(int64_t step) {
  done_ = true;
  if (pairs_.empty()) return;
  if (options_.lr) JudgeLr(step);
  if (options_.data) JudgeData(step);
  if (options_.spike) JudgeSpike();
  pairs_.clear();
  pairs_.shrink_to_fit();
}

void ResumeRule::JudgeLr(int64_t step) {
  LrMismatchFinding f;
  f.judged_step = step;
  for (const Pair& p : pairs_) {
    if (!p.before.learning_rate || !p.after.learning_rate) continue;
    ++f.compared;
    const double relative = Relative(*p.before.learning_rate, *p.after.learning_rate);
    if (!(relative > options_.lr_tolerance)) continue;
    if (f.differing++ == 0) {
      f.step = p.after.step;
      f.lr_before = *p.before.learning_rate;
      f.lr_after = *p.after.learning_rate;
      f.relative = relative;
    }
  }
  // Most of the steps: a schedule is deterministic, so a step or two that
  // differ is not a scheduler that started over.
  if (f.compared > 0 && 2 * f.differing > f.compared) found_.lr = f;
}

void ResumeRule::JudgeData(int64_t step) {
  DataPositionFinding f;
  f.judged_step = step;
  for (const Pair& p : pairs_) {
    // A step handed over without some rank's STEP sums fewer ranks.
    if (p.before.ranks != p.after.ranks) continue;
    const bool samples = p.before.samples > 0 && p.after.samples > 0;
    const bool tokens = p.before.tokens > 0 && p.after.tokens > 0;
    if (!samples && !tokens) continue;
    ++f.compared;
    const bool differs = CountDiffers(p.before.samples, p.after.samples, options_.data_tolerance) ||
                         CountDiffers(p.before.tokens, p.after.tokens, options_.data_tolerance);
    if (!differs) continue;
    if (f.differing++ == 0) {
      f.step = p.after.step;
      f.samples_before = p.before.samples;
      f.samples_after = p.after.samples;
      f.tokens_before = p.before.tokens;
      f.tokens_after = p.after.tokens;
    }
  }
  if (f.compared > 0 && 2 * f.differing > f.compared) found_.data = f;
}

void ResumeRule::JudgeSpike() {
  std::vector<double> before, after, excess;
  ResumeSpikeFinding f;
  for (const Pair& p : pairs_) {
    if (!p.before.loss || !p.after.loss) continue;
    before.push_back(*p.before.loss);
    after.push_back(*p.after.loss);
    excess.push_back(*p.after.loss - *p.before.loss);
    if (f.peak_step < 0 || excess.back() > f.peak_excess) {
      f.peak_step = p.after.step;
      f.peak_excess = excess.back();
    }
    f.step = p.after.step;
  }
  if (excess.size() < kMinSpikeSteps) return;
  // The noise of one step's loss against another's: the changes from step
  // to step of the generation before (a trend moves them little; the
  // difference of two noisy losses is what `excess` is too).
  std::vector<double> changes;
  const StepSummary* last = nullptr;
  previous_->ForEach([&](const StepSummary& s) {
    if (!s.loss) return;
    if (last != nullptr && last->step == s.step - 1) changes.push_back(*s.loss - *last->loss);
    last = &s;
  });
  f.sigma = RobustSpreadOf(changes).sigma;
  f.threshold = std::max(options_.spike_floor, options_.spike_sigmas * f.sigma);
  f.compared = static_cast<uint32_t>(excess.size());
  f.excess = RobustSpreadOf(excess).median;
  if (!(f.excess > f.threshold)) return;
  f.generation = generation_;
  f.first_step = first_step_;
  f.resumed_step = first_step_ - 1;
  f.loss_before = RobustSpreadOf(before).median;
  f.loss_after = RobustSpreadOf(after).median;
  found_.spike = f;
}

ResumeFindings ResumeRule::Take() {
  ResumeFindings out = std::move(found_);
  found_ = ResumeFindings();
  return out;
}

}  // namespace trainsup
