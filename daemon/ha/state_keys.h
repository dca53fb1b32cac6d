#ifndef TRAINSUP_DAEMON_HA_STATE_KEYS_H_
#define TRAINSUP_DAEMON_HA_STATE_KEYS_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trainsup {

// Where the state shared by the instances of one election lives in etcd,
// under the shard's prefix P (default "/trainsup/default/", beside the
// election's P + "leader"), and how its values read (docs/ha.md). Pure.
//
//   P log/SEQ          one committed journal's changes (SEQ from 1, 20 digits)
//   P part/SEQ/I       the parts of a journal too big for one etcd request
//   P snapshot         the latest snapshot's head: "SEQ PARTS" (it covers
//                      the log up to SEQ; its PARTS parts are P snap/SEQ/I)
//   P snap/SEQ/I       a snapshot's parts
//
// Log entries, parts and snapshots all fit etcd's request limit (1.5 MiB
// by default); the log is compacted into a snapshot as it grows.
class StateKeys {
 public:
  explicit StateKeys(std::string prefix) : prefix_(std::move(prefix)) {}

  std::string Log(uint64_t seq) const;
  std::string LogPrefix() const { return prefix_ + "log/"; }
  // The SEQ of a log key (nullopt: not one).
  std::optional<uint64_t> LogSeq(absl::string_view key) const;
  // "part" (a journal's) or "snap" (a snapshot's) part I of SEQ.
  std::string Part(absl::string_view kind, uint64_t seq, size_t index) const;
  std::string PartsPrefix(absl::string_view kind, uint64_t seq) const;
  std::string KindPrefix(absl::string_view kind) const { return prefix_ + std::string(kind) + "/"; }
  std::string Head() const { return prefix_ + "snapshot"; }

 private:
  const std::string prefix_;
};

// The end of etcd's range of every key that begins with `prefix`.
std::string PrefixEnd(absl::string_view prefix);

// `blob` cut into pieces of at most `max_part` bytes (one empty piece for
// an empty blob). REQUIRES: max_part > 0.
std::vector<absl::string_view> SplitParts(absl::string_view blob, size_t max_part);

// A log entry's value: the changes themselves ("I" + bytes), or how many
// parts hold them ("P" + count).
std::string InlineEntry(absl::string_view changes);
std::string PartsEntry(size_t parts);
struct LogEntry {
  std::optional<std::string> changes;  // inline
  size_t parts = 0;                    // else, in this many parts
};
absl::StatusOr<LogEntry> ParseLogEntry(absl::string_view value);

// The snapshot head's value.
struct SnapshotHead {
  uint64_t seq = 0;   // it covers the log up to this entry
  size_t parts = 0;
};
std::string HeadValue(const SnapshotHead& head);
absl::StatusOr<SnapshotHead> ParseHead(absl::string_view value);

// Whether the log is due for compaction into a snapshot.
struct CompactionPolicy {
  uint64_t max_entries = 1000;       // entries since the last snapshot
  uint64_t max_bytes = 16u << 20;    // their bytes
};
inline bool ShouldCompact(const CompactionPolicy& policy, uint64_t entries, uint64_t bytes) {
  return entries >= policy.max_entries || bytes >= policy.max_bytes;
}

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_HA_STATE_KEYS_H_
