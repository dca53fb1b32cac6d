#ifndef TRAINSUP_DAEMON_CORE_SIGNALS_SIGNAL_OPTIONS_H_
#define TRAINSUP_DAEMON_CORE_SIGNALS_SIGNAL_OPTIONS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace trainsup {

// What is done about a non-finite loss (or a gradient norm non-finite for
// too many steps in a row).
enum class NonFiniteAction : int {
  kOff = 0,      // not judged
  kReport = 1,   // an event only
  kRestart = 2,  // an event, and the generation is stopped everywhere and restarted
};

struct NonFiniteOptions {
  // Default: kRestart (the job cannot recover from a non-finite loss; every
  // step after it is wasted).
  NonFiniteAction action = NonFiniteAction::kRestart;
  // A non-finite gradient norm with a finite loss is an overflow step that
  // fp16 dynamic loss scaling skips; it is counted, and becomes non-finite
  // only when this many steps in a row have one. Default: 20 (torch's
  // GradScaler halves its scale on each overflow: from 2^16, 16 overflows in
  // a row take it to 1).
  int grad_steps = 20;
  // The first non-finite loss is reported this long after it was seen, so
  // that a rank at an earlier step whose report is still on its way is named
  // first. Default: 1s (--crash-settle's default, for the same reason).
  absl::Duration settle = absl::Seconds(1);
};

struct LossShiftOptions {
  bool enabled = true;
  // The loss (mean over ranks, per step) shifted when the minimum over the
  // last `window` steps is above the median of the `baseline` steps before
  // them + max(floor, sigmas x 1.4826 x their MAD). Defaults: 20, 128, 6,
  // 0.05 (docs/signals.md: OLMo-core and Levanter skip beyond 6 sigma of a
  // 128-step window; marin's alert is the 5-minute minimum above the
  // baseline + max(0.05, 6 sigma)).
  int window = 20;
  int baseline = 128;
  double sigmas = 6;
  double floor = 0.05;
};

struct LossFlatOptions {
  bool enabled = true;
  // A generation that starts near step 0 (below `steps`) is flat when the
  // mean loss of the last quarter of its first `steps` steps is not below the
  // mean of the first quarter by at least `min_drop` of it. Defaults: 200, 0.01.
  int steps = 200;
  double min_drop = 0.01;
};

struct GradNormOptions {
  // The baseline: the median of the last `baseline` gradient norms (finite,
  // not themselves a spike or a collapse). Default: 128.
  int baseline = 128;
  // A spike: a gradient norm above `spike_factor` x the baseline. Default: 10.
  bool spike = true;
  double spike_factor = 10;
  // A collapse: `collapse_steps` steps in a row at or below `collapse_ratio`
  // x the baseline (or exactly 0). Defaults: 1e-3, 20.
  bool collapse = true;
  double collapse_ratio = 1e-3;
  int collapse_steps = 20;
};

struct ThroughputOptions {
  bool enabled = true;
  // A change of at least `change` (a fraction) of the job's step time, or of
  // one node's compute time, against the generation's reference, found by a
  // two-sided CUSUM and confirmed when the median since the change began
  // holds it for at least `confirm` steps and `confirm_time`. The reference
  // is the median of the `baseline` steps after the first `warmup` ones.
  // Defaults: 0.1, 20, 1m, 20, 50.
  double change = 0.1;
  int confirm = 20;
  absl::Duration confirm_time = absl::Minutes(1);
  int warmup = 20;
  int baseline = 50;
};

struct MemoryGrowthOptions {
  bool enabled = true;
  // Memory (device, and host RSS: the largest rank's, per step) grows when,
  // over the last `steps` steps (after the generation's first `warmup`), each
  // quarter's median is above the previous one and the last quarter's is at
  // least `min_bytes` above the first's. Defaults: 200, 50, 64 MiB.
  int steps = 200;
  int warmup = 50;
  double min_bytes = 64.0 * 1024 * 1024;
};

struct ReplicaOptions {
  bool enabled = true;
  // After a mismatch on a node, the next one on that node is an event (and a
  // failure charged to it) only this many steps later. Default: 100.
  int rearm_steps = 100;
};

struct CheckpointOverdueOptions {
  bool enabled = true;
  // Overdue: the job trained more than `factor` x the planned interval (in
  // steps, of the plan in force) past its last committed checkpoint, the
  // step it resumed from or the plan's first step, whichever is latest.
  // Default: 2.
  double factor = 2;
};

struct ResumeOptions {
  // Each check's switch: the step resumed from against the last checkpoint
  // seen complete (resumed_behind), the learning rate (lr_mismatch), the
  // samples and tokens per step (data_position_mismatch), the loss
  // (resume_spike).
  bool behind = true;
  bool lr = true;
  bool data = true;
  bool spike = true;
  // The first `steps` steps of a generation are compared with the same
  // steps of the generation before (those it kept). Default: 8 (a spike
  // check needs a median over several; the report comes that many steps
  // after the resume).
  int steps = 8;
  // lr_mismatch: most compared steps' learning rates differ by more than
  // this fraction of the one before. Default: 1e-3 (a schedule is
  // deterministic: a restored one gives the same value to the bit; one that
  // started over is off by far more).
  double lr_tolerance = 1e-3;
  // data_position_mismatch: most compared steps' samples or tokens (summed
  // over the ranks) differ by more than this fraction. Default: 0 (the same
  // step over the same data reads the same counts).
  double data_tolerance = 0;
  // resume_spike: the median over the compared steps of (loss after - loss
  // before) is above max(floor, sigmas x 1.4826 x the MAD of the generation
  // before's step-to-step loss changes). Defaults: 6, 0.05 (the loss shift
  // rule's).
  double spike_sigmas = 6;
  double spike_floor = 0.05;
};

// What is done about a loss level shift (LossShiftRule).
enum class LossSpikeAction : int {
  kReport = 0,    // an event only
  kRollback = 1,  // restart from the newest checkpoint before it, skipping its batches
};

// Falling back from a checkpoint that fails every time it is loaded, and
// rolling back from a loss spike (checkpoint_fallback.h; docs/recovery.md,
// "Bad checkpoints and spike rollback").
struct FallbackOptions {
  // A non-finite loss (or a resume spike) within this many steps after a
  // generation loaded a checkpoint counts against that checkpoint. Default:
  // 20 (Megatron-LM#5281's came 3 steps after every load).
  int load_steps = 20;
  // Checkpoints a job may fall back from; the next suspect holds the job.
  // Default: 2.
  int max_rollbacks = 2;
  // Default: kReport.
  LossSpikeAction on_loss_spike = LossSpikeAction::kReport;
  // Spike rollback: the batches of up to this many steps before the spike's
  // onset are skipped with it. Default: 100 (PaLM went back about 100 steps).
  int spike_skip_steps = 100;
  // Spike rollbacks in a row (no checkpoint completed past the last skipped
  // range in between) before the next spike holds the job instead.
  // Default: 2 (llm-foundry's KillLossSpike stops without retry).
  int max_spike_rollbacks = 2;
};

// Every signal rule's options (docs/signals.md). trainsupd's flags set the
// defaults; a job's script may override them for its job (START's
// signal_settings), by the names of SignalSettings().
struct SignalOptions {
  NonFiniteOptions non_finite;
  LossShiftOptions loss_shift;
  LossFlatOptions loss_flat;
  GradNormOptions grad;
  ThroughputOptions throughput;
  MemoryGrowthOptions memory;
  ReplicaOptions replica;
  CheckpointOverdueOptions checkpoint;
  ResumeOptions resume;
  FallbackOptions fallback;
};

// One setting a script (or trainsupd's flags) may change: its name, its
// allowed range, and where it lives in SignalOptions.
struct SignalSetting {
  const char* name;  // e.g. "loss_shift_window"; the flag is --loss-shift-window
  double min;
  double max;
  bool integer;      // whole numbers only
  bool rule_switch;  // a rule's on (1) / off (0) switch: --signals-off names it
  const char* help;
  double (*get)(const SignalOptions&);
  void (*set)(SignalOptions&, double);
};

// Every setting, in the order docs/signals.md lists them. The rule
// switches' names are the rules' names ("loss_shift", "throughput", ...).
const std::vector<SignalSetting>& SignalSettings();
// The setting called `name`; nullptr when there is none.
const SignalSetting* FindSignalSetting(absl::string_view name);
// Whether `value` is one `setting` takes (finite, in range, whole if it must be).
bool SettingAllows(const SignalSetting& setting, double value);

// A job's script may send at most this many settings, names of at most
// kMaxSignalSettingName bytes.
constexpr size_t kMaxSignalSettings = 32;
constexpr size_t kMaxSignalSettingName = 64;

// `defaults` with `settings` applied in order. InvalidArgument, naming the
// first bad one, when a name is unknown or a value out of its range.
absl::Status ApplySignalSettings(const std::vector<std::pair<std::string, double>>& settings,
                                 SignalOptions* options);

// Turns off the rules named in `names` (comma-separated switch names, e.g.
// "loss_flat,throughput"). InvalidArgument for a name that is not a rule.
absl::Status TurnOffRules(absl::string_view names, SignalOptions* options);

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_SIGNALS_SIGNAL_OPTIONS_H_
