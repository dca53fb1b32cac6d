#ifndef TRAINSUP_DAEMON_JOURNAL_WRITER_H_
#define TRAINSUP_DAEMON_JOURNAL_WRITER_H_

#include <deque>
#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "daemon/core/journal.h"

namespace trainsup {

// Where journals are committed: the SQLite state store, or a test's stand-in.
class JournalSink {
 public:
  // How hard a commit is pushed to the disk.
  enum class Sync {
    kNormal,  // survives a kill -9 of the process (WAL, synchronous=NORMAL)
    kFull,    // also a power loss: fsynced before Apply returns
  };
  virtual ~JournalSink() = default;
  // Writes all of `journal` or nothing of it. Aborted: refused because this
  // instance may no longer decide (fenced: another instance leads), so the
  // journal is void, its events too; any other error: it could not be made
  // durable (its commands and fences are not acted on).
  virtual absl::Status Apply(const Journal& journal, Sync sync) = 0;
};

// Commits journals on a thread of its own, one at a time in the order
// written, and after each commit runs its continuation on that thread with
// the commit's status. The caller (the host, under the mutex agent streams
// take) only queues: a slow disk delays what waits for a commit (commands,
// fences), never the ingest of reports. Thread-safe.
class JournalWriter {
 public:
  using Then = std::function<void(const absl::Status& committed)>;

  // `sink` is not owned and must outlive the writer.
  explicit JournalWriter(JournalSink* sink);
  // Commits everything written before, runs its continuations, then stops.
  ~JournalWriter();

  JournalWriter(const JournalWriter&) = delete;
  JournalWriter& operator=(const JournalWriter&) = delete;

  // Queues `journal` (may be empty: `then` still runs in order). Never blocks
  // on the sink. `then` must not call Flush().
  void Write(Journal journal, JournalSink::Sync sync, Then then);

  // Returns once everything written before the call is committed and its
  // continuation has run.
  void Flush();

  // Journals written and not yet committed (for tests and metrics).
  size_t pending() const;

 private:
  struct Item {
    Journal journal;
    JournalSink::Sync sync;
    Then then;
  };
  void Loop();

  JournalSink* const sink_;
  mutable absl::Mutex mu_;
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t written_ ABSL_GUARDED_BY(mu_) = 0;  // items ever queued
  uint64_t done_ ABSL_GUARDED_BY(mu_) = 0;     // items committed, continuation run
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_JOURNAL_WRITER_H_
