#ifndef TRAINSUP_AGENT_STACK_COLLECTION_H_
#define TRAINSUP_AGENT_STACK_COLLECTION_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "agent/rank_watcher.h"

namespace trainsup {

// Once the stack file of an asked rank grew, the rank has answered when the
// file has not changed for this long (faulthandler writes a dump in one burst).
inline constexpr absl::Duration kStackQuietTime = absl::Milliseconds(100);
// At most this much of a rank's dump is reported (RankStack.text).
inline constexpr int64_t kMaxStackBytes = 64 << 10;

// One collection of the ranks' Python stacks before a stop (a hung job):
// which ranks are asked, when each has answered, what to read of its file.
// Pure: the event loop signals the ranks, reads the files' sizes and passes
// them in with the time; the collection's time limit is AgentStateMachine's.
// Each rank writes its dumps to its own file (stack-RANK.txt), appending, so
// what it wrote in answer is what follows the size noted before the signal.
// Thread-compatible.
class StackCollection {
 public:
  // Reports the ranks of `generation` among `ranks` (the watched processes),
  // and asks those alive with a stack signal.
  StackCollection(uint64_t generation, const std::vector<ProcessObservation>& ranks);
  StackCollection(const StackCollection&) = delete;
  StackCollection& operator=(const StackCollection&) = delete;

  struct Target {
    uint32_t rank = 0;
    pid_t pid = 0;
    int signal = 0;
  };
  // The ranks to ask: note the size of each one's file, then signal it.
  const std::vector<Target>& targets() const { return targets_; }

  // `rank`'s file held `size_before` bytes (0 when missing) before it was
  // signalled; `signalled`: false when the signal could not be sent (the
  // process is gone), and it will not answer. REQUIRES: once per target.
  void Asked(uint32_t rank, int64_t size_before, bool signalled);

  // `rank`'s file holds `size` bytes at `now` (0 when missing).
  void Observe(uint32_t rank, int64_t size, absl::Duration now);

  // NCCL's flight recorder (docs/gpu.md): `rank` was asked for a dump
  // through its pipe (`asked`: false when no process reads the pipe: the
  // rank has no NCCL group, or did not set one up), its dump file's
  // modification time (ns; 0 when missing) noted before. A dump is written
  // whole, anew: a new modification time is its answer.
  void AskedDump(uint32_t rank, int64_t stamp_before, bool asked);
  // `rank`'s dump file has modification time `stamp` at `now`.
  void ObserveDump(uint32_t rank, int64_t stamp, absl::Duration now);
  // The ranks asked for a dump that may still write it.
  std::vector<uint32_t> PendingDumps(absl::Duration now) const;

  // The asked ranks that may still answer: whose files to Observe.
  std::vector<uint32_t> Pending(absl::Duration now) const;
  // True once no asked rank may answer any more: each one answered (its file
  // grew and then stayed the same for kStackQuietTime) or cannot, and so
  // for the dumps asked for.
  bool Done(absl::Duration now) const {
    return Pending(now).empty() && PendingDumps(now).empty();
  }

  // What to report of one rank: answered when its file grew since it was
  // asked (an answer still being written counts: the collection may end
  // first); then `length` bytes from `offset` are its text (at most
  // kMaxStackBytes).
  struct Result {
    uint32_t rank = 0;
    uint32_t local_rank = 0;
    uint32_t pid = 0;
    bool answered = false;
    int64_t offset = 0;
    int64_t length = 0;
    bool dumped = false;  // its flight recorder wrote a dump since it was asked
  };
  // Every rank of the generation, by rank.
  std::vector<Result> Results() const;

  uint64_t generation() const { return generation_; }

 private:
  struct Rank {
    uint32_t local_rank = 0;
    uint32_t pid = 0;
    bool asked = false;      // a target
    bool can_answer = false;  // asked, and the signal went out
    int64_t size_before = 0;
    int64_t size = 0;
    absl::Duration changed_at;  // when `size` was last seen to change
    // The flight recorder's dump: asked through the pipe, its file's
    // modification time before and now, when it last changed.
    bool dump_asked = false;
    int64_t dump_before = 0;
    int64_t dump_stamp = 0;
    absl::Duration dump_changed_at;
  };
  bool Answered(const Rank& r) const { return r.size > r.size_before; }
  bool Dumped(const Rank& r) const { return r.dump_asked && r.dump_stamp != r.dump_before; }

  const uint64_t generation_;
  std::vector<Target> targets_;
  std::map<uint32_t, Rank> ranks_;
};

// Stack text as it may go in a proto string: bytes outside printable ASCII
// (but for newlines and tabs) become '?'. faulthandler writes ASCII.
std::string StackText(absl::string_view bytes);

}  // namespace trainsup

#endif  // TRAINSUP_AGENT_STACK_COLLECTION_H_
