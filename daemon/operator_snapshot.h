#ifndef TRAINSUP_DAEMON_OPERATOR_SNAPSHOT_H_
#define TRAINSUP_DAEMON_OPERATOR_SNAPSHOT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "daemon/core/supervisor.h"
#include "trainsup/v1/operator.pb.h"

namespace trainsup {

// One rank as the operator sees it, packed: a 100k-rank job's rows are
// copied under the core's lock at each publication, so they hold numbers
// only; the rare texts (exit, exception) sit in the job's `texts`.
struct RankRow {
  uint32_t rank = 0;
  NodeIndex node = kNoNode;  // into OperatorSnapshot::node_names
  uint32_t local_rank = 0;
  uint32_t pid = 0;
  int64_t step = -1;
  absl::Time last_heartbeat = absl::InfinitePast();
  uint64_t heartbeats = 0;
  uint64_t datagrams_dropped = 0;
  float step_p50 = 0;
  float step_p99 = 0;
  float compute_p50 = 0;
  float compute_p99 = 0;
  double loss = 0;
  double learning_rate = 0;
  uint32_t texts = UINT32_MAX;  // index into JobSnapshot::texts, if any
  StepPhase phase = StepPhase::kBetweenSteps;
  Liveness liveness = Liveness::kUnknown;
  bool has_loss = false;
  bool has_learning_rate = false;
  bool straggler = false;
  bool stall_culprit = false;
  bool crash_culprit = false;
};

// The exit and exception of a rank that ended.
struct RankTexts {
  std::string exit;
  std::string exception;
};

// One job: its rendered detail (which holds the ListJobs row) and its ranks
// in rank order.
struct JobSnapshot {
  v1::JobDetail detail;
  std::vector<RankRow> ranks;
  std::vector<RankTexts> texts;
};

// One node as `trainsupctl nodes` shows it.
struct NodeRow {
  std::string name;
  std::string job;
  std::string quarantine_reason;
  uint64_t incarnation = 0;
  uint64_t generation = 0;
  uint64_t heartbeats = 0;
  absl::Time last_report = absl::InfinitePast();
  uint32_t ranks = 0;
  LauncherState launcher = LauncherState::kUnspecified;
  bool connected = false;
  bool quarantined = false;
  bool unreachable = false;
};

// What operators read: the core as of one moment, immutable once published.
// Readers share it (std::shared_ptr) and never touch the core's lock, so a
// slow reader cannot hold ingest up, and ingest cannot starve readers.
struct OperatorSnapshot {
  absl::Time taken;                  // the core's clock when it was copied
  uint64_t last_event_id = 0;        // every event up to it is reflected here
  std::vector<std::shared_ptr<const JobSnapshot>> jobs;  // by job id
  absl::flat_hash_map<std::string, const JobSnapshot*> by_id;
  std::vector<NodeRow> nodes;        // by name
  std::vector<std::string> node_names;  // by NodeIndex, for RankRow::node

  const JobSnapshot* FindJob(const std::string& id) const;
};

// Copies what operators read out of the core. Runs under the core's (shared)
// lock, so it copies numbers and leaves the rendering of protos to the
// readers, except for the few per-job details.
std::shared_ptr<OperatorSnapshot> CaptureSnapshot(const Supervisor& core, absl::Time now);

// The ranks a ListRanks request asks for, in its order, and how many matched
// its filter before the limit.
struct RankSelection {
  std::vector<const RankRow*> rows;
  uint32_t matched = 0;
};
RankSelection SelectRanks(const OperatorSnapshot& snapshot, const JobSnapshot& job,
                          const v1::ListRanksRequest& request);
// The whole job at a glance, as of `now`.
void SummarizeRanks(const JobSnapshot& job, absl::Time now, v1::RankSummary* out);
void RenderRank(const OperatorSnapshot& snapshot, const JobSnapshot& job, const RankRow& row,
                absl::Time now, v1::Rank* out);
void RenderNode(const NodeRow& row, absl::Time now, v1::Node* out);
void SetTimestamp(absl::Time t, google::protobuf::Timestamp* out);

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_OPERATOR_SNAPSHOT_H_
