#include "common/bounded_run.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "common/clock.h"

extern char** environ;

namespace trainsup {
namespace {

// A pidfd for a child (Linux 5.3+): readable once the child has exited,
// before it is reaped. Without one (older kernels), Exited() asks waitid()
// without reaping.
class ProcessExitFd {
 public:
  explicit ProcessExitFd(pid_t pid)
      : pid_(pid), fd_(static_cast<int>(syscall(SYS_pidfd_open, pid, 0))) {}
  ~ProcessExitFd() {
    if (fd_ >= 0) close(fd_);
  }
  ProcessExitFd(const ProcessExitFd&) = delete;
  ProcessExitFd& operator=(const ProcessExitFd&) = delete;

  int fd() const { return fd_; }
  // Whether the child has exited; `revents` is what poll() said of fd().
  bool Exited(short revents) const {
    if (fd_ >= 0) return revents != 0;
    siginfo_t info{};
    return waitid(P_PID, pid_, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid_;
  }

 private:
  const pid_t pid_;
  const int fd_;
};

// Reaps `pid` (already exited or SIGKILLed) within `grace`. A process that
// does not die even then (stuck in the kernel, e.g. on a dead NFS mount) is
// left to a detached thread to reap, so that the caller never wedges.
bool ReapWithin(pid_t pid, absl::Duration grace, int* status) {
  ProcessExitFd exit_fd(pid);
  const absl::Duration deadline = SteadyNow() + grace;
  for (;;) {
    if (waitpid(pid, status, WNOHANG) == pid) return true;
    const absl::Duration left = deadline - SteadyNow();
    if (left <= absl::ZeroDuration()) break;
    pollfd p{exit_fd.fd(), POLLIN, 0};
    const int64_t wait_ms = exit_fd.fd() >= 0 ? absl::ToInt64Milliseconds(left) + 1 : 10;
    poll(&p, 1, static_cast<int>(wait_ms));
  }
  std::thread([pid] {
    int ignored = 0;
    waitpid(pid, &ignored, 0);
  }).detach();
  return false;
}

}  // namespace

bool BoundedRunResult::succeeded() const {
  return spawn_error == 0 && !timed_out && reaped && WIFEXITED(status) &&
         WEXITSTATUS(status) == 0;
}

BoundedRunResult RunBounded(const std::vector<std::string>& argv,
                            const BoundedRunOptions& options) {
  BoundedRunResult result;
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    result.spawn_error = errno;
    return result;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  if (options.merge_stderr) {
    posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDERR_FILENO);
  } else {
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  }
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t empty;
  sigemptyset(&empty);
  // The daemons block their signals (sigwait, signalfd); the command must not inherit that.
  posix_spawnattr_setsigmask(&attr, &empty);
  posix_spawnattr_setpgroup(&attr, 0);  // its own group: a timeout kills all of it
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETPGROUP);
  std::vector<std::string> args = argv;
  std::vector<char*> c_args;
  for (std::string& a : args) c_args.push_back(a.data());
  c_args.push_back(nullptr);
  pid_t pid = 0;
  const int err = posix_spawnp(&pid, c_args[0], &actions, &attr, c_args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(pipe_fds[1]);
  if (err != 0) {
    close(pipe_fds[0]);
    result.spawn_error = err;
    return result;
  }

  // Its exit is seen through a pidfd, without reaping it, so that its
  // process group id stays valid for the kill below.
  ProcessExitFd exit_fd(pid);
  bool output_open = true;
  bool exited = false;
  const absl::Duration deadline = SteadyNow() + options.timeout;
  while (output_open || !exited) {
    const absl::Duration left = deadline - SteadyNow();
    if (left <= absl::ZeroDuration()) break;
    pollfd fds[2] = {{output_open ? pipe_fds[0] : -1, POLLIN, 0},
                     {exited ? -1 : exit_fd.fd(), POLLIN, 0}};
    // Without a pidfd (kernels before 5.3) the exit is checked every 50ms.
    const int64_t wait_ms = exit_fd.fd() >= 0
                                ? absl::ToInt64Milliseconds(left) + 1
                                : std::min<int64_t>(50, absl::ToInt64Milliseconds(left) + 1);
    if (poll(fds, 2, static_cast<int>(wait_ms)) < 0 && errno != EINTR) break;
    if (output_open && fds[0].revents != 0) {
      char buffer[4096];
      const ssize_t n = read(pipe_fds[0], buffer, sizeof(buffer));
      if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
        output_open = false;
      } else if (n > 0 && result.output.size() <= options.max_output) {
        result.output.append(buffer, n);
      }
    }
    if (!exited) exited = exit_fd.Exited(fds[1].revents);
  }
  close(pipe_fds[0]);
  result.timed_out = !exited;
  result.output_open = output_open;
  result.left_running = exited && output_open;
  if (result.timed_out || result.left_running) kill(-pid, SIGKILL);
  result.reaped = ReapWithin(pid, absl::Seconds(1), &result.status);
  return result;
}

}  // namespace trainsup
