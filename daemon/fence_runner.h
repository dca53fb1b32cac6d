#ifndef TRAINSUP_DAEMON_FENCE_RUNNER_H_
#define TRAINSUP_DAEMON_FENCE_RUNNER_H_

#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace trainsup {

// Runs the operator's --fence-command for quarantined nodes, one at a time on
// a thread of its own, so that a slow scheduler never holds up the
// supervisor: `COMMAND NODE REASON` (e.g. a script around `scontrol update
// NodeName=$1 State=DRAIN Reason="$2"` or `kubectl cordon -- $1`). Its output
// (stdout and stderr, the first KiB as valid UTF-8) and result go to `done`.
//
// A command never wedges the runner: at the timeout it is killed with its
// whole process group, whether it still writes, has closed its output and
// lives on, or has exited and left a child holding the output; each run
// returns within the timeout and a second. Commands may run more than once
// for a node (see docs/recovery.md): they must be idempotent. Thread-safe.
class FenceRunner {
 public:
  // `done(node, ok, detail)` is called on the runner's thread.
  using DoneFn = std::function<void(const std::string& node, bool ok, const std::string& detail)>;

  // REQUIRES: command is not empty.
  FenceRunner(std::string command, absl::Duration timeout, DoneFn done);
  ~FenceRunner();  // finishes the command in flight, drops the queued ones

  FenceRunner(const FenceRunner&) = delete;
  FenceRunner& operator=(const FenceRunner&) = delete;

  void Enqueue(const std::string& node, const std::string& reason);

  // Runs one command now, on the caller's thread. Returns (ok, detail).
  static std::pair<bool, std::string> RunOnce(const std::string& command, const std::string& node,
                                              const std::string& reason, absl::Duration timeout);

 private:
  void Loop();

  const std::string command_;
  const absl::Duration timeout_;
  const DoneFn done_;
  absl::Mutex mu_;
  std::deque<std::pair<std::string, std::string>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_FENCE_RUNNER_H_
