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
#include "daemon/core/decisions.h"

namespace trainsup {

// Runs the operator's --fence-command for quarantined nodes, and its
// --unfence-command for nodes whose quarantine was lifted, one at a time in
// the order enqueued (so a node's unfence never overtakes its fence) on a
// thread of its own, so that a slow scheduler never holds up the supervisor:
// `COMMAND NODE REASON` (e.g. a script around `scontrol update NodeName=$1
// State=DRAIN Reason="$2"` or `kubectl cordon -- $1`, and `State=RESUME` or
// `kubectl uncordon`). Its output (stdout and stderr, the first KiB as valid
// UTF-8) and result go to `done`.
//
// A command never wedges the runner: at the timeout it is killed with its
// whole process group, whether it still writes, has closed its output and
// lives on, or has exited and left a child holding the output; each run
// returns within the timeout and a second. Commands may run more than once
// for a node (see docs/recovery.md): they must be idempotent. Thread-safe.
class FenceRunner {
 public:
  // `done(request, ok, detail)` is called on the runner's thread.
  using DoneFn =
      std::function<void(const FenceRequest& request, bool ok, const std::string& detail)>;

  // The command for each action; an empty one is not run.
  struct Commands {
    std::string fence;
    std::string unfence;
  };

  // REQUIRES: at least one command is not empty.
  FenceRunner(Commands commands, absl::Duration timeout, DoneFn done);
  ~FenceRunner();  // finishes the command in flight, drops the queued ones

  FenceRunner(const FenceRunner&) = delete;
  FenceRunner& operator=(const FenceRunner&) = delete;

  // Queues the command for `request.action`. False, and nothing queued, when
  // that action has no command.
  bool Enqueue(const FenceRequest& request);

  // Runs one command now, on the caller's thread. Returns (ok, detail).
  static std::pair<bool, std::string> RunOnce(const std::string& command, const std::string& node,
                                              const std::string& reason, absl::Duration timeout);

 private:
  void Loop();

  const std::string& CommandFor(FenceAction action) const {
    return action == FenceAction::kUnfence ? commands_.unfence : commands_.fence;
  }

  const Commands commands_;
  const absl::Duration timeout_;
  const DoneFn done_;
  absl::Mutex mu_;
  std::deque<FenceRequest> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_FENCE_RUNNER_H_
