#include "agent/agent_state.h"

#include <algorithm>
#include <csignal>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/format.h"
#include "common/options.h"

namespace trainsup {
namespace {

// An action of `kind` logged with `why`; the caller sets the kind's figure.
AgentAction Action(AgentAction::Kind kind, std::string why) {
  AgentAction action;
  action.kind = kind;
  action.reason = std::move(why);
  return action;
}

AgentAction SignalAction(int signal, std::string why) {
  AgentAction action = Action(AgentAction::Kind::kSignal, std::move(why));
  action.signal = signal;
  return action;
}

}  // namespace

absl::string_view AgentPhaseName(AgentStateMachine::Phase phase) {
  switch (phase) {
    case AgentStateMachine::Phase::kConnecting: return "connecting";
    case AgentStateMachine::Phase::kRunning: return "running";
    case AgentStateMachine::Phase::kCollecting: return "collecting";
    case AgentStateMachine::Phase::kStopping: return "stopping";
    case AgentStateMachine::Phase::kWaiting: return "waiting";
    case AgentStateMachine::Phase::kHeld: return "held";
    case AgentStateMachine::Phase::kDone: return "done";
  }
  return "unknown";
}

AgentStateMachine::AgentStateMachine(AgentStateOptions options, absl::Duration now)
    : options_(options), deadline_(now + options_.connect_timeout) {}

void AgentStateMachine::Heard(absl::Duration now) {
  if (phase_ == Phase::kWaiting) deadline_ = now + options_.decision_timeout;
}

AgentAction AgentStateMachine::Launch(uint64_t generation, absl::string_view why) {
  generation_ = generation;
  stopped_by_supervisor_ = false;
  phase_ = Phase::kRunning;
  deadline_ = absl::InfiniteDuration();
  AgentAction action = Action(AgentAction::Kind::kLaunch, std::string(why));
  action.generation = generation;
  return action;
}

AgentAction AgentStateMachine::Stop(absl::Duration now, absl::Duration grace,
                                    absl::string_view why) {
  kill_deadline_ = now + grace;
  phase_ = Phase::kStopping;
  deadline_ = absl::InfiniteDuration();
  return SignalAction(SIGTERM, absl::StrCat("stopping generation ", generation_,
                                            " (SIGTERM to its process group, SIGKILL after ",
                                            absl::FormatDuration(grace), "): ", why));
}

AgentAction AgentStateMachine::Wait(Phase phase, absl::Duration deadline, std::string why) {
  phase_ = phase;
  deadline_ = deadline;
  return Action(AgentAction::Kind::kWait, std::move(why));
}

AgentAction AgentStateMachine::Finish(int exit_code, std::string why) {
  phase_ = Phase::kDone;
  exit_code_ = exit_code;
  deadline_ = absl::InfiniteDuration();
  kill_deadline_ = absl::InfiniteDuration();
  AgentAction action = Action(AgentAction::Kind::kFinish, std::move(why));
  action.exit_code = exit_code;
  return action;
}

AgentAction AgentStateMachine::Alert(std::string why) const {
  return Action(AgentAction::Kind::kAlert, std::move(why));
}

AgentAction AgentStateMachine::Ignore(std::string why) const {
  if (phase_ == Phase::kDone) {
    absl::StrAppend(&why, ": the agent is exiting with code ", *exit_code_);
  }
  return Action(AgentAction::Kind::kIgnore, std::move(why));
}

AgentAction AgentStateMachine::OnWelcome(absl::Duration now, bool launch, uint64_t generation,
                                         bool restarts) {
  if (phase_ == Phase::kDone) return Ignore("welcome");
  Heard(now);
  supervisor_restarts_ = restarts;
  welcomed_ = true;
  node_taken_ = false;
  if (phase_ == Phase::kConnecting) {
    if (launch) return Launch(std::max<uint64_t>(1, generation), "the supervisor says go");
    return Wait(Phase::kWaiting, now + options_.decision_timeout,
                "the supervisor says wait (job stopping, restarting or held)");
  }
  // A welcome on a reconnect: after the first launch, launches come as starts.
  if (launch && !CommandRuns()) {
    return Ignore(absl::StrCat("welcome with launch of generation ", generation, " while ",
                               AgentPhaseName(phase_), ": waiting for a start command"));
  }
  if (unsupervised_) {
    unsupervised_ = false;
    return Action(AgentAction::Kind::kNote,
                  absl::StrCat("the supervisor welcomed this agent: generation ", generation_,
                               ", launched unsupervised, is supervised from now on"));
  }
  return AgentAction();
}

AgentAction AgentStateMachine::OnStop(absl::Duration now, uint64_t generation,
                                      absl::Duration grace, absl::string_view why,
                                      bool collect_stacks) {
  if (phase_ == Phase::kDone) return Ignore("stop");
  Heard(now);
  stopped_by_supervisor_ = true;
  if (!CommandRuns()) {
    return Ignore(absl::StrCat("stop of generation ", generation, " while no command runs"));
  }
  if (generation > generation_) {
    return Ignore(absl::StrCat("stop of generation ", generation, " while generation ",
                               generation_, " runs"));
  }
  if (phase_ == Phase::kCollecting) {
    return Ignore(absl::StrCat("stop of generation ", generation,
                               " while collecting stacks: the stop under way follows them"));
  }
  // Stacks only from ranks not yet signalled: once SIGTERM went out, they
  // show the teardown, not the hang.
  if (collect_stacks && phase_ == Phase::kRunning) {
    phase_ = Phase::kCollecting;
    deadline_ = now + options_.stack_collect_time;
    pending_grace_ = grace;
    pending_stop_why_ = std::string(why);
    AgentAction action = Action(
        AgentAction::Kind::kCollectStacks,
        absl::StrCat("collecting the Python stacks of generation ", generation_, " (at most ",
                     absl::FormatDuration(options_.stack_collect_time),
                     ") before stopping it: ", why));
    action.generation = generation_;
    return action;
  }
  return Stop(now, grace, why);
}

AgentAction AgentStateMachine::OnStacksCollected(absl::Duration now) {
  if (phase_ != Phase::kCollecting) return AgentAction();
  deadline_ = absl::InfiniteDuration();
  return Stop(now, pending_grace_, pending_stop_why_);
}

AgentAction AgentStateMachine::OnStart(absl::Duration now, uint64_t generation,
                                       absl::string_view why) {
  if (phase_ == Phase::kDone) return Ignore("start");
  Heard(now);
  if (CommandRuns()) {
    return Ignore(absl::StrCat("start of generation ", generation, " while generation ",
                               generation_, " runs"));
  }
  return Launch(generation, why);
}

AgentAction AgentStateMachine::OnHold(absl::Duration now, absl::string_view why) {
  if (phase_ == Phase::kDone) return Ignore("hold");
  Heard(now);
  if (CommandRuns()) {
    return Ignore(absl::StrCat("hold (", why, ") while generation ", generation_,
                               " runs: the supervisor stops it first"));
  }
  return Wait(Phase::kHeld, now + options_.hold_timeout,
              absl::StrCat("the job is held: ", why, "; waiting up to ",
                           absl::FormatDuration(options_.hold_timeout),
                           " for `trainsupctl resume`"));
}

AgentAction AgentStateMachine::OnQuarantined(absl::Duration now, absl::string_view why) {
  if (phase_ == Phase::kDone) return Ignore("quarantine");
  Heard(now);
  quarantined_ = true;
  if (CommandRuns()) {
    return Stop(now, options_.stop_grace, absl::StrCat("node quarantined: ", why));
  }
  return Finish(kExitQuarantined, absl::StrCat("this node is quarantined: ", why));
}

AgentAction AgentStateMachine::OnOtherMessage(absl::Duration now) {
  if (phase_ == Phase::kDone) return AgentAction();
  Heard(now);
  return AgentAction();
}

AgentAction AgentStateMachine::OnNodeTaken(absl::string_view message) {
  if (phase_ == Phase::kDone) return Ignore("refusal");
  const bool first = !node_taken_;
  node_taken_ = true;
  if (phase_ == Phase::kConnecting) {
    AgentAction action = Finish(
        kExitNodeTaken, "another agent serves this node; nothing was launched");
    action.error = std::string(message);
    return action;
  }
  if (!first) return AgentAction();
  return Alert(absl::StrCat("the supervisor refuses this agent: ", message, "; ",
                            CommandRuns() ? "the command runs on" : "the agent goes on",
                            " (fail-open) and keeps retrying"));
}

AgentAction AgentStateMachine::OnLaunchFailed(absl::string_view error) {
  if (phase_ == Phase::kDone) return Ignore("launch failure");
  AgentAction action =
      Finish(kExitFailure, absl::StrCat("cannot launch generation ", generation_, ": ", error));
  action.error = action.reason;
  return action;
}

AgentAction AgentStateMachine::OnStopSignal(absl::Duration now, int signal) {
  const std::string name = SignalName(signal);
  if (phase_ == Phase::kDone) return Ignore(name);
  if (!CommandRuns()) return Finish(128 + signal, name + " received while no command runs");
  if (stopped_by_signal_) {
    return SignalAction(SIGKILL, absl::StrCat("second stop signal (", name,
                                              "): killing the command's process group"));
  }
  stopped_by_signal_ = true;
  kill_deadline_ = now + options_.stop_grace;
  phase_ = Phase::kStopping;
  deadline_ = absl::InfiniteDuration();
  const int forwarded = signal == SIGHUP ? SIGTERM : signal;
  return SignalAction(forwarded, absl::StrCat(name, " received: forwarding ",
                                              SignalName(forwarded),
                                              " to the command's process group, SIGKILL after ",
                                              absl::FormatDuration(options_.stop_grace)));
}

AgentAction AgentStateMachine::OnCommandEnded(absl::Duration now, CommandEnd end,
                                              bool supervisor_connected) {
  if (phase_ == Phase::kDone) return Ignore("command end");
  if (!CommandRuns()) {
    return Ignore(absl::StrCat("command end while ", AgentPhaseName(phase_)));
  }
  kill_deadline_ = absl::InfiniteDuration();
  last_exit_code_ = end.signal != 0 ? 128 + end.signal : end.exit_code;
  const int code = last_exit_code_;
  if (quarantined_) return Finish(kExitQuarantined, "this node is quarantined");
  if (stopped_by_signal_) return Finish(code, "stopped by a signal: exiting with the command");
  if (code == 0 && !stopped_by_supervisor_) return Finish(0, "the command succeeded");
  if (!supervisor_restarts_) {
    return Finish(code, absl::StrCat("the supervisor only observes: exiting with the command's "
                                     "exit code ", code));
  }
  if (!supervisor_connected && !welcomed_) {
    // Fail-open: with no supervisor to decide, the scheduler decides.
    return Finish(code, absl::StrCat("the supervisor is unreachable: exiting with the command's "
                                     "exit code ", code));
  }
  if (!supervisor_connected) {
    // A supervisor decided for this job before: it may be cut off from us
    // (a partition) and have moved the job on, or be restarting. Wait for
    // it as for any decision: a relaunch by the scheduler now could rejoin
    // a generation the job has left.
    return Wait(Phase::kWaiting, now + options_.decision_timeout,
                absl::StrCat("generation ", generation_, " ended while the supervisor is "
                             "unreachable: waiting up to ",
                             absl::FormatDuration(options_.decision_timeout),
                             " for it to be heard again and decide"));
  }
  return Wait(Phase::kWaiting, now + options_.decision_timeout,
              absl::StrCat("generation ", generation_, " ended: waiting up to ",
                           absl::FormatDuration(options_.decision_timeout),
                           " for the supervisor's decision"));
}

AgentAction AgentStateMachine::ConnectTimedOut() {
  const std::string waited = absl::FormatDuration(options_.connect_timeout);
  if (options_.fail_closed) {
    AgentAction action =
        Finish(kExitUnsupervised, absl::StrCat("no word from the supervisor within ", waited,
                                               " (--fail-mode closed): nothing was launched"));
    action.error = action.reason;
    return action;
  }
  AgentAction action =
      Launch(1, absl::StrCat("no word from the supervisor within ", waited,
                             ": launching anyway, UNSUPERVISED (fail-open start, --fail-mode "
                             "open)"));
  action.unsupervised = true;
  unsupervised_ = true;
  return action;
}

AgentAction AgentStateMachine::Tick(absl::Duration now) {
  if (now >= kill_deadline_ && CommandRuns()) {
    kill_deadline_ = absl::InfiniteDuration();
    return SignalAction(SIGKILL,
                        absl::StrCat("generation ", generation_, " did not stop in time: SIGKILL"));
  }
  if (now < deadline_) return AgentAction();
  switch (phase_) {
    case Phase::kConnecting:
      return ConnectTimedOut();
    case Phase::kWaiting:
      return Finish(last_exit_code_,
                    absl::StrCat("no decision from the supervisor within ",
                                 absl::FormatDuration(options_.decision_timeout),
                                 ": exiting with code ", last_exit_code_));
    case Phase::kHeld:
      return Finish(last_exit_code_, absl::StrCat("still held after ",
                                                  absl::FormatDuration(options_.hold_timeout),
                                                  ": exiting with code ", last_exit_code_));
    case Phase::kCollecting:
      deadline_ = absl::InfiniteDuration();
      return Stop(now, pending_grace_,
                  absl::StrCat(pending_stop_why_, " (the stack collection took its ",
                               absl::FormatDuration(options_.stack_collect_time), ")"));
    case Phase::kRunning:
    case Phase::kStopping:
    case Phase::kDone:
      break;
  }
  return AgentAction();
}

}  // namespace trainsup
