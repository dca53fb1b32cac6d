// The agent's decisions (agent/agent_state.h), driven in fake steady time.
#include "agent/agent_state.h"

#include <csignal>
#include <ostream>

#include "common/options.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainsup {

void PrintTo(const AgentAction& a, std::ostream* os) {
  static const char* const kKinds[] = {"none",  "launch", "signal",         "wait",
                                       "ignore", "alert",  "note", "collect stacks", "finish"};
  *os << kKinds[static_cast<int>(a.kind)] << " {generation " << a.generation << ", signal "
      << a.signal << ", exit code " << a.exit_code << ", reason \"" << a.reason
      << "\", error \"" << a.error << "\"}";
}
void PrintTo(AgentStateMachine::Phase phase, std::ostream* os) { *os << AgentPhaseName(phase); }

namespace {

using ::testing::HasSubstr;
using Kind = AgentAction::Kind;
using Phase = AgentStateMachine::Phase;

MATCHER(IsNone, "") { return arg.kind == Kind::kNone; }
MATCHER(IsWait, "") { return arg.kind == Kind::kWait; }
MATCHER(IsIgnore, "") { return arg.kind == Kind::kIgnore && !arg.reason.empty(); }
MATCHER_P(IsLaunch, generation, "") {
  return arg.kind == Kind::kLaunch && arg.generation == static_cast<uint64_t>(generation);
}
MATCHER_P(IsSignal, signal, "") { return arg.kind == Kind::kSignal && arg.signal == signal; }
MATCHER_P(IsFinish, code, "") { return arg.kind == Kind::kFinish && arg.exit_code == code; }
MATCHER(IsAlert, "") { return arg.kind == Kind::kAlert && !arg.reason.empty(); }
MATCHER(IsNote, "") { return arg.kind == Kind::kNote && !arg.reason.empty(); }
MATCHER_P(IsCollectStacks, generation, "") {
  return arg.kind == Kind::kCollectStacks && arg.generation == static_cast<uint64_t>(generation);
}

// Steady time: seconds since an arbitrary origin.
absl::Duration T(double seconds) { return absl::Seconds(1000) + absl::Seconds(seconds); }

constexpr CommandEnd kSucceeded{0, 0};
constexpr CommandEnd kFailed{1, 0};
constexpr bool kConnected = true;
constexpr bool kUnreachable = false;

AgentStateOptions TestOptions() {
  AgentStateOptions o;
  o.connect_timeout = absl::Seconds(10);
  o.decision_timeout = absl::Minutes(5);
  o.hold_timeout = absl::Hours(1);
  o.stop_grace = absl::Seconds(10);
  o.stack_collect_time = absl::Seconds(2);
  return o;
}

class AgentStateTest : public ::testing::Test {
 protected:
  // A machine running generation `generation` since T(0).
  void Running(uint64_t generation = 1) {
    ASSERT_THAT(state_.OnWelcome(T(0), true, generation, true), IsLaunch(generation));
    ASSERT_EQ(state_.phase(), Phase::kRunning);
  }
  // A machine whose generation 1 failed at T(10) and waits for a decision.
  void Waiting() {
    Running();
    ASSERT_THAT(state_.OnCommandEnded(T(10), kFailed, kConnected), IsWait());
    ASSERT_EQ(state_.phase(), Phase::kWaiting);
  }
  // A machine held at T(20) after generation 1 failed.
  void Held() {
    Waiting();
    ASSERT_THAT(state_.OnHold(T(20), "restart cap"), IsWait());
    ASSERT_EQ(state_.phase(), Phase::kHeld);
  }

  AgentStateMachine state_{TestOptions(), T(0)};
};

// --- connecting ---

TEST_F(AgentStateTest, StartsConnectingWithNothingLaunched) {
  EXPECT_EQ(state_.phase(), Phase::kConnecting);
  EXPECT_EQ(state_.generation(), 0u);
  EXPECT_FALSE(state_.exit_code().has_value());
}

TEST_F(AgentStateTest, WelcomeWithLaunchStartsTheGenerationItNames) {
  EXPECT_THAT(state_.OnWelcome(T(1), true, 4, true), IsLaunch(4));
  EXPECT_EQ(state_.phase(), Phase::kRunning);
  EXPECT_EQ(state_.generation(), 4u);
}

TEST_F(AgentStateTest, WelcomeOfGenerationZeroLaunchesGenerationOne) {
  EXPECT_THAT(state_.OnWelcome(T(1), true, 0, true), IsLaunch(1));
}

TEST_F(AgentStateTest, WelcomeWithoutLaunchWaitsForTheDecisionTimeout) {
  EXPECT_THAT(state_.OnWelcome(T(1), false, 3, true), IsWait());
  EXPECT_EQ(state_.phase(), Phase::kWaiting);
  // The connect timeout no longer applies; the decision timeout does.
  EXPECT_THAT(state_.Tick(T(11)), IsNone());
  EXPECT_THAT(state_.Tick(T(1) + absl::Minutes(5) - absl::Milliseconds(1)), IsNone());
  EXPECT_THAT(state_.Tick(T(1) + absl::Minutes(5)), IsFinish(0));
}

TEST_F(AgentStateTest, NoWelcomeWithinTheConnectTimeoutLaunchesGenerationOne) {
  EXPECT_THAT(state_.Tick(T(9.999)), IsNone());
  const AgentAction action = state_.Tick(T(10));
  EXPECT_THAT(action, IsLaunch(1));
  EXPECT_TRUE(action.unsupervised);
  EXPECT_THAT(action.reason, HasSubstr("UNSUPERVISED"));
  EXPECT_EQ(state_.phase(), Phase::kRunning);
  EXPECT_THAT(state_.Tick(T(3600)), IsNone());  // running: no phase timeout
}

TEST_F(AgentStateTest, AWelcomeAfterAnUnsupervisedLaunchIsNotedOnce) {
  ASSERT_TRUE(state_.Tick(T(10)).unsupervised);
  const AgentAction welcomed = state_.OnWelcome(T(20), true, 1, true);
  EXPECT_THAT(welcomed, IsNote());
  EXPECT_THAT(welcomed.reason, HasSubstr("supervised from now on"));
  EXPECT_EQ(state_.phase(), Phase::kRunning);
  EXPECT_THAT(state_.OnWelcome(T(30), true, 1, true), IsNone());  // a reconnect
}

TEST_F(AgentStateTest, ALaunchTheSupervisorOrderedIsSupervised) {
  EXPECT_FALSE(state_.OnWelcome(T(1), true, 1, true).unsupervised);
}

TEST_F(AgentStateTest, FailClosedLaunchesNothingAndExits77AtTheConnectTimeout) {
  AgentStateOptions options = TestOptions();
  options.fail_closed = true;
  AgentStateMachine state(options, T(0));
  EXPECT_THAT(state.Tick(T(9.999)), IsNone());
  const AgentAction action = state.Tick(T(10));
  EXPECT_THAT(action, IsFinish(kExitUnsupervised));
  EXPECT_EQ(kExitUnsupervised, 77);
  EXPECT_THAT(action.error, HasSubstr("nothing was launched"));
  EXPECT_EQ(state.generation(), 0u);
}

TEST_F(AgentStateTest, FailClosedLaunchesWhenTheSupervisorSaysGo) {
  AgentStateOptions options = TestOptions();
  options.fail_closed = true;
  AgentStateMachine state(options, T(0));
  EXPECT_THAT(state.OnWelcome(T(9), true, 1, true), IsLaunch(1));
  EXPECT_THAT(state.Tick(T(10)), IsNone());
}

TEST_F(AgentStateTest, FailClosedStillExits76WhenRefusedForItsNode) {
  AgentStateOptions options = TestOptions();
  options.fail_closed = true;
  AgentStateMachine state(options, T(0));
  EXPECT_THAT(state.OnNodeTaken("node n1 is served by another agent"),
              IsFinish(kExitNodeTaken));
}

TEST_F(AgentStateTest, StartBeforeTheWelcomeLaunches) {
  EXPECT_THAT(state_.OnStart(T(1), 2, "restart"), IsLaunch(2));
}

TEST_F(AgentStateTest, HoldBeforeTheFirstLaunchWaitsHeld) {
  EXPECT_THAT(state_.OnHold(T(1), "cap"), IsWait());
  EXPECT_EQ(state_.phase(), Phase::kHeld);
  EXPECT_THAT(state_.Tick(T(11)), IsNone());  // the connect timeout is gone
}

TEST_F(AgentStateTest, QuarantineBeforeTheFirstLaunchExits75) {
  EXPECT_THAT(state_.OnQuarantined(T(1), "3 failures"), IsFinish(kExitQuarantined));
  EXPECT_EQ(state_.phase(), Phase::kDone);
  EXPECT_EQ(state_.exit_code(), 75);
}

TEST_F(AgentStateTest, StopSignalWithNoCommandExitsWith128PlusTheSignal) {
  EXPECT_THAT(state_.OnStopSignal(T(1), SIGTERM), IsFinish(128 + SIGTERM));
  EXPECT_EQ(state_.phase(), Phase::kDone);
}

TEST_F(AgentStateTest, StopWithNoCommandIsIgnored) {
  EXPECT_THAT(state_.OnStop(T(1), 1, absl::Seconds(5), "stall"), IsIgnore());
  EXPECT_EQ(state_.phase(), Phase::kConnecting);
}

TEST_F(AgentStateTest, CommandEndWithNoCommandIsIgnored) {
  EXPECT_THAT(state_.OnCommandEnded(T(1), kFailed, kConnected), IsIgnore());
  EXPECT_EQ(state_.phase(), Phase::kConnecting);
}

TEST_F(AgentStateTest, LaunchFailureExitsWithFailure) {
  Running();
  const AgentAction action = state_.OnLaunchFailed("cannot run torchrun");
  EXPECT_THAT(action, IsFinish(kExitFailure));
  EXPECT_THAT(action.error, HasSubstr("cannot run torchrun"));  // the agent's error line
  EXPECT_EQ(state_.phase(), Phase::kDone);
}

// --- connecting: another agent serves the node ---

constexpr char kTaken[] = "node n1 is served by another agent (incarnation 00000000000000aa)";

// The supervisor refuses a hello only while another agent is heard for the
// node (it lets an agent take over from one that is gone): this one exits
// at once, launching nothing. Retrying would have it join whatever runs on
// the node's name next, such as the first agent's job run again once it
// finished.
TEST_F(AgentStateTest, ARefusedAgentLaunchesNothingAndExits76AtOnce) {
  const AgentAction action = state_.OnNodeTaken(kTaken);
  EXPECT_THAT(action, IsFinish(kExitNodeTaken));
  EXPECT_EQ(action.error, kTaken);  // the agent's error line
  EXPECT_EQ(state_.exit_code(), 76);
  EXPECT_EQ(state_.generation(), 0u);  // nothing was launched
  // The first agent left and its job would run again on this node: no.
  EXPECT_THAT(state_.OnWelcome(T(5), true, 2, true), IsIgnore());
  EXPECT_THAT(state_.Tick(T(10)), IsNone());
  EXPECT_EQ(state_.generation(), 0u);
}

TEST_F(AgentStateTest, ARefusalAfterTheLaunchIsAlertedAndTheCommandRunsOn) {
  Running();
  const AgentAction action = state_.OnNodeTaken(kTaken);
  EXPECT_THAT(action, IsAlert());
  EXPECT_THAT(action.reason, HasSubstr("runs on"));
  EXPECT_EQ(state_.phase(), Phase::kRunning);
  EXPECT_THAT(state_.OnNodeTaken(kTaken), IsNone());
  EXPECT_THAT(state_.Tick(T(3600)), IsNone());
  // A welcome ends the streak: the next refusal is news again.
  EXPECT_THAT(state_.OnWelcome(T(3601), true, 1, true), IsNone());
  EXPECT_THAT(state_.OnNodeTaken(kTaken), IsAlert());
  EXPECT_THAT(state_.OnCommandEnded(T(3602), kSucceeded, kUnreachable), IsFinish(0));
}

TEST_F(AgentStateTest, ARefusalWhileWaitingKeepsTheDecisionTimeout) {
  Waiting();  // since T(10)
  EXPECT_THAT(state_.OnNodeTaken(kTaken), IsAlert());
  EXPECT_THAT(state_.Tick(T(10) + absl::Minutes(5)), IsFinish(1));
}

// --- running ---

TEST_F(AgentStateTest, StartWhileRunningIsIgnored) {
  Running(1);
  EXPECT_THAT(state_.OnStart(T(5), 2, "restart"), IsIgnore());
  EXPECT_EQ(state_.phase(), Phase::kRunning);
  EXPECT_EQ(state_.generation(), 1u);
}

TEST_F(AgentStateTest, WelcomeOnReconnectWhileRunningChangesNothing) {
  Running(1);
  EXPECT_THAT(state_.OnWelcome(T(5), true, 1, true), IsNone());
  EXPECT_EQ(state_.phase(), Phase::kRunning);
}

TEST_F(AgentStateTest, SuccessExitsZero) {
  Running();
  EXPECT_THAT(state_.OnCommandEnded(T(5), kSucceeded, kConnected), IsFinish(0));
  EXPECT_EQ(state_.exit_code(), 0);
}

TEST_F(AgentStateTest, FailureWaitsForTheSupervisorsDecision) {
  Running();
  EXPECT_THAT(state_.OnCommandEnded(T(5), kFailed, kConnected), IsWait());
  EXPECT_EQ(state_.phase(), Phase::kWaiting);
  EXPECT_EQ(state_.last_exit_code(), 1);
}

TEST_F(AgentStateTest, FailureWithNoSupervisorEverHeardFailsOpen) {
  ASSERT_THAT(state_.Tick(T(10)), IsLaunch(1));  // no welcome: launched on its own
  const AgentAction action = state_.OnCommandEnded(T(15), kFailed, kUnreachable);
  EXPECT_THAT(action, IsFinish(1));
  EXPECT_THAT(action.reason, HasSubstr("unreachable"));
}

TEST_F(AgentStateTest, FailureWhileASupervisorThatDecidedBeforeIsUnreachableWaitsForIt) {
  // A partition (or a supervisor restart): the job may have moved on without
  // this node; the agent waits to be told rather than hand the node back.
  Running();
  const AgentAction action = state_.OnCommandEnded(T(5), kFailed, kUnreachable);
  EXPECT_THAT(action, IsWait());
  EXPECT_THAT(action.reason, HasSubstr("unreachable"));
  EXPECT_EQ(state_.phase(), Phase::kWaiting);
  EXPECT_THAT(state_.Tick(T(5) + absl::Minutes(5)), IsFinish(1));
}

TEST_F(AgentStateTest, ObserveOnlyExitsWithTheCommandsCode) {
  ASSERT_THAT(state_.OnWelcome(T(0), true, 1, /*restarts=*/false), IsLaunch(1));
  EXPECT_THAT(state_.OnCommandEnded(T(5), CommandEnd{3, 0}, kConnected), IsFinish(3));
}

TEST_F(AgentStateTest, ObserveOnlyLearnedOnAReconnectApplies) {
  Running();
  EXPECT_THAT(state_.OnWelcome(T(5), true, 1, /*restarts=*/false), IsNone());
  EXPECT_THAT(state_.OnCommandEnded(T(6), kFailed, kConnected), IsFinish(1));
}

TEST_F(AgentStateTest, ASignalDeathIs128PlusTheSignal) {
  ASSERT_THAT(state_.Tick(T(10)), IsLaunch(1));
  EXPECT_THAT(state_.OnCommandEnded(T(15), CommandEnd{0, SIGKILL}, kUnreachable),
              IsFinish(128 + SIGKILL));
}

TEST_F(AgentStateTest, HoldWhileRunningIsIgnored) {
  Running();
  EXPECT_THAT(state_.OnHold(T(5), "cap"), IsIgnore());
  EXPECT_EQ(state_.phase(), Phase::kRunning);
  // When the command then fails, the agent waits for a decision (not a resume).
  EXPECT_THAT(state_.OnCommandEnded(T(6), kFailed, kConnected), IsWait());
  EXPECT_EQ(state_.phase(), Phase::kWaiting);
}

// --- stopping: the supervisor's stop ---

TEST_F(AgentStateTest, StopOfTheRunningGenerationSendsSigtermThenSigkillAfterTheGrace) {
  Running(2);
  EXPECT_THAT(state_.OnStop(T(5), 2, absl::Seconds(30), "stall"), IsSignal(SIGTERM));
  EXPECT_EQ(state_.phase(), Phase::kStopping);
  EXPECT_THAT(state_.Tick(T(34.9)), IsNone());
  EXPECT_THAT(state_.Tick(T(35)), IsSignal(SIGKILL));
  EXPECT_THAT(state_.Tick(T(36)), IsNone());  // once
}

TEST_F(AgentStateTest, StopOfAnOlderGenerationStillStops) {
  Running(3);
  EXPECT_THAT(state_.OnStop(T(5), 2, absl::Seconds(30), "stall"), IsSignal(SIGTERM));
}

TEST_F(AgentStateTest, StopOfANewerGenerationIsIgnored) {
  Running(2);
  EXPECT_THAT(state_.OnStop(T(5), 3, absl::Seconds(30), "stall"), IsIgnore());
  EXPECT_EQ(state_.phase(), Phase::kRunning);
  EXPECT_THAT(state_.Tick(T(100)), IsNone());
}

TEST_F(AgentStateTest, AfterAStopEvenASuccessWaitsForTheDecision) {
  Running();
  ASSERT_THAT(state_.OnStop(T(5), 1, absl::Seconds(30), "stall"), IsSignal(SIGTERM));
  EXPECT_THAT(state_.OnCommandEnded(T(6), kSucceeded, kConnected), IsWait());
  EXPECT_EQ(state_.phase(), Phase::kWaiting);
}

TEST_F(AgentStateTest, CommandEndCancelsTheSigkill) {
  Running();
  ASSERT_THAT(state_.OnStop(T(5), 1, absl::Seconds(30), "stall"), IsSignal(SIGTERM));
  ASSERT_THAT(state_.OnCommandEnded(T(6), CommandEnd{0, SIGTERM}, kConnected), IsWait());
  ASSERT_THAT(state_.OnStart(T(7), 2, "restart"), IsLaunch(2));
  EXPECT_THAT(state_.Tick(T(35)), IsNone());  // the old deadline does not kill generation 2
}

TEST_F(AgentStateTest, AStartAfterAStopForgetsTheStop) {
  Running();
  ASSERT_THAT(state_.OnStop(T(5), 1, absl::Seconds(30), "stall"), IsSignal(SIGTERM));
  ASSERT_THAT(state_.OnCommandEnded(T(6), CommandEnd{0, SIGTERM}, kConnected), IsWait());
  ASSERT_THAT(state_.OnStart(T(7), 2, "restart"), IsLaunch(2));
  EXPECT_THAT(state_.OnCommandEnded(T(8), kSucceeded, kConnected), IsFinish(0));
}

// --- stopping: stacks first ---

constexpr bool kCollectStacks = true;

TEST_F(AgentStateTest, AStopThatWantsStacksCollectsThemBeforeTheSigterm) {
  Running(2);
  EXPECT_THAT(state_.OnStop(T(5), 2, absl::Seconds(30), "hang", kCollectStacks),
              IsCollectStacks(2));
  EXPECT_EQ(state_.phase(), Phase::kCollecting);
  EXPECT_THAT(state_.Tick(T(6)), IsNone());
  EXPECT_THAT(state_.OnStacksCollected(T(6)), IsSignal(SIGTERM));
  EXPECT_EQ(state_.phase(), Phase::kStopping);
  // The grace runs from the SIGTERM, not from the stop command.
  EXPECT_THAT(state_.Tick(T(35.9)), IsNone());
  EXPECT_THAT(state_.Tick(T(36)), IsSignal(SIGKILL));
}

TEST_F(AgentStateTest, TheStackCollectionEndsAfterTheCollectTimeWhateverTheRanksDo) {
  Running();
  ASSERT_THAT(state_.OnStop(T(5), 1, absl::Seconds(30), "hang", kCollectStacks),
              IsCollectStacks(1));
  EXPECT_THAT(state_.Tick(T(6.999)), IsNone());
  const AgentAction action = state_.Tick(T(7));
  EXPECT_THAT(action, IsSignal(SIGTERM));
  EXPECT_THAT(action.reason, HasSubstr("hang"));
  EXPECT_EQ(state_.phase(), Phase::kStopping);
  // A late collection result changes nothing.
  EXPECT_THAT(state_.OnStacksCollected(T(7.5)), IsNone());
  EXPECT_THAT(state_.Tick(T(36.9)), IsNone());
  EXPECT_THAT(state_.Tick(T(37)), IsSignal(SIGKILL));
}

TEST_F(AgentStateTest, StacksAreNotCollectedFromACommandAlreadyStopping) {
  Running();
  ASSERT_THAT(state_.OnStop(T(5), 1, absl::Seconds(30), "stall"), IsSignal(SIGTERM));
  EXPECT_THAT(state_.OnStop(T(6), 1, absl::Seconds(30), "hang", kCollectStacks),
              IsSignal(SIGTERM));
  EXPECT_EQ(state_.phase(), Phase::kStopping);
}

TEST_F(AgentStateTest, AStopForANewerGenerationCollectsNothing) {
  Running(1);
  EXPECT_THAT(state_.OnStop(T(5), 2, absl::Seconds(30), "hang", kCollectStacks), IsIgnore());
  EXPECT_EQ(state_.phase(), Phase::kRunning);
}

TEST_F(AgentStateTest, ASecondStopWhileCollectingIsIgnored) {
  Running();
  ASSERT_THAT(state_.OnStop(T(5), 1, absl::Seconds(30), "hang", kCollectStacks),
              IsCollectStacks(1));
  EXPECT_THAT(state_.OnStop(T(6), 1, absl::Seconds(1), "again"), IsIgnore());
  EXPECT_EQ(state_.phase(), Phase::kCollecting);
  EXPECT_THAT(state_.OnStacksCollected(T(6.5)), IsSignal(SIGTERM));
  EXPECT_THAT(state_.Tick(T(36.4)), IsNone());  // the first stop's grace
  EXPECT_THAT(state_.Tick(T(36.5)), IsSignal(SIGKILL));
}

TEST_F(AgentStateTest, AStopSignalWhileCollectingIsForwardedAtOnce) {
  Running();
  ASSERT_THAT(state_.OnStop(T(5), 1, absl::Seconds(30), "hang", kCollectStacks),
              IsCollectStacks(1));
  EXPECT_THAT(state_.OnStopSignal(T(6), SIGTERM), IsSignal(SIGTERM));
  EXPECT_EQ(state_.phase(), Phase::kStopping);
  EXPECT_THAT(state_.Tick(T(7)), IsNone());  // the collect time no longer applies
  EXPECT_THAT(state_.OnStacksCollected(T(7)), IsNone());
}

TEST_F(AgentStateTest, ACommandEndingWhileCollectingWaitsForTheDecision) {
  Running();
  ASSERT_THAT(state_.OnStop(T(5), 1, absl::Seconds(30), "hang", kCollectStacks),
              IsCollectStacks(1));
  EXPECT_THAT(state_.OnCommandEnded(T(6), kFailed, kConnected), IsWait());
  EXPECT_EQ(state_.phase(), Phase::kWaiting);
  EXPECT_THAT(state_.Tick(T(7)), IsNone());
}

TEST_F(AgentStateTest, AQuarantineWhileCollectingStopsAtOnce) {
  Running();
  ASSERT_THAT(state_.OnStop(T(5), 1, absl::Seconds(30), "hang", kCollectStacks),
              IsCollectStacks(1));
  EXPECT_THAT(state_.OnQuarantined(T(6), "3 failures"), IsSignal(SIGTERM));
  EXPECT_EQ(state_.phase(), Phase::kStopping);
}

// --- stopping: a quarantine ---

TEST_F(AgentStateTest, QuarantineWhileRunningStopsWithTheGraceThenExits75) {
  Running();
  EXPECT_THAT(state_.OnQuarantined(T(5), "3 failures"), IsSignal(SIGTERM));
  EXPECT_EQ(state_.phase(), Phase::kStopping);
  EXPECT_THAT(state_.Tick(T(14.9)), IsNone());
  EXPECT_THAT(state_.Tick(T(15)), IsSignal(SIGKILL));
  EXPECT_THAT(state_.OnCommandEnded(T(16), CommandEnd{0, SIGKILL}, kConnected),
              IsFinish(kExitQuarantined));
}

// --- stopping: a stop signal to the agent ---

TEST_F(AgentStateTest, StopSignalIsForwardedAndTheAgentEndsWithTheCommand) {
  Running();
  EXPECT_THAT(state_.OnStopSignal(T(5), SIGINT), IsSignal(SIGINT));
  EXPECT_EQ(state_.phase(), Phase::kStopping);
  // Ends with the command even when connected to a supervisor that restarts.
  EXPECT_THAT(state_.OnCommandEnded(T(6), CommandEnd{0, SIGINT}, kConnected),
              IsFinish(128 + SIGINT));
}

TEST_F(AgentStateTest, SighupIsForwardedAsSigterm) {
  Running();
  EXPECT_THAT(state_.OnStopSignal(T(5), SIGHUP), IsSignal(SIGTERM));
}

TEST_F(AgentStateTest, ASecondStopSignalEscalatesToSigkill) {
  Running();
  ASSERT_THAT(state_.OnStopSignal(T(5), SIGTERM), IsSignal(SIGTERM));
  EXPECT_THAT(state_.OnStopSignal(T(6), SIGTERM), IsSignal(SIGKILL));
  EXPECT_EQ(state_.phase(), Phase::kStopping);
}

TEST_F(AgentStateTest, AForwardedStopSignalGetsSigkillAfterTheStopGrace) {
  Running();
  ASSERT_THAT(state_.OnStopSignal(T(5), SIGTERM), IsSignal(SIGTERM));
  EXPECT_THAT(state_.Tick(T(14.9)), IsNone());
  EXPECT_THAT(state_.Tick(T(15)), IsSignal(SIGKILL));
}

TEST_F(AgentStateTest, AQuarantineOutranksAStopSignal) {
  Running();
  ASSERT_THAT(state_.OnStopSignal(T(5), SIGTERM), IsSignal(SIGTERM));
  ASSERT_THAT(state_.OnQuarantined(T(6), "3 failures"), IsSignal(SIGTERM));
  // The quarantine's code wins: the node must not be used again.
  EXPECT_THAT(state_.OnCommandEnded(T(7), CommandEnd{0, SIGTERM}, kConnected),
              IsFinish(kExitQuarantined));
}

// --- waiting for a decision ---

TEST_F(AgentStateTest, NoDecisionWithinTheTimeoutExitsWithTheCommandsCode) {
  Waiting();  // since T(10)
  EXPECT_THAT(state_.Tick(T(10) + absl::Minutes(5) - absl::Milliseconds(1)), IsNone());
  EXPECT_THAT(state_.Tick(T(10) + absl::Minutes(5)), IsFinish(1));
}

TEST_F(AgentStateTest, EveryMessageRestartsTheWaitForADecision) {
  Waiting();  // since T(10)
  const absl::Duration later = T(10) + absl::Minutes(4);
  EXPECT_THAT(state_.OnOtherMessage(later), IsNone());  // a checkpoint plan
  EXPECT_THAT(state_.Tick(T(10) + absl::Minutes(5)), IsNone());
  EXPECT_THAT(state_.Tick(later + absl::Minutes(5)), IsFinish(1));
}

TEST_F(AgentStateTest, AnIgnoredMessageStillRestartsTheWait) {
  Waiting();  // since T(10)
  const absl::Duration later = T(10) + absl::Minutes(4);
  EXPECT_THAT(state_.OnStop(later, 1, absl::Seconds(5), "late"), IsIgnore());
  EXPECT_THAT(state_.Tick(T(10) + absl::Minutes(5)), IsNone());
  EXPECT_THAT(state_.Tick(later + absl::Minutes(5)), IsFinish(1));
}

TEST_F(AgentStateTest, StartWhileWaitingLaunchesTheNewGeneration) {
  Waiting();
  EXPECT_THAT(state_.OnStart(T(20), 2, "restart"), IsLaunch(2));
  EXPECT_EQ(state_.phase(), Phase::kRunning);
  EXPECT_EQ(state_.generation(), 2u);
  EXPECT_THAT(state_.Tick(T(10) + absl::Hours(2)), IsNone());  // no timeout while running
}

TEST_F(AgentStateTest, WelcomeWithLaunchWhileWaitingIsIgnored) {
  Waiting();
  EXPECT_THAT(state_.OnWelcome(T(20), true, 2, true), IsIgnore());
  EXPECT_EQ(state_.phase(), Phase::kWaiting);
}

TEST_F(AgentStateTest, QuarantineWhileWaitingExits75) {
  Waiting();
  EXPECT_THAT(state_.OnQuarantined(T(20), "3 failures"), IsFinish(kExitQuarantined));
}

TEST_F(AgentStateTest, StopSignalWhileWaitingExitsWith128PlusTheSignal) {
  Waiting();
  EXPECT_THAT(state_.OnStopSignal(T(20), SIGINT), IsFinish(128 + SIGINT));
}

// --- held ---

TEST_F(AgentStateTest, HeldExitsWithTheCommandsCodeAfterTheHoldTimeout) {
  Held();  // since T(20)
  EXPECT_THAT(state_.Tick(T(20) + absl::Minutes(5)), IsNone());  // not the decision timeout
  EXPECT_THAT(state_.Tick(T(20) + absl::Hours(1) - absl::Milliseconds(1)), IsNone());
  const AgentAction action = state_.Tick(T(20) + absl::Hours(1));
  EXPECT_THAT(action, IsFinish(1));
  EXPECT_THAT(action.reason, HasSubstr("still held"));
}

TEST_F(AgentStateTest, OtherMessagesDoNotExtendTheHold) {
  Held();  // since T(20)
  EXPECT_THAT(state_.OnOtherMessage(T(20) + absl::Minutes(30)), IsNone());
  EXPECT_THAT(state_.Tick(T(20) + absl::Hours(1)), IsFinish(1));
}

TEST_F(AgentStateTest, AnotherHoldRestartsTheHoldTimeout) {
  Held();  // since T(20)
  EXPECT_THAT(state_.OnHold(T(20) + absl::Minutes(30), "cap"), IsWait());
  EXPECT_THAT(state_.Tick(T(20) + absl::Hours(1)), IsNone());
  EXPECT_THAT(state_.Tick(T(20) + absl::Minutes(90)), IsFinish(1));
}

TEST_F(AgentStateTest, ResumeLaunchesTheNextGeneration) {
  Held();
  EXPECT_THAT(state_.OnStart(T(30), 2, "resumed"), IsLaunch(2));
  EXPECT_EQ(state_.phase(), Phase::kRunning);
}

// --- done ---

TEST_F(AgentStateTest, DoneIgnoresEveryInputAndKeepsItsExitCode) {
  ASSERT_THAT(state_.Tick(T(10)), IsLaunch(1));
  ASSERT_THAT(state_.OnCommandEnded(T(11), CommandEnd{7, 0}, kUnreachable), IsFinish(7));
  EXPECT_THAT(state_.OnWelcome(T(6), true, 2, true), IsIgnore());
  EXPECT_THAT(state_.OnStart(T(6), 2, "restart"), IsIgnore());
  EXPECT_THAT(state_.OnStop(T(6), 2, absl::Seconds(1), "stop"), IsIgnore());
  EXPECT_THAT(state_.OnHold(T(6), "cap"), IsIgnore());
  EXPECT_THAT(state_.OnQuarantined(T(6), "3 failures"), IsIgnore());
  EXPECT_THAT(state_.OnStopSignal(T(6), SIGTERM), IsIgnore());
  EXPECT_THAT(state_.OnCommandEnded(T(6), kFailed, kConnected), IsIgnore());
  EXPECT_THAT(state_.OnLaunchFailed("no"), IsIgnore());
  EXPECT_THAT(state_.OnNodeTaken(kTaken), IsIgnore());
  EXPECT_THAT(state_.OnStacksCollected(T(6)), IsNone());
  EXPECT_THAT(state_.OnOtherMessage(T(6)), IsNone());
  EXPECT_THAT(state_.Tick(T(1e6)), IsNone());
  EXPECT_EQ(state_.phase(), Phase::kDone);
  EXPECT_EQ(state_.exit_code(), 7);
}

TEST(AgentPhaseNameTest, NamesEveryPhase) {
  EXPECT_EQ(AgentPhaseName(Phase::kConnecting), "connecting");
  EXPECT_EQ(AgentPhaseName(Phase::kRunning), "running");
  EXPECT_EQ(AgentPhaseName(Phase::kCollecting), "collecting");
  EXPECT_EQ(AgentPhaseName(Phase::kStopping), "stopping");
  EXPECT_EQ(AgentPhaseName(Phase::kWaiting), "waiting");
  EXPECT_EQ(AgentPhaseName(Phase::kHeld), "held");
  EXPECT_EQ(AgentPhaseName(Phase::kDone), "done");
}

}  // namespace
}  // namespace trainsup
