#ifndef TRAINSUP_DAEMON_CORE_COLLECTIVE_CULPRIT_H_
#define TRAINSUP_DAEMON_CORE_COLLECTIVE_CULPRIT_H_

// Which rank never entered the collective the others wait in, from the
// ranks' NCCL flight recorder dumps (common/collective_record.h; docs/gpu.md).
// Pure: the dumps in, a finding and its one line out.
//
// A rank "entered" a collective when it enqueued it: its CPU called it. That
// is what a rank stuck elsewhere (in Python, in I/O, in another group's
// collective) never does, and what every dump has: "started" needs
// TORCH_NCCL_ENABLE_TIMING, without which pg_status says -1 for it.
//
// In a group, N is the highest collective any of its ranks entered. The
// ranks at N that have not completed it wait in it; a rank whose dump says
// it entered less than N never entered it. Sends and receives are judged
// apart, pair by pair (their numbers are each rank's own): a rank waits in a
// send or receive that has not completed, and its peer never entered the
// other end when the peer's dump has no pending operation back to it.
//
// With several groups, the finding that explains the hang is the one whose
// culprits are not themselves waiting in another group (a rank held in
// group A's collective is short of group B's as a consequence, not a
// cause: fewer such culprits first); then dump evidence before absence,
// absence before "every rank reached it"; then the lowest lag (N less the
// culprits' last entered: the most recent divergence; a send or receive
// counts 1); then collectives before sends and receives; then the group's
// name (numbers in order: "0" < "2" < "10").

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/collective_record.h"

namespace trainsup {

enum class CulpritEvidence {
  kNoDumps = 0,   // no dump at all
  kUndetermined,  // every rank of the group reached the collective (or nothing is pending)
  kDump,          // ranks' own dumps show them short of the collective others wait in
  kAbsence,       // only ranks that gave no dump can be short of it: weaker evidence
};

struct CollectiveCulprit {
  CulpritEvidence evidence = CulpritEvidence::kNoDumps;
  std::string pg;       // the group's name ("0"); "" for kNoDumps
  std::string pg_desc;  // "default_pg"
  bool p2p = false;     // a send or receive rather than a collective
  int64_t seq = -1;     // collective_seq_id (p2p: the first waiting rank's p2p_seq_id)
  std::string op;       // "all_reduce", "send 0->1"; "" when no dump names it
  std::vector<uint32_t> not_entered;   // dumps show they never entered it; ascending
  std::vector<uint32_t> waiting;       // in it and not completed; ascending
  std::vector<uint32_t> without_dump;  // the group's ranks that gave no dump; ascending
  // One line for people: "rank 2 never entered all_reduce #7 of pg 0
  // (default_pg) that ranks 0-1, 3 wait in".
  std::string text;
};

// "no_dumps", "undetermined", "dump", "absence": the wire's name (operator.proto).
const char* CulpritEvidenceName(CulpritEvidence evidence);

// `dumps`: each rank's record, by global rank. `world_size`: the job's ranks
// (0 when unknown), to tell which ranks of the default group gave no dump
// when no dump lists the group's ranks.
CollectiveCulprit FindCollectiveCulprit(const std::map<uint32_t, FlightRecord>& dumps,
                                        uint32_t world_size);

// "rank 3", "ranks 0-2", "ranks 0-1, 3, 7-9": ascending ranks as ranges, at
// most 8 of them, then "and N more".
std::string RankRanges(const std::vector<uint32_t>& ranks);

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_COLLECTIVE_CULPRIT_H_
