#ifndef TRAINSUP_DAEMON_CORE_SIGNALS_STEP_AGGREGATOR_H_
#define TRAINSUP_DAEMON_CORE_SIGNALS_STEP_AGGREGATOR_H_

#include <array>
#include <memory>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "daemon/core/heartbeat.h"
#include "daemon/core/job.h"

namespace trainsup {

// A rank, and the node it reported from.
struct RankAt {
  uint32_t rank = 0;
  NodeIndex node = kNoNode;
};

// What the ranks said of one step, summed over them: one record per step of
// the job, whatever its number of ranks.
struct StepSignals {
  int64_t step = -1;
  absl::Time time;     // when its first STEP was heard
  uint32_t ranks = 0;  // STEPs counted
  // The mean finite loss over the ranks that sent one, and how many sent a
  // non-finite one.
  std::optional<double> loss;
  uint32_t loss_nonfinite = 0;
  std::optional<double> learning_rate;  // the first rank's
  // The largest finite gradient norm (and its rank); ranks with a
  // non-finite one, and the first of them.
  std::optional<double> grad_norm;
  RankAt grad_norm_at;
  uint32_t grad_nonfinite = 0;
  RankAt grad_nonfinite_at;
  // Mean step time over the ranks whose step was measured and held no
  // blocking checkpoint; mean data wait.
  std::optional<double> step_time_s;
  std::optional<double> data_wait_s;
  uint64_t samples = 0;  // summed over ranks (0: none sent)
  uint64_t tokens = 0;
  // The rank using the most device memory (its capacity, when it sent one),
  // and the rank with the largest host RSS.
  std::optional<double> device_memory_bytes;
  RankAt device_memory_at;
  std::optional<double> device_capacity_bytes;
  std::optional<double> host_rss_bytes;
  RankAt host_rss_at;
};

// A replica group whose ranks did not all send the same digest at a step:
// the ranks that disagree with its majority, or no majority at all.
struct ReplicaDisagreement {
  int64_t step = -1;
  uint32_t group = 0;
  uint32_t group_ranks = 0;  // digests heard from the group at the step
  uint32_t majority = 0;     // ranks that agreed on the commonest digest
  bool no_majority = false;  // fewer than 2 agreed, or not more than half
  // The disagreeing ranks (0 when no_majority), and the first few of them.
  uint32_t disagreeing = 0;
  std::vector<RankAt> named;
};

// Sums the STEP heartbeats of a generation per step, in O(1) per heartbeat
// and without allocating once warm, and hands each step's record over in
// step order: when every rank reporting has sent it, when the job is
// kSlots steps past it, or when it is older than Expire()'s age. A STEP that
// arrives after its step was handed over is counted late and left out.
// Thread-compatible.
class StepAggregator {
 public:
  static constexpr size_t kSlots = 64;
  // Digests told apart per group and step; more are counted, unnamed.
  static constexpr size_t kDigestsPerGroup = 3;
  // Disagreeing ranks named per digest.
  static constexpr size_t kNamedPerDigest = 4;

  StepAggregator() = default;
  StepAggregator(const StepAggregator&) = delete;
  StepAggregator& operator=(const StepAggregator&) = delete;

  // `rank` on `node` completed hb.step at `now` (hb a STEP); it blocked
  // `checkpoint_s` seconds in a checkpoint since its previous step.
  // `expected_ranks`: how many ranks report in the generation.
  void Add(absl::Time now, RankAt at, const Heartbeat& hb, double checkpoint_s,
           uint32_t expected_ranks);
  // Hands over the steps first heard before `now - age` (and any complete
  // ones after them).
  void Expire(absl::Time now, absl::Duration age);
  // Starts over (a new generation).
  void Clear();

  // The records handed over, in step order, and the replica groups that
  // disagreed in them; the caller clears both once read (the vectors keep
  // their memory).
  std::vector<StepSignals>& ready() { return ready_; }
  std::vector<ReplicaDisagreement>& disagreements() { return disagreements_; }
  uint64_t late() const { return late_; }

 private:
  struct Digest {
    uint64_t value = 0;
    uint32_t count = 0;
    std::array<RankAt, kNamedPerDigest> first{};
  };
  struct GroupTally {
    uint32_t total = 0;
    uint32_t others = 0;  // digests beyond kDigestsPerGroup
    std::array<Digest, kDigestsPerGroup> digests{};
    size_t used = 0;
  };
  struct Slot {
    bool open = false;
    bool complete = false;  // every rank reporting has sent it
    uint32_t count = 0;
    StepSignals s;
    double loss_sum = 0;
    uint32_t loss_n = 0;
    double step_time_sum = 0;
    uint32_t step_time_n = 0;
    double data_wait_sum = 0;
    uint32_t data_wait_n = 0;
    absl::flat_hash_map<uint32_t, GroupTally> groups;
  };

  Slot& SlotOf(int64_t step) { return (*slots_)[static_cast<size_t>(step) % kSlots]; }
  static void Accumulate(Slot& slot, RankAt at, const Heartbeat& hb, double checkpoint_s);
  static void Tally(Slot& slot, RankAt at, uint64_t digest, uint32_t group);
  // Hands over the lowest open step; the complete ones from the lowest on.
  void FinalizeLowest();
  void FinalizeComplete();
  void Finalize(Slot& slot);
  void Judge(int64_t step, uint32_t group, const GroupTally& tally);
  void AdvanceLowest();

  // Taken at the first STEP, not before: trainsupd holds up to --max-jobs
  // jobs, most of which may never send one (20 KiB each).
  std::unique_ptr<std::array<Slot, kSlots>> slots_;
  int64_t lowest_open_ = -1;   // -1: none open
  int64_t highest_open_ = -1;
  int64_t last_final_ = -1;    // the last step handed over
  uint64_t late_ = 0;
  std::vector<StepSignals> ready_;
  std::vector<ReplicaDisagreement> disagreements_;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_SIGNALS_STEP_AGGREGATOR_H_
