#ifndef TRAINSUP_TESTS_SUPPORT_NULL_CHANNEL_H_
#define TRAINSUP_TESTS_SUPPORT_NULL_CHANNEL_H_

#include <grpcpp/grpcpp.h>

#include "daemon/supervisor_host.h"

namespace trainsup {
namespace testing {

// An agent channel that drops everything: for tests that speak to the host
// directly and do not read what it sends the agents.
class NullChannel : public AgentChannel {
 public:
  void Send(const v1::SupervisorMessage&) override {}
  void Close(const grpc::Status&) override {}
};

}  // namespace testing
}  // namespace trainsup

#endif  // TRAINSUP_TESTS_SUPPORT_NULL_CHANNEL_H_
