#include "agent/provenance.h"

#include <fnmatch.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/bounded_run.h"
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

// What `argv` wrote to stdout when it exited 0 within `timeout`; nullopt
// otherwise (not found, failed, or killed at the timeout).
std::optional<std::string> RunCapture(const std::vector<std::string>& argv,
                                      absl::Duration timeout) {
  BoundedRunOptions options;
  options.timeout = timeout;
  options.max_output = kMaxGitOutput;
  options.merge_stderr = false;
  BoundedRunResult run = RunBounded(argv, options);
  if (!run.succeeded()) return std::nullopt;
  return std::move(run.output);
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
  const std::string git = "git";  // from $PATH; a missing one leaves the code version empty
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

bool MergeRankProvenance(const v1::RankHeartbeat& hb, v1::GenerationProvenance* record) {
  if (hb.generation() != record->generation()) return false;
  if (!record->has_runtime()) {
    *record->mutable_runtime() = hb.provenance();
    return true;
  }
  const v1::RuntimeProvenance& held = record->runtime();
  const v1::RuntimeProvenance& update = hb.provenance();
  if (!held.resumed_hash().empty() || update.resumed_hash().empty() ||
      update.resumed_path() != held.resumed_path() ||
      update.resumed_step() != held.resumed_step()) {
    return false;
  }
  record->mutable_runtime()->set_resumed_hash(update.resumed_hash());
  return true;
}

}  // namespace trainsup
