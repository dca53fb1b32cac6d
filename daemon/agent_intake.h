#ifndef TRAINSUP_DAEMON_AGENT_INTAKE_H_
#define TRAINSUP_DAEMON_AGENT_INTAKE_H_

#include <grpcpp/support/status.h>

#include <memory>

#include "absl/strings/string_view.h"
#include "daemon/supervisor_host.h"
#include "trainsup/v1/agent.pb.h"

namespace trainsup {

// Applies one message of an agent's stream to the host, as the agent service
// does for every message it reads: a hello first and only once (it sets
// `*session`, which starts at 0), then reports and stacks, each converted
// from the wire into the core's types. A status that is not OK ends the
// stream with it. `peer` only names the agent in the log. Reports are
// converted into `*scratch`, which the caller reuses from one report to the
// next so that steady reports allocate nothing per heartbeat. Apart from the
// gRPC stream, so that the fuzz target drives the same path with raw bytes.
grpc::Status ApplyAgentMessage(SupervisorHost& host, const v1::AgentMessage& message,
                               const std::shared_ptr<AgentChannel>& channel,
                               absl::string_view peer, SessionId* session,
                               NodeReportInfo* scratch);

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_AGENT_INTAKE_H_
