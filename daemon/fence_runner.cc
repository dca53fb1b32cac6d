#include "daemon/fence_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/format.h"

extern char** environ;

namespace trainsup {
namespace {

constexpr size_t kMaxOutput = 1024;

// The exit status in words (ExitStatusText): "exit code 0", "killed by
// SIGTERM (signal 15)".
std::string Describe(int wait_status) {
  const bool exited = WIFEXITED(wait_status);
  const bool signaled = WIFSIGNALED(wait_status);
  return ExitStatusText(exited || signaled, exited ? WEXITSTATUS(wait_status) : 0,
                        signaled ? WTERMSIG(wait_status) : 0);
}

}  // namespace

FenceRunner::FenceRunner(std::string command, absl::Duration timeout, DoneFn done)
    : command_(std::move(command)), timeout_(timeout), done_(std::move(done)) {
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

void FenceRunner::Enqueue(const std::string& node, const std::string& reason) {
  absl::MutexLock lock(&mu_);
  queue_.emplace_back(node, reason);
}

void FenceRunner::Loop() {
  for (;;) {
    std::pair<std::string, std::string> job;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !queue_.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    auto [ok, detail] = RunOnce(command_, job.first, job.second, timeout_);
    done_(job.first, ok, detail);
  }
}

std::pair<bool, std::string> FenceRunner::RunOnce(const std::string& command,
                                                  const std::string& node,
                                                  const std::string& reason,
                                                  absl::Duration timeout) {
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

  std::string output;
  bool timed_out = false;
  const absl::Duration deadline = SteadyNow() + timeout;
  for (;;) {
    const absl::Duration left = deadline - SteadyNow();
    if (left <= absl::ZeroDuration()) {
      timed_out = true;
      break;
    }
    pollfd p{pipe_fds[0], POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1) <= 0) continue;
    char buffer[512];
    const ssize_t n = read(pipe_fds[0], buffer, sizeof(buffer));
    if (n <= 0) break;  // EOF: the command (and whatever it started) closed its output
    if (output.size() < kMaxOutput) output.append(buffer, std::min<size_t>(n, kMaxOutput - output.size()));
  }
  close(pipe_fds[0]);
  if (timed_out) kill(-pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  while (!output.empty() && (output.back() == '\n' || output.back() == ' ')) output.pop_back();
  const bool ok = !timed_out && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  std::string detail = timed_out ? absl::StrCat("timed out after ", absl::FormatDuration(timeout),
                                                " (killed)")
                                 : Describe(status);
  if (!output.empty()) absl::StrAppend(&detail, "; output: ", output);
  return {ok, detail};
}

}  // namespace trainsup
