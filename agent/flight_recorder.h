#ifndef TRAINSUP_AGENT_FLIGHT_RECORDER_H_
#define TRAINSUP_AGENT_FLIGHT_RECORDER_H_

// NCCL's flight recorder: the file a rank's ProcessGroupNCCL writes when a
// collective times out or on demand (TORCH_NCCL_TRACE_BUFFER_SIZE,
// TORCH_NCCL_DUMP_ON_TIMEOUT, TORCH_NCCL_DEBUG_INFO_TEMP_FILE + rank),
// read into what trainsupd needs to name a rank that never entered a
// collective (common/collective_record.h; docs/gpu.md).
//
// The file is a Python pickle of a dict, written by torch's own C++ pickler
// (torch/csrc/jit/serialization/pickler.cpp, protocol 2): "version",
// "pg_config", "pg_status", "entries" and, in newer versions,
// "comm_lib_version" and "nccl_comm_state". Only plain data is decoded
// (dicts, lists, tuples, strings, numbers, booleans, None, the memo); a
// pickle that would import or call anything (GLOBAL, REDUCE, BUILD, ...) is
// refused unread, never executed. Pure; bounded: the limits below.

#include <cstddef>
#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/collective_record.h"

namespace trainsup {

// The largest dump read. The dumps of tests/testdata/flight_recorder take
// about 300 bytes an entry with a 5-frame stack (strings and frames are
// memoized): torch's default ring of 2,000 entries is far below this.
constexpr size_t kMaxFlightRecordBytes = 64 << 20;
// The most values (strings, numbers, containers) one dump may build; a
// memo reference builds none.
constexpr size_t kMaxPickleValues = 2 << 20;
// The most items (list items, dict keys and values, tuple members) in all
// the dump's containers together, and the most values on the stack at once.
constexpr size_t kMaxPickleItems = 8 << 20;
// The deepest a value may nest as built, and the most MARKs open at once.
// A dump nests 5 deep (dict, entries, entry, input_sizes, a shape).
constexpr int kMaxPickleDepth = 32;
// Only the last entries are read beyond this (the ring buffer's newest).
constexpr size_t kMaxFlightRecordEntries = 100000;
// The most process groups a dump may name.
constexpr size_t kMaxFlightRecordGroups = 4096;
// How many of a group's last operations are kept, per numbering.
constexpr size_t kFlightRecordOpsKept = 8;

// Reads one rank's dump. InvalidArgument naming why for anything else:
// larger than kMaxFlightRecordBytes, truncated, not a pickle, an opcode
// outside plain data, past a limit, not a dict with a "version" of 2.x, or
// entries without the keys every 2.x writer gives (pg_id, process_group,
// profiling_name, collective_seq_id).
absl::StatusOr<FlightRecord> ReadFlightRecord(absl::string_view bytes);

// The rank torch wrote a dump for: the decimal number that ends its file
// name (TORCH_NCCL_DEBUG_INFO_TEMP_FILE is a prefix, "/tmp/nccl_trace_rank_"
// by default, the rank appended). None when the name does not end in one.
std::optional<uint32_t> FlightRecordRankFromFileName(absl::string_view file_name);

}  // namespace trainsup

#endif  // TRAINSUP_AGENT_FLIGHT_RECORDER_H_
