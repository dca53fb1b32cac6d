#include "daemon/shared_journal_sink.h"

#include <algorithm>
#include <vector>

#include "absl/time/clock.h"
#include "common/log.h"

namespace trainsup {

absl::Status SharedJournalSink::Apply(const Journal& journal, Sync sync) {
  std::string changes;
  if (absl::Status s = store_->Apply(journal, sync, &changes); !s.ok()) return s;
  absl::Duration backoff = absl::Milliseconds(50);
  for (int attempt = 1;; ++attempt) {
    absl::Status s = log_->Append(changes);
    if (s.ok()) {
      if (attempt > 1) {
        TRAINSUP_LOG_INFO("shared state: etcd took the write after %d attempts; acting on it",
                          attempt);
      }
      break;
    }
    if (absl::IsFailedPrecondition(s)) {
      TRAINSUP_LOG_ERROR("shared state: %s; not acting on it, and stopping", s.message());
      fenced_(std::string(s.message()));
      return absl::AbortedError(s.message());  // void, as JournalSink says
    }
    if (!absl::IsUnavailable(s) && !absl::IsDeadlineExceeded(s) && !absl::IsCancelled(s)) {
      return s;  // etcd refused the request itself (too big): not acted on
    }
    if (attempt == 1) {
      TRAINSUP_LOG_WARN("shared state: etcd did not take the write (%s); the decision waits "
                        "until it does (or until this instance no longer leads)", s.message());
    }
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Seconds(1));
  }
  if (log_->CompactionDue()) {
    std::string snapshot;
    absl::Status s = store_->SnapshotShared(&snapshot);
    if (s.ok()) s = log_->Compact(snapshot);
    if (s.ok()) {
      TRAINSUP_LOG_INFO("shared state: log compacted into a snapshot of %d bytes", snapshot.size());
    } else {
      TRAINSUP_LOG_WARN("shared state: compacting the log failed (tried again later): %s",
                        s.message());
    }
  }
  return absl::OkStatus();
}

absl::Status LoadSharedState(SharedLog* log, StateStore* store) {
  absl::StatusOr<SharedLog::Loaded> loaded = log->Load();
  if (!loaded.ok()) return loaded.status();
  if (loaded->empty()) {
    std::string snapshot;
    if (absl::Status s = store->SnapshotShared(&snapshot); !s.ok()) return s;
    if (absl::Status s = log->Compact(snapshot); !s.ok()) return s;
    TRAINSUP_LOG_INFO("shared state: none in etcd yet; seeded with this instance's store "
                      "(%d bytes)", snapshot.size());
    return absl::OkStatus();
  }
  std::vector<std::string> changes;
  changes.reserve(loaded->entries.size() + 1);
  changes.push_back(std::move(loaded->snapshot));
  size_t bytes = changes.front().size();
  for (std::string& e : loaded->entries) {
    bytes += e.size();
    changes.push_back(std::move(e));
  }
  if (absl::Status s = store->ReplaceShared(changes); !s.ok()) return s;
  TRAINSUP_LOG_INFO("shared state: loaded from etcd (a snapshot of %d bytes and %d log entries, "
                    "%d bytes in all)", changes.front().size(), changes.size() - 1, bytes);
  return absl::OkStatus();
}

}  // namespace trainsup
