#include "daemon/core/admission.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/format.h"
#include "common/limits.h"
#include "common/verdict_rule.h"
#include "daemon/core/checkpoint_publisher.h"
#include "daemon/core/node_loss_detector.h"

namespace trainsup {

std::string PreflightReason(const PreflightInfo& preflight) {
  absl::string_view last;
  for (absl::string_view line : absl::StrSplit(preflight.output, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (!line.empty()) last = line;
  }
  std::string said(ClipText(last, 300));
  for (char& c : said) {
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';  // one line, whatever the check wrote
  }
  return absl::StrCat("preflight failed (",
                      preflight.timed_out ? "at its time limit"
                                          : absl::StrCat("exit code ", preflight.exit_code),
                      absl::StrFormat(" after %.1fs)", preflight.seconds),
                      said.empty() ? "" : ": ", said);
}

absl::Status Admission::CheckNodeFree(absl::Time now, const AgentHelloInfo& hello) const {
  const NodeIndex index = agents_.Find(hello.node);
  if (index == kNoNode) return absl::OkStatus();
  const NodeRecord& node = agents_.node(index);
  // One agent per node: a second one (the same --node given twice, a reused
  // hostname) is refused while the first is heard; it may take over only
  // from an agent that is gone. The same agent reconnecting is welcome.
  if (!node.connected || node.incarnation == hello.incarnation ||
      NodeLossDetector::IsSilent(node, now)) {
    return absl::OkStatus();
  }
  return absl::AlreadyExistsError(absl::StrFormat(
      "node %s is served by another agent (incarnation %016x, job %s, heard %s ago); run one "
      "agent per node, each with its own --node",
      hello.node, node.incarnation, node.job, TenthsOfSeconds(now - node.last_report)));
}

absl::Status Admission::CheckLimits(const AgentHelloInfo& hello) {
  if (agents_.Find(hello.node) == kNoNode && agents_.size() >= options_.limits.max_nodes) {
    ++nodes_refused_;
    return absl::ResourceExhaustedError(absl::StrFormat(
        "node %s refused: trainsupd holds --max-nodes=%d nodes (a node leaves memory "
        "--job-retention after its agent is gone); raise --max-nodes",
        hello.node, options_.limits.max_nodes));
  }
  if (jobs_.Find(hello.job) == nullptr && jobs_.size() >= options_.limits.max_jobs) {
    ++jobs_refused_;
    return absl::ResourceExhaustedError(absl::StrFormat(
        "job %s refused: trainsupd holds --max-jobs=%d jobs (a job leaves memory "
        "--job-retention after its agents are gone); raise --max-jobs",
        hello.job, options_.limits.max_jobs));
  }
  return absl::OkStatus();
}

absl::Status Admission::CheckJob(const AgentHelloInfo& hello) const {
  const JobEntry* job = jobs_.Find(hello.job);
  if (job == nullptr) return CheckpointPublisher(options_.publish).CheckHeld(hello.plans);
  // Trust only what this supervisor decided: once it started (or restored)
  // the job's generation itself, an agent cannot move the job to one it
  // never started.
  const uint64_t current = job->job().generation();
  if (hello.generation > current && !job->lifecycle().generation_adopted) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "job %s has no generation %d: this supervisor started it up to generation %d",
        hello.job, hello.generation, current));
  }
  return job->plans().CheckHeld(hello.plans);
}

absl::Status Admission::Check(absl::Time now, const AgentHelloInfo& hello) {
  if (!IsValidName(hello.node)) {
    return absl::InvalidArgumentError(absl::StrCat("node name must be ", kNameRule));
  }
  if (!IsValidName(hello.job)) {
    return absl::InvalidArgumentError(absl::StrCat("job id must be ", kNameRule));
  }
  if (absl::Status bad = CheckJobVerdictRules(hello.verdict_rules); !bad.ok()) return bad;
  if (hello.rendezvous) {
    if (absl::Status bad = CheckRendezvousOffer(*hello.rendezvous); !bad.ok()) return bad;
  }
  if (hello.preflight && hello.preflight->output.size() > kMaxPreflightOutputBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a preflight's output longer than ",
                                                   kMaxPreflightOutputBytes, " bytes"));
  }
  if (absl::Status taken = CheckNodeFree(now, hello); !taken.ok()) return taken;
  if (absl::Status refused = CheckLimits(hello); !refused.ok()) return refused;
  return CheckJob(hello);
}

Admission::Admitted Admission::Admit(absl::Time now, const AgentHelloInfo& hello,
                                     NodeIndex index) {
  NodeRecord& node = agents_.mutable_node(index);
  bool created = false;
  JobEntry& job = jobs_.FindOrAdd(hello.job, &created);
  job.NoteHeard(now);
  Job& observed = job.job();
  const bool new_job = observed.generation() == 0;
  // A generation the agent runs and we do not know (our state was lost) is
  // adopted, never restarted.
  if (created && hello.generation > 0) job.mutable_lifecycle().generation_adopted = true;
  observed.ObserveGeneration(now, std::max<uint64_t>(hello.generation, 1));
  job.SyncGeneration();
  if (new_job) restarts_.JournalJob(now, job);
  const bool fresh_agent = hello.launcher.state == LauncherState::kWaiting;
  const JobState state = job.lifecycle().state;
  if (fresh_agent && (state == JobState::kFinished || state == JobState::kFailed)) {
    // The same job id, run again by new agents: a new generation, and a new
    // ledger (the idle time between the runs is nobody's loss).
    observed.ObserveGeneration(now, observed.generation() + 1);
    job.mutable_lifecycle().generation_adopted = false;
    job.SyncGeneration();
    job.mutable_ledger() = GoodputLedger();
    (void)restarts_.Transition(now, job, JobState::kPending, "run again by new agents");
  }
  job.mutable_plans().Adopt(hello.plans);
  for (const CheckpointPlanSpec& plan : hello.plans) {
    node.plans_held_through = std::max(node.plans_held_through, plan.plan_id);
  }

  Admitted admitted;
  admitted.job = &job;
  const uint64_t generation = observed.generation();
  // A fresh agent joins the generation that runs; one that ran an older
  // generation was cut from this one and waits for the next.
  admitted.launch = !quarantine_.IsQuarantined(node.name) && !node.preflight_failed &&
                    (job.lifecycle().state == JobState::kPending ||
                     job.lifecycle().state == JobState::kRunning) &&
                    (fresh_agent || hello.generation == generation);
  // The welcome is this agent's start: no separate start for this generation.
  if (admitted.launch && fresh_agent) {
    node.told.start_generation = generation;
    node.member_generation = generation;
    // It meets where the generation meets; the first to launch hosts it.
    admitted.rendezvous_decided =
        job.mutable_rendezvous().Join(generation, RendezvousMember{node.name, node.rendezvous});
    admitted.rendezvous = job.rendezvous().For(generation, node.name);
  }
  // An agent that still runs the current generation (it reconnected) is one
  // of its members; one that runs an older one was cut from this one.
  if (hello.generation == generation && node.running()) node.member_generation = generation;
  return admitted;
}

bool Admission::NoticeReport(absl::Time now, JobEntry& job) {
  const Job& observed = job.job();
  if (job.lifecycle().state != JobState::kPending || observed.ranks_reporting() == 0) return false;
  return restarts_
      .Transition(now, job, JobState::kRunning,
                  absl::StrCat("generation ", observed.generation(), " ranks report"))
      .ok();
}

}  // namespace trainsup
