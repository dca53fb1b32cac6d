#ifndef TRAINSUP_AGENT_LAUNCHER_H_
#define TRAINSUP_AGENT_LAUNCHER_H_

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "trainsup/v1/agent.pb.h"

namespace trainsup {

// Runs the agent's command (normally torchrun) in a process group of its own,
// so that one signal reaches torchrun and every rank it started. Not
// thread-safe: the agent's event loop owns it.
class Launcher {
 public:
  using EnvVars = std::vector<std::pair<std::string, std::string>>;

  Launcher() = default;
  Launcher(const Launcher&) = delete;
  Launcher& operator=(const Launcher&) = delete;

  // Starts `argv` (argv[0] looked up on PATH) with the agent's environment
  // plus `extra_env`. REQUIRES: not running.
  absl::Status Start(const std::vector<std::string>& argv, const EnvVars& extra_env);

  // Sends `signal` to the command's whole process group. No-op when not running.
  void SignalGroup(int signal);

  // Reaps every child that has exited (the agent is a child subreaper, so
  // orphaned ranks end up here too) and records the command's own status.
  // Returns true when the command itself ended in this call.
  bool ReapChildren();

  bool running() const { return status_.state() == v1::LauncherStatus::STATE_RUNNING ||
                                status_.state() == v1::LauncherStatus::STATE_STOPPING; }
  pid_t pid() const { return pid_; }
  const v1::LauncherStatus& status() const { return status_; }

 private:
  pid_t pid_ = 0;
  v1::LauncherStatus status_;
};

}  // namespace trainsup

#endif  // TRAINSUP_AGENT_LAUNCHER_H_
