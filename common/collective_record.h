#ifndef TRAINSUP_COMMON_COLLECTIVE_RECORD_H_
#define TRAINSUP_COMMON_COLLECTIVE_RECORD_H_

// What one rank's NCCL flight recorder dump says about its collectives, as
// the agent reads it (agent/flight_recorder.h) and trainsupd judges it
// (daemon/core/collective_culprit.h). Plain data: a header of its own so
// that the daemon does not depend on the agent.
//
// PyTorch numbers a process group's operations twice: collective_seq_id
// counts collectives (all of the group's ranks take part), p2p_seq_id counts
// sends and receives (two ranks take part). The two are kept apart here:
// comparing one rank's p2p count with another's collective count means
// nothing.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace trainsup {

// The flight recorder's "state" of an entry.
enum class CollectiveState {
  kUnknown = 0,  // no "state", or one this reader does not know
  kScheduled,    // enqueued on the GPU stream, not seen started
  kStarted,      // seen started (only with TORCH_NCCL_ENABLE_TIMING=1)
  kCompleted,    // seen completed
};

// One entry of the dump: a collective, or a send or receive.
struct CollectiveOp {
  int64_t seq = -1;            // collective_seq_id, or p2p_seq_id when p2p
  bool p2p = false;            // is_p2p (or, without it, a send or recv)
  std::string op;              // "all_reduce", "send 1->2": profiling_name less "nccl:"
  int32_t peer = -1;           // p2p: the other end, as a rank of the group; -1 otherwise
  CollectiveState state = CollectiveState::kUnknown;
  bool retired = false;        // the watchdog let go of it (timed out if not completed)
  std::vector<std::vector<int64_t>> input_sizes;   // a shape per input tensor
  std::vector<std::vector<int64_t>> output_sizes;  // a shape per output tensor
};

// How far a rank got in one of its groups' numberings; -1 for none yet.
// Enqueued: the rank called the operation (the CPU reached it). Started: its
// kernel ran (known only with timing on; -1 otherwise). Completed: done.
struct CollectiveProgress {
  int64_t last_enqueued = -1;
  int64_t last_started = -1;
  int64_t last_completed = -1;
};

// One process group as a rank's dump shows it.
struct GroupRecord {
  int64_t pg_id = -1;          // the rank's own number of the group; -1 when unknown
  std::string name;            // the group's name, the same on every rank ("0", "1", ...)
  std::string desc;            // "default_pg", or the name the script gave
  std::vector<uint32_t> ranks; // its global ranks (pg_config); empty when not given
  CollectiveProgress collectives;
  CollectiveProgress p2p;
  // The collective progress includes pg_status, which torch counts with
  // either numbering (the last work's own); used only when the dump has no
  // send or receive of the group, otherwise the entries alone count.
  bool from_pg_status = false;
  std::vector<CollectiveOp> last_collectives;  // the last few, oldest first
  std::vector<CollectiveOp> last_p2p;          // the last few, oldest first
};

// One rank's dump, summarized.
struct FlightRecord {
  std::string version;          // the dump's "version": "2.10"
  std::optional<uint32_t> rank; // when the dump says (torch's do not: the file name does)
  size_t entries = 0;           // entries read
  std::vector<GroupRecord> groups;  // by name
};

}  // namespace trainsup

#endif  // TRAINSUP_COMMON_COLLECTIVE_RECORD_H_
