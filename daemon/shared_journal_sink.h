#ifndef TRAINSUP_DAEMON_SHARED_JOURNAL_SINK_H_
#define TRAINSUP_DAEMON_SHARED_JOURNAL_SINK_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "daemon/ha/etcd_state_log.h"
#include "daemon/journal_writer.h"
#include "daemon/state_store.h"

namespace trainsup {

// Where an elected trainsupd commits its journals (docs/ha.md): to its own
// store, then what that changed in the shared tables to the shared log,
// fenced by its leadership; the journal counts as committed (its commands
// sent, its fences run) only once both took it.
//
// If etcd does not answer, Apply waits and tries again (every 50ms, then up
// to every second) for as long as this instance is still elected: the
// decision is neither acted on nor dropped, and everything after it queues
// behind it on the JournalWriter's thread (never the ingest of reports). If
// the write is refused (another instance leads), Apply fails Aborted and
// calls `fenced` (to stop acting at once); the store's copy may then be
// ahead of the shared state, and is replaced by it before this instance
// leads again.
//
// Compacts the shared log into a snapshot of the store when it is due.
// Thread-compatible: called by one JournalWriter.
class SharedJournalSink : public JournalSink {
 public:
  // None is owned; each must outlive the sink.
  SharedJournalSink(StateStore* store, SharedLog* log,
                    std::function<void(const std::string& why)> fenced)
      : store_(store), log_(log), fenced_(std::move(fenced)) {}

  absl::Status Apply(const Journal& journal, Sync sync) override;

 private:
  StateStore* const store_;
  SharedLog* const log_;
  const std::function<void(const std::string&)> fenced_;
};

// Makes `store`'s shared tables the shared state, before this instance
// acts as the leader: replaces them with the shared log's snapshot and
// entries; when etcd holds none yet, seeds it with a snapshot of `store`
// (the first leader's own, e.g. a single trainsupd's file as it was).
absl::Status LoadSharedState(SharedLog* log, StateStore* store);

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_SHARED_JOURNAL_SINK_H_
