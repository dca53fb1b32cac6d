#ifndef TRAINSUP_DAEMON_CORE_KILL_CRITERIA_SPEC_H_
#define TRAINSUP_DAEMON_CORE_KILL_CRITERIA_SPEC_H_

// A job's kill criteria as set (docs/kill-criteria.md): plain values, so
// the wire's mirror (heartbeat.h) and the journal carry them without the
// rule that judges them (kill_criteria.h: KillCriteria, CheckKillCriteria).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace trainsup {

struct CurvePoint {
  int64_t step = 0;
  double loss = 0;
};

// A job's criteria, as set.
struct KillCriteriaSpec {
  // Fires when the smoothed loss is above `loss_above` over steps at or
  // after `at_step` (every step of the window at or after it).
  std::optional<double> loss_above;
  int64_t at_step = 0;
  // Loss vs step of an earlier good run (steps increasing), linear between
  // points, its last loss held after its last step; steps before its first
  // are not judged. Fires when the smoothed ratio loss / (curve + band) is
  // above 1. `band`: relative (a fraction of the curve: 0.1 = 10 % above
  // it) unless `band_absolute` (loss units). Default band: 0.1 relative.
  std::vector<CurvePoint> curve;
  double band = 0.1;
  bool band_absolute = false;
  // Fires after this many loss level shifts (the loss-shift rule's
  // findings) in a row with no recovery: the smoothed loss never back at or
  // under the first one's threshold. 0: off. Default: 5 (llm-foundry stops
  // after 5 consecutive loss outliers).
  uint32_t spikes = 5;
  // The job's total steps, when the script told them: the GPU-time a kill
  // saves is counted against the steps left.
  std::optional<int64_t> total_steps;
  // Report (an event with observe_only) instead of stopping the job.
  bool observe_only = false;

  bool operator==(const KillCriteriaSpec& o) const {
    if (curve.size() != o.curve.size()) return false;
    for (size_t i = 0; i < curve.size(); ++i) {
      if (curve[i].step != o.curve[i].step || curve[i].loss != o.curve[i].loss) return false;
    }
    return loss_above == o.loss_above && at_step == o.at_step && band == o.band &&
           band_absolute == o.band_absolute && spikes == o.spikes &&
           total_steps == o.total_steps && observe_only == o.observe_only;
  }
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_KILL_CRITERIA_SPEC_H_
