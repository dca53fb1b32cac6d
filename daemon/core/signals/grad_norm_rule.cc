#include "daemon/core/signals/grad_norm_rule.h"

#include <algorithm>
#include <utility>

namespace trainsup {
namespace {

// The baseline's median moves slowly: recomputed every this many steps.
constexpr int64_t kMedianEvery = 16;

}  // namespace

double GradNormRule::Baseline(int64_t step) {
  if (median_step_ < 0 || step - median_step_ >= kMedianEvery) {
    median_ = norms_.Median(0, norms_.size(), &scratch_);
    median_step_ = step;
  }
  return median_;
}

void GradNormRule::Observe(int64_t step, double grad_norm, RankAt at) {
  const bool judged = norms_.size() >= std::max<size_t>(1, norms_.capacity() / 2);
  const double base = judged ? Baseline(step) : 0;
  const bool spike = judged && base > 0 && grad_norm > options_.spike_factor * base;
  const bool collapsed =
      grad_norm == 0 || (judged && grad_norm <= options_.collapse_ratio * base);

  GradNormFinding f;
  f.step = f.first_step = step;
  f.grad_norm = grad_norm;
  f.baseline_median = base;
  f.ratio = base > 0 ? grad_norm / base : 0;
  f.at = at;
  if (spike) {
    normal_run_ = 0;
    if (options_.spike && spike_armed_) {
      spike_armed_ = false;
      found_.push_back(f);
    }
  }
  if (collapsed) {
    if (collapse_run_++ == 0) collapse_first_ = step;
    if (options_.collapse && !collapse_reported_ && collapse_run_ >= options_.collapse_steps) {
      collapse_reported_ = true;
      f.collapse = true;
      f.first_step = collapse_first_;
      f.steps = collapse_run_;
      found_.push_back(f);
      // What comes next is measured against itself.
      norms_.Clear();
      median_step_ = -1;
    }
  } else {
    collapse_run_ = 0;
    collapse_reported_ = false;
  }
  if (!spike && !collapsed) {
    norms_.Add(step, grad_norm);
    if (++normal_run_ >= kRearmSteps) spike_armed_ = true;
  }
}

std::vector<GradNormFinding> GradNormRule::Take() {
  std::vector<GradNormFinding> out;
  out.swap(found_);
  return out;
}

}  // namespace trainsup
