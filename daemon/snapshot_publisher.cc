#include "daemon/snapshot_publisher.h"

#include <algorithm>
#include <utility>

#include "absl/time/clock.h"

namespace trainsup {

SnapshotPublisher::SnapshotPublisher(CaptureFn capture, size_t event_capacity)
    : capture_(std::move(capture)),
      current_(std::make_shared<OperatorSnapshot>()),
      events_(event_capacity) {
  thread_ = std::thread([this] { Run(); });
}

SnapshotPublisher::~SnapshotPublisher() {
  {
    absl::MutexLock lock(&wake_mu_);
    stopping_ = true;
  }
  thread_.join();
}

void SnapshotPublisher::Changed() {
  version_.fetch_add(1, std::memory_order_release);
  // A try-lock keeps ingest from ever waiting here: if the publisher holds
  // wake_mu_ it is about to look at version_ anyway.
  if (wake_mu_.TryLock()) {
    wake_ = true;
    wake_mu_.Unlock();
  }
}

void SnapshotPublisher::PublishNow() {
  absl::MutexLock lock(&capture_mu_);
  CaptureAndPublish();
}

void SnapshotPublisher::Run() {
  // Waits for a change, then for the pause that keeps capturing cheap, then
  // captures. A change that arrives while Changed()'s try-lock fails is
  // seen at the next periodic look (every 100 ms at the latest).
  for (;;) {
    {
      absl::MutexLock lock(&wake_mu_);
      auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(wake_mu_) { return wake_ || stopping_; };
      wake_mu_.AwaitWithTimeout(absl::Condition(&woken), absl::Milliseconds(100));
      if (stopping_) return;
      wake_ = false;
    }
    absl::Duration pause;
    {
      absl::MutexLock lock(&capture_mu_);
      if (version_.load(std::memory_order_acquire) == captured_version_) continue;
      pause = capture_cost_ * kCostShare;
    }
    if (pause > absl::ZeroDuration()) {
      absl::MutexLock lock(&wake_mu_);
      auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(wake_mu_) { return stopping_; };
      if (wake_mu_.AwaitWithTimeout(absl::Condition(&stopping), pause)) return;
    }
    absl::MutexLock lock(&capture_mu_);
    if (version_.load(std::memory_order_acquire) != captured_version_) CaptureAndPublish();
  }
}

void SnapshotPublisher::CaptureAndPublish() {
  const absl::Time start = absl::Now();
  // Read the version first: a change during the capture is captured again.
  const uint64_t version = version_.load(std::memory_order_acquire);
  uint64_t after;
  {
    absl::ReaderMutexLock lock(&mu_);
    after = events_.last_id();
  }
  Capture capture = capture_(after);
  capture_cost_ = absl::Now() - start;
  captured_version_ = version;
  absl::MutexLock lock(&mu_);
  // The snapshot first, then its events: a reader woken by an event finds
  // the state after it.
  current_ = std::move(capture.snapshot);
  events_.Restore(capture.events);
  last_capture_duration_ = capture_cost_;
}

std::shared_ptr<const OperatorSnapshot> SnapshotPublisher::Current() const {
  absl::ReaderMutexLock lock(&mu_);
  return current_;
}

std::vector<Event> SnapshotPublisher::Events(uint64_t after_id, const std::string& job,
                                             size_t limit) const {
  absl::ReaderMutexLock lock(&mu_);
  return events_.Since(after_id, job, limit);
}

std::vector<Event> SnapshotPublisher::WaitForEvents(uint64_t after_id, const std::string& job,
                                                    absl::Duration timeout,
                                                    uint64_t* scanned_to) const {
  auto has_new = [this, after_id]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return events_.last_id() > after_id;
  };
  mu_.ReaderLockWhenWithTimeout(absl::Condition(&has_new), timeout);
  std::vector<Event> events = events_.Since(after_id, job);
  *scanned_to = std::max(after_id, events_.last_id());
  mu_.ReaderUnlock();
  return events;
}

absl::Duration SnapshotPublisher::last_capture_duration() const {
  absl::ReaderMutexLock lock(&mu_);
  return last_capture_duration_;
}

}  // namespace trainsup
