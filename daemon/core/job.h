#ifndef TRAINSUP_DAEMON_CORE_JOB_H_
#define TRAINSUP_DAEMON_CORE_JOB_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "daemon/core/goodput_ledger.h"
#include "daemon/core/heartbeat.h"
#include "daemon/core/rank_table.h"
#include "daemon/core/reject_reason.h"
#include "daemon/core/step_shares.h"
#include "daemon/core/step_window.h"

namespace trainsup {

// Index of a node in the supervisor's node table.
using NodeIndex = uint32_t;
constexpr NodeIndex kNoNode = UINT32_MAX;

// Where a rank is within its current step: the finest progress a rank
// reports. Ordered: a rank between steps s and s+1 is behind one computing
// step s+1, which is behind one that finished computing it (and now waits in
// the collective).
enum class StepPhase : uint8_t {
  kBetweenSteps = 0,  // completed `step`, not yet computing the next
  kComputing = 1,     // inside hb.compute() of step + 1
  kComputeDone = 2,   // left hb.compute() of step + 1: in or near the collective
};
absl::string_view StepPhaseName(StepPhase phase);

// Whether a rank's process runs, as far as the supervisor can tell.
enum class Liveness : uint8_t {
  kUnknown = 0,  // no word yet, or its agent cannot be heard (gone or silent)
  kAlive,        // its agent reports the process running
  kDead,         // its agent saw the process end
  // It exited 0 and its job finished: the end of the run, not a death. Only
  // the read model says so (RankView, RankCounts); a Job holds kDead for it,
  // since its rules judge an exit as an exit.
  kFinished,
};
// "unknown", "alive", "dead", "finished".
absl::string_view LivenessName(Liveness liveness);

// How a rank's process ended, as its agent saw it.
struct RankDeath {
  // When the rank failed, in supervisor time, corrected by the agent's "seen
  // N s ago": the uncaught exception's report if there was one (the
  // interpreter's teardown after it can outlast its peers' deaths), else the
  // process's death.
  absl::Time time;
  bool exit_known = false;
  int32_t exit_code = 0;
  int32_t signal = 0;
  // A death that is not a clean exit 0.
  bool failed() const { return !exit_known || exit_code != 0 || signal != 0; }
};

// What the supervisor knows of one rank in the job's current generation.
struct RankState {
  RankState(size_t step_window, size_t compute_window)
      : step_durations(step_window), compute_durations(compute_window) {}

  uint32_t rank = 0;
  bool seen = false;  // heard from in the current generation
  NodeIndex node = kNoNode;
  uint32_t local_rank = 0;
  uint32_t pid = 0;
  int64_t step = -1;  // last completed step; -1 before the first
  absl::Time last_heartbeat = absl::InfinitePast();  // supervisor receive time
  absl::Time last_progress = absl::InfinitePast();   // when `step` last advanced
  uint64_t heartbeats = 0;
  StepWindow step_durations;
  // The rank's own work per step (hb.compute()), for straggler detection.
  StepWindow compute_durations;
  // Where its recent step time went: data wait, and outside compute.
  StepShares shares;
  StepPhase phase = StepPhase::kBetweenSteps;
  bool in_checkpoint = false;
  // Blocking checkpoint seconds since the rank's last step (its next step's
  // measured duration includes them).
  double checkpoint_since_step_s = 0;
  std::optional<double> loss;
  std::optional<double> learning_rate;
  std::optional<uint64_t> samples;  // per step, as the rank last reported
  // From the agent's process reports. Unknown when its agent is not heard:
  // the rules judge what they can see and never switch off for it.
  Liveness liveness = Liveness::kUnknown;
  bool alive() const { return liveness == Liveness::kAlive; }
  std::optional<RankDeath> death;
  // Dead with no sign of failure: it exited 0 as its agent read the status,
  // or the status could not be read (an agent that reaps its command's
  // processes itself) and the rank neither raised nor asked for a failing
  // exit.
  bool ended_cleanly() const {
    if (!death) return false;
    if (death->exit_known) return death->exit_code == 0 && death->signal == 0;
    return exception_type.empty() && (!exiting_code || *exiting_code == 0);
  }
  // The uncaught exception the rank reported before dying, if any; or, with
  // `exception_caught`, the one its script was handling when it called
  // sys.exit with a failing code (the cause it caught).
  std::string exception_type;
  std::string exception_message;
  bool exception_caught = false;
  // The rank said it is exiting (its helper saw sys.exit or the interpreter
  // begin to shut down), with the code when known.
  bool exiting = false;
  std::optional<int32_t> exiting_code;
  // When the rank reported its failure (an exception, or an exit it began),
  // at the source: the failure began then, before the interpreter's
  // teardown, which can outlast its peers' own deaths.
  std::optional<absl::Time> exception_time;
  // Datagrams its helper could not send, as last reported; a rank whose
  // count rose since its last phase may have lost a phase change.
  uint64_t datagrams_dropped = 0;
  bool phase_uncertain = false;
  int32_t stack_signal = 0;
  // What the rank's script said to do when it fails (hb.verdict), with its
  // reason; kUnspecified: nothing said.
  VerdictAction verdict = VerdictAction::kUnspecified;
  std::string verdict_reason;
  // Dead without a word of its end: the last line it wrote to stderr that
  // names an infrastructure fault, as its agent read it ("": none).
  std::string stderr_line;
};

class Job;

// Told of every step a rank completes, as it is applied (the training
// signals' monitor). Called inside Job::Apply: must not call back into the
// job's mutating methods.
class StepObserver {
 public:
  virtual ~StepObserver() = default;
  // `r` (on r.node) completed hb.step (a STEP heartbeat, its step above the
  // rank's last) at `now`; it had blocked `checkpoint_s` seconds in
  // checkpoints since its previous step.
  virtual void OnStep(absl::Time now, const Job& job, const RankState& r, const Heartbeat& hb,
                      double checkpoint_s) = 0;
};

// What the supervisor observed of one training job: its generation, world
// size and per-rank state. Observations only; the rules' verdicts are kept
// beside it (JobEntry). Thread-compatible.
class Job {
 public:
  Job(std::string id, size_t step_window, size_t compute_window);

  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  const std::string& id() const { return id_; }
  uint64_t generation() const { return generation_; }
  // 0 until the first heartbeat of the generation. Claimed by the ranks:
  // memory is held only for the ranks heard of, never for this many.
  uint32_t world_size() const { return world_size_; }
  // The ranks heard of in this generation (by a heartbeat, or by their
  // agent's process report), by rank. Loop over these, never over
  // 0..world_size(): a claimed world size costs nothing until ranks report.
  using RankMap = RankTable<RankState>;
  const RankMap& ranks() const { return ranks_; }
  // The rank's state; an unseen one (seen == false) for a rank not heard of.
  const RankState& rank(uint32_t rank) const;

  // Highest step any rank completed in this generation; -1 before the first.
  int64_t max_step() const { return max_step_; }
  // Last time any rank's step advanced; InfinitePast() if never.
  absl::Time last_progress() const { return last_progress_; }
  uint64_t heartbeats_received() const { return heartbeats_received_; }
  uint32_t ranks_reporting() const { return ranks_reporting_; }
  // Rank processes the agents report alive (heard from or not).
  uint32_t ranks_alive() const { return ranks_alive_; }
  // The ranks heard from (ranks_reporting()), by liveness. O(1): kept as
  // the observations arrive, so that a reader never counts 100k ranks.
  uint32_t seen_alive() const { return seen_alive_; }
  uint32_t seen_dead() const { return ranks_dead_; }
  uint32_t seen_unknown() const { return ranks_reporting_ - seen_alive_ - ranks_dead_; }
  // Of seen_dead(), those that ended cleanly (RankState::ended_cleanly()).
  uint32_t seen_exited_cleanly() const { return ranks_exited_cleanly_; }
  // Datagrams the helpers of the ranks heard from could not send, summed.
  uint64_t datagrams_dropped() const { return datagrams_dropped_; }
  // The ranks that last reported from `node`, in the order first heard of
  // there (kept as they report: a node's ranks without a scan of the job's).
  const std::vector<uint32_t>& RanksOn(NodeIndex node) const;
  // True when a rank heard from in this generation is known dead. O(1), as
  // any_in_checkpoint(): the sweep asks every second, and a loop over 100k
  // ranks' states is what made it slow.
  bool has_dead_rank() const { return ranks_dead_ > 0; }
  // When the current generation was first heard of (or started).
  absl::Time generation_start() const { return generation_start_; }
  // When its first heartbeat and its first completed step arrived
  // (InfinitePast() until then).
  absl::Time first_heartbeat() const { return first_heartbeat_; }
  absl::Time first_progress() const { return first_progress_; }
  // Samples per step summed over ranks that report them (0: none report).
  uint64_t global_batch() const;
  // Ranks that completed a step in the current generation (O(ranks)).
  uint32_t ranks_stepped() const;
  // True when some rank is inside a checkpoint's blocking part.
  bool any_in_checkpoint() const { return ranks_in_checkpoint_ > 0; }
  // True when some rank said it is exiting (sys.exit, or the interpreter's
  // shutdown began) and its process is not yet seen to end. O(1).
  bool any_exiting() const { return ranks_exiting_ > 0; }
  // True once some rank's process died in a way that is certainly a failure
  // (a non-zero exit, a signal, or after an uncaught exception). O(1): kept
  // as the observations arrive, because reports ask on every arrival.
  bool has_certain_failure() const { return certain_failure_; }

  // `observer` (not owned; may be null) is told of every step applied.
  void set_step_observer(StepObserver* observer) { step_observer_ = observer; }

  // The frontier's moves since the last call (steps completed by the first
  // rank to complete them), for the goodput ledger.
  std::vector<FrontierStep> TakeFrontier() { return std::move(frontier_); }
  // Checkpoints since the last call: (blocking seconds, asynchronous seconds)
  // of each rank's CHECKPOINT_END.
  std::vector<std::pair<double, double>> TakeCheckpoints() { return std::move(checkpoints_); }

  // Moves to `generation` if it is newer: every rank starts over. Returns
  // true when it did.
  bool ObserveGeneration(absl::Time now, uint64_t generation);

  // Applies a heartbeat that passed CheckHeartbeat(), forwarded by `node`
  // and received at `now`; a step counts as made hb.queued_s earlier.
  // Returns why it was refused, or nullopt when applied.
  std::optional<RejectReason> Apply(absl::Time now, NodeIndex node, const Heartbeat& hb);

  // Applies an agent's view of a rank process, received at `now`. Ignored
  // when it is not about this generation or names a rank outside the world.
  void ApplyProcess(absl::Time now, NodeIndex node, const RankProcessInfo& process);

  // Renumbers the nodes its ranks name: `move(NodeIndex&)` for each (the
  // supervisor forgot some nodes).
  template <typename Move>
  void MoveNodes(Move move) {
    for (auto& [i, r] : ranks_) move(r.node);
  }

  // The agent of `node` cannot be heard: its ranks' processes become
  // unknown (dead ones stay dead: that was seen).
  void ForgetLiveness(NodeIndex node);

  // Puts back what the job showed when it ended, at start-up before any
  // agent speaks (ended_job.h): the world size its ranks claimed and the
  // heartbeats received over its life, then each rank heard of, as it was
  // (`rank.rank`, on `rank.node`). REQUIRES: RestoreTotals() first, once;
  // for RestoreRank, rank.seen, and the rank not restored yet.
  void RestoreTotals(uint32_t world_size, uint64_t heartbeats_received);
  void RestoreRank(const RankState& rank);

 private:
  static absl::Time ProgressTime(absl::Time received, const Heartbeat& hb);
  // r made progress with `hb`: its and the job's last progress move on.
  void NoteProgress(absl::Time now, const Heartbeat& hb, RankState& r);
  // A COMPUTE_BEGIN/END of a step after r's last completed one.
  void PlaceInStep(absl::Time now, const Heartbeat& hb, RankState& r, StepPhase phase);
  void Resize(uint32_t world_size);
  RankState& RankSlot(uint32_t rank);
  void NoteIfCertainFailure(const RankState& r);
  // The only ways liveness and in_checkpoint change, so that the counts
  // below stay true. Count adds `delta` for what `r` counts in.
  void Count(const RankState& r, int delta);
  void SetLiveness(RankState& r, Liveness liveness);
  void SetDeath(RankState& r, const RankDeath& death);
  void SetNode(RankState& r, NodeIndex node);
  void SetInCheckpoint(RankState& r, bool in_checkpoint);

  const std::string id_;
  const size_t step_window_;
  const size_t compute_window_;
  uint64_t generation_ = 0;
  absl::Time generation_start_ = absl::InfinitePast();
  absl::Time first_heartbeat_ = absl::InfinitePast();
  absl::Time first_progress_ = absl::InfinitePast();
  uint32_t world_size_ = 0;
  RankMap ranks_;
  int64_t max_step_ = -1;
  absl::Time last_progress_ = absl::InfinitePast();
  uint64_t heartbeats_received_ = 0;
  uint32_t ranks_reporting_ = 0;
  // Kept as the ranks' states change (only through Count's callers).
  uint32_t ranks_alive_ = 0;
  uint32_t seen_alive_ = 0;          // seen and alive
  uint32_t ranks_dead_ = 0;          // seen and dead
  uint32_t ranks_exited_cleanly_ = 0;  // seen, dead, and ended cleanly
  uint64_t datagrams_dropped_ = 0;   // over the seen ranks
  uint32_t ranks_in_checkpoint_ = 0;
  uint32_t ranks_exiting_ = 0;  // said EXIT, not seen dead
  absl::flat_hash_map<NodeIndex, std::vector<uint32_t>> ranks_by_node_;
  bool certain_failure_ = false;
  std::vector<FrontierStep> frontier_;
  std::vector<std::pair<double, double>> checkpoints_;
  StepObserver* step_observer_ = nullptr;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_JOB_H_
