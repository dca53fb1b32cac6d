#include "agent/rank_watcher.h"

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace trainsup {
namespace {

int PidfdOpen(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

int PidfdSendSignal(int pidfd, int signal) {
  return static_cast<int>(syscall(SYS_pidfd_send_signal, pidfd, signal, nullptr, 0));
}

// Kinds sent by a rank whose process is about to end: its pid proves nothing.
bool IsFailure(v1::HeartbeatKind kind) {
  return kind == v1::HEARTBEAT_KIND_EXCEPTION || kind == v1::HEARTBEAT_KIND_EXIT;
}

bool IsReadable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR)) != 0;
}

// The wait status of a zombie, from /proc/PID/stat; nullopt when the
// process is not a zombie (already reaped, or running).
std::optional<int> ReadZombieStatus(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
  return ZombieWaitStatus(line);
}

}  // namespace

std::optional<int> ZombieWaitStatus(absl::string_view stat_line) {
  // The command name (field 2) may hold spaces and parentheses: skip past
  // the last ')'. Fields from 3 on follow, one space apart.
  const size_t close = stat_line.rfind(')');
  if (close == absl::string_view::npos) return std::nullopt;
  absl::string_view rest = stat_line.substr(close + 1);
  if (!absl::ConsumePrefix(&rest, " ")) return std::nullopt;
  std::vector<absl::string_view> fields = absl::StrSplit(rest, ' ');
  if (fields.empty() || fields[0] != "Z") return std::nullopt;
  constexpr size_t kExitCodeField = 52 - 3;
  int wait_status = 0;
  if (fields.size() <= kExitCodeField ||
      !absl::SimpleAtoi(fields[kExitCodeField], &wait_status)) {
    return std::nullopt;
  }
  return wait_status;
}

absl::Duration FailureTime(absl::Duration received_at, double monotonic_seconds) {
  if (!(monotonic_seconds > 0) || !std::isfinite(monotonic_seconds)) return received_at;
  const absl::Duration age = received_at - absl::Seconds(monotonic_seconds);
  return received_at - std::clamp(age, absl::ZeroDuration(), kMaxFailureAge);
}

RankWatcher::~RankWatcher() { Clear(); }

bool RankWatcher::Observe(const v1::RankHeartbeat& hb, uint64_t current_generation,
                          absl::Duration received_at) {
  const uint64_t generation = hb.generation() != 0 ? hb.generation() : current_generation;
  const pid_t pid = static_cast<pid_t>(hb.pid());
  if (IsFailure(hb.kind())) {
    auto it = ranks_.find(hb.rank());
    // Only about the process watched: a late word of an earlier one is stale.
    if (it == ranks_.end() || (pid != 0 && it->second.process.pid() != hb.pid()) ||
        it->second.process.generation() != generation) {
      return false;
    }
    return NoteFailure(hb.rank(), FailureTime(received_at, hb.monotonic_seconds()));
  }
  if (pid == 0) return false;
  bool changed = Watch(hb.rank(), hb.local_rank(), pid, generation, received_at);
  if (hb.kind() == v1::HEARTBEAT_KIND_START) {
    Watched& w = ranks_[hb.rank()];
    changed |= w.stack_signal != hb.stack_signal();
    w.stack_signal = hb.stack_signal();
  }
  return changed;
}

bool RankWatcher::Watch(uint32_t rank, uint32_t local_rank, pid_t pid, uint64_t generation,
                        absl::Duration steady_now) {
  auto it = ranks_.find(rank);
  if (it != ranks_.end()) {
    if (it->second.process.pid() == static_cast<uint32_t>(pid) &&
        it->second.process.generation() == generation) {
      return false;
    }
    if (it->second.pidfd >= 0) close(it->second.pidfd);
    ranks_.erase(it);
  }
  Watched& w = ranks_[rank];
  w.process.set_rank(rank);
  w.process.set_local_rank(local_rank);
  w.process.set_pid(static_cast<uint32_t>(pid));
  w.process.set_generation(generation);
  w.process.set_alive(true);
  w.pidfd = PidfdOpen(pid);
  if (w.pidfd < 0) MarkDead(w, steady_now);  // gone before we could watch it
  return true;
}

bool RankWatcher::NoteFailure(uint32_t rank, absl::Duration at) {
  auto it = ranks_.find(rank);
  if (it == ranks_.end()) return false;
  Watched& w = it->second;
  if (w.process.exception_seen() && w.exception_at <= at) return false;
  w.process.set_exception_seen(true);
  w.exception_at = at;
  return true;
}

std::vector<std::pair<uint32_t, uint32_t>> RankWatcher::SilentFailures(
    absl::Duration since) const {
  std::vector<std::pair<uint32_t, uint32_t>> out;
  for (const auto& [rank, w] : ranks_) {
    const v1::RankProcess& p = w.process;
    const bool failed = !p.exit_known() || p.exit_code() != 0 || p.signal() != 0;
    if (p.alive() || !failed || p.exception_seen() || !p.stderr_line().empty() ||
        w.died_at < since) {
      continue;
    }
    out.emplace_back(rank, p.local_rank());
  }
  return out;
}

bool RankWatcher::NoteStderrLine(uint32_t rank, const std::string& line) {
  auto it = ranks_.find(rank);
  if (it == ranks_.end() || line.empty() || it->second.process.stderr_line() == line) return false;
  it->second.process.set_stderr_line(line);
  return true;
}

bool RankWatcher::Signal(uint32_t rank, int signal) {
  auto it = ranks_.find(rank);
  if (it == ranks_.end() || !it->second.process.alive() || it->second.pidfd < 0) return false;
  return PidfdSendSignal(it->second.pidfd, signal) == 0;
}

std::vector<int> RankWatcher::LiveFds() const {
  std::vector<int> fds;
  for (const auto& [rank, w] : ranks_) {
    if (w.process.alive() && w.pidfd >= 0) fds.push_back(w.pidfd);
  }
  return fds;
}

void RankWatcher::MarkDead(Watched& w, absl::Duration steady_now) {
  w.process.set_alive(false);
  w.died_at = steady_now;
  if (std::optional<int> status = ReadZombieStatus(static_cast<pid_t>(w.process.pid()))) {
    w.process.set_exit_known(true);
    if (WIFEXITED(*status)) w.process.set_exit_code(WEXITSTATUS(*status));
    if (WIFSIGNALED(*status)) w.process.set_signal(WTERMSIG(*status));
  }
  if (w.pidfd >= 0) {
    close(w.pidfd);
    w.pidfd = -1;
  }
}

bool RankWatcher::CheckExits(absl::Duration steady_now) {
  bool any = false;
  for (auto& [rank, w] : ranks_) {
    if (!w.process.alive() || w.pidfd < 0) continue;
    if (IsReadable(w.pidfd)) {
      MarkDead(w, steady_now);
      any = true;
    }
  }
  return any;
}

std::vector<ProcessObservation> RankWatcher::Snapshot() const {
  std::vector<ProcessObservation> out;
  out.reserve(ranks_.size());
  for (const auto& [rank, w] : ranks_) out.push_back(w);
  return out;
}

void RankWatcher::Clear() {
  for (auto& [rank, w] : ranks_) {
    if (w.pidfd >= 0) close(w.pidfd);
  }
  ranks_.clear();
}

}  // namespace trainsup
