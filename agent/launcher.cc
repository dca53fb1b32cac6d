#include "agent/launcher.h"

#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/wait.h>

#include "absl/strings/str_cat.h"

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

}  // namespace

absl::Status Launcher::Start(const std::vector<std::string>& argv, const EnvVars& extra_env) {
  if (argv.empty()) return absl::InvalidArgumentError("no command to run");
  std::vector<std::string> args = argv;
  std::vector<std::string> env = BuildEnvironment(extra_env);
  std::vector<char*> c_args = CStrings(args);
  std::vector<char*> c_env = CStrings(env);

  // posix_spawn, not fork: the agent has threads (gRPC), and posix_spawn sets
  // the new process group and signal state without running our code in the child.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t empty;
  sigemptyset(&empty);
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int s : {SIGTERM, SIGINT, SIGHUP, SIGCHLD, SIGPIPE, SIGQUIT}) sigaddset(&defaults, s);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setsigmask(&attr, &empty);  // the agent blocks signals for its signalfd
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                      POSIX_SPAWN_SETSIGDEF);
  pid_t pid = 0;
  int err = posix_spawnp(&pid, c_args[0], nullptr, &attr, c_args.data(), c_env.data());
  posix_spawnattr_destroy(&attr);
  if (err != 0) {
    return absl::FailedPreconditionError(absl::StrCat("cannot run ", argv[0], ": ", strerror(err)));
  }
  pid_ = pid;
  status_.Clear();
  status_.set_state(v1::LauncherStatus::STATE_RUNNING);
  status_.set_pid(static_cast<uint32_t>(pid));
  return absl::OkStatus();
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

}  // namespace trainsup
