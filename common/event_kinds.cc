#include "common/event_kinds.h"

namespace trainsup {
namespace {

using F = EventFamily;

// One row a kind, in the enum's order (a test checks it): name, family, the
// doc that lists its figures, the alert that pages on it, and what diagnose
// says to do about it.
constexpr EventKindInfo kTable[] = {
    {EventKind::kStall, "stall", F::kDetection, "detection.md", "TrainingStepStalled", nullptr},
    {EventKind::kCrash, "crash", F::kDetection, "detection.md", nullptr, nullptr},
    {EventKind::kStraggler, "straggler", F::kDetection, "detection.md", "TrainingStraggler", nullptr},
    {EventKind::kStragglerCleared, "straggler_cleared", F::kDetection, "detection.md", nullptr, nullptr},
    {EventKind::kStateChange, "state", F::kLifecycle, "detection.md", nullptr, nullptr},
    {EventKind::kRestart, "restart", F::kLifecycle, "detection.md", nullptr, nullptr},
    {EventKind::kRecovered, "recovered", F::kLifecycle, "detection.md", nullptr, nullptr},
    {EventKind::kHold, "hold", F::kLifecycle, "detection.md", "TrainingRestartsHeld", nullptr},
    {EventKind::kResume, "resume", F::kLifecycle, "detection.md", nullptr, nullptr},
    {EventKind::kQuarantine, "quarantine", F::kNode, "detection.md", nullptr, nullptr},
    {EventKind::kUnquarantine, "unquarantine", F::kNode, "detection.md", nullptr, nullptr},
    {EventKind::kQuarantineSkipped, "quarantine_skipped", F::kNode, "detection.md", nullptr, nullptr},
    {EventKind::kFence, "fence", F::kNode, "detection.md", nullptr, nullptr},
    {EventKind::kWorldSizeChanged, "world_size_changed", F::kLifecycle, "detection.md", nullptr,
     "the global batch changed with the world size: scale the learning rate (or keep the "
     "global batch) so the resumed run trains as before"},
    {EventKind::kCheckpointPlan, "checkpoint_plan", F::kCheckpoint, "detection.md", nullptr, nullptr},
    {EventKind::kNodeUnreachable, "node_unreachable", F::kNode, "detection.md", "TrainingNodeUnreachable",
     nullptr},
    {EventKind::kNodeReachable, "node_reachable", F::kNode, "detection.md", nullptr, nullptr},
    {EventKind::kNodeLost, "node_lost", F::kDetection, "detection.md", nullptr, nullptr},
    {EventKind::kStacks, "stacks", F::kDetection, "detection.md", nullptr, nullptr},
    {EventKind::kPersistFailed, "persist_failed", F::kSupervisor, "detection.md", nullptr, nullptr},
    {EventKind::kUnfence, "unfence", F::kNode, "detection.md", nullptr, nullptr},
    {EventKind::kVerdict, "verdict", F::kDetection, "detection.md", nullptr,
     "the job itself judged its failure (an exit code, an exception, hb.verdict): read the "
     "verdict's reason"},
    {EventKind::kNotFinite, "not_finite", F::kSignal, "signals.md", "TrainingLossNotFinite",
     "a NaN or Inf loss (or gradient norm): lower the learning rate, check the data at that "
     "step, and resume from a checkpoint before it"},
    {EventKind::kLossShift, "loss_shift", F::kSignal, "signals.md", "TrainingLossShift",
     "the loss moved to a higher level and stayed there: look at the data and learning rate "
     "at that step; roll back past it if it does not recover"},
    {EventKind::kLossFlat, "loss_flat", F::kSignal, "signals.md", "TrainingLossFlat",
     "the loss did not go down from the start: check the learning rate, the labels and that "
     "the checkpoint loaded"},
    {EventKind::kGradSpike, "grad_spike", F::kSignal, "signals.md", "TrainingGradNormAnomaly",
     "a gradient norm far above its baseline: clip gradients, lower the learning rate, look "
     "at the batch"},
    {EventKind::kGradCollapse, "grad_collapse", F::kSignal, "signals.md", "TrainingGradNormAnomaly",
     "gradient norms collapsed to about 0: the model stopped learning (frozen parameters, a "
     "dead loss, a learning rate of 0)"},
    {EventKind::kThroughputChange, "throughput_change", F::kSignal, "signals.md", "TrainingThroughputDrop",
     "the step time rose at one step: the node named slowed (thermal, a neighbour, a failing "
     "device); see `trainsupctl ranks JOB --sort compute-p99`"},
    {EventKind::kThroughputDecay, "throughput_decay", F::kSignal, "signals.md", "TrainingThroughputDrop",
     "the step time drifts slower: memory fragmentation, a growing data pipeline, a leak"},
    {EventKind::kMemoryGrowth, "memory_growth", F::kSignal, "signals.md", "TrainingMemoryGrowth",
     "memory rises steadily: a leak (tensors kept across steps, a growing cache); it runs out "
     "at the time to the limit given"},
    {EventKind::kReplicaMismatch, "replica_mismatch", F::kSignal, "signals.md", "TrainingReplicaMismatch",
     "a rank disagrees with its replicas: silent data corruption on its node; the node is "
     "charged toward quarantine"},
    {EventKind::kRendezvous, "rendezvous", F::kLifecycle, "detection.md", nullptr, nullptr},
    {EventKind::kStartTimeout, "start_timeout", F::kDetection, "detection.md", nullptr, nullptr},
    {EventKind::kLeadership, "leadership", F::kSupervisor, "detection.md", "TrainsupLeaderFlapping", nullptr},
    {EventKind::kResumedBehind, "resumed_behind", F::kResume, "signals.md", "TrainingResumeMismatch",
     "the generation resumed from before the last complete checkpoint: check which checkpoint "
     "the script loads (the newest complete one) and that saving it finished"},
    {EventKind::kLrMismatch, "lr_mismatch", F::kResume, "signals.md", "TrainingResumeMismatch",
     "the learning rate differs from before at the same steps: save and load the LR "
     "scheduler's state with the checkpoint"},
    {EventKind::kDataPositionMismatch, "data_position_mismatch", F::kResume, "signals.md",
     "TrainingResumeMismatch",
     "the data read per step differs from before at the same steps: save and load the "
     "sampler's or loader's position with the checkpoint"},
    {EventKind::kResumeSpike, "resume_spike", F::kResume, "signals.md", "TrainingResumeMismatch",
     "the loss after the resume is far above the loss before at the same steps: the checkpoint "
     "may be incomplete (optimizer state, RNG, data position); check what it saves and loads"},
    {EventKind::kCheckpointSuspect, "checkpoint_suspect", F::kCheckpoint, "recovery.md", nullptr, nullptr},
    {EventKind::kCheckpointFallback, "checkpoint_fallback", F::kCheckpoint, "recovery.md", nullptr, nullptr},
    {EventKind::kSpikeRollback, "spike_rollback", F::kCheckpoint, "recovery.md", nullptr, nullptr},
    {EventKind::kKilledByCriterion, "killed_by_criterion", F::kLifecycle, "kill-criteria.md",
     "TrainingJobKilled", nullptr},
    {EventKind::kCheckpointFailed, "checkpoint_failed", F::kCheckpoint, "signals.md",
     "TrainingCheckpointFailed",
     "a checkpoint save failed (the reason is in the event): check the storage it writes to "
     "(space, quota, permissions, the file system's health); the job runs on the last one "
     "committed"},
    {EventKind::kCheckpointOverdue, "checkpoint_overdue", F::kCheckpoint, "signals.md",
     "TrainingCheckpointOverdue",
     "no checkpoint committed for more than twice the planned interval: a failure now loses "
     "the work the event counts; check that the script saves at should_checkpoint() and that "
     "its saves end (checkpoint_failed events say why they do not)"},
    {EventKind::kGpuError, "gpu_error", F::kNode, "gpu.md", nullptr,
     "a node's GPU driver reported an Xid: the event says what NVIDIA's catalog wants done "
     "(a GPU that must be reset took its node out of the job); have the node checked before "
     "lifting its quarantine (docs/gpu.md)"},
};
static_assert(sizeof(kTable) / sizeof(kTable[0]) == kEventKindCount, "one row for every event kind");

}  // namespace

absl::Span<const EventKindInfo> EventKindTable() { return kTable; }

const EventKindInfo& EventKindInfoOf(EventKind kind) { return kTable[static_cast<int>(kind)]; }

absl::string_view EventKindName(EventKind kind) {
  const int i = static_cast<int>(kind);
  return i >= 0 && i < kEventKindCount ? kTable[i].name : "unknown";
}

std::optional<EventKind> EventKindFromName(absl::string_view name) {
  for (const EventKindInfo& row : kTable) {
    if (row.name == name) return row.kind;
  }
  return std::nullopt;
}

absl::string_view EventFamilyName(EventFamily family) {
  switch (family) {
    case EventFamily::kDetection: return "detection";
    case EventFamily::kLifecycle: return "lifecycle";
    case EventFamily::kNode: return "node";
    case EventFamily::kCheckpoint: return "checkpoint";
    case EventFamily::kSignal: return "signal";
    case EventFamily::kResume: return "resume";
    case EventFamily::kSupervisor: return "supervisor";
  }
  return "unknown";
}

}  // namespace trainsup
