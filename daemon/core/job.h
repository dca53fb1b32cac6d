#ifndef TRAINSUP_DAEMON_CORE_JOB_H_
#define TRAINSUP_DAEMON_CORE_JOB_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "daemon/core/heartbeat.h"
#include "daemon/core/reject_reason.h"
#include "daemon/core/step_window.h"

namespace trainsup {

// Index of a node in the supervisor's node table.
using NodeIndex = uint32_t;
constexpr NodeIndex kNoNode = UINT32_MAX;

// What the supervisor knows of one rank in the job's current generation.
struct RankState {
  explicit RankState(size_t window) : step_durations(window) {}

  bool seen = false;  // heard from in the current generation
  NodeIndex node = kNoNode;
  uint32_t local_rank = 0;
  uint32_t pid = 0;
  int64_t step = -1;  // last completed step; -1 before the first
  absl::Time last_heartbeat = absl::InfinitePast();  // supervisor receive time
  absl::Time last_progress = absl::InfinitePast();   // when `step` last advanced
  uint64_t heartbeats = 0;
  StepWindow step_durations;
  std::optional<double> loss;
  std::optional<double> learning_rate;
  // From the agent's process reports: is the rank's process running?
  bool alive = false;
};

// One training job: its generation, world size and per-rank state.
// Thread-compatible.
class Job {
 public:
  Job(std::string id, size_t step_window);

  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  const std::string& id() const { return id_; }
  uint64_t generation() const { return generation_; }
  // 0 until the first heartbeat of the generation.
  uint32_t world_size() const { return world_size_; }
  // REQUIRES: rank < world_size().
  const RankState& rank(uint32_t rank) const { return ranks_[rank]; }
  const std::vector<RankState>& ranks() const { return ranks_; }

  // Highest step any rank completed in this generation; -1 before the first.
  int64_t max_step() const { return max_step_; }
  // Last time any rank's step advanced; InfinitePast() if never.
  absl::Time last_progress() const { return last_progress_; }
  uint64_t heartbeats_received() const { return heartbeats_received_; }
  uint32_t ranks_reporting() const { return ranks_reporting_; }
  uint32_t ranks_alive() const;

  // Moves to `generation` if it is newer: every rank starts over.
  void ObserveGeneration(uint64_t generation);

  // Applies a heartbeat that passed CheckHeartbeat(), forwarded by `node`.
  // Returns why it was refused, or nullopt when applied.
  std::optional<RejectReason> Apply(absl::Time now, NodeIndex node, const Heartbeat& hb);

  // Applies an agent's view of a rank process. Ignored when it is not about
  // this generation or names a rank outside the world.
  void ApplyProcess(NodeIndex node, const RankProcessInfo& process);

  // The agent of `node` is gone: nothing is known of its ranks' processes.
  void ForgetLiveness(NodeIndex node);

 private:
  void Resize(uint32_t world_size);

  const std::string id_;
  const size_t step_window_;
  uint64_t generation_ = 0;
  uint32_t world_size_ = 0;
  std::vector<RankState> ranks_;
  int64_t max_step_ = -1;
  absl::Time last_progress_ = absl::InfinitePast();
  uint64_t heartbeats_received_ = 0;
  uint32_t ranks_reporting_ = 0;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_JOB_H_
