#include "agent/provenance.h"

#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <poll.h>
#include <signal.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/provenance.h"

extern char** environ;

namespace trainsup {
namespace {

constexpr size_t kMaxEnvValue = 4096;
constexpr size_t kMaxModifiedFiles = 64;
constexpr size_t kMaxPath = 256;
// What is read of a git command's output at most.
constexpr size_t kMaxGitOutput = 256 * 1024;

bool Matches(const std::string& name, const std::vector<std::string>& patterns) {
  for (const std::string& p : patterns) {
    if (fnmatch(p.c_str(), name.c_str(), 0) == 0) return true;
  }
  return false;
}

// The first executable `file` in $PATH ("" when none).
std::string OnPath(const std::string& file) {
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path != nullptr ? path : "/bin:/usr/bin", ':')) {
    std::string candidate = absl::StrCat(dir.empty() ? "." : dir, "/", file);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// Runs `argv` (argv[0] a path) with stdin and stderr on /dev/null, and
// returns what it wrote to stdout when it exited 0 within `timeout`;
// nullopt otherwise (it is killed at the timeout).
std::optional<std::string> RunCapture(const std::vector<std::string>& argv,
                                      absl::Duration timeout) {
  std::vector<std::string> args = argv;
  std::vector<char*> c_args;
  for (std::string& a : args) c_args.push_back(a.data());
  c_args.push_back(nullptr);
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return std::nullopt;
  const int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  const pid_t pid = fork();
  if (pid == 0) {
    // Only async-signal-safe calls between fork and exec.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    if (null_fd >= 0) {
      dup2(null_fd, STDIN_FILENO);
      dup2(null_fd, STDERR_FILENO);
    }
    dup2(out[1], STDOUT_FILENO);
    execv(c_args[0], c_args.data());
    _exit(127);
  }
  close(out[1]);
  if (null_fd >= 0) close(null_fd);
  if (pid < 0) {
    close(out[0]);
    return std::nullopt;
  }
  std::string text;
  const absl::Time deadline = absl::Now() + timeout;
  bool timed_out = false;
  for (;;) {
    const int64_t left_ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left_ms <= 0) {
      timed_out = true;
      break;
    }
    pollfd fd{out[0], POLLIN, 0};
    const int ready = poll(&fd, 1, static_cast<int>(left_ms));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;  // the deadline is checked above
    char buffer[4096];
    const ssize_t n = read(out[0], buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (text.size() < kMaxGitOutput) text.append(buffer, static_cast<size_t>(n));
  }
  close(out[0]);
  if (timed_out) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return std::nullopt;
  return text;
}

std::string WorkingDirectory() {
  char buffer[4096];
  return getcwd(buffer, sizeof(buffer)) != nullptr ? std::string(buffer) : std::string();
}

std::string Dirname(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

v1::CodeVersion CodeOf(const std::string& script, const std::string& cwd,
                       absl::Duration timeout) {
  v1::CodeVersion code;
  code.set_script(script);
  if (script.empty()) return code;
  const std::string git = OnPath("git");
  if (git.empty()) return code;
  std::string dir = Dirname(script);
  if (dir[0] != '/' && !cwd.empty()) dir = absl::StrCat(cwd, "/", dir);
  std::optional<std::string> head =
      RunCapture({git, "-C", dir, "rev-parse", "--show-toplevel", "HEAD"}, timeout);
  if (!head.has_value()) return code;  // not in a repository, or no commit yet
  std::vector<std::string> lines = absl::StrSplit(*head, '\n', absl::SkipEmpty());
  if (lines.size() >= 1) code.set_repository(lines[0]);
  if (lines.size() >= 2) code.set_commit(lines[1]);
  std::optional<std::string> status = RunCapture({git, "-C", dir, "status", "--porcelain"}, timeout);
  if (!status.has_value()) return code;
  uint32_t total = 0;
  for (std::string& f : PorcelainFiles(*status, kMaxModifiedFiles, &total)) {
    code.add_modified(std::move(f));
  }
  code.set_modified_total(total);
  code.set_dirty(total > 0);
  return code;
}

std::string FirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return "";
  if (line.size() > kMaxPath) line.resize(kMaxPath);
  return line;
}

}  // namespace

const std::vector<std::string>& DefaultProvenanceEnv() {
  static const auto* const kPatterns = new std::vector<std::string>{
      "CUDA_VISIBLE_DEVICES", "NCCL_*", "TORCH_*", "OMP_NUM_THREADS", "PYTHONPATH"};
  return *kPatterns;
}

std::vector<v1::EnvVar> SelectEnvironment(const std::vector<std::string>& environment,
                                          const std::vector<std::string>& patterns) {
  std::vector<v1::EnvVar> out;
  for (const std::string& entry : environment) {
    const size_t eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    const std::string name = entry.substr(0, eq);
    if (IsSecretName(name)) continue;
    if (!Matches(name, DefaultProvenanceEnv()) && !Matches(name, patterns)) continue;
    v1::EnvVar& v = out.emplace_back();
    v.set_name(name);
    v.set_value(entry.substr(eq + 1, kMaxEnvValue));
  }
  std::sort(out.begin(), out.end(),
            [](const v1::EnvVar& x, const v1::EnvVar& y) { return x.name() < y.name(); });
  // A name given twice: the last entry's value (as getenv would not say,
  // but as the launch's own override does).
  std::vector<v1::EnvVar> unique;
  for (v1::EnvVar& v : out) {
    if (!unique.empty() && unique.back().name() == v.name()) {
      unique.back() = std::move(v);
    } else {
      unique.push_back(std::move(v));
    }
  }
  return unique;
}

std::string FindScript(const std::vector<std::string>& argv) {
  for (size_t i = 1; i < argv.size(); ++i) {
    if (argv[i].size() > 3 && absl::EndsWith(argv[i], ".py") && argv[i][0] != '-') return argv[i];
  }
  return "";
}

std::vector<std::string> PorcelainFiles(absl::string_view porcelain, size_t max_files,
                                        uint32_t* total) {
  std::vector<std::string> files;
  *total = 0;
  for (absl::string_view line : absl::StrSplit(porcelain, '\n', absl::SkipEmpty())) {
    if (line.size() < 4) continue;
    absl::string_view path = line.substr(3);
    const size_t arrow = path.find(" -> ");
    if (arrow != absl::string_view::npos) path = path.substr(arrow + 4);
    ++*total;
    if (files.size() < max_files) files.emplace_back(path.substr(0, kMaxPath));
  }
  return files;
}

v1::GenerationProvenance CaptureProvenance(
    uint64_t generation, const std::vector<std::string>& argv,
    const std::vector<std::pair<std::string, std::string>>& extra_env,
    const ProvenanceOptions& options) {
  v1::GenerationProvenance record;
  record.set_generation(generation);
  record.set_launched_unix_seconds(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
  for (const std::string& arg : argv) record.add_command(arg);
  const std::string cwd = WorkingDirectory();
  record.set_working_directory(cwd);
  std::vector<std::string> environment;
  for (char** e = environ; *e != nullptr; ++e) environment.emplace_back(*e);
  for (const auto& [name, value] : extra_env) environment.push_back(absl::StrCat(name, "=", value));
  for (v1::EnvVar& v : SelectEnvironment(environment, options.env_patterns)) {
    *record.add_env() = std::move(v);
  }
  *record.mutable_code() = CodeOf(FindScript(argv), cwd, options.git_timeout);
  utsname uts;
  if (uname(&uts) == 0) {
    record.set_kernel(absl::StrCat(uts.sysname, " ", uts.release, " ", uts.version));
  }
  record.set_driver(FirstLine("/proc/driver/nvidia/version"));
  BoundProvenance(&record);
  return record;
}

}  // namespace trainsup
