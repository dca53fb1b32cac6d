#ifndef TRAINSUP_AGENT_LAUNCHER_H_
#define TRAINSUP_AGENT_LAUNCHER_H_

#include <sys/types.h>

#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "agent/reaper.h"
#include "agent/stderr_tee.h"
#include "trainsup/v1/agent.pb.h"

namespace trainsup {

// Runs the agent's command (normally torchrun) in a process group of its own,
// so that one signal reaches torchrun and every rank it started, and makes
// sure that group dies with the agent: the command gets SIGKILL when the
// agent dies (PR_SET_PDEATHSIG), and a Reaper SIGKILLs the whole group. The
// command inherits no descriptor of the agent but stdin and stdout; its
// stderr is a pipe that a StderrTee passes on to the agent's own stderr,
// keeping its last lines. Not thread-safe: the agent's event loop owns it.
class Launcher {
 public:
  using EnvVars = std::vector<std::pair<std::string, std::string>>;

  Launcher() = default;
  // SIGKILLs a command still running, and releases its reaper.
  ~Launcher();
  Launcher(const Launcher&) = delete;
  Launcher& operator=(const Launcher&) = delete;

  // Starts `argv` (argv[0] looked up on PATH) with the agent's environment
  // plus `extra_env`, and its reaper. The command runs even if the reaper
  // could not be started (then reaper_pid() is 0: the caller warns).
  // REQUIRES: not running; called on a thread that lives as long as the
  // agent (its main thread): the kernel sends the death signal when the
  // thread that started the command ends.
  absl::Status Start(const std::vector<std::string>& argv, const EnvVars& extra_env);

  // Sends `signal` to the command's whole process group. No-op when not running.
  void SignalGroup(int signal);

  // Reaps every child that has exited (the agent is a child subreaper, so
  // orphaned ranks end up here too, and so do reapers) and records the
  // command's own status. Returns true when the command itself ended in
  // this call.
  bool ReapChildren();

  // After the command ended: SIGKILL to whatever is left of its group, and
  // release its reaper. Idempotent.
  void EndGroup();

  bool running() const { return status_.state() == v1::LauncherStatus::STATE_RUNNING ||
                                status_.state() == v1::LauncherStatus::STATE_STOPPING; }
  pid_t pid() const { return pid_; }
  // The current command's reaper; 0 when there is none.
  pid_t reaper_pid() const { return reaper_ != nullptr ? reaper_->pid() : 0; }
  const v1::LauncherStatus& status() const { return status_; }

  // The last lines the current (or last) command wrote to its stderr,
  // oldest first; empty before the first.
  std::deque<std::string> StderrTail() const;
  // After the command ended (and its group was ended): waits up to
  // `timeout` for the rest of what it wrote to stderr. True when all came.
  bool AwaitStderr(absl::Duration timeout);

 private:
  pid_t pid_ = 0;
  v1::LauncherStatus status_;
  bool group_left_ = false;  // the last command's group may still hold processes
  std::unique_ptr<Reaper> reaper_;
  std::unique_ptr<StderrTee> stderr_;  // the command's stderr
};

}  // namespace trainsup

#endif  // TRAINSUP_AGENT_LAUNCHER_H_
