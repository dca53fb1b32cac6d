#ifndef TRAINSUP_DAEMON_CORE_KILL_CRITERIA_H_
#define TRAINSUP_DAEMON_CORE_KILL_CRITERIA_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "daemon/core/kill_criteria_spec.h"
#include "daemon/core/signals/series.h"

namespace trainsup {

// When a run has clearly lost (docs/kill-criteria.md): criteria a job's
// script (hb.kill_if, hb.reference_curve) or an operator (`trainsupctl
// kill-criteria`) sets, judged on the signal rules' per-step mean loss of the
// job's current generation, smoothed: the median over the last `window`
// steps (--loss-shift-window's steps), never one noisy step.
enum class KillCriterionKind : int {
  kLossAbove = 0,       // the loss above a limit from a step on
  kReferenceCurve = 1,  // the loss above a good run's curve + its band
  kLossSpikes = 2,      // loss level shifts in a row with no recovery
};
constexpr int kKillCriterionKinds = 3;
// "loss_above", "reference_curve", "loss_spikes".
absl::string_view KillCriterionName(KillCriterionKind kind);

// Bounds on what a script or an operator may set.
constexpr size_t kMaxCurvePoints = 256;
constexpr double kMaxRelativeBand = 100;
constexpr uint32_t kMaxSpikes = 1000;
// InvalidArgument naming what is wrong: a non-finite loss or band, a
// negative step, curve steps not increasing, more than kMaxCurvePoints, a
// band <= 0 (or above kMaxRelativeBand when relative), a relative band on a
// curve with a loss <= 0, spikes above kMaxSpikes, total_steps < 0.
absl::Status CheckKillCriteria(const KillCriteriaSpec& spec);

// How close one criterion is to firing, for listing and the metric.
struct CriterionStatus {
  KillCriterionKind kind = KillCriterionKind::kLossAbove;
  bool judged = false;  // there were enough steps to judge it
  // loss_above, reference_curve: the median of loss / limit over the
  // window (fires above 1), the median loss, the limit at the newest step.
  // loss_spikes: shifts in a row / the criterion's count (fires at 1).
  double ratio = 0;
  double loss = 0;
  double limit = 0;
  int64_t step = -1;  // the newest step judged
  uint32_t spikes = 0;  // loss_spikes: shifts in a row so far
};

// What a fired criterion says.
struct KillFiring {
  KillCriterionKind kind = KillCriterionKind::kLossAbove;
  uint64_t generation = 0;
  int64_t step = -1;        // the step at which it fired
  int64_t onset_step = -1;  // the first step of the run it has been true since
  int64_t first_step = -1;  // the window's oldest step
  int window = 0;           // steps in the window
  double loss = 0;          // the smoothed loss
  double limit = 0;         // the limit at `step`
  double ratio = 0;         // the smoothed loss / limit
  // loss_spikes: the shifts (their onset steps and the least loss after each).
  std::vector<CurvePoint> shifts;
};

// A job's kill criteria and their state. Fed the generation's per-step mean
// loss in step order and the loss-shift rule's findings; a criterion fires
// once, and no more until Rearm(). Thread-compatible; no I/O, no clock.
class KillCriteria {
 public:
  // `window`: the steps the loss is smoothed over. REQUIRES: window >= 1.
  explicit KillCriteria(int window);
  KillCriteria(const KillCriteria&) = delete;
  KillCriteria& operator=(const KillCriteria&) = delete;

  // The criteria the script set (replaces the script's last); the
  // operator's (nullopt: cleared). The operator's, when set, are in force
  // instead of the script's. REQUIRES: CheckKillCriteria(spec) is ok.
  void SetScript(const KillCriteriaSpec& spec);
  void SetOperator(const std::optional<KillCriteriaSpec>& spec);
  const std::optional<KillCriteriaSpec>& script() const { return script_; }
  const std::optional<KillCriteriaSpec>& operator_spec() const { return operator_; }
  // The criteria in force; nullptr when none.
  const KillCriteriaSpec* spec() const;
  // Where the criteria in force came from: "operator", "script" or "".
  absl::string_view source() const;

  // The step's mean loss (finite) of `generation`, steps increasing within
  // it. A new generation starts the window over (a resume is never judged on
  // the steps of the generation before).
  void ObserveLoss(uint64_t generation, int64_t step, double loss);
  // A loss level shift the loss-shift rule found at `step` (its onset step,
  // the least loss after it, its threshold).
  void ObserveShift(int64_t step, int64_t onset_step, double recent_min, double threshold);
  // The first criterion met since the last call that has not fired yet.
  // Judged only on new steps, with a full window of the generation's own.
  std::optional<KillFiring> Check();
  // The generation observed last, and its last step (-1: none).
  uint64_t generation() const { return generation_; }
  int64_t last_step() const { return losses_.size() > 0 ? losses_.back_step() : -1; }
  // Whether a criterion fired (and was not rearmed).
  bool fired() const { return fired_; }
  // After an operator's resume: the criteria may fire again.
  void Rearm();

  // How close each criterion in force is to firing, in kind order.
  std::vector<CriterionStatus> Status() const;

 private:
  // The limit at `step` of criterion `kind`; nullopt: not judged there.
  std::optional<double> LimitAt(const KillCriteriaSpec& spec, KillCriterionKind kind,
                                int64_t step) const;
  CriterionStatus Judge(const KillCriteriaSpec& spec, KillCriterionKind kind) const;
  void TrackOnset(const KillCriteriaSpec& spec, int64_t step, double loss);

  const int window_;
  std::optional<KillCriteriaSpec> script_;
  std::optional<KillCriteriaSpec> operator_;
  uint64_t generation_ = 0;
  Series losses_;
  bool new_steps_ = false;
  bool fired_ = false;
  // The first step of the current run of steps above each limit (-1: none).
  int64_t onset_[2] = {-1, -1};
  // Loss shifts in a row with no recovery, and the first one's threshold.
  std::vector<CurvePoint> shifts_;
  double recover_at_ = 0;
  int64_t shift_step_ = -1;  // the step the last shift was found at
  mutable std::vector<double> scratch_;
};

// One job's kill criteria as `trainsupctl kill-criteria list` shows them.
struct KillCriteriaView {
  std::string job;
  std::string state;   // the job's lifecycle state (JobStateName)
  std::string source;  // "script" or "operator"
  KillCriteriaSpec spec;
  std::vector<CriterionStatus> status;  // KillCriteria::Status()
  bool fired = false;
};
// `job`'s view, as of its criteria in force; nullopt when none is.
std::optional<KillCriteriaView> ViewOf(const std::string& job, absl::string_view state,
                                       const KillCriteria& criteria);

// The reason a job is stopped (and killed) for criterion `kind` met at
// `step`; IsKillReason tells such a reason from any other.
std::string KillReason(KillCriterionKind kind, int64_t step);
bool IsKillReason(absl::string_view reason);

// The GPU-seconds a kill at `step` saves: the steps left of `total_steps`
// at `step_seconds` each, on `gpus` ranks. 0 when any is unknown.
double GpuSecondsSaved(std::optional<int64_t> total_steps, int64_t step, double step_seconds,
                       uint32_t gpus);

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_KILL_CRITERIA_H_
