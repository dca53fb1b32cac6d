#include "agent/report_batcher.h"

#include <algorithm>
#include <string>
#include <utility>

namespace trainsup {
namespace {

bool IsPhase(v1::HeartbeatKind kind) {
  return kind == v1::HEARTBEAT_KIND_COMPUTE_BEGIN || kind == v1::HEARTBEAT_KIND_COMPUTE_END;
}

}  // namespace

ReportBatcher::ReportBatcher(size_t max_backlog) : max_backlog_(std::max<size_t>(1, max_backlog)) {}

void ReportBatcher::PushLocked(Entry entry) {
  if (pending_.size() >= max_backlog_) {
    pending_.pop_front();
    ++dropped_;
  }
  pending_.push_back(std::move(entry));
}

void ReportBatcher::AddHeartbeat(v1::RankHeartbeat hb, std::optional<absl::Duration> read_at) {
  absl::MutexLock lock(&mu_);
  Entry entry{next_seq_++, std::move(hb), read_at};
  RankLatest& latest = latest_[entry.hb.rank()];
  if (entry.hb.kind() == v1::HEARTBEAT_KIND_STEP) latest.step = entry;
  if (IsPhase(entry.hb.kind())) latest.phase = entry;
  PushLocked(std::move(entry));
  ++added_;
}

void ReportBatcher::CountReject(v1::RejectReason reason) {
  absl::MutexLock lock(&mu_);
  ++rejected_[reason];
}

void ReportBatcher::SetLauncher(const v1::LauncherStatus& launcher) {
  absl::MutexLock lock(&mu_);
  launcher_ = launcher;
}

v1::LauncherStatus ReportBatcher::launcher() const {
  absl::MutexLock lock(&mu_);
  return launcher_;
}

void ReportBatcher::SetProcesses(std::vector<ProcessObservation> processes) {
  absl::MutexLock lock(&mu_);
  processes_ = std::move(processes);
}

void ReportBatcher::SetGeneration(uint64_t generation) {
  absl::MutexLock lock(&mu_);
  SetGenerationLocked(generation);
}

void ReportBatcher::SetGenerationLocked(uint64_t generation) {
  if (generation == generation_) return;
  generation_ = generation;
  latest_.clear();  // the old generation's state means nothing in the new one
}

void ReportBatcher::StartGeneration(uint64_t generation, const v1::LauncherStatus& launcher) {
  absl::MutexLock lock(&mu_);
  SetGenerationLocked(generation);
  launcher_ = launcher;
}

uint64_t ReportBatcher::generation() const {
  absl::MutexLock lock(&mu_);
  return generation_;
}

void ReportBatcher::SetPlansHeldThrough(uint64_t plan_id) {
  absl::MutexLock lock(&mu_);
  plans_held_through_ = plan_id;
}

void ReportBatcher::BeginSession() {
  absl::MutexLock lock(&mu_);
  resend_latest_ = true;
}

// Puts in front of the backlog each rank's latest step and phase heartbeats
// that were already sent (their seq is older than anything pending, so the
// order per rank stays intact). Resent state is idempotent at the supervisor.
void ReportBatcher::PrependLatestLocked() {
  const int64_t first_pending = pending_.empty() ? next_seq_ : pending_.front().seq;
  std::vector<Entry> resend;
  for (const auto& [rank, latest] : latest_) {
    for (const std::optional<Entry>* e : {&latest.step, &latest.phase}) {
      // Generation 0 is "the current one" to the rank (as to the supervisor).
      const uint64_t generation = e->has_value() ? (*e)->hb.generation() : 0;
      if (e->has_value() && (*e)->seq < first_pending &&
          (generation == generation_ || generation == 0)) {
        resend.push_back(**e);
      }
    }
  }
  std::sort(resend.begin(), resend.end(), [](const Entry& a, const Entry& b) { return a.seq < b.seq; });
  for (auto it = resend.rbegin(); it != resend.rend(); ++it) pending_.push_front(*it);
}

v1::NodeReport ReportBatcher::TakeReport(absl::Duration steady_now, size_t max_bytes,
                                         bool* more) {
  absl::MutexLock lock(&mu_);
  if (resend_latest_) {
    PrependLatestLocked();
    resend_latest_ = false;
  }
  v1::NodeReport report;
  report.set_sequence(++sequence_);
  report.set_generation(generation_);
  *report.mutable_launcher() = launcher_;
  for (const ProcessObservation& p : processes_) {
    v1::RankProcess* out = report.add_processes();
    *out = p.process;
    if (!p.process.alive()) out->set_died_seconds_ago(absl::ToDoubleSeconds(steady_now - p.died_at));
    if (p.process.exception_seen()) {
      out->set_exception_seconds_ago(absl::ToDoubleSeconds(steady_now - p.exception_at));
    }
  }
  for (const auto& [reason, n] : rejected_) {
    v1::RejectCount* count = report.add_rejected();
    count->set_reject_reason(reason);
    count->set_count(n);
  }
  report.set_dropped_total(dropped_);
  report.set_plans_held_through(plans_held_through_);
  // The heartbeats last, as many as fit (one at least, so that the backlog
  // always drains); each costs its size plus a tag and a length.
  size_t bytes = report.ByteSizeLong();
  taken_.clear();
  while (!pending_.empty()) {
    const size_t cost = pending_.front().hb.ByteSizeLong() + 6;
    if (!taken_.empty() && bytes + cost > max_bytes) break;
    bytes += cost;
    Entry& e = pending_.front();
    taken_.push_back({e.seq, e.read_at});
    if (e.read_at.has_value()) {
      e.hb.set_queued_seconds(std::max(0.0, absl::ToDoubleSeconds(steady_now - *e.read_at)));
    }
    *report.add_heartbeats() = std::move(e.hb);
    pending_.pop_front();
  }
  if (more != nullptr) *more = !pending_.empty();
  return report;
}

void ReportBatcher::Restore(v1::NodeReport report) {
  absl::MutexLock lock(&mu_);
  auto* hbs = report.mutable_heartbeats();
  const size_t n = static_cast<size_t>(hbs->size());
  // Oldest first into the front, within the bound: when the backlog is full
  // the oldest of the restored ones are the ones dropped.
  const size_t room = max_backlog_ > pending_.size() ? max_backlog_ - pending_.size() : 0;
  const size_t keep = std::min(room, n);
  dropped_ += n - keep;
  // The heartbeats go back under the numbers they had when taken, so that
  // the resend of BeginSession sees them as pending, not as already sent.
  const bool same_report = taken_.size() == n;
  int64_t seq = pending_.empty() ? next_seq_ : pending_.front().seq;
  for (size_t i = 0; i < keep; ++i) {
    const size_t index = n - 1 - i;
    // Its read time stays: it waits on from then, not from when it went out.
    const Taken original = same_report ? taken_[index] : Taken{--seq, std::nullopt};
    pending_.push_front(
        Entry{original.seq, std::move(*hbs->Mutable(static_cast<int>(index))), original.read_at});
  }
  taken_.clear();
}

size_t ReportBatcher::backlog() const {
  absl::MutexLock lock(&mu_);
  return pending_.size();
}

uint64_t ReportBatcher::dropped_total() const {
  absl::MutexLock lock(&mu_);
  return dropped_;
}

uint64_t ReportBatcher::heartbeats_added() const {
  absl::MutexLock lock(&mu_);
  return added_;
}

}  // namespace trainsup
