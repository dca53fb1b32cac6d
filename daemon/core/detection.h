#ifndef TRAINSUP_DAEMON_CORE_DETECTION_H_
#define TRAINSUP_DAEMON_CORE_DETECTION_H_

#include <optional>

#include "absl/container/flat_hash_set.h"
#include "absl/time/time.h"
#include "daemon/core/agent_registry.h"
#include "daemon/core/crash_detector.h"
#include "daemon/core/decisions.h"
#include "daemon/core/failure_handler.h"
#include "daemon/core/job_entry.h"
#include "daemon/core/job_stats.h"
#include "daemon/core/node_loss_detector.h"
#include "daemon/core/stall_detector.h"
#include "daemon/core/supervisor_options.h"

namespace trainsup {

// Runs the detection rules over a job's current generation and turns their
// verdicts into events (naming the rank and node) and failures for the
// FailureHandler: a crash's first rank to fail on its own, a hang's culprit,
// a node the job lost, a persistent straggler; and says when a node's agent
// can no longer be heard, and when it is heard again. Thread-compatible.
class Detection {
 public:
  // After a job is restored, how long its stall waits for every rank's
  // agent to say hello again: an agent comes back within its reconnect
  // backoff (--reconnect-max, 5s) and a standby's refusal (at most 1s).
  static constexpr absl::Duration kRejoinGrace = absl::Seconds(10);

  Detection(const SupervisorOptions& options, AgentRegistry& agents, Decisions& decisions,
            FailureHandler& failures)
      : crash_(options.crash),
        stall_(options.stall),
        node_loss_(options.node_loss),
        start_timeout_(options.start_timeout),
        verdict_table_(options.verdicts),
        agents_(agents),
        decisions_(decisions),
        failures_(failures) {}
  Detection(const Detection&) = delete;
  Detection& operator=(const Detection&) = delete;

  // A report was applied: starts the crash settle clock at the first certain
  // failure or failed command of the generation. O(1).
  static void NoticeReport(absl::Time now, JobEntry& job, bool launcher_failed);
  // `node`'s agent was heard (a hello or a report): if it was unreachable,
  // says it is back. O(1).
  void NoticeHeard(absl::Time now, JobEntry* job, NodeIndex node);

  // Each returns true when it found a job-killing failure (and handed it on).
  bool SweepCrash(absl::Time now, JobEntry& job);
  bool SweepStall(absl::Time now, JobEntry& job, const JobStepStats& stats);
  // A generation whose command runs on some node, of which no rank
  // reported and none stepped within --start-timeout of its start:
  // start_timeout, a failure charged to no node.
  bool SweepStart(absl::Time now, JobEntry& job);
  void SweepStragglers(absl::Time now, JobEntry& job);
  // Marks the job's nodes that have not been heard for --node-lost-after
  // unreachable (an event; their ranks' liveness becomes unknown). Nothing is
  // stopped for it.
  void SweepNodes(absl::Time now, JobEntry& job);
  // Keeps what the rules measure now in the job's verdicts, for the read
  // model: its step statistics and the stall threshold in force. O(1) and
  // O(the job's nodes), plus a pass over its ranks when heartbeats arrived
  // since the statistics were last taken.
  void UpdateFigures(absl::Time now, JobEntry& job);

  // The job's nodes whose agent is silent now, for longer than `at_least`
  // (their ranks' word is stale).
  absl::flat_hash_set<NodeIndex> SilentNodes(const JobEntry& job, absl::Time now,
                                             absl::Duration at_least) const;

  // Commands that failed before any rank reported, judged since start.
  const EarlyFailureCounts& early_failures() const { return early_failures_; }

  // The longest report interval in force among the job's connected agents.
  absl::Duration ReportIntervalOf(const JobEntry& job) const;

 private:
  // Whether a rank inside a checkpoint is on a node still heard: a rank
  // that began a save on a host that froze or lost power is not saving, and
  // its silence must not buy the job the checkpoint grace (15 minutes by
  // default) while the node-loss rule already says the node is gone.
  bool CheckpointCredible(const JobEntry& job) const;
  // The first node of `job` whose command failed in the job's current
  // generation, if any.
  std::optional<FailedLauncher> FailedLauncherOf(const JobEntry& job) const;
  // A failure named by a crash verdict; for a command that failed before
  // any rank reported, `early` says whose it is.
  Failure CrashFailure(JobEntry& job, const CrashVerdict& verdict,
                       std::optional<JudgedEarlyFailure>* early);
  // A rank's crash: the job's own verdict on it, or else whether it repeats
  // as the training code's.
  void JudgeRankFailure(JobEntry& job, const CrashVerdict& verdict, Failure& f) const;
  // What a crash says about the job's checkpoints (FailureHandler::
  // JudgeCheckpoints): a rank's own failure soon after a load counts toward
  // the checkpoint loaded; any crash of a generation that sent a non-finite
  // loss has the next generations resume below it.
  void JudgeCrashForCheckpoints(JobEntry& job, const CrashVerdict& verdict, Failure& failure);
  // `early`, the command of `job` on its node that failed before any rank
  // reported, against the job's other nodes and its last early failure.
  JudgedEarlyFailure JudgeEarly(JobEntry& job, EarlyFailure early);
  // Of `silent`, the node the supervisor lost sight of first; with
  // `with_the_job`, only among those that fell silent when the job stopped
  // stepping (kNoNode if none did).
  NodeIndex FirstSilent(const JobEntry& job, const absl::flat_hash_set<NodeIndex>& silent,
                        bool with_the_job) const;
  // The job stalled and node `lost`, which cannot be heard, is why: it is lost.
  void NodeLostInStall(absl::Time now, JobEntry& job, const StallVerdict& verdict,
                       NodeIndex lost);

  const CrashDetector crash_;
  const StallDetector stall_;
  const NodeLossDetector node_loss_;
  const absl::Duration start_timeout_;
  const VerdictTable& verdict_table_;  // trainsupd's (--verdict, --verdict-table)
  AgentRegistry& agents_;
  Decisions& decisions_;
  FailureHandler& failures_;
  EarlyFailureCounts early_failures_;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_DETECTION_H_
