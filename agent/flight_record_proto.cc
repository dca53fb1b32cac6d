#include "agent/flight_record_proto.h"

#include <algorithm>

namespace trainsup {
namespace {

v1::CollectiveOp::State ToProto(CollectiveState state) {
  switch (state) {
    case CollectiveState::kScheduled:
      return v1::CollectiveOp::STATE_SCHEDULED;
    case CollectiveState::kStarted:
      return v1::CollectiveOp::STATE_STARTED;
    case CollectiveState::kCompleted:
      return v1::CollectiveOp::STATE_COMPLETED;
    case CollectiveState::kUnknown:
      break;
  }
  return v1::CollectiveOp::STATE_UNKNOWN;
}

void ToProto(const CollectiveProgress& in, v1::CollectiveProgress* out) {
  out->set_last_enqueued(in.last_enqueued);
  out->set_last_started(in.last_started);
  out->set_last_completed(in.last_completed);
}

void AddOps(const std::vector<CollectiveOp>& ops, size_t max_ops,
            google::protobuf::RepeatedPtrField<v1::CollectiveOp>* out) {
  const size_t first = ops.size() > max_ops ? ops.size() - max_ops : 0;
  for (size_t i = first; i < ops.size(); ++i) {
    v1::CollectiveOp* op = out->Add();
    op->set_seq(ops[i].seq);
    op->set_p2p(ops[i].p2p);
    op->set_op(ops[i].op);
    op->set_peer(ops[i].peer);
    op->set_state(ToProto(ops[i].state));
    op->set_retired(ops[i].retired);
  }
}

}  // namespace

void ToProto(const FlightRecord& record, size_t max_groups, size_t max_ops,
             v1::FlightRecordSummary* out) {
  out->set_version(record.version);
  out->set_entries(record.entries);
  const size_t groups = std::min(record.groups.size(), max_groups);
  for (size_t i = 0; i < groups; ++i) {
    const GroupRecord& g = record.groups[i];
    v1::CollectiveGroup* group = out->add_groups();
    group->set_pg_id(g.pg_id);
    group->set_name(g.name);
    group->set_desc(g.desc);
    for (uint32_t rank : g.ranks) group->add_ranks(rank);
    ToProto(g.collectives, group->mutable_collectives());
    ToProto(g.p2p, group->mutable_p2p());
    group->set_from_pg_status(g.from_pg_status);
    AddOps(g.last_collectives, max_ops, group->mutable_last_collectives());
    AddOps(g.last_p2p, max_ops, group->mutable_last_p2p());
  }
}

}  // namespace trainsup
