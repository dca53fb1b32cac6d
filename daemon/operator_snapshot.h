#ifndef TRAINSUP_DAEMON_OPERATOR_SNAPSHOT_H_
#define TRAINSUP_DAEMON_OPERATOR_SNAPSHOT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "daemon/core/job_view.h"
#include "trainsup/v1/operator.pb.h"

namespace trainsup {

class Supervisor;

// One job: its rendered detail (which holds the ListJobs row), its ranks in
// rank order (the core's packed rows, with the texts they point to) and the
// figures the core keeps of them.
struct JobSnapshot {
  v1::JobDetail detail;
  std::vector<RankView> ranks;
  std::vector<RankTexts> texts;
  RankCounts counts;        // the ranks by liveness
  uint32_t stragglers = 0;  // ranks flagged now
};

// What operators read: the core as of one moment, immutable once published.
// Readers share it (std::shared_ptr) and never touch the core's lock, so a
// slow reader cannot hold ingest up, and ingest cannot starve readers.
struct OperatorSnapshot {
  absl::Time taken;                  // the core's clock when it was copied
  uint64_t last_event_id = 0;        // every event up to it is reflected here
  std::vector<std::shared_ptr<const JobSnapshot>> jobs;  // by job id
  absl::flat_hash_map<std::string, const JobSnapshot*> by_id;
  std::vector<NodeView> nodes;       // by name
  std::vector<std::string> node_names;  // by NodeIndex, for RankView::node

  const JobSnapshot* FindJob(const std::string& id) const;
};

// Copies what operators read out of the core's read model (job_view.h).
// Runs under the core's (shared) lock, so it copies numbers and leaves the
// rendering of protos to the readers, except for the few per-job details.
std::shared_ptr<OperatorSnapshot> CaptureSnapshot(const Supervisor& core, absl::Time now);

// The ranks a ListRanks request asks for, in its order, and how many matched
// its filter before the limit.
struct RankSelection {
  std::vector<const RankView*> rows;
  uint32_t matched = 0;
};
RankSelection SelectRanks(const OperatorSnapshot& snapshot, const JobSnapshot& job,
                          const v1::ListRanksRequest& request);
// The whole job at a glance, as of `now`.
void SummarizeRanks(const JobSnapshot& job, absl::Time now, v1::RankSummary* out);
void RenderRank(const OperatorSnapshot& snapshot, const JobSnapshot& job, const RankView& row,
                absl::Time now, v1::Rank* out);
void RenderNode(const NodeView& row, absl::Time now, v1::Node* out);
void SetTimestamp(absl::Time t, google::protobuf::Timestamp* out);
void RenderLedger(const LedgerTotals& totals, v1::LedgerBuckets* out);

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_OPERATOR_SNAPSHOT_H_
