#ifndef TRAINSUP_AGENT_HEARTBEAT_DECODER_H_
#define TRAINSUP_AGENT_HEARTBEAT_DECODER_H_

#include <cstddef>
#include <variant>
#include <vector>

#include "absl/strings/string_view.h"
#include "trainsup/v1/agent.pb.h"
#include "trainsup/v1/heartbeat.pb.h"

namespace trainsup {

// Largest datagram the agent accepts from a rank. A heartbeat is ~300 bytes of
// JSON; the limit leaves room for an exception message of 1 KiB.
constexpr size_t kMaxHeartbeatDatagramBytes = 4096;

// Turns one datagram from a rank into a RankHeartbeat, with Protobuf's JSON
// support (one schema: the proto; no hand-written parser). Refuses, with the
// reason, what is too large, not JSON of RankHeartbeat, or carries fields the
// schema does not have. Semantic checks (ranks, steps, names) are the
// supervisor's, which sees the whole job.
std::variant<v1::RankHeartbeat, v1::RejectReason> DecodeHeartbeat(absl::string_view datagram);

// The most records one datagram may carry. The agent tells its ranks
// (TRAINSUP_HEARTBEAT_RECORDS); a helper told so may put a record that can
// wait (a STEP) in front of its next event's, one datagram instead of two.
constexpr int kMaxRecordsPerDatagram = 8;

// The records of one datagram, in their order: JSON objects one after
// another (the helper puts a newline between them). A datagram without that
// form comes back whole, for DecodeHeartbeat to judge: a single object over
// several lines is one record, and so is anything that is not JSON. Split
// only at the top level (braces inside strings do not count); at most
// kMaxRecordsPerDatagram records, the last holding whatever is left. Pure.
std::vector<absl::string_view> SplitRecords(absl::string_view datagram);

// The highest field number of RankHeartbeat this agent decodes. The agent
// tells its ranks (TRAINSUP_HEARTBEAT_FIELDS), so that a newer helper sends
// no field an older agent would refuse the whole datagram for.
int HighestHeartbeatField();

}  // namespace trainsup

#endif  // TRAINSUP_AGENT_HEARTBEAT_DECODER_H_
