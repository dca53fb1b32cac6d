#ifndef TRAINSUP_DAEMON_STORE_PROVENANCE_H_
#define TRAINSUP_DAEMON_STORE_PROVENANCE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "daemon/store/sqlite.h"
#include "trainsup/v1/provenance.pb.h"

namespace trainsup {
namespace store {

// Upserts one node's record of one generation of `job` (the latest
// replaces the one before), received at `now`. The record is kept as its
// JSON (readable with `sqlite3`). A record without a node is the
// generation's own, trainsupd's (its first step): the first one kept stays
// (a trainsupd restarted mid-generation does not replace it with a later
// step).
absl::Status PutProvenance(const Db& db, const std::string& job,
                           const v1::GenerationProvenance& record, absl::Time now);

// The records of `job`'s `generation`, by node name (none: empty); the
// generation's own record, if any, first (its node is empty).
absl::Status ReadProvenance(const Db& db, const std::string& job, uint64_t generation,
                            std::vector<v1::GenerationProvenance>* records);

}  // namespace store
}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_STORE_PROVENANCE_H_
