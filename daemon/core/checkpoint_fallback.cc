#include "daemon/core/checkpoint_fallback.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace trainsup {
namespace {

// "step 30", or "none seen: a fresh start".
std::string ResumeAtText(const std::optional<int64_t>& at) {
  return at ? absl::StrCat("step ", *at) : std::string("none seen: a fresh start");
}

// What a failure was, for people: "a non-finite loss at step 42".
std::string FailureWhat(LoadFailureKind kind, int64_t step) {
  switch (kind) {
    case LoadFailureKind::kNonFinite:
      return absl::StrCat("a non-finite loss at step ", step);
    case LoadFailureKind::kResumeSpike:
      return absl::StrCat("a resume spike at step ", step);
    case LoadFailureKind::kCrash:
      break;
  }
  return absl::StrCat("a rank failing at step ", step);
}

}  // namespace

std::string CheckpointName(int64_t step) {
  return step <= 0 ? std::string("a fresh start") : absl::StrCat("checkpoint step ", step);
}

std::string ResumeAdviceText(const CheckpointFallback& fallback) {
  const ResumeAdvice& advice = fallback.advice();
  std::string text;
  if (advice.limit) {
    text = absl::StrCat("the next generation loads the newest checkpoint at or below step ",
                        *advice.limit, " (",
                        ResumeAtText(fallback.NewestAtOrBelow(*advice.limit)), ")");
  }
  if (advice.skip_first && advice.skip_last) {
    absl::StrAppend(&text, text.empty() ? "the next generation skips" : ", skipping",
                    " the batches of steps ", *advice.skip_first, " to ", *advice.skip_last);
  }
  return text;
}

bool CheckpointFallback::OnStep(uint64_t generation, int64_t step) {
  if (generation != state_.generation) {
    state_.generation = generation;
    state_.first_step = step;
    committed_.clear();
    limit_at_start_ = state_.advice.limit;
    return true;
  }
  if (state_.first_step >= 0 && step >= state_.first_step) return false;
  state_.first_step = step;
  return true;
}

bool CheckpointFallback::OnCheckpoint(uint64_t generation, int64_t step) {
  bool changed = false;
  std::vector<int64_t>& seen = state_.checkpoints;
  auto it = std::lower_bound(seen.begin(), seen.end(), step);
  if (it == seen.end() || *it != step) {
    seen.insert(it, step);
    if (seen.size() > kMaxCheckpoints) seen.erase(seen.begin());
    changed = true;
  }
  // Every rank ends the same checkpoint: the latest is the common repeat.
  if (generation == state_.generation && (committed_.empty() || committed_.back() != step) &&
      std::find(committed_.begin(), committed_.end(), step) == committed_.end()) {
    committed_.push_back(step);
    if (committed_.size() > kMaxCheckpoints) committed_.erase(committed_.begin());
  }
  // Committed while its generation stops for a NaN it may hold.
  if (generation == cut_generation_ && cut_step_ >= 0 && step >= cut_step_ && AddSuspect(step)) {
    changed = true;
  }
  // A generation that followed the advice has saved past it: the job is
  // beyond what the advice was about.
  if (generation <= state_.advice_generation) return changed;
  ResumeAdvice& advice = state_.advice;
  if (advice.limit && step > *advice.limit) {
    advice.limit.reset();
    changed = true;
  }
  if (advice.skip_last && step > *advice.skip_last) {
    advice.skip_first.reset();
    advice.skip_last.reset();
    state_.spike_rollbacks = 0;
    changed = true;
  }
  return changed;
}

std::optional<int64_t> CheckpointFallback::resumed_from() const {
  if (state_.first_step < 0) return std::nullopt;
  return state_.first_step - 1;
}

std::optional<int64_t> CheckpointFallback::NewestAtOrBelow(int64_t step) const {
  const std::vector<int64_t>& seen = state_.checkpoints;
  auto it = std::upper_bound(seen.begin(), seen.end(), step);
  if (it == seen.begin()) return std::nullopt;
  return *std::prev(it);
}

void CheckpointFallback::Advise(uint64_t generation, ResumeAdvice advice) {
  state_.advice = std::move(advice);
  state_.advice_generation = generation;
}

bool CheckpointFallback::AddSuspect(int64_t step) {
  std::vector<int64_t>& suspects = state_.suspects;
  if (std::find(suspects.begin(), suspects.end(), step) != suspects.end()) return false;
  suspects.push_back(step);
  if (suspects.size() > kMaxCheckpoints) suspects.erase(suspects.begin());
  return true;
}

FallbackDecision CheckpointFallback::OnLoadFailure(uint64_t generation, int64_t step,
                                                   LoadFailureKind kind,
                                                   const FallbackOptions& options) {
  FallbackDecision d;
  const std::optional<int64_t> loaded = resumed_from();
  if (generation != state_.generation || !loaded) return d;
  const bool seen_zero = NewestAtOrBelow(0) == 0;
  if (*loaded < 0 || (*loaded == 0 && !seen_zero)) return d;  // a fresh start
  if (step - *loaded > options.load_steps) return d;
  const std::string what = FailureWhat(kind, step);
  const std::optional<LoadFailure> last = state_.last_load_failure;
  state_.last_load_failure = LoadFailure{generation, *loaded};
  d.checkpoint = *loaded;
  d.rollbacks = state_.rollbacks;
  d.cap = options.max_rollbacks;
  const std::string name = CheckpointName(*loaded);
  if (!last || last->generation + 1 != generation || last->checkpoint != *loaded) {
    d.kind = FallbackDecision::Kind::kRetry;
    d.reason = absl::StrCat(what, ", ", step - *loaded, " steps after generation ", generation,
                            " loaded ", name, " (the same in the next generation makes it "
                            "suspect)");
    return d;
  }
  AddSuspect(*loaded);
  const std::string found =
      absl::StrCat(what, ", ", step - *loaded, " steps after loading ", name, ", in generations ",
                   last->generation, " and ", generation, ": the checkpoint is suspect");
  if (state_.rollbacks >= options.max_rollbacks) {
    d.kind = FallbackDecision::Kind::kHold;
    d.reason = absl::StrCat(found, "; the job fell back ", state_.rollbacks,
                            " time(s) already (at most ", options.max_rollbacks,
                            "): held, fix or remove ", name);
    return d;
  }
  d.kind = FallbackDecision::Kind::kFallBack;
  d.rollbacks = ++state_.rollbacks;
  ResumeAdvice advice = state_.advice;
  advice.limit = *loaded - 1;
  d.advice = advice;
  d.resume_at = NewestAtOrBelow(*loaded - 1);
  Advise(generation, std::move(advice));
  d.reason = absl::StrCat(found, "; the next generation loads the newest checkpoint at or below "
                          "step ", *loaded - 1, " (", ResumeAtText(d.resume_at), "), fallback ",
                          d.rollbacks, " of at most ", options.max_rollbacks);
  return d;
}

FallbackDecision CheckpointFallback::OnNonFinite(uint64_t generation, int64_t step) {
  FallbackDecision d;
  if (generation != state_.generation || step < 0) return d;
  cut_generation_ = generation;
  cut_step_ = step;
  d.kind = FallbackDecision::Kind::kCut;
  d.non_finite_step = step;
  d.rollbacks = state_.rollbacks;
  for (int64_t c : committed_) {
    if (c < step) continue;
    d.poisoned.push_back(c);
    AddSuspect(c);
  }
  std::sort(d.poisoned.begin(), d.poisoned.end());
  if (!d.poisoned.empty()) d.checkpoint = d.poisoned.front();
  ResumeAdvice advice = state_.advice;
  advice.limit = advice.limit ? std::min(*advice.limit, step - 1) : step - 1;
  d.advice = advice;
  d.resume_at = NewestAtOrBelow(*advice.limit);
  Advise(generation, std::move(advice));
  std::string committed;
  for (int64_t c : d.poisoned) {
    absl::StrAppend(&committed, committed.empty() ? "" : ", ", c);
  }
  d.reason = absl::StrCat(
      "a non-finite loss at step ", step, " in generation ", generation, ": ",
      d.poisoned.empty()
          ? std::string("a checkpoint committed from that step on may hold it")
          : absl::StrCat("checkpoint step", d.poisoned.size() > 1 ? "s " : " ", committed,
                         d.poisoned.size() > 1 ? " were" : " was",
                         " committed after it and may hold it"),
      "; the next generation loads the newest checkpoint at or below step ", *d.advice.limit,
      " (", ResumeAtText(d.resume_at), ")");
  return d;
}

FallbackDecision CheckpointFallback::OnLossSpike(uint64_t generation, int64_t onset_step,
                                                 int64_t step, const FallbackOptions& options) {
  FallbackDecision d;
  d.rollbacks = state_.spike_rollbacks;
  d.cap = options.max_spike_rollbacks;
  const std::string what = absl::StrCat("the loss shifted up from step ", onset_step,
                                        " (found at step ", step, ")");
  if (state_.spike_rollbacks >= options.max_spike_rollbacks) {
    d.kind = FallbackDecision::Kind::kHold;
    d.reason = absl::StrCat(what, " after ", state_.spike_rollbacks,
                            " spike rollback(s) in a row (at most ", options.max_spike_rollbacks,
                            "): held, not retried");
    return d;
  }
  const std::optional<int64_t> target = NewestAtOrBelow(onset_step - 1);
  if (!target) {
    d.reason = absl::StrCat(what, "; no checkpoint before it was seen: not rolled back");
    return d;
  }
  d.kind = FallbackDecision::Kind::kRollBack;
  d.checkpoint = *target;
  d.resume_at = target;
  d.rollbacks = ++state_.spike_rollbacks;
  ResumeAdvice advice;
  advice.limit = onset_step - 1;
  if (state_.advice.limit) advice.limit = std::min(*advice.limit, *state_.advice.limit);
  advice.skip_first = std::max(*target + 1, onset_step - options.spike_skip_steps);
  advice.skip_last = step;
  d.advice = advice;
  Advise(generation, std::move(advice));
  d.reason = absl::StrCat(what, ": restarted from checkpoint step ", *target,
                          ", skipping the batches of steps ", *d.advice.skip_first, " to ", step,
                          " (spike rollback ", d.rollbacks, " in a row, at most ",
                          options.max_spike_rollbacks, ")");
  return d;
}

}  // namespace trainsup
