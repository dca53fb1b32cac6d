#ifndef TRAINSUP_DAEMON_CORE_SIGNALS_THROUGHPUT_RULE_H_
#define TRAINSUP_DAEMON_CORE_SIGNALS_THROUGHPUT_RULE_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/time/time.h"
#include "daemon/core/job.h"
#include "daemon/core/signals/series.h"
#include "daemon/core/signals/signal_options.h"

namespace trainsup {

// A per-step time (the job's step time, a node's compute time) moved to
// another level and stayed there.
struct ThroughputFinding {
  // false: a step change (the level jumped where the change began); true: a
  // decay (it kept drifting after the change began).
  bool decay = false;
  int64_t onset_step = -1;  // where the change began
  int64_t step = -1;        // the last step judged
  double before_s = 0;      // the reference it moved from
  double after_s = 0;       // the median since the onset
  double ratio = 0;         // after / before: > 1 slower
  int64_t steps = 0;        // steps since the onset
  absl::Duration held;      // time since the onset
};

// A throughput finding as the job sees it (ThroughputSignalRule): the job's
// step time moved (`node` names the one node whose compute moved with it,
// if exactly one did), or one node's compute time moved while the others'
// did not.
struct ThroughputSignal {
  bool job = true;            // false: the node's own compute time
  NodeIndex node = kNoNode;   // the node named, if any
  ThroughputFinding finding;  // of the job's step time, or of the node's compute
  std::optional<ThroughputFinding> node_finding;  // the named node's, with a job's
  uint32_t nodes_moving = 0;  // nodes whose compute slowed with it
};

// The throughput rule on one series, for one generation: after `warmup`
// steps, the median of the next `baseline` is the reference, and the noise
// (1.4826 x MAD, relative) is measured with it. Each step then feeds a
// two-sided CUSUM of the relative deviation, each deviation clipped to 3 x
// `change` so that a few outliers (a GC pause, an evaluation step) cannot
// carry it:
//
//     S+ = max(0, S+ + d - change/2),   S- = max(0, S- - d - change/2)
//
// A side past `confirm` x change/2 has moved; its onset is the last step its
// sum was 0. The move is confirmed when, at least `confirm` steps and
// `confirm_time` after the onset, both the median of the steps since the
// onset and that of the last `confirm` steps are off the reference by at
// least max(change, 5 x the noise / sqrt(confirm)) (a noisy series must move
// further; a move that went away is not one). A slowdown is a finding: a
// decay when the trend of the steps since the onset (least squares), over
// their number, makes at least half of the move, else a step change. A
// speedup is taken without a finding. Either way the new level becomes the
// reference. Thread-compatible.
class ThroughputRule {
 public:
  explicit ThroughputRule(const ThroughputOptions& options);

  // The step's time (seconds > 0), heard at `time`, in step order.
  void Observe(int64_t step, absl::Time time, double seconds);
  // A confirmed slowdown, at most one per call.
  std::optional<ThroughputFinding> Check(absl::Time now);

  // +1 while a slowdown builds (its sum past half its threshold), -1 a
  // speedup, 0 neither.
  int Moving() const;
  // The last `confirm` steps' median over the generation's first reference;
  // nullopt before the reference.
  std::optional<double> Ratio() const;

 private:
  struct Side {
    double sum = 0;
    int64_t onset_step = -1;  // -1: the sum is 0
    absl::Time onset_time;
    int64_t count = 0;           // steps since the onset
    std::vector<double> first;   // the first `confirm` of them
  };
  void Update(Side& side, double deviation, int64_t step, absl::Time time, double seconds);
  // The move of `side` (+1 slower, -1 faster) if confirmed.
  std::optional<ThroughputFinding> Confirm(int direction, const Side& side, absl::Time now);
  void Rebase(double reference);

  const ThroughputOptions options_;
  int64_t seen_ = 0;
  double reference_ = 0;  // 0: not yet
  double first_reference_ = 0;
  double noise_ = 0;  // relative
  Side up_;
  Side down_;
  // The recent steps: the baseline first, then the level since an onset
  // (max(baseline, 2 x confirm) of them).
  Series recent_;
  mutable std::vector<double> scratch_;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_SIGNALS_THROUGHPUT_RULE_H_
