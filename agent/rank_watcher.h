#ifndef TRAINSUP_AGENT_RANK_WATCHER_H_
#define TRAINSUP_AGENT_RANK_WATCHER_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "trainsup/v1/agent.pb.h"
#include "trainsup/v1/heartbeat.pb.h"

namespace trainsup {

// A rank process as last observed; `died_at` (steady time) is set when
// !process.alive(). The report adds how long ago that was when it is sent.
struct ProcessObservation {
  v1::RankProcess process;
  absl::Duration died_at;
  // When process.exception_seen(): when the rank's failure began (steady time).
  absl::Duration exception_at;
  // The signal on which the rank writes its Python stack (its START said so); 0: none.
  int stack_signal = 0;
};

// How far back a rank's own clock may date its failure: further is not
// believed (a clock from another host or time namespace).
inline constexpr absl::Duration kMaxFailureAge = absl::Seconds(60);

// When a failure reported by a heartbeat began (or when a record that rode
// on a later datagram happened), in the agent's steady time:
// the rank's CLOCK_MONOTONIC reading `monotonic_seconds` (the agent's steady
// clock on the same host), at most kMaxFailureAge before `received_at` and
// never after it; `received_at` when the rank gave no time (0, or not finite).
absl::Duration FailureTime(absl::Duration received_at, double monotonic_seconds);

// Watches the rank processes of this node and notes when each one dies, with
// its exit status when it can still be read. The agent learns rank pids from
// their heartbeats. A death is seen through a pidfd (readable the moment the
// process exits), so the time is exact to the event loop's latency; the exit
// status comes from /proc/PID/stat while torchrun has not reaped the zombie.
// Not thread-safe: the agent's event loop owns it.
class RankWatcher {
 public:
  RankWatcher() = default;
  ~RankWatcher();
  RankWatcher(const RankWatcher&) = delete;
  RankWatcher& operator=(const RankWatcher&) = delete;

  // What a heartbeat, received at `received_at`, says of its rank's process:
  // every kind but EXCEPTION and EXIT proves its pid alive (Watch); EXCEPTION
  // and EXIT say its failure began (at FailureTime); START gives its stack
  // signal. `current_generation` stands in for the heartbeat's generation 0.
  // Returns true when this changed what is watched.
  bool Observe(const v1::RankHeartbeat& hb, uint64_t current_generation,
               absl::Duration received_at);

  // Starts watching `pid` as `rank` (a new pid for a known rank replaces the
  // old one). Returns true when this changed what is watched.
  bool Watch(uint32_t rank, uint32_t local_rank, pid_t pid, uint64_t generation,
             absl::Duration steady_now);

  // The rank's failure began at `at` (steady time): an uncaught exception, or
  // the start of its exit. The earliest such time is kept. Returns true when
  // this is news.
  bool NoteFailure(uint32_t rank, absl::Duration at);

  // The ranks that died with a failure (a signal, a non-zero or unknown
  // exit) at or after `since` and reported nothing of it (no exception, no
  // exit: os._exit, SIGKILL, a segfault), and have no stderr line yet:
  // their (rank, local rank).
  std::vector<std::pair<uint32_t, uint32_t>> SilentFailures(absl::Duration since) const;
  // The last line `rank` wrote to stderr that names an infrastructure fault
  // (common/failure_text.h): it goes up with its process. Returns true when
  // this is news.
  bool NoteStderrLine(uint32_t rank, const std::string& line);

  // Sends `signal` to the rank's live process through its pidfd (never to a
  // reused pid). False when the rank is not watched alive or the signal
  // could not be sent.
  bool Signal(uint32_t rank, int signal);

  // The pidfds of live watched ranks, to poll for readability.
  std::vector<int> LiveFds() const;

  // Checks every live rank; records the deaths. Returns true if any died.
  bool CheckExits(absl::Duration steady_now);

  // Every watched process, by rank.
  std::vector<ProcessObservation> Snapshot() const;

  // Forgets everything (a new generation starts).
  void Clear();


 private:
  struct Watched : ProcessObservation {
    int pidfd = -1;
  };
  void MarkDead(Watched& w, absl::Duration steady_now);

  std::map<uint32_t, Watched> ranks_;  // by rank
};

// The wait status of a zombie from one line of /proc/PID/stat (field 52,
// Linux 3.5+); nullopt when the process is not a zombie or the line is not
// of that form. Pure; never throws.
std::optional<int> ZombieWaitStatus(absl::string_view stat_line);

}  // namespace trainsup

#endif  // TRAINSUP_AGENT_RANK_WATCHER_H_
