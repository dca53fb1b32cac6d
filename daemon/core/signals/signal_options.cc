#include "daemon/core/signals/signal_options.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace trainsup {
namespace {

// A rule's switch: 1 on, 0 off.
#define TRAINSUP_SWITCH(name, field, help)                                          \
  SignalSetting {                                                                   \
    name, 0, 1, true, true, help,                                                   \
        [](const SignalOptions& o) -> double { return o.field ? 1 : 0; },           \
        [](SignalOptions& o, double v) { o.field = v != 0; }                        \
  }
// A number; `integer` ones are kept as int.
#define TRAINSUP_NUMBER(name, min, max, integer, field, help)                      \
  SignalSetting {                                                                   \
    name, min, max, integer, false, help,                                           \
        [](const SignalOptions& o) -> double { return static_cast<double>(o.field); }, \
        [](SignalOptions& o, double v) { o.field = static_cast<decltype(o.field)>(v); } \
  }
// A duration in seconds.
#define TRAINSUP_SECONDS(name, min, max, field, help)                               \
  SignalSetting {                                                                   \
    name, min, max, false, false, help,                                             \
        [](const SignalOptions& o) -> double { return absl::ToDoubleSeconds(o.field); }, \
        [](SignalOptions& o, double v) { o.field = absl::Seconds(v); }              \
  }

// Windows are bounded so that a script cannot make its job's rules hold
// unbounded memory: at most kMaxWindow values per series.
constexpr double kMaxWindow = 10000;

const std::vector<SignalSetting>* const kSettings = new std::vector<SignalSetting>{
    SignalSetting{
        "non_finite", 0, 2, true, true,
        "a NaN/Inf loss: 0 off, 1 report (an event), 2 report and restart the generation from "
        "its last checkpoint",
        [](const SignalOptions& o) -> double { return static_cast<double>(o.non_finite.action); },
        [](SignalOptions& o, double v) {
          o.non_finite.action = static_cast<NonFiniteAction>(static_cast<int>(v));
        }},
    TRAINSUP_NUMBER("grad_nonfinite_steps", 1, 1e6, true, non_finite.grad_steps,
                    "steps in a row with a non-finite gradient norm (a finite loss) that make it "
                    "non-finite; fewer are fp16 overflow steps, counted only"),
    TRAINSUP_SWITCH("loss_shift", loss_shift.enabled, "the loss level shift rule"),
    TRAINSUP_NUMBER("loss_shift_window", 2, kMaxWindow, true, loss_shift.window,
                    "steps whose minimum loss must stay above the threshold"),
    TRAINSUP_NUMBER("loss_shift_baseline", 8, kMaxWindow, true, loss_shift.baseline,
                    "steps before that window whose median and MAD make the threshold"),
    TRAINSUP_NUMBER("loss_shift_sigmas", 1, 1000, false, loss_shift.sigmas,
                    "threshold: baseline median + max(floor, sigmas x 1.4826 x MAD)"),
    TRAINSUP_NUMBER("loss_shift_floor", 0, 1e12, false, loss_shift.floor,
                    "the least rise of the loss that counts, in the loss's own units"),
    TRAINSUP_SWITCH("loss_flat", loss_flat.enabled, "the flat loss rule"),
    TRAINSUP_NUMBER("loss_flat_steps", 8, kMaxWindow, true, loss_flat.steps,
                    "the first steps of a fresh generation judged for a flat loss"),
    TRAINSUP_NUMBER("loss_flat_drop", 0, 1, false, loss_flat.min_drop,
                    "the least relative drop of the loss over them (last quarter vs first)"),
    TRAINSUP_NUMBER("grad_baseline", 8, kMaxWindow, true, grad.baseline,
                    "gradient norms whose median is the baseline"),
    TRAINSUP_SWITCH("grad_spike", grad.spike, "the gradient norm spike rule"),
    TRAINSUP_NUMBER("grad_spike_factor", 1.5, 1e9, false, grad.spike_factor,
                    "a gradient norm above this x the baseline is a spike"),
    TRAINSUP_SWITCH("grad_collapse", grad.collapse, "the gradient norm collapse rule"),
    TRAINSUP_NUMBER("grad_collapse_ratio", 0, 1, false, grad.collapse_ratio,
                    "a gradient norm at or below this x the baseline is collapsed"),
    TRAINSUP_NUMBER("grad_collapse_steps", 1, kMaxWindow, true, grad.collapse_steps,
                    "collapsed steps in a row that make a collapse"),
    TRAINSUP_SWITCH("throughput", throughput.enabled, "the throughput change and decay rules"),
    TRAINSUP_NUMBER("throughput_change", 0.01, 10, false, throughput.change,
                    "the least change of step (or node compute) time that counts, a fraction"),
    TRAINSUP_NUMBER("throughput_confirm", 2, kMaxWindow, true, throughput.confirm,
                    "steps a change must hold before it is reported"),
    TRAINSUP_SECONDS("throughput_confirm_seconds", 0, 1e6, throughput.confirm_time,
                     "seconds a change must hold too before it is reported"),
    TRAINSUP_NUMBER("throughput_warmup", 0, kMaxWindow, true, throughput.warmup,
                    "a generation's first steps left out (start-up, compilation, caches)"),
    TRAINSUP_NUMBER("throughput_baseline", 4, kMaxWindow, true, throughput.baseline,
                    "steps after those whose median is the reference"),
    TRAINSUP_SWITCH("memory_growth", memory.enabled, "the memory growth rule"),
    TRAINSUP_NUMBER("memory_growth_steps", 8, kMaxWindow, true, memory.steps,
                    "steps over which memory must rise in every quarter"),
    TRAINSUP_NUMBER("memory_growth_warmup", 0, kMaxWindow, true, memory.warmup,
                    "a generation's first steps left out (allocator caches filling)"),
    TRAINSUP_NUMBER("memory_growth_min_bytes", 0, 1e18, false, memory.min_bytes,
                    "the least rise (last quarter's median over the first's) that counts"),
    TRAINSUP_SWITCH("replica_mismatch", replica.enabled, "the replica disagreement rule"),
    TRAINSUP_NUMBER("replica_rearm_steps", 1, 1e9, true, replica.rearm_steps,
                    "steps after a mismatch on a node before the next one there counts again"),
    TRAINSUP_SWITCH("checkpoint_overdue", checkpoint.enabled,
                    "the checkpoint overdue rule (a failed save is always reported)"),
    TRAINSUP_NUMBER("checkpoint_overdue_factor", 1, 1000, false, checkpoint.factor,
                    "overdue past this x the planned interval without a committed checkpoint"),
    TRAINSUP_SWITCH("resumed_behind", resume.behind,
                    "a resume from before the last checkpoint seen complete"),
    TRAINSUP_SWITCH("lr_mismatch", resume.lr,
                    "a resume whose learning rate is not the one before at the same steps"),
    TRAINSUP_SWITCH("data_position_mismatch", resume.data,
                    "a resume whose samples/tokens per step are not the ones before"),
    TRAINSUP_SWITCH("resume_spike", resume.spike,
                    "a resume whose loss is far above the loss before at the same steps"),
    TRAINSUP_NUMBER("resume_steps", 1, 1000, true, resume.steps,
                    "a generation's first steps compared with the same steps before"),
    TRAINSUP_NUMBER("resume_lr_tolerance", 0, 10, false, resume.lr_tolerance,
                    "the relative difference of learning rates that counts"),
    TRAINSUP_NUMBER("resume_data_tolerance", 0, 10, false, resume.data_tolerance,
                    "the relative difference of samples or tokens per step that counts"),
    TRAINSUP_NUMBER("resume_spike_sigmas", 1, 1000, false, resume.spike_sigmas,
                    "spike: median rise above sigmas x the noise of the loss before"),
    TRAINSUP_NUMBER("resume_spike_floor", 0, 1e12, false, resume.spike_floor,
                    "the least median rise of the loss that counts, in its own units"),
    SignalSetting{
        "on_loss_spike", 0, 1, true, false,
        "a loss level shift: 0 report (an event), 1 rollback (restart from the newest checkpoint "
        "before it and skip the batches that led into it)",
        [](const SignalOptions& o) -> double {
          return static_cast<double>(o.fallback.on_loss_spike);
        },
        [](SignalOptions& o, double v) {
          o.fallback.on_loss_spike = static_cast<LossSpikeAction>(static_cast<int>(v));
        }},
    TRAINSUP_NUMBER("fallback_load_steps", 1, kMaxWindow, true, fallback.load_steps,
                    "a non-finite loss this many steps or fewer after loading a checkpoint counts "
                    "against the checkpoint"),
    TRAINSUP_NUMBER("fallback_max_rollbacks", 0, 100, true, fallback.max_rollbacks,
                    "suspect checkpoints a job may fall back from before it is held"),
    TRAINSUP_NUMBER("spike_skip_steps", 0, 1e6, true, fallback.spike_skip_steps,
                    "spike rollback: steps before the spike's onset whose batches are skipped"),
    TRAINSUP_NUMBER("spike_max_rollbacks", 0, 100, true, fallback.max_spike_rollbacks,
                    "spike rollbacks in a row before the next spike holds the job"),
};

#undef TRAINSUP_SWITCH
#undef TRAINSUP_NUMBER
#undef TRAINSUP_SECONDS

}  // namespace

const std::vector<SignalSetting>& SignalSettings() { return *kSettings; }

const SignalSetting* FindSignalSetting(absl::string_view name) {
  for (const SignalSetting& s : *kSettings) {
    if (name == s.name) return &s;
  }
  return nullptr;
}

bool SettingAllows(const SignalSetting& setting, double value) {
  if (!std::isfinite(value) || value < setting.min || value > setting.max) return false;
  return !setting.integer || value == std::floor(value);
}

absl::Status ApplySignalSettings(const std::vector<std::pair<std::string, double>>& settings,
                                 SignalOptions* options) {
  for (const auto& [name, value] : settings) {
    const SignalSetting* setting = FindSignalSetting(name);
    if (setting == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("no signal setting '", name, "'"));
    }
    if (!SettingAllows(*setting, value)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "signal setting ", name, "=", value, " is outside ", setting->min, "..", setting->max,
          setting->integer ? " (whole numbers)" : ""));
    }
    setting->set(*options, value);
  }
  return absl::OkStatus();
}

absl::Status TurnOffRules(absl::string_view names, SignalOptions* options) {
  for (absl::string_view piece : absl::StrSplit(names, ',', absl::SkipWhitespace())) {
    const absl::string_view name = absl::StripAsciiWhitespace(piece);
    const SignalSetting* setting = FindSignalSetting(name);
    if (setting == nullptr || !setting->rule_switch) {
      return absl::InvalidArgumentError(absl::StrCat("'", name, "' is not a signal rule"));
    }
    setting->set(*options, 0);
  }
  return absl::OkStatus();
}

}  // namespace trainsup
