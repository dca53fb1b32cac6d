#ifndef TRAINSUP_AGENT_REAPER_H_
#define TRAINSUP_AGENT_REAPER_H_

#include <sys/types.h>

#include <memory>

#include "absl/status/statusor.h"

namespace trainsup {

// A small process that SIGKILLs the command's process group as soon as the
// agent is gone, however it ended (SIGKILL and crashes included), so that no
// torchrun and no rank outlives its agent. It blocks reading a pipe whose
// write end only the agent holds: end of file means the agent died. When the
// command ends in order the agent Releases it, and it exits without killing.
//
// The reaper holds nothing of the agent but that pipe's read end and stderr
// (stdin and stdout are /dev/null; not the rank socket, not the connection
// to the supervisor, which would otherwise stay open after the agent died).
// It lives in a process group of its own and ignores SIGINT, SIGTERM and
// SIGHUP, so that a signal to the agent's group (a terminal's ^C, a
// scheduler's killpg) leaves it to do its work; it ends with the agent anyway.
// Not thread-safe: the agent's event loop owns it.
class Reaper {
 public:
  // Forks the reaper of process group `pgid`. Safe in a multithreaded
  // process: the child makes only async-signal-safe calls.
  static absl::StatusOr<std::unique_ptr<Reaper>> Start(pid_t pgid);
  // Releases it.
  ~Reaper();

  Reaper(const Reaper&) = delete;
  Reaper& operator=(const Reaper&) = delete;

  // The reaper's process id; the agent (a child subreaper) reaps it with the
  // rest of its children.
  pid_t pid() const { return pid_; }

  // The group ended in order: the reaper exits without killing. Idempotent.
  void Release();

 private:
  Reaper(pid_t pid, int write_fd) : pid_(pid), write_fd_(write_fd) {}

  const pid_t pid_;
  int write_fd_;  // -1 once released
};

}  // namespace trainsup

#endif  // TRAINSUP_AGENT_REAPER_H_
