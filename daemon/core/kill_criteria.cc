#include "daemon/core/kill_criteria.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/core/job_stats.h"

namespace trainsup {
namespace {

constexpr KillCriterionKind kKinds[kKillCriterionKinds] = {
    KillCriterionKind::kLossAbove, KillCriterionKind::kReferenceCurve,
    KillCriterionKind::kLossSpikes};

bool Finite(double v) { return std::isfinite(v); }

// The curve's loss at `step`: linear between its points, its last loss after
// its last point; nullopt before its first.
std::optional<double> CurveAt(const std::vector<CurvePoint>& curve, int64_t step) {
  if (curve.empty() || step < curve.front().step) return std::nullopt;
  if (step >= curve.back().step) return curve.back().loss;
  auto hi = std::upper_bound(curve.begin(), curve.end(), step,
                             [](int64_t s, const CurvePoint& p) { return s < p.step; });
  auto lo = hi - 1;
  const double t = static_cast<double>(step - lo->step) / static_cast<double>(hi->step - lo->step);
  return lo->loss + t * (hi->loss - lo->loss);
}

}  // namespace

absl::string_view KillCriterionName(KillCriterionKind kind) {
  switch (kind) {
    case KillCriterionKind::kLossAbove:
      return "loss_above";
    case KillCriterionKind::kReferenceCurve:
      return "reference_curve";
    case KillCriterionKind::kLossSpikes:
      return "loss_spikes";
  }
  return "unknown";
}

absl::Status CheckKillCriteria(const KillCriteriaSpec& spec) {
  if (spec.loss_above && !Finite(*spec.loss_above)) {
    return absl::InvalidArgumentError("loss_above must be a finite number");
  }
  if (spec.at_step < 0) return absl::InvalidArgumentError("at_step must be >= 0");
  if (spec.curve.size() > kMaxCurvePoints) {
    return absl::InvalidArgumentError(
        absl::StrCat("a reference curve has at most ", kMaxCurvePoints, " points"));
  }
  for (size_t i = 0; i < spec.curve.size(); ++i) {
    const CurvePoint& p = spec.curve[i];
    if (p.step < 0 || !Finite(p.loss)) {
      return absl::InvalidArgumentError("a reference point needs a step >= 0 and a finite loss");
    }
    if (i > 0 && p.step <= spec.curve[i - 1].step) {
      return absl::InvalidArgumentError("the reference curve's steps must increase");
    }
    if (!spec.band_absolute && p.loss <= 0) {
      return absl::InvalidArgumentError("a relative band needs a curve whose losses are > 0");
    }
  }
  if (!Finite(spec.band) || spec.band <= 0 || (!spec.band_absolute && spec.band > kMaxRelativeBand)) {
    return absl::InvalidArgumentError(
        absl::StrCat("band must be > 0 (and at most ", kMaxRelativeBand, " when relative)"));
  }
  if (spec.spikes > kMaxSpikes) {
    return absl::InvalidArgumentError(absl::StrCat("spikes must be at most ", kMaxSpikes));
  }
  if (spec.total_steps && *spec.total_steps < 0) {
    return absl::InvalidArgumentError("total_steps must be >= 0");
  }
  return absl::OkStatus();
}

KillCriteria::KillCriteria(int window)
    : window_(std::max(1, window)), losses_(static_cast<size_t>(std::max(1, window))) {}

void KillCriteria::SetScript(const KillCriteriaSpec& spec) { script_ = spec; }

void KillCriteria::SetOperator(const std::optional<KillCriteriaSpec>& spec) { operator_ = spec; }

const KillCriteriaSpec* KillCriteria::spec() const {
  if (operator_) return &*operator_;
  if (script_) return &*script_;
  return nullptr;
}

absl::string_view KillCriteria::source() const {
  if (operator_) return "operator";
  if (script_) return "script";
  return "";
}

std::optional<double> KillCriteria::LimitAt(const KillCriteriaSpec& spec, KillCriterionKind kind,
                                            int64_t step) const {
  if (kind == KillCriterionKind::kLossAbove) {
    if (!spec.loss_above || step < spec.at_step) return std::nullopt;
    return *spec.loss_above;
  }
  std::optional<double> curve = CurveAt(spec.curve, step);
  if (!curve) return std::nullopt;
  return spec.band_absolute ? *curve + spec.band : *curve * (1 + spec.band);
}

void KillCriteria::TrackOnset(const KillCriteriaSpec& spec, int64_t step, double loss) {
  for (int i = 0; i < 2; ++i) {
    std::optional<double> limit = LimitAt(spec, kKinds[i], step);
    if (limit && loss > *limit) {
      if (onset_[i] < 0) onset_[i] = step;
    } else {
      onset_[i] = -1;
    }
  }
}

void KillCriteria::ObserveLoss(uint64_t generation, int64_t step, double loss) {
  if (generation != generation_) {
    generation_ = generation;
    losses_.Clear();
    onset_[0] = onset_[1] = -1;
  }
  losses_.Add(step, loss);
  new_steps_ = true;
  if (const KillCriteriaSpec* s = spec()) TrackOnset(*s, step, loss);
  // Recovered: the smoothed loss back at or under the first shift's threshold.
  if (!shifts_.empty() && losses_.full() &&
      losses_.Median(0, losses_.size(), &scratch_) <= recover_at_) {
    shifts_.clear();
  }
}

void KillCriteria::ObserveShift(int64_t step, int64_t onset_step, double recent_min,
                                double threshold) {
  if (shifts_.empty()) recover_at_ = threshold;
  if (shifts_.size() < kMaxSpikes) shifts_.push_back({onset_step, recent_min});
  shift_step_ = step;
  new_steps_ = true;
}

CriterionStatus KillCriteria::Judge(const KillCriteriaSpec& spec, KillCriterionKind kind) const {
  CriterionStatus out;
  out.kind = kind;
  if (kind == KillCriterionKind::kLossSpikes) {
    out.judged = true;
    out.spikes = static_cast<uint32_t>(shifts_.size());
    out.ratio = static_cast<double>(out.spikes) / spec.spikes;
    out.step = shift_step_;
    return out;
  }
  if (!losses_.full()) return out;
  scratch_.clear();
  std::vector<double> losses;
  losses.reserve(losses_.size());
  for (size_t i = 0; i < losses_.size(); ++i) {
    std::optional<double> limit = LimitAt(spec, kind, losses_.step(i));
    if (!limit || *limit <= 0) return out;  // a step of the window not judged: none is
    scratch_.push_back(losses_.value(i) / *limit);
    losses.push_back(losses_.value(i));
    out.limit = *limit;
  }
  out.judged = true;
  out.ratio = MedianInPlace(scratch_);
  out.loss = MedianInPlace(losses);
  out.step = losses_.back_step();
  return out;
}

std::optional<KillFiring> KillCriteria::Check() {
  const KillCriteriaSpec* s = spec();
  if (s == nullptr || fired_ || !new_steps_) return std::nullopt;
  new_steps_ = false;
  for (KillCriterionKind kind : kKinds) {
    if (kind == KillCriterionKind::kLossAbove && !s->loss_above) continue;
    if (kind == KillCriterionKind::kReferenceCurve && s->curve.empty()) continue;
    if (kind == KillCriterionKind::kLossSpikes && s->spikes == 0) continue;
    const CriterionStatus status = Judge(*s, kind);
    if (!status.judged) continue;
    const bool met = kind == KillCriterionKind::kLossSpikes ? status.spikes >= s->spikes
                                                            : status.ratio > 1;
    if (!met) continue;
    KillFiring f;
    f.kind = kind;
    f.generation = generation_;
    f.step = status.step;
    f.ratio = status.ratio;
    f.loss = status.loss;
    f.limit = status.limit;
    if (kind == KillCriterionKind::kLossSpikes) {
      f.shifts = shifts_;
      f.onset_step = shifts_.front().step;
    } else {
      f.window = window_;
      f.first_step = losses_.step(0);
      const int64_t onset = onset_[static_cast<int>(kind)];
      f.onset_step = onset >= 0 ? onset : f.first_step;
    }
    fired_ = true;
    return f;
  }
  return std::nullopt;
}

void KillCriteria::Rearm() {
  fired_ = false;
  shifts_.clear();
}

std::vector<CriterionStatus> KillCriteria::Status() const {
  std::vector<CriterionStatus> out;
  const KillCriteriaSpec* s = spec();
  if (s == nullptr) return out;
  if (s->loss_above) out.push_back(Judge(*s, KillCriterionKind::kLossAbove));
  if (!s->curve.empty()) out.push_back(Judge(*s, KillCriterionKind::kReferenceCurve));
  if (s->spikes > 0) out.push_back(Judge(*s, KillCriterionKind::kLossSpikes));
  return out;
}

std::optional<KillCriteriaView> ViewOf(const std::string& job, absl::string_view state,
                                       const KillCriteria& criteria) {
  const KillCriteriaSpec* spec = criteria.spec();
  if (spec == nullptr) return std::nullopt;
  KillCriteriaView view;
  view.job = job;
  view.state = std::string(state);
  view.source = std::string(criteria.source());
  view.spec = *spec;
  view.status = criteria.Status();
  view.fired = criteria.fired();
  return view;
}

std::string KillReason(KillCriterionKind kind, int64_t step) {
  return absl::StrCat("kill criterion ", KillCriterionName(kind), " met at step ", step);
}

bool IsKillReason(absl::string_view reason) {
  return absl::StartsWith(reason, "kill criterion ");
}

double GpuSecondsSaved(std::optional<int64_t> total_steps, int64_t step, double step_seconds,
                       uint32_t gpus) {
  if (!total_steps || *total_steps <= step || step_seconds <= 0 || gpus == 0) return 0;
  return static_cast<double>(*total_steps - step) * step_seconds * gpus;
}

}  // namespace trainsup
