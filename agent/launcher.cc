#include "agent/launcher.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

extern char** environ;

namespace trainsup {
namespace {

// The environment of the agent, with `extra` set (overriding equal names).
std::vector<std::string> BuildEnvironment(const Launcher::EnvVars& extra) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    absl::string_view entry(*e);
    bool overridden = false;
    for (const auto& [name, value] : extra) {
      if (entry.size() > name.size() && entry.substr(0, name.size()) == name &&
          entry[name.size()] == '=') {
        overridden = true;
        break;
      }
    }
    if (!overridden) env.emplace_back(entry);
  }
  for (const auto& [name, value] : extra) env.push_back(absl::StrCat(name, "=", value));
  return env;
}

std::vector<char*> CStrings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// The paths execvp would try for `file`, in order: `file` itself when it
// holds a '/', else each directory of $PATH (default "/bin:/usr/bin").
std::vector<std::string> ExecCandidates(const std::string& file) {
  if (file.find('/') != std::string::npos) return {file};
  const char* path = std::getenv("PATH");
  std::vector<std::string> out;
  for (absl::string_view dir : absl::StrSplit(path != nullptr ? path : "/bin:/usr/bin", ':')) {
    out.push_back(absl::StrCat(dir.empty() ? "." : dir, "/", file));
  }
  return out;
}

// What the forked child needs, all of it made before the fork.
struct ChildPlan {
  pid_t agent = 0;
  std::vector<char*> paths;  // exec candidates, null-terminated
  char** argv = nullptr;
  char** envp = nullptr;
  int error_fd = -1;  // where to write errno if no exec succeeds
  int stderr_fd = -1;  // the write end of the stderr pipe
};

// The child between fork and exec: only async-signal-safe calls (the agent
// has threads, whose locks may be held at the fork).
[[noreturn]] void ExecChild(const ChildPlan& plan) {
  setpgid(0, 0);
  // Dispositions that exec would keep: back to their defaults.
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  for (int s : {SIGTERM, SIGINT, SIGHUP, SIGCHLD, SIGPIPE, SIGQUIT}) {
    sigaction(s, &default_action, nullptr);
  }
  // Die with the agent. If it already died (the fork raced its death), the
  // command must not start at all: nobody would stop it.
  if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0 || getppid() != plan.agent) _exit(127);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);  // the agent blocks signals for its signalfd
  // Its stderr is the agent's pipe (dup2 leaves the copy open across exec).
  if (plan.stderr_fd == STDERR_FILENO) {
    fcntl(STDERR_FILENO, F_SETFD, 0);
  } else if (dup2(plan.stderr_fd, STDERR_FILENO) < 0) {
    _exit(127);
  }
  // No descriptor of the agent's reaches the command, even one a library
  // opened without O_CLOEXEC.
  close_range(STDERR_FILENO + 1, ~0U, CLOSE_RANGE_CLOEXEC);
  int error = ENOENT;
  for (char* const* path = plan.paths.data(); *path != nullptr; ++path) {
    execve(*path, plan.argv, plan.envp);
    // Like execvp: go on past paths that do not hold the file, remember
    // that one existed but could not run.
    if (errno != ENOENT && errno != ENOTDIR) error = errno;
  }
  ssize_t ignored = write(plan.error_fd, &error, sizeof(error));
  (void)ignored;
  _exit(127);
}

}  // namespace

Launcher::~Launcher() {
  if (running()) kill(-pid_, SIGKILL);
  reaper_.reset();
}

absl::Status Launcher::Start(const std::vector<std::string>& argv, const EnvVars& extra_env) {
  if (argv.empty()) return absl::InvalidArgumentError("no command to run");
  std::vector<std::string> args = argv;
  std::vector<std::string> env = BuildEnvironment(extra_env);
  std::vector<std::string> paths = ExecCandidates(argv[0]);
  std::vector<char*> c_args = CStrings(args);
  std::vector<char*> c_env = CStrings(env);
  ChildPlan plan;
  plan.agent = getpid();
  plan.paths = CStrings(paths);
  plan.argv = c_args.data();
  plan.envp = c_env.data();

  // fork, not posix_spawn: PR_SET_PDEATHSIG must be set in the child. The
  // exec's failure comes back on a close-on-exec pipe (end of file: it ran).
  int error_pipe[2];
  if (pipe2(error_pipe, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", strerror(errno)));
  }
  int stderr_pipe[2];
  if (pipe2(stderr_pipe, O_CLOEXEC) != 0) {
    const int error = errno;
    close(error_pipe[0]);
    close(error_pipe[1]);
    return absl::InternalError(absl::StrCat("pipe for the command's stderr: ", strerror(error)));
  }
  plan.error_fd = error_pipe[1];
  plan.stderr_fd = stderr_pipe[1];
  const pid_t pid = fork();
  if (pid < 0) {
    const int error = errno;
    for (int fd : {error_pipe[0], error_pipe[1], stderr_pipe[0], stderr_pipe[1]}) close(fd);
    return absl::FailedPreconditionError(absl::StrCat("cannot run ", argv[0], ": fork: ",
                                                      strerror(error)));
  }
  if (pid == 0) ExecChild(plan);
  close(error_pipe[1]);
  close(stderr_pipe[1]);
  // Read at once, whatever happens next: the command must never block on
  // a full pipe.
  stderr_ = std::make_unique<StderrTee>(stderr_pipe[0]);
  int child_error = 0;
  ssize_t n;
  do {
    n = read(error_pipe[0], &child_error, sizeof(child_error));
  } while (n < 0 && errno == EINTR);
  close(error_pipe[0]);
  if (n == sizeof(child_error)) {
    waitpid(pid, nullptr, 0);
    return absl::FailedPreconditionError(
        absl::StrCat("cannot run ", argv[0], ": ", strerror(child_error)));
  }
  pid_ = pid;
  status_.Clear();
  status_.set_state(v1::LauncherStatus::STATE_RUNNING);
  status_.set_pid(static_cast<uint32_t>(pid));
  group_left_ = true;
  absl::StatusOr<std::unique_ptr<Reaper>> reaper = Reaper::Start(pid);
  reaper_ = reaper.ok() ? std::move(*reaper) : nullptr;
  return absl::OkStatus();
}

std::deque<std::string> Launcher::StderrTail() const {
  return stderr_ != nullptr ? stderr_->Tail() : std::deque<std::string>();
}

bool Launcher::AwaitStderr(absl::Duration timeout) {
  return stderr_ == nullptr || stderr_->AwaitEnd(timeout);
}

void Launcher::SignalGroup(int signal) {
  if (!running()) return;
  if (signal == SIGTERM || signal == SIGKILL || signal == SIGINT) {
    status_.set_state(v1::LauncherStatus::STATE_STOPPING);
  }
  kill(-pid_, signal);
}

bool Launcher::ReapChildren() {
  bool command_ended = false;
  for (;;) {
    int wstatus = 0;
    pid_t pid = waitpid(-1, &wstatus, WNOHANG);
    if (pid <= 0) break;  // none left to reap now (0) or no children (-1)
    if (pid != pid_ || !running()) continue;
    status_.set_state(v1::LauncherStatus::STATE_EXITED);
    if (WIFEXITED(wstatus)) {
      status_.set_exit_code(WEXITSTATUS(wstatus));
    } else if (WIFSIGNALED(wstatus)) {
      status_.set_signal(WTERMSIG(wstatus));
    }
    command_ended = true;
  }
  return command_ended;
}

void Launcher::EndGroup() {
  if (running() || !group_left_) return;
  kill(-pid_, SIGKILL);
  group_left_ = false;
  reaper_.reset();
}

}  // namespace trainsup
