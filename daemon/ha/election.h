#ifndef TRAINSUP_DAEMON_HA_ELECTION_H_
#define TRAINSUP_DAEMON_HA_ELECTION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/ha/acting_deadline.h"
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

// The leadership a write is fenced on: the election key this instance holds
// and its create revision (the epoch). epoch 0: not elected.
struct FencingToken {
  std::string key;
  int64_t epoch = 0;
};

// The rest of trainsupd depends on this, not on etcd: it campaigns from
// construction (the implementation's), keeps its lease, and tells its
// state. EtcdElection in production; a fake drives HaServer's tests.
// Thread-safe.
class Election {
 public:
  virtual ~Election() = default;

  // One instance campaigning: what it proclaimed ("NAME ADDRESS") and its
  // key's create revision.
  struct Candidate {
    std::string value;
    int64_t create_revision = 0;
  };

  // The state now.
  virtual ElectionState Current() const = 0;
  // Blocks until the state's `changes` differs from `seen`, or `timeout`
  // passes; returns the state then.
  virtual ElectionState Await(uint64_t seen, absl::Duration timeout) const = 0;
  // Stops campaigning and gives leadership (or the place in line) up at
  // once: revokes the lease, so that another instance wins without waiting
  // for it to expire. Idempotent; the state is standby after it.
  virtual void Resign() = 0;

  // What this instance's writes to the shared state are fenced on: its
  // election key and epoch while elected (leading or suspended), else
  // epoch 0.
  virtual FencingToken Token() const = 0;
  // Until when this instance may act: moved with every renewal while it
  // leads, the infinite past otherwise. Lives as long as the election.
  virtual const ActingDeadline& acting_deadline() const = 0;
  // The election's name (its keys' prefix).
  virtual const std::string& election_name() const = 0;
  // The candidates now, in line (the leader first).
  virtual absl::StatusOr<std::vector<Candidate>> Candidates() const = 0;
  // The last renewal's round trip (zero before the first).
  virtual absl::Duration last_renew_latency() const = 0;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_HA_ELECTION_H_
