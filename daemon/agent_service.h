#ifndef TRAINSUP_DAEMON_AGENT_SERVICE_H_
#define TRAINSUP_DAEMON_AGENT_SERVICE_H_

#include "daemon/access_control.h"
#include "daemon/supervisor_host.h"
#include "trainsup/v1/agent.grpc.pb.h"

namespace trainsup {

// gRPC adapter of AgentService: one callback-API stream per agent, so that
// thousands of idle agent streams cost memory, not threads. Each stream turns
// wire messages into core observations on the host and carries the host's
// commands down.
class AgentServiceImpl final : public v1::AgentService::CallbackService {
 public:
  AgentServiceImpl(SupervisorHost* host, AccessControl* access)
      : host_(host), access_(access) {}

  grpc::ServerBidiReactor<v1::AgentMessage, v1::SupervisorMessage>* Connect(
      grpc::CallbackServerContext* context) override;

 private:
  SupervisorHost* const host_;
  AccessControl* const access_;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_AGENT_SERVICE_H_
