#ifndef TRAINSUP_DAEMON_AGENT_SERVICE_H_
#define TRAINSUP_DAEMON_AGENT_SERVICE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

#include <google/protobuf/arena.h>

#include "daemon/access_control.h"
#include "daemon/supervisor_host.h"
#include "trainsup/v1/agent.grpc.pb.h"

namespace trainsup {

struct AgentStreamLimits {
  // Agent streams open at once (an idle one included), --max-agents; past it
  // a new stream is refused with RESOURCE_EXHAUSTED. Default: 16384 (a
  // 100k-GPU cluster of 8-GPU nodes has 12,500 agents); trainsupd keeps it
  // below what its descriptor limit allows (daemon/descriptors.h).
  size_t max_streams = 16384;
  // Messages queued to one agent and not yet written (it does not read):
  // past it the stream is ended with RESOURCE_EXHAUSTED; the agent
  // reconnects and is told its state afresh. Default: 1024.
  size_t max_outbox = 1024;
};

// What the streams' limits did, for /metrics. Lock-free. Owned outside the
// service, so that it outlives a listener that is rebuilt.
struct AgentStreamStats {
  std::atomic<int64_t> open{0};
  std::atomic<uint64_t> refused_max_streams{0};
  std::atomic<uint64_t> ended_max_outbox{0};
};

// The arena each agent stream reads a message into, emptied before the next
// read (see AgentStream): a report costs a block or two, whatever its
// heartbeats.
google::protobuf::ArenaOptions AgentReadArenaOptions();

// gRPC adapter of AgentService: one callback-API stream per agent, so that
// thousands of idle agent streams cost memory, not threads. Each stream turns
// wire messages into core observations on the host and carries the host's
// commands down.
class AgentServiceImpl final : public v1::AgentService::CallbackService {
 public:
  // `stats` (not owned) must outlive the service and its streams.
  AgentServiceImpl(SupervisorHost* host, AccessControl* access, AgentStreamLimits limits,
                   AgentStreamStats* stats)
      : host_(host), access_(access), limits_(limits), stats_(*stats) {}

  grpc::ServerBidiReactor<v1::AgentMessage, v1::SupervisorMessage>* Connect(
      grpc::CallbackServerContext* context) override;

  const AgentStreamStats& stats() const { return stats_; }

 private:
  SupervisorHost* const host_;
  AccessControl* const access_;
  const AgentStreamLimits limits_;
  AgentStreamStats& stats_;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_AGENT_SERVICE_H_
