#ifndef TRAINSUP_DAEMON_SNAPSHOT_PUBLISHER_H_
#define TRAINSUP_DAEMON_SNAPSHOT_PUBLISHER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/core/event_log.h"
#include "daemon/operator_snapshot.h"

namespace trainsup {

// Publishes what operators read, so that reading never takes the core's
// lock: an immutable OperatorSnapshot, and the events in a log of their own.
//
// The owner says Changed() after every change of the core (lock-free); a
// thread of the publisher then captures a new snapshot, waiting first so
// that capturing costs at most 1/kCostShare of the time: the capture holds
// the core's lock (shared) while it copies, and at 100k ranks one copy
// takes milliseconds. A small job is republished within a millisecond of
// each change; a 100k-rank one a few times a second.
//
// Events are handed to readers together with the snapshot that reflects
// them: whoever saw an event can read the state it left. Thread-safe.
class SnapshotPublisher {
 public:
  struct Capture {
    std::shared_ptr<const OperatorSnapshot> snapshot;
    std::vector<Event> events;  // the core's events after the id asked for
  };
  // Runs on the publisher's thread (or PublishNow's caller): copies the core
  // consistently (under its lock) and returns its events after `after_id`.
  using CaptureFn = std::function<Capture(uint64_t after_id)>;

  SnapshotPublisher(CaptureFn capture, size_t event_capacity);
  ~SnapshotPublisher();
  SnapshotPublisher(const SnapshotPublisher&) = delete;
  SnapshotPublisher& operator=(const SnapshotPublisher&) = delete;

  // The core changed. Lock-free; never blocks.
  void Changed();
  // Captures and publishes now, on the caller's thread: an operator's own
  // action is visible to its next read.
  void PublishNow();

  // The latest snapshot (never null: an empty one before the first capture).
  std::shared_ptr<const OperatorSnapshot> Current() const;
  // Events with id > after_id, of `job` only unless empty, at most `limit`.
  std::vector<Event> Events(uint64_t after_id, const std::string& job, size_t limit) const;
  // Like Events, blocking up to `timeout` for any new event; sets
  // `*scanned_to` to the last id looked at (of any job).
  std::vector<Event> WaitForEvents(uint64_t after_id, const std::string& job,
                                   absl::Duration timeout, uint64_t* scanned_to) const;

  // How long the last capture took (for /metrics and the benchmark).
  absl::Duration last_capture_duration() const;

 private:
  // Capturing costs at most 1 / kCostShare of the time.
  static constexpr int kCostShare = 20;

  void Run();
  void CaptureAndPublish() ABSL_EXCLUSIVE_LOCKS_REQUIRED(capture_mu_);

  const CaptureFn capture_;
  std::atomic<uint64_t> version_{0};  // bumped by Changed()

  absl::Mutex capture_mu_;  // one capture at a time, in order
  uint64_t captured_version_ ABSL_GUARDED_BY(capture_mu_) = 0;
  absl::Duration capture_cost_ ABSL_GUARDED_BY(capture_mu_);

  mutable absl::Mutex mu_;  // what readers see
  std::shared_ptr<const OperatorSnapshot> current_ ABSL_GUARDED_BY(mu_);
  EventLog events_ ABSL_GUARDED_BY(mu_);
  absl::Duration last_capture_duration_ ABSL_GUARDED_BY(mu_);

  absl::Mutex wake_mu_;
  bool wake_ ABSL_GUARDED_BY(wake_mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(wake_mu_) = false;
  std::thread thread_;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_SNAPSHOT_PUBLISHER_H_
