#ifndef TRAINSUP_FUZZ_FUZZ_SUPPORT_H_
#define TRAINSUP_FUZZ_FUZZ_SUPPORT_H_

// What the daemon's fuzz targets share: an agent stream that goes nowhere,
// and the reads the operator service and /metrics make of the core.

#include <string>

#include "daemon/core/stacks.h"
#include "daemon/supervisor_host.h"

namespace trainsup {
namespace fuzz {

// Stands in for an agent's gRPC stream: each message is serialized, as the
// stream would, and dropped.
class DiscardingChannel final : public AgentChannel {
 public:
  void Send(const v1::SupervisorMessage& message) override {
    std::string wire;
    message.SerializeToString(&wire);
  }
  void Close(const grpc::Status&) override {}
};

// Computes every figure that `trainsupctl jobs|job|nodes|stacks` and a
// /metrics scrape read from the core, so that state the input left behind
// is read as the daemon would read it.
inline void ReadAsOperator(const SupervisorHost& host) {
  host.Read([](const Supervisor& core, absl::Time now) {
    core.ClusterMtbf(now);
    for (const JobEntry* job : core.Jobs()) {
      core.ViewOf(*job, now);
      job->ledger.totals().goodput();
      if (const JobStacks* stacks = core.FindStacks(job->id(), 0); stacks != nullptr) {
        GroupStacks(*stacks);
        UnansweredRanks(*stacks);
      }
    }
    core.NodeViews();
    return 0;
  });
}

}  // namespace fuzz
}  // namespace trainsup

#endif  // TRAINSUP_FUZZ_FUZZ_SUPPORT_H_
