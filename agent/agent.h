#ifndef TRAINSUP_AGENT_AGENT_H_
#define TRAINSUP_AGENT_AGENT_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
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
  // SIGKILL the command's group this long after SIGTERM (on a forwarded
  // signal; a supervisor stop says its own grace). Default: 10s.
  absl::Duration stop_grace = absl::Seconds(10);
  // Heartbeats kept while the supervisor is away. Default: 65536.
  size_t max_backlog = 65536;
  // Cap of the reconnect backoff. Default: 5s.
  absl::Duration reconnect_max = absl::Seconds(5);
  // Parent of the private socket directory. Default: $XDG_RUNTIME_DIR or /tmp.
  std::string socket_parent;
  // At start, wait this long for the supervisor's welcome (it may say this
  // node is quarantined) before launching anyway. Default: 10s.
  absl::Duration connect_timeout = absl::Seconds(10);
  // After the command failed or was stopped, wait this long for the
  // supervisor's decision (restart, hold, quarantine) before exiting with the
  // command's exit code. Every command from the supervisor restarts the
  // wait. Default: 5m.
  absl::Duration decision_timeout = absl::Minutes(5);
  // While the job is held, wait this long for a resume before exiting with
  // the command's exit code. Default: 1h.
  absl::Duration hold_timeout = absl::Hours(1);
};

// trainsup-agent's event loop: launches the command when the supervisor says
// so (or on its own when the supervisor is away: fail-open), receives rank
// heartbeats, watches rank processes, forwards signals, and carries out the
// supervisor's decisions (stop, start generation N, hold, quarantine). One
// thread, plus the link's.
class Agent {
 public:
  explicit Agent(AgentOptions options);
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Runs until the job is over for this node; returns the agent's exit code
  // (the command's, 128 + signal, or kExitQuarantined). REQUIRES: SIGCHLD,
  // SIGTERM, SIGINT and SIGHUP blocked in every thread (BlockAgentSignals)
  // before any thread starts.
  int Run();

 private:
  enum class Phase {
    kConnecting,  // before the first launch: waiting for the welcome
    kRunning,     // the command runs
    kStopping,    // SIGTERM sent; SIGKILL at kill_deadline_
    kWaiting,     // the command ended; waiting for the supervisor's decision
    kHeld,        // the job is held; waiting for a resume
  };

  v1::AgentHello Hello() const;
  void Launch(uint64_t generation, const std::string& why);
  void StopCommand(absl::Duration grace, const std::string& why);
  void OnDatagrams();
  void OnSignals(int signal_fd);
  void OnSupervisorMessage(const v1::SupervisorMessage& message);
  void OnCommandEnded();
  // Keeps a checkpoint plan and rewrites the ranks' plan file.
  void OnPlan(const v1::CheckpointPlan& plan);
  void CheckTimers();
  void Finish(int code);
  void PublishProcesses();
  void PublishLauncher();

  // Messages from the link's reader thread, for the event loop.
  class Inbox {
   public:
    Inbox();
    ~Inbox();
    int fd() const { return event_fd_; }
    void Push(const v1::SupervisorMessage& message);
    std::deque<v1::SupervisorMessage> TakeAll();

   private:
    const int event_fd_;
    absl::Mutex mu_;
    std::deque<v1::SupervisorMessage> messages_ ABSL_GUARDED_BY(mu_);
  };

  const AgentOptions options_;
  const uint64_t incarnation_;
  std::vector<std::string> command_;
  ReportBatcher batcher_;
  Launcher launcher_;
  RankWatcher watcher_;
  std::unique_ptr<RankSocket> socket_;
  std::unique_ptr<SupervisorLink> link_;
  Inbox inbox_;
  mutable absl::Mutex plans_mu_;  // the link thread reads them for its hello
  v1::CheckpointPlans plans_ ABSL_GUARDED_BY(plans_mu_);
  std::string plan_path_;

  Phase phase_ = Phase::kConnecting;
  uint64_t generation_ = 0;
  absl::Duration deadline_ = absl::InfiniteDuration();       // of the phase (steady time)
  absl::Duration kill_deadline_ = absl::InfiniteDuration();  // SIGKILL (steady time)
  bool stopped_by_signal_ = false;   // a forwarded SIGTERM/SIGINT: the agent ends with it
  bool stopped_by_supervisor_ = false;
  bool quarantined_ = false;
  bool supervisor_restarts_ = true;  // from the welcome: false under --observe-only
  int last_exit_code_ = 0;
  std::optional<int> exit_code_;  // set when the agent is done
};

// Blocks the signals the agent reads through its signalfd. Call first in main.
void BlockAgentSignals();

}  // namespace trainsup

#endif  // TRAINSUP_AGENT_AGENT_H_
