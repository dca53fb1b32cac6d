#ifndef TRAINSUP_FUZZ_FUZZ_SUPPORT_H_
#define TRAINSUP_FUZZ_FUZZ_SUPPORT_H_

// What the daemon's fuzz targets share: an agent stream that goes nowhere,
// and the reads the operator service and /metrics make of the core.

#include <string>
#include <vector>

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
    core.Cluster(now);
    std::vector<RankView> ranks;
    std::vector<RankTexts> texts;
    for (const JobView& job : core.JobViews(now)) {
      job.ledger.goodput();
      core.RankViewsOf(job.id, &ranks, &texts);
      (void)core.StacksOf(job.id, 0);
    }
    core.NodeViews();
    return 0;
  });
}

}  // namespace fuzz
}  // namespace trainsup

#endif  // TRAINSUP_FUZZ_FUZZ_SUPPORT_H_
