#include "daemon/core/job.h"

#include <utility>

namespace trainsup {

Job::Job(std::string id, size_t step_window) : id_(std::move(id)), step_window_(step_window) {}

uint32_t Job::ranks_alive() const {
  uint32_t n = 0;
  for (const RankState& r : ranks_) n += r.alive ? 1 : 0;
  return n;
}

void Job::Resize(uint32_t world_size) {
  world_size_ = world_size;
  ranks_.clear();
  ranks_.reserve(world_size);
  for (uint32_t i = 0; i < world_size; ++i) ranks_.emplace_back(step_window_);
  ranks_reporting_ = 0;
  max_step_ = -1;
}

void Job::ObserveGeneration(uint64_t generation) {
  if (generation <= generation_) return;
  generation_ = generation;
  Resize(0);
}

std::optional<RejectReason> Job::Apply(absl::Time now, NodeIndex node, const Heartbeat& hb) {
  // Generation 0 means "unknown to the rank": take it as the current one.
  if (hb.generation != 0) {
    if (hb.generation < generation_) return RejectReason::kStaleGeneration;
    ObserveGeneration(hb.generation);
  }
  if (hb.world_size != world_size_) {
    // The world size is fixed within a generation once a rank has spoken.
    if (ranks_reporting_ > 0) return RejectReason::kWorldSizeMismatch;
    Resize(hb.world_size);
  }

  RankState& r = ranks_[hb.rank];
  // A START names the step the rank resumes from, not one it completed, so it
  // neither advances nor has to follow the rank's step.
  if (hb.kind != HeartbeatKind::kStart && hb.step < r.step) return RejectReason::kStepRegressed;

  if (!r.seen) {
    r.seen = true;
    ++ranks_reporting_;
  }
  r.node = node;
  r.local_rank = hb.local_rank;
  r.pid = hb.pid;
  r.last_heartbeat = now;
  ++r.heartbeats;
  ++heartbeats_received_;
  if (hb.kind == HeartbeatKind::kException) r.alive = false;

  if (hb.kind == HeartbeatKind::kStep && hb.step > r.step) {
    r.step = hb.step;
    r.last_progress = now;
    last_progress_ = now;
    if (hb.step > max_step_) max_step_ = hb.step;
    // A duration of 0 means "not measured" (the helper's first step).
    if (hb.step_duration_s > 0) r.step_durations.Add(hb.step_duration_s);
    if (hb.loss) r.loss = hb.loss;
    if (hb.learning_rate) r.learning_rate = hb.learning_rate;
  }
  return std::nullopt;
}

void Job::ApplyProcess(NodeIndex node, const RankProcessInfo& process) {
  if (process.generation != 0 && process.generation != generation_) return;
  if (process.rank >= world_size_) return;
  RankState& r = ranks_[process.rank];
  r.node = node;
  r.alive = process.alive;
  if (process.pid != 0) r.pid = process.pid;
}

void Job::ForgetLiveness(NodeIndex node) {
  for (RankState& r : ranks_) {
    if (r.node == node) r.alive = false;
  }
}

}  // namespace trainsup
