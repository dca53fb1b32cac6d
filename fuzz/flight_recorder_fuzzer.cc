// Fuzz target: one NCCL flight recorder dump, as the agent would hand a
// rank's file to ReadFlightRecord (docs/gpu.md). Whatever the bytes: a dump
// past the size limit is refused; a record read keeps its bounds (a 2.x
// version of at most 128 bytes, at most the limit's groups and the kept
// operations a group, valid UTF-8 names); and the culprit rule, given the
// record as two ranks' dumps, says something and names as short of a
// collective, or waiting in one, only ranks that gave a dump.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "agent/flight_recorder.h"
#include "common/format.h"
#include "daemon/core/collective_culprit.h"

namespace {

void Require(bool condition, const char* what) {
  if (condition) return;
  std::fprintf(stderr, "flight_recorder_fuzzer: %s\n", what);
  std::abort();
}

bool Kept(const std::string& text) { return text.size() <= 128 && trainsup::IsValidUtf8(text); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  const absl::StatusOr<trainsup::FlightRecord> record = trainsup::ReadFlightRecord(bytes);
  if (size > trainsup::kMaxFlightRecordBytes) Require(!record.ok(), "an oversized dump was read");
  if (!record.ok()) return 0;
  Require(absl::StartsWith(record->version, "2.") && Kept(record->version), "a bad version kept");
  Require(record->groups.size() <= trainsup::kMaxFlightRecordGroups, "too many groups");
  Require(record->entries <= trainsup::kMaxFlightRecordEntries, "too many entries");
  for (const trainsup::GroupRecord& g : record->groups) {
    Require(Kept(g.name) && Kept(g.desc), "a group's name past its bound");
    Require(g.last_collectives.size() <= trainsup::kFlightRecordOpsKept &&
                g.last_p2p.size() <= trainsup::kFlightRecordOpsKept,
            "more operations kept than the limit");
    for (const auto* ops : {&g.last_collectives, &g.last_p2p}) {
      for (const trainsup::CollectiveOp& op : *ops) {
        Require(Kept(op.op), "an operation's name past its bound");
        Require(op.p2p == (ops == &g.last_p2p), "an operation kept with the other numbering");
      }
    }
  }

  std::map<uint32_t, trainsup::FlightRecord> dumps = {{0, *record}, {1, *record}};
  dumps[1].groups.clear();
  const trainsup::CollectiveCulprit culprit = trainsup::FindCollectiveCulprit(dumps, 4);
  Require(!culprit.text.empty(), "a finding without its text");
  // Only a dump can show its rank short of a collective or waiting in one.
  for (const auto* ranks : {&culprit.not_entered, &culprit.waiting}) {
    for (uint32_t rank : *ranks) Require(dumps.count(rank) > 0, "a rank named without a dump");
  }
  return 0;
}
