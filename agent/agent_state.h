#ifndef TRAINSUP_AGENT_AGENT_STATE_H_
#define TRAINSUP_AGENT_AGENT_STATE_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace trainsup {

// The agent's timeouts, as AgentOptions documents them.
struct AgentStateOptions {
  // At start, wait this long for the supervisor's welcome before launching
  // anyway (fail-open), or exiting with kExitUnsupervised (fail_closed).
  // Default: 10s.
  absl::Duration connect_timeout = absl::Seconds(10);
  // Launch nothing the supervisor has not welcomed: with no welcome by the
  // connect timeout, exit with kExitUnsupervised instead of launching
  // unsupervised. Default: false (fail-open: training goes on without the
  // supervisor, which nothing then watches, restarts or plans for).
  bool fail_closed = false;
  // After the command failed or was stopped, wait this long for the
  // supervisor's decision before exiting with the command's exit code. Every
  // message from the supervisor restarts the wait. Default: 5m.
  absl::Duration decision_timeout = absl::Minutes(5);
  // While the job is held, wait this long for a resume. Default: 1h.
  absl::Duration hold_timeout = absl::Hours(1);
  // SIGKILL the command's group this long after forwarding a stop signal, or
  // after SIGTERM for a quarantine. Default: 10s.
  absl::Duration stop_grace = absl::Seconds(10);
  // On a stop that asks for the ranks' Python stacks, collect them for at
  // most this long before the SIGTERM. Default: 2s.
  absl::Duration stack_collect_time = absl::Seconds(2);
};

// What the agent's event loop must do next, as a value. Every input of
// AgentStateMachine returns exactly one.
struct AgentAction {
  enum class Kind {
    kNone,    // nothing to do
    kLaunch,  // start the command as `generation`
    kSignal,  // send `signal` to the command's process group
    kWait,    // no command runs: wait for the supervisor (logged, nothing to do)
    kIgnore,  // the input was refused in this phase; `reason` says why
    kAlert,   // nothing to do, but an operator must know: log `reason` as an error
    kNote,    // nothing to do; log `reason`
    kCollectStacks,  // ask the ranks of `generation` for their Python stacks, and
                     // report OnStacksCollected once they answered
    kFinish,  // the agent is done: exit with `exit_code`
  };
  Kind kind = Kind::kNone;
  uint64_t generation = 0;  // kLaunch, kCollectStacks
  // kLaunch without the supervisor's word (fail-open at the connect timeout):
  // nothing supervises the command until a welcome comes. Said loudly.
  bool unsupervised = false;
  int signal = 0;           // kSignal
  int exit_code = 0;        // kFinish
  std::string reason;       // for the log: why
  // kFinish when the agent refuses to run: the line for its stderr, after
  // "error: ". Empty otherwise.
  std::string error;
};

// How the command ended: its exit code, or the signal that killed it (0: none).
struct CommandEnd {
  int exit_code = 0;
  int signal = 0;
};

// The agent's decisions, without I/O: when to launch the command and as
// which generation, when to stop or kill it, when to give up waiting and
// with which exit code. The event loop feeds it the supervisor's messages,
// the stop signals it receives, the command's end and the passing of time
// (steady time, `now` on every call), and carries out the returned action.
//
// Phases: kConnecting (before the first launch: waiting for the welcome) ->
// kRunning (the command runs) -> [kCollecting (a stop that wants the ranks'
// stacks: collecting them, at most the collect time)] -> kStopping (SIGTERM
// sent; SIGKILL at the kill deadline) -> kWaiting (the command ended; waiting
// for the supervisor's decision) or kHeld (the job is held; waiting for a
// resume) -> kRunning again on a start; kDone once an exit code is decided,
// after which every input is ignored. Thread-compatible.
class AgentStateMachine {
 public:
  enum class Phase { kConnecting, kRunning, kCollecting, kStopping, kWaiting, kHeld, kDone };

  // Starts in kConnecting; the connect timeout runs from `now`.
  AgentStateMachine(AgentStateOptions options, absl::Duration now);
  AgentStateMachine(const AgentStateMachine&) = delete;
  AgentStateMachine& operator=(const AgentStateMachine&) = delete;

  // The supervisor's messages (agent.proto). Each one, whatever it says,
  // restarts the wait for a decision in kWaiting.
  //
  // Welcome: `restarts` is remembered (false under --observe-only). Before
  // the first launch: launch as max(1, generation), or wait for a start.
  // The first welcome of a command launched unsupervised is noted.
  AgentAction OnWelcome(absl::Duration now, bool launch, uint64_t generation, bool restarts);
  // Stop the command if it runs a generation <= `generation`: SIGTERM now,
  // SIGKILL after `grace`. With `collect_stacks` (a hung job), and while the
  // command runs undisturbed: first kCollectStacks, and the SIGTERM once
  // the stacks are collected (OnStacksCollected) or the collect time is over.
  AgentAction OnStop(absl::Duration now, uint64_t generation, absl::Duration grace,
                     absl::string_view why, bool collect_stacks = false);
  // The stacks asked for by kCollectStacks are in (every rank answered, or
  // none will): the stop goes on. Nothing to do in any other phase.
  AgentAction OnStacksCollected(absl::Duration now);
  // Launch `generation`, unless the command runs (then ignored).
  AgentAction OnStart(absl::Duration now, uint64_t generation, absl::string_view why);
  // The job is held: when no command runs, wait up to the hold timeout.
  AgentAction OnHold(absl::Duration now, absl::string_view why);
  // This node is quarantined: stop the command, or exit with kExitQuarantined.
  AgentAction OnQuarantined(absl::Duration now, absl::string_view why);
  // Any other message (a checkpoint plan): no decision in it, but it still
  // restarts the wait for one.
  AgentAction OnOtherMessage(absl::Duration now);

  // The supervisor refused the hello: another agent serves this node
  // (`message` is the supervisor's; it refuses only while that agent is
  // heard, and lets an agent take over from one that is gone). Before the
  // first launch the agent exits at once with kExitNodeTaken, having
  // launched nothing, and `message` as its error: no fail-open start, and no
  // retry that would join whatever runs under the node's name next (the
  // first agent's job run again once it ended). After a launch the command
  // runs on (fail-open); the first refusal of a streak is alerted, a welcome
  // ends the streak.
  AgentAction OnNodeTaken(absl::string_view message);

  // A carried-out kLaunch failed: exit with kExitFailure.
  AgentAction OnLaunchFailed(absl::string_view error);

  // SIGTERM, SIGINT or SIGHUP reached the agent (a person or the scheduler
  // stops it). With no command running: exit with 128 + signal. Otherwise
  // pass it on (SIGHUP as SIGTERM) and end with the command; a second one
  // escalates to SIGKILL, and so does the stop grace running out.
  AgentAction OnStopSignal(absl::Duration now, int signal);

  // The command ended. `supervisor_connected`: whether the link to the
  // supervisor is up now; when it is not, the agent fails open (exits with
  // the command's code and lets the scheduler decide).
  AgentAction OnCommandEnded(absl::Duration now, CommandEnd end, bool supervisor_connected);

  // Time passed: the SIGKILL deadline while the command runs, the end of
  // the stack collection, the phase's timeout while no command runs (at most
  // one is due at a time). The connect timeout launches generation 1
  // unsupervised, or with fail_closed exits with kExitUnsupervised.
  AgentAction Tick(absl::Duration now);

  Phase phase() const { return phase_; }
  // The generation last launched (0: none yet).
  uint64_t generation() const { return generation_; }
  // Set once the phase is kDone.
  std::optional<int> exit_code() const { return exit_code_; }
  // The exit code the agent ends with for the command's last end: its exit
  // code, or 128 + signal (the shell's convention); 0 before any end.
  int last_exit_code() const { return last_exit_code_; }

 private:
  bool CommandRuns() const {
    return phase_ == Phase::kRunning || phase_ == Phase::kCollecting ||
           phase_ == Phase::kStopping;
  }
  // Any word from the supervisor restarts the wait for its decision.
  void Heard(absl::Duration now);
  AgentAction Launch(uint64_t generation, absl::string_view why);
  // kConnecting's deadline: exit 77 if fail-closed, else launch generation
  // 1 unsupervised.
  AgentAction ConnectTimedOut();
  // SIGTERM now, SIGKILL at now + grace. REQUIRES: CommandRuns().
  AgentAction Stop(absl::Duration now, absl::Duration grace, absl::string_view why);
  AgentAction Wait(Phase phase, absl::Duration deadline, std::string why);
  AgentAction Finish(int exit_code, std::string why);
  AgentAction Ignore(std::string why) const;
  AgentAction Alert(std::string why) const;

  const AgentStateOptions options_;
  Phase phase_ = Phase::kConnecting;
  uint64_t generation_ = 0;
  absl::Duration deadline_;                                  // of the phase
  absl::Duration kill_deadline_ = absl::InfiniteDuration();  // SIGKILL
  bool stopped_by_signal_ = false;  // a forwarded stop signal: the agent ends with the command
  bool stopped_by_supervisor_ = false;
  bool quarantined_ = false;
  bool supervisor_restarts_ = true;  // from the welcome: false under --observe-only
  bool welcomed_ = false;            // a supervisor spoke for this job at least once
  bool unsupervised_ = false;        // launched at the connect timeout; no welcome since
  // kCollecting: the stop that follows the collection.
  absl::Duration pending_grace_;
  std::string pending_stop_why_;
  // The supervisor refused this agent since its last welcome: another agent
  // serves the node.
  bool node_taken_ = false;
  int last_exit_code_ = 0;
  std::optional<int> exit_code_;
};

// "connecting", "running", ...: for logs and tests.
absl::string_view AgentPhaseName(AgentStateMachine::Phase phase);

}  // namespace trainsup

#endif  // TRAINSUP_AGENT_AGENT_STATE_H_
