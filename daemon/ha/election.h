#ifndef TRAINSUP_DAEMON_HA_ELECTION_H_
#define TRAINSUP_DAEMON_HA_ELECTION_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "daemon/ha/leadership.h"

namespace trainsup {

// What an election says of this instance. `changes` grows by one with
// every change of `role` (or of the epoch), so a watcher never misses one.
struct ElectionState {
  Leadership::Role role = Leadership::Role::kStandby;
  int64_t epoch = 0;      // the leader key's revision while elected, else 0
  std::string leader;     // who leads, as it proclaimed itself ("NAME ADDRESS"); may be empty
  std::string reason;     // why the role last changed, for the log
  uint64_t changes = 0;
  uint64_t elections_won = 0;
};

// The rest of trainsupd depends on this, not on etcd: it campaigns from
// construction (the implementation's), keeps its lease, and tells its
// state. Thread-safe.
class Election {
 public:
  virtual ~Election() = default;

  // The state now.
  virtual ElectionState Current() const = 0;
  // Blocks until the state's `changes` differs from `seen`, or `timeout`
  // passes; returns the state then.
  virtual ElectionState Await(uint64_t seen, absl::Duration timeout) const = 0;
  // Stops campaigning and gives leadership (or the place in line) up at
  // once: revokes the lease, so that another instance wins without waiting
  // for it to expire. Idempotent; the state is standby after it.
  virtual void Resign() = 0;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_HA_ELECTION_H_
