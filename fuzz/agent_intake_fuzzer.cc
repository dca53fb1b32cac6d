// Fuzz target: the daemon's intake of agent messages. The input is a few
// agents' streams (fuzz_input.proto's AgentStreams): each message goes the
// agent service's way (ApplyAgentMessage: hello first, wire -> core types,
// the core's checks) into a SupervisorHost on a fake clock, a sweep follows
// every message, and at the end the core is read as the operator CLI and
// /metrics read it. No input may crash, leak or reach undefined behaviour.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "common/clock.h"
#include "daemon/agent_intake.h"
#include "daemon/supervisor_host.h"
#include "fuzz/fuzz_support.h"
#include "fuzz_input.pb.h"

namespace trainsup {
namespace {

// Agents that may speak at once (one stream each).
constexpr size_t kStreams = 4;
// Messages read from one input; the rest is ignored (keeps each run short).
constexpr int kMaxSteps = 256;
// The longest the clock moves between two messages: beyond every timer of
// the default options (restart backoff 5m, startup grace 5m).
constexpr uint32_t kMaxAdvanceMs = 10 * 60 * 1000;

struct Stream {
  std::shared_ptr<AgentChannel> channel = std::make_shared<fuzz::DiscardingChannel>();
  SessionId session = 0;  // 0 until its hello is accepted
  NodeReportInfo report;  // reused from report to report, as the service does
};

void Run(const fuzz::AgentStreams& input) {
  FakeClock clock;
  SupervisorHost host(SupervisorOptions(), &clock);
  std::array<Stream, kStreams> streams;
  const int steps = std::min(input.steps_size(), kMaxSteps);
  for (int i = 0; i < steps; ++i) {
    const fuzz::StreamStep& step = input.steps(i);
    clock.Advance(absl::Milliseconds(std::min(step.advance_ms(), kMaxAdvanceMs)));
    Stream& stream = streams[step.stream() % kStreams];
    const grpc::Status status =
        ApplyAgentMessage(host, step.message(), stream.channel, "fuzz", &stream.session,
                          &stream.report);
    // As the service does when a stream ends, by error or by the agent.
    if (!status.ok() || step.end_stream()) {
      if (stream.session != 0) host.Disconnected(stream.session);
      stream = Stream();
    }
    host.Sweep();
  }
  fuzz::ReadAsOperator(host);
}

}  // namespace
}  // namespace trainsup

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  trainsup::fuzz::AgentStreams input;
  if (!input.ParseFromArray(data, static_cast<int>(size))) return -1;  // not worth keeping
  trainsup::Run(input);
  return 0;
}
