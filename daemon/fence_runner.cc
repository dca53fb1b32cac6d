#include "daemon/fence_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/format.h"
#include "common/limits.h"

extern char** environ;

namespace trainsup {
namespace {


// The exit status in words (ExitStatusText): "exit code 0", "killed by
// SIGTERM (signal 15)".
std::string Describe(int wait_status) {
  const bool exited = WIFEXITED(wait_status);
  const bool signaled = WIFSIGNALED(wait_status);
  return ExitStatusText(exited || signaled, exited ? WEXITSTATUS(wait_status) : 0,
                        signaled ? WTERMSIG(wait_status) : 0);
}

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

FenceRunner::FenceRunner(Commands commands, absl::Duration timeout, DoneFn done)
    : commands_(std::move(commands)), timeout_(timeout), done_(std::move(done)) {
  thread_ = std::thread([this] { Loop(); });
}

FenceRunner::~FenceRunner() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    queue_.clear();
  }
  thread_.join();
}

bool FenceRunner::Enqueue(const FenceRequest& request) {
  if (CommandFor(request.action).empty()) return false;
  absl::MutexLock lock(&mu_);
  queue_.push_back(request);
  return true;
}

void FenceRunner::Loop() {
  for (;;) {
    FenceRequest job;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !queue_.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    auto [ok, detail] = RunOnce(CommandFor(job.action), job.node, job.reason, timeout_);
    done_(job, ok, detail);
  }
}

std::pair<bool, std::string> FenceRunner::RunOnce(const std::string& command,
                                                  const std::string& node,
                                                  const std::string& reason,
                                                  absl::Duration timeout) {
  // The last line of defence: a name beginning with '-' would read as an
  // option to the scheduler's tool (the supervisor refuses such names).
  if (!IsValidName(node)) return {false, absl::StrCat("refused: the node name must be ", kNameRule)};
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return {false, absl::StrCat("pipe: ", strerror(errno))};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t empty;
  sigemptyset(&empty);
  posix_spawnattr_setsigmask(&attr, &empty);  // trainsupd blocks SIGTERM/SIGINT for sigwait
  posix_spawnattr_setpgroup(&attr, 0);        // its own group: a timeout kills all of it
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETPGROUP);
  std::vector<std::string> args = {command, node, reason};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int err = posix_spawnp(&pid, command.c_str(), &actions, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(pipe_fds[1]);
  if (err != 0) {
    close(pipe_fds[0]);
    return {false, absl::StrCat("cannot run ", command, ": ", strerror(err))};
  }

  // Waits for both ends of the command: its output closed (EOF) and its
  // process exited (seen through a pidfd, without reaping it, so that its
  // process group id stays valid for the kill below). Either may come first:
  // a command may exit and leave a child holding the output, or close its
  // output and keep running. At the deadline, whatever is left is killed.
  ProcessExitFd exit_fd(pid);
  std::string output;
  bool output_open = true;
  bool exited = false;
  const absl::Duration deadline = SteadyNow() + timeout;
  while (output_open || !exited) {
    const absl::Duration left = deadline - SteadyNow();
    if (left <= absl::ZeroDuration()) break;
    pollfd fds[2] = {{output_open ? pipe_fds[0] : -1, POLLIN, 0},
                     {exited ? -1 : exit_fd.fd(), POLLIN, 0}};
    // Without a pidfd (kernels before 5.3) the exit is checked every 50ms.
    const int64_t wait_ms = exit_fd.fd() >= 0 ? absl::ToInt64Milliseconds(left) + 1
                                              : std::min<int64_t>(50, absl::ToInt64Milliseconds(left) + 1);
    if (poll(fds, 2, static_cast<int>(wait_ms)) < 0 && errno != EINTR) break;
    if (output_open && fds[0].revents != 0) {
      char buffer[4096];
      const ssize_t n = read(pipe_fds[0], buffer, sizeof(buffer));
      if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
        output_open = false;
      } else if (n > 0 && output.size() <= kMaxFenceOutputLength) {
        output.append(buffer, n);  // more than the limit: ClipText marks the cut
      }
    }
    if (!exited) exited = exit_fd.Exited(fds[1].revents);
  }
  close(pipe_fds[0]);
  const bool timed_out = !exited;
  const bool left_running = exited && output_open;  // a child kept the output past the deadline
  if (timed_out || left_running) kill(-pid, SIGKILL);
  int status = 0;
  const bool reaped = ReapWithin(pid, absl::Seconds(1), &status);

  while (!output.empty() && (output.back() == '\n' || output.back() == ' ')) output.pop_back();
  const bool ok = !timed_out && reaped && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  std::string detail;
  if (timed_out) {
    detail = absl::StrCat("timed out after ", absl::FormatDuration(timeout),
                          output_open ? "" : " (its output closed, still running)",
                          "; its process group was killed");
    if (!reaped) absl::StrAppend(&detail, ", and did not die within 1s");
  } else {
    detail = Describe(status);
    if (left_running) {
      absl::StrAppend(&detail, "; processes it left holding its output were killed after ",
                      absl::FormatDuration(timeout));
    }
  }
  if (!output.empty()) absl::StrAppend(&detail, "; output: ", ClipText(output, kMaxFenceOutputLength));
  return {ok, detail};
}

}  // namespace trainsup
