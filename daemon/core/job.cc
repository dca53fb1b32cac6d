#include "daemon/core/job.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "common/failure_text.h"
#include "common/limits.h"

namespace trainsup {

absl::string_view StepPhaseName(StepPhase phase) {
  switch (phase) {
    case StepPhase::kBetweenSteps:
      return "between_steps";
    case StepPhase::kComputing:
      return "computing";
    case StepPhase::kComputeDone:
      return "compute_done";
  }
  return "unknown";
}

absl::string_view LivenessName(Liveness liveness) {
  switch (liveness) {
    case Liveness::kUnknown:
      return "unknown";
    case Liveness::kAlive:
      return "alive";
    case Liveness::kDead:
      return "dead";
    case Liveness::kFinished:
      return "finished";
  }
  return "unknown";
}

Job::Job(std::string id, size_t step_window, size_t compute_window)
    : id_(std::move(id)), step_window_(step_window), compute_window_(compute_window) {}

const RankState& Job::rank(uint32_t rank) const {
  static const RankState* const kUnseen = new RankState(1, 1);
  const RankState* found = ranks_.Find(rank);
  return found == nullptr ? *kUnseen : *found;
}

RankState& Job::RankSlot(uint32_t rank) {
  RankState& r = ranks_.FindOrAdd(rank, step_window_, compute_window_);
  r.rank = rank;
  return r;
}

uint64_t Job::global_batch() const {
  uint64_t total = 0;
  for (const auto& [i, r] : ranks_) total += r.samples.value_or(0);
  return total;
}

uint32_t Job::ranks_stepped() const {
  uint32_t n = 0;
  for (const auto& [i, r] : ranks_) n += r.step >= 0 ? 1 : 0;
  return n;
}

void Job::Count(const RankState& r, int delta) {
  if (r.liveness == Liveness::kAlive) ranks_alive_ += delta;
  if (r.seen && r.liveness == Liveness::kAlive) seen_alive_ += delta;
  if (r.seen && r.liveness == Liveness::kDead) ranks_dead_ += delta;
  if (r.seen && r.liveness == Liveness::kDead && r.ended_cleanly()) {
    ranks_exited_cleanly_ += delta;
  }
  if (r.in_checkpoint) ranks_in_checkpoint_ += delta;
  if (r.exiting && r.liveness != Liveness::kDead) ranks_exiting_ += delta;
}

void Job::SetNode(RankState& r, NodeIndex node) {
  if (r.node == node) return;
  if (r.node != kNoNode) {
    std::vector<uint32_t>& before = ranks_by_node_[r.node];
    before.erase(std::find(before.begin(), before.end(), r.rank));
  }
  r.node = node;
  if (node != kNoNode) ranks_by_node_[node].push_back(r.rank);
}

const std::vector<uint32_t>& Job::RanksOn(NodeIndex node) const {
  static const std::vector<uint32_t>* const kNone = new std::vector<uint32_t>();
  auto it = ranks_by_node_.find(node);
  return it == ranks_by_node_.end() ? *kNone : it->second;
}

void Job::SetLiveness(RankState& r, Liveness liveness) {
  Count(r, -1);
  r.liveness = liveness;
  Count(r, +1);
}

void Job::SetDeath(RankState& r, const RankDeath& death) {
  Count(r, -1);
  r.death = death;
  Count(r, +1);
}

void Job::SetInCheckpoint(RankState& r, bool in_checkpoint) {
  Count(r, -1);
  r.in_checkpoint = in_checkpoint;
  Count(r, +1);
}

void Job::NoteIfCertainFailure(const RankState& r) {
  if (!r.death || !r.death->failed()) return;
  const bool exited_badly = r.death->exit_known && (r.death->exit_code != 0 || r.death->signal != 0);
  const bool said_so = !r.exception_type.empty() || (r.exiting_code && *r.exiting_code != 0);
  if (exited_badly || said_so) certain_failure_ = true;
}

void Job::Resize(uint32_t world_size) {
  // Nothing is allocated for the claimed size: ranks get their state when
  // they are first heard of.
  world_size_ = world_size;
  ranks_.clear();
  ranks_by_node_.clear();
  ranks_reporting_ = 0;
  ranks_alive_ = 0;
  seen_alive_ = 0;
  ranks_dead_ = 0;
  ranks_exited_cleanly_ = 0;
  datagrams_dropped_ = 0;
  ranks_in_checkpoint_ = 0;
  ranks_exiting_ = 0;
  certain_failure_ = false;
  max_step_ = -1;
}

bool Job::ObserveGeneration(absl::Time now, uint64_t generation) {
  if (generation <= generation_) return false;
  generation_ = generation;
  generation_start_ = now;
  last_progress_ = absl::InfinitePast();
  first_heartbeat_ = absl::InfinitePast();
  first_progress_ = absl::InfinitePast();
  frontier_.clear();
  Resize(0);
  return true;
}

// When a step was made: its agent held the heartbeat for queued_s before the
// report that carried it left (up to a report interval, seconds at scale), so
// a stall is timed from the step itself. An agent sends what it reads within
// an interval (at most 5 s); a heartbeat held longer waited out a broken
// stream, and is dated no earlier than kMaxQueueCredit before its receipt.
absl::Time Job::ProgressTime(absl::Time received, const Heartbeat& hb) {
  constexpr double kMaxQueueCredit = 10.0;
  return received - absl::Seconds(std::min(hb.queued_s, kMaxQueueCredit));
}

void Job::NoteProgress(absl::Time now, const Heartbeat& hb, RankState& r) {
  r.last_progress = std::max(r.last_progress, ProgressTime(now, hb));
  last_progress_ = std::max(last_progress_, r.last_progress);
}

void Job::PlaceInStep(absl::Time now, const Heartbeat& hb, RankState& r, StepPhase phase) {
  r.phase = phase;
  if (hb.step - 1 <= r.step) return;
  // The rank computes step s, so it completed s - 1: the STEP that said so
  // was given up on by its helper (a newer message of its slot replaced it
  // while the agent's queue was full). Left at its old step, a rank blocked
  // in the next collective would look furthest behind and be named for a
  // hang it only waits on. No step duration was measured: the frontier and
  // the ledger wait for the other ranks' STEPs.
  r.step = hb.step - 1;
  NoteProgress(now, hb, r);
}

std::optional<RejectReason> Job::Apply(absl::Time now, NodeIndex node, const Heartbeat& hb) {
  // Generation 0 means "unknown to the rank": take it as the current one.
  if (hb.generation != 0) {
    if (hb.generation < generation_) return RejectReason::kStaleGeneration;
    ObserveGeneration(now, hb.generation);
  }
  if (generation_start_ == absl::InfinitePast()) generation_start_ = now;
  if (hb.world_size != world_size_) {
    // The world size is fixed within a generation once a rank has spoken.
    if (ranks_reporting_ > 0) return RejectReason::kWorldSizeMismatch;
    Resize(hb.world_size);
  }

  // A START names the step the rank resumes from, not one it completed, so it
  // neither advances nor has to follow the rank's step.
  if (hb.kind != HeartbeatKind::kStart && hb.step < rank(hb.rank).step) {
    return RejectReason::kStepRegressed;
  }
  RankState& r = RankSlot(hb.rank);

  if (!r.seen) {
    Count(r, -1);
    r.seen = true;
    Count(r, +1);
    ++ranks_reporting_;
  }
  if (first_heartbeat_ == absl::InfinitePast()) first_heartbeat_ = now;
  SetNode(r, node);
  r.local_rank = hb.local_rank;
  r.pid = hb.pid;
  r.last_heartbeat = now;
  ++r.heartbeats;
  ++heartbeats_received_;
  // The helper gave up on a datagram since the last one. A step or phase
  // heartbeat is the rank's latest place all the same; any other leaves its
  // place uncertain until the next one.
  const bool carries_phase = hb.kind == HeartbeatKind::kStep ||
                             hb.kind == HeartbeatKind::kComputeBegin ||
                             hb.kind == HeartbeatKind::kComputeEnd;
  if (hb.datagrams_dropped > r.datagrams_dropped) {
    datagrams_dropped_ += hb.datagrams_dropped - r.datagrams_dropped;
    r.datagrams_dropped = hb.datagrams_dropped;
    r.phase_uncertain = !carries_phase;
  } else if (carries_phase) {
    r.phase_uncertain = false;
  }
  switch (hb.kind) {
    case HeartbeatKind::kStep:
      if (hb.step > r.step) {
        r.step = hb.step;
        r.phase = StepPhase::kBetweenSteps;
        NoteProgress(now, hb, r);
        if (first_progress_ == absl::InfinitePast()) first_progress_ = now;
        if (hb.samples) r.samples = hb.samples;
        if (hb.step > max_step_) {
          max_step_ = hb.step;
          frontier_.push_back(
              {hb.step, hb.step_duration_s, hb.data_wait_s, r.checkpoint_since_step_s});
        }
        if (step_observer_ != nullptr) {
          step_observer_->OnStep(now, *this, r, hb, r.checkpoint_since_step_s);
        }
        r.checkpoint_since_step_s = 0;
        // A duration of 0 means "not measured" (the helper's first step).
        if (hb.step_duration_s > 0) r.step_durations.Add(hb.step_duration_s);
        if (hb.compute_s && *hb.compute_s > 0) r.compute_durations.Add(*hb.compute_s);
        r.shares.Add(hb.step_duration_s, hb.data_wait_s, hb.compute_s);
        if (hb.loss) r.loss = hb.loss;
        if (hb.learning_rate) r.learning_rate = hb.learning_rate;
      }
      break;
    // A phase only counts for the step after the rank's last completed one.
    case HeartbeatKind::kComputeBegin:
      if (hb.step > r.step) PlaceInStep(now, hb, r, StepPhase::kComputing);
      break;
    case HeartbeatKind::kComputeEnd:
      if (hb.step > r.step) PlaceInStep(now, hb, r, StepPhase::kComputeDone);
      break;
    case HeartbeatKind::kCheckpointBegin:
      SetInCheckpoint(r, true);
      break;
    case HeartbeatKind::kCheckpointEnd:
      // A failed save (an exception) with no blocking time is a background
      // write that failed later (hb.checkpoint_failed): it ends no save.
      if (hb.save_failed() && hb.checkpoint_blocking_s <= 0) break;
      SetInCheckpoint(r, false);
      r.checkpoint_since_step_s += hb.checkpoint_blocking_s;
      // The loop was blocked either way; only a save that succeeded measures
      // what a checkpoint costs.
      if (!hb.save_failed()) {
        checkpoints_.emplace_back(hb.checkpoint_blocking_s, hb.checkpoint_async_s);
      }
      break;
    case HeartbeatKind::kException:
      Count(r, -1);  // it no longer ended cleanly
      r.exception_type = hb.exception_type;
      r.exception_message = hb.exception_message;
      Count(r, +1);
      NoteIfCertainFailure(r);
      break;
    case HeartbeatKind::kExit:
      Count(r, -1);  // nor after a failing exit
      r.exiting = true;
      if (hb.exit_code) r.exiting_code = hb.exit_code;
      // The exception the script caught before it exited with a failing
      // code: the failure's cause, as if it had not been caught.
      if (r.exception_type.empty() && !hb.exception_type.empty() && hb.exit_code &&
          *hb.exit_code != 0) {
        r.exception_type = hb.exception_type;
        r.exception_message = hb.exception_message;
        r.exception_caught = true;
      }
      Count(r, +1);
      NoteIfCertainFailure(r);
      break;
    case HeartbeatKind::kVerdict:
      r.verdict = hb.verdict;
      r.verdict_reason = OutputLine(hb.verdict_reason, kMaxReasonLength);
      break;
    case HeartbeatKind::kStart:
      r.stack_signal = hb.stack_signal;
      break;
    case HeartbeatKind::kKillCriteria:  // the job's, not the rank's (Supervisor)
      break;
    case HeartbeatKind::kUnspecified:
      break;
  }
  return std::nullopt;
}

void Job::ApplyProcess(absl::Time now, NodeIndex node, const RankProcessInfo& process) {
  if (process.generation != 0 && process.generation != generation_) return;
  if (process.rank >= world_size_) return;
  RankState& r = RankSlot(process.rank);
  SetNode(r, node);
  if (process.pid != 0) r.pid = process.pid;
  if (process.exception_seen && !r.exception_time) {
    const double ago = process.exception_seconds_ago;
    r.exception_time = now - absl::Seconds(std::isfinite(ago) && ago > 0 ? ago : 0.0);
    if (r.death && *r.exception_time < r.death->time) r.death->time = *r.exception_time;
  }
  if (process.alive) {
    SetLiveness(r, Liveness::kAlive);
    return;
  }
  if (r.stderr_line.empty() && !process.stderr_line.empty()) {
    r.stderr_line = OutputLine(process.stderr_line, kMaxStderrLineBytes);
  }
  SetLiveness(r, Liveness::kDead);
  if (r.death) return;  // the first report of a death has the best timing
  RankDeath death;
  // Agents report how long ago they saw the death, so that ranks on
  // different nodes are ordered by when they died, not by whose report
  // happened to arrive first.
  const double ago = process.died_seconds_ago;
  death.time = now - absl::Seconds(std::isfinite(ago) && ago > 0 ? ago : 0.0);
  if (r.exception_time && *r.exception_time < death.time) death.time = *r.exception_time;
  death.exit_known = process.exit_known;
  death.exit_code = process.exit_code;
  death.signal = process.signal;
  SetDeath(r, death);
  NoteIfCertainFailure(r);
}

void Job::RestoreTotals(uint32_t world_size, uint64_t heartbeats_received) {
  Resize(world_size);
  heartbeats_received_ = heartbeats_received;
}

void Job::RestoreRank(const RankState& rank) {
  RankState& r = RankSlot(rank.rank);  // a new slot counts for nothing yet
  r = rank;
  r.node = kNoNode;
  SetNode(r, rank.node);
  Count(r, +1);
  ++ranks_reporting_;
  max_step_ = std::max(max_step_, r.step);
  last_progress_ = std::max(last_progress_, r.last_progress);
  NoteIfCertainFailure(r);
}

void Job::ForgetLiveness(NodeIndex node) {
  for (uint32_t rank : RanksOn(node)) {
    RankState& r = *ranks_.Find(rank);
    if (r.liveness == Liveness::kAlive) SetLiveness(r, Liveness::kUnknown);
  }
}

}  // namespace trainsup
