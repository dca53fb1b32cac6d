#ifndef TRAINSUP_AGENT_AGENT_H_
#define TRAINSUP_AGENT_AGENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "agent/launcher.h"
#include "agent/rank_socket.h"
#include "agent/rank_watcher.h"
#include "agent/report_batcher.h"
#include "agent/supervisor_link.h"

namespace trainsup {

struct AgentOptions {
  std::string supervisor;  // HOST:PORT of trainsupd
  std::string job;
  std::string node;
  std::vector<std::string> command;  // normally torchrun ...
  // Batch period of reports to the supervisor. Default: 200ms.
  absl::Duration report_interval = absl::Milliseconds(200);
  // After forwarding SIGTERM/SIGINT, SIGKILL the group if it still runs after
  // this long. Default: 10s.
  absl::Duration stop_grace = absl::Seconds(10);
  // Heartbeats kept while the supervisor is away. Default: 65536.
  size_t max_backlog = 65536;
  // Cap of the reconnect backoff. Default: 5s.
  absl::Duration reconnect_max = absl::Seconds(5);
  // Parent of the private socket directory. Default: $XDG_RUNTIME_DIR or /tmp.
  std::string socket_parent;
};

// trainsup-agent's event loop: launches the command, receives rank
// heartbeats, watches rank processes, forwards signals, and feeds the
// supervisor link. One thread (plus the link's).
class Agent {
 public:
  explicit Agent(AgentOptions options);
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Runs the command to its end; returns the agent's exit code (the
  // command's, or 128 + signal). REQUIRES: SIGCHLD, SIGTERM, SIGINT and SIGHUP
  // blocked in every thread (see BlockAgentSignals) before any thread starts.
  int Run();

 private:
  v1::AgentHello Hello() const;
  void OnDatagrams();
  void OnSignals(int signal_fd);
  void PublishProcesses();
  void PublishLauncher();

  const AgentOptions options_;
  const uint64_t incarnation_;
  uint64_t generation_ = 1;
  ReportBatcher batcher_;
  Launcher launcher_;
  RankWatcher watcher_;
  std::unique_ptr<RankSocket> socket_;
  absl::Duration kill_deadline_ = absl::InfiniteDuration();  // steady time
  int stop_signals_ = 0;
};

// Blocks the signals the agent reads through its signalfd. Call first in main.
void BlockAgentSignals();

}  // namespace trainsup

#endif  // TRAINSUP_AGENT_AGENT_H_
