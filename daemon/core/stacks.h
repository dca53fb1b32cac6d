#ifndef TRAINSUP_DAEMON_CORE_STACKS_H_
#define TRAINSUP_DAEMON_CORE_STACKS_H_

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/collective_record.h"
#include "daemon/core/collective_culprit.h"
#include "absl/time/time.h"

namespace trainsup {

// The most a rank's stack may hold; the agent cuts longer dumps.
constexpr size_t kMaxStackBytes = 64 * 1024;

// One rank's Python stack from a hung generation.
struct RankStack {
  std::string node;
  bool answered = false;
  std::string text;  // faulthandler's dump of every thread
};

// The stacks of a hung generation, collected before its ranks were stopped:
// the evidence the on-call person needs.
struct JobStacks {
  uint64_t generation = 0;
  uint64_t event_id = 0;  // the stall (or node_lost) event they belong to
  absl::Time time = absl::InfinitePast();  // first received
  double collect_seconds = 0;              // the slowest agent's
  std::optional<uint32_t> culprit;         // the rank the event named
  std::map<uint32_t, RankStack> by_rank;
  // The ranks' NCCL flight records, and what they say together (judged
  // again as each agent's stacks arrive).
  std::map<uint32_t, FlightRecord> flight_records;
  CollectiveCulprit collective;
  // The ranks whose dump was written but not read, and why.
  std::map<uint32_t, std::string> unread_dumps;
};

// Ranks whose stacks show the same thing.
struct StackGroup {
  std::vector<uint32_t> ranks;     // ascending
  std::vector<std::string> nodes;  // of the ranks, in the same order
  std::string stack;               // the first rank's whole dump
  bool culprit = false;            // holds the culprit
};

// What a dump shows, to group ranks by: the frames of the main thread (the
// last thread faulthandler lists), with thread ids and addresses blanked
// out, so that ranks waiting in the same all-reduce group together.
std::string StackSignature(absl::string_view text);

// The answered ranks grouped by signature: the smallest group first (in a
// hang the culprit is usually alone), then by lowest rank. Ranks that did
// not answer are left out (JobStacks lists them).
std::vector<StackGroup> GroupStacks(const JobStacks& stacks);

// The ranks that wrote no stack in time.
std::vector<uint32_t> UnansweredRanks(const JobStacks& stacks);

// A job's stack sets, one per hung generation, the newest last, at most
// `capacity` (the oldest go). Thread-compatible.
class StackShelf {
 public:
  explicit StackShelf(size_t capacity) : capacity_(capacity) {}

  // The set of `generation`, created (with the event it explains and its
  // culprit) when it is the first of that generation.
  JobStacks& For(uint64_t generation, absl::Time now, uint64_t event_id,
                 std::optional<uint32_t> culprit);
  // `generation`'s set (0: the newest); nullptr when none.
  const JobStacks* Find(uint64_t generation) const;
  bool empty() const { return sets_.empty(); }

 private:
  const size_t capacity_;
  std::deque<JobStacks> sets_;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_STACKS_H_
