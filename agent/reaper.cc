#include "agent/reaper.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace trainsup {
namespace {

// The pipe's read end in the reaper.
constexpr int kPipeFd = 3;

// Closes every descriptor from `first` on. Async-signal-safe.
void CloseFrom(int first, int max_fd) {
  if (close_range(static_cast<unsigned>(first), ~0U, 0) == 0) return;
  for (int fd = first; fd < max_fd; ++fd) close(fd);  // kernels before 5.9
}

// The reaper's whole life, in the forked child: only async-signal-safe calls
// (the agent has threads, whose locks may be held at the fork).
[[noreturn]] void RunReaper(pid_t pgid, int read_fd, int max_fd, const char* message,
                            size_t message_size) {
  setpgid(0, 0);
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGQUIT}) sigaction(s, &ignore, nullptr);
  prctl(PR_SET_NAME, "trainsup-reaper", 0, 0, 0);
  if (read_fd != kPipeFd && dup2(read_fd, kPipeFd) < 0) _exit(1);
  const int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null_fd >= 0) {
    dup2(null_fd, STDIN_FILENO);
    dup2(null_fd, STDOUT_FILENO);
  }
  CloseFrom(kPipeFd + 1, max_fd);  // the write end, the rank socket, gRPC's sockets, ...
  for (;;) {
    char byte;
    const ssize_t n = read(kPipeFd, &byte, 1);
    if (n == 1) _exit(0);  // released: the group ended in order
    if (n < 0 && errno == EINTR) continue;
    break;  // end of file: the agent is gone
  }
  kill(-pgid, SIGKILL);
  ssize_t ignored = write(STDERR_FILENO, message, message_size);
  (void)ignored;
  _exit(0);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Reaper>> Reaper::Start(pid_t pgid) {
  // Everything the child needs is made before the fork.
  const std::string message = absl::StrCat(
      "trainsup-agent reaper: the agent is gone; SIGKILL to its command's process group ", pgid,
      "\n");
  rlimit limit{};
  const int max_fd = getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY
                         ? static_cast<int>(std::min<rlim_t>(limit.rlim_cur, 1 << 20))
                         : 1 << 16;
  // A pipe in all but name: a stream socket pair, so that telling a reaper
  // that someone else killed cannot raise SIGPIPE in the agent.
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    return absl::InternalError(absl::StrCat("socketpair for the reaper: ", strerror(errno)));
  }
  const pid_t pid = fork();
  if (pid < 0) {
    const int error = errno;
    close(fds[0]);
    close(fds[1]);
    return absl::InternalError(absl::StrCat("fork of the reaper: ", strerror(error)));
  }
  if (pid == 0) RunReaper(pgid, fds[0], max_fd, message.data(), message.size());
  close(fds[0]);
  return std::unique_ptr<Reaper>(new Reaper(pid, fds[1]));
}

Reaper::~Reaper() { Release(); }

void Reaper::Release() {
  if (write_fd_ < 0) return;
  const char byte = 0;
  ssize_t ignored = send(write_fd_, &byte, 1, MSG_NOSIGNAL);
  (void)ignored;
  close(write_fd_);
  write_fd_ = -1;
}

}  // namespace trainsup
