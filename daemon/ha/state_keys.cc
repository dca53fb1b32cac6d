#include "daemon/ha/state_keys.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace trainsup {

std::string StateKeys::Log(uint64_t seq) const {
  return absl::StrFormat("%slog/%020d", prefix_, seq);
}

std::optional<uint64_t> StateKeys::LogSeq(absl::string_view key) const {
  if (!absl::ConsumePrefix(&key, LogPrefix()) || key.size() != 20) return std::nullopt;
  uint64_t seq = 0;
  if (!absl::SimpleAtoi(key, &seq)) return std::nullopt;
  return seq;
}

std::string StateKeys::Part(absl::string_view kind, uint64_t seq, size_t index) const {
  return absl::StrFormat("%s%06d", PartsPrefix(kind, seq), index);
}

std::string StateKeys::PartsPrefix(absl::string_view kind, uint64_t seq) const {
  return absl::StrFormat("%s%s/%020d/", prefix_, kind, seq);
}

std::string PrefixEnd(absl::string_view prefix) {
  std::string end(prefix);
  while (!end.empty() && static_cast<unsigned char>(end.back()) == 0xff) end.pop_back();
  if (end.empty()) return std::string(1, '\0');  // etcd: every key
  end.back() = static_cast<char>(end.back() + 1);
  return end;
}

std::vector<absl::string_view> SplitParts(absl::string_view blob, size_t max_part) {
  std::vector<absl::string_view> parts;
  do {
    const size_t n = std::min(blob.size(), max_part);
    parts.push_back(blob.substr(0, n));
    blob.remove_prefix(n);
  } while (!blob.empty());
  return parts;
}

std::string InlineEntry(absl::string_view changes) { return absl::StrCat("I", changes); }

std::string PartsEntry(size_t parts) { return absl::StrCat("P", parts); }

absl::StatusOr<LogEntry> ParseLogEntry(absl::string_view value) {
  LogEntry entry;
  if (absl::ConsumePrefix(&value, "I")) {
    entry.changes = std::string(value);
    return entry;
  }
  if (absl::ConsumePrefix(&value, "P") && absl::SimpleAtoi(value, &entry.parts) &&
      entry.parts > 0) {
    return entry;
  }
  return absl::DataLossError("a shared state log entry that is neither changes nor parts");
}

std::string HeadValue(const SnapshotHead& head) { return absl::StrCat(head.seq, " ", head.parts); }

absl::StatusOr<SnapshotHead> ParseHead(absl::string_view value) {
  std::vector<absl::string_view> fields = absl::StrSplit(value, ' ');
  SnapshotHead head;
  if (fields.size() != 2 || !absl::SimpleAtoi(fields[0], &head.seq) ||
      !absl::SimpleAtoi(fields[1], &head.parts)) {
    return absl::DataLossError(absl::StrCat("shared state snapshot head \"", value,
                                            "\" is not \"SEQ PARTS\""));
  }
  return head;
}

}  // namespace trainsup
