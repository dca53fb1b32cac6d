#ifndef TRAINSUP_AGENT_FLIGHT_RECORD_PROTO_H_
#define TRAINSUP_AGENT_FLIGHT_RECORD_PROTO_H_

// A rank's flight record (common/collective_record.h) as the agent sends it
// in its stacks (agent.proto's FlightRecordSummary): the groups and the last
// operations trainsupd judges, within the bounds it accepts.

#include "common/collective_record.h"
#include "trainsup/v1/agent.pb.h"

namespace trainsup {

// At most `max_groups` groups (the first by name) and `max_ops` operations a
// numbering (the newest); an operation's tensor sizes are not sent.
void ToProto(const FlightRecord& record, size_t max_groups, size_t max_ops,
             v1::FlightRecordSummary* out);

}  // namespace trainsup

#endif  // TRAINSUP_AGENT_FLIGHT_RECORD_PROTO_H_
