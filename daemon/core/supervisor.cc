#include "daemon/core/supervisor.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/core/format.h"
#include "daemon/core/validation.h"

namespace trainsup {

Supervisor::Supervisor(SupervisorOptions options)
    : options_(options),
      stall_detector_(options.stall),
      crash_detector_(options.crash),
      mtbf_(options.mtbf),
      quarantine_(options.quarantine),
      events_(options.event_log_size) {}

JobControl& Supervisor::ControlFor(const Job& job) {
  std::unique_ptr<JobControl>& slot = controls_[job.id()];
  if (slot == nullptr) slot = std::make_unique<JobControl>(options_.restart);
  return *slot;
}

void Supervisor::AdoptPlans(JobControl& control, const std::vector<CheckpointPlanSpec>& held) {
  // A supervisor that restarted has lost the plans it published; the agents
  // kept them, and ranks must keep holding the same plans. Keep them by id.
  bool added = false;
  for (const CheckpointPlanSpec& plan : held) {
    auto same = [&](const CheckpointPlanSpec& p) { return p.plan_id == plan.plan_id; };
    if (std::none_of(control.plans.begin(), control.plans.end(), same)) {
      control.plans.push_back(plan);
      added = true;
    }
  }
  if (!added) return;
  std::sort(control.plans.begin(), control.plans.end(),
            [](const CheckpointPlanSpec& a, const CheckpointPlanSpec& b) {
              return a.plan_id < b.plan_id;
            });
}

const JobControl* Supervisor::FindControl(absl::string_view job_id) const {
  auto it = controls_.find(job_id);
  return it == controls_.end() ? nullptr : it->second.get();
}

Job& Supervisor::JobFor(const std::string& job_id) {
  std::unique_ptr<Job>& slot = jobs_[job_id];
  if (slot == nullptr) slot = std::make_unique<Job>(job_id, options_.step_window, options_.straggler.window);
  return *slot;
}

NodeIndex Supervisor::NodeFor(const std::string& name) {
  auto it = node_index_.find(name);
  if (it != node_index_.end()) return it->second;
  NodeIndex index = static_cast<NodeIndex>(nodes_.size());
  nodes_.emplace_back();
  nodes_.back().name = name;
  node_index_.emplace(name, index);
  return index;
}

NodeIndex Supervisor::NodeOfSession(SessionId session) const {
  auto it = sessions_.find(session);
  return it == sessions_.end() ? kNoNode : it->second;
}

absl::StatusOr<Supervisor::HelloResult> Supervisor::Hello(absl::Time now, const AgentHelloInfo& hello) {
  if (!IsValidName(hello.node)) {
    return absl::InvalidArgumentError(
        absl::StrCat("node name must be 1..", kMaxNameLength, " characters of [A-Za-z0-9._-]"));
  }
  if (!IsValidName(hello.job)) {
    return absl::InvalidArgumentError(
        absl::StrCat("job id must be 1..", kMaxNameLength, " characters of [A-Za-z0-9._-]"));
  }
  NodeIndex index = NodeFor(hello.node);
  NodeRecord& node = nodes_[index];
  HelloResult result;
  if (node.connected) {
    result.superseded = node.session;
    sessions_.erase(node.session);
  }
  if (node.incarnation != hello.incarnation) {
    // A new agent process: its cumulative counters start from zero.
    node.agent_rejected.clear();
    node.agent_dropped = 0;
  }
  SessionId session = next_session_++;
  sessions_.emplace(session, index);
  node.job = hello.job;
  node.connected = true;
  node.session = session;
  node.incarnation = hello.incarnation;
  node.generation = hello.generation;
  node.launcher = hello.launcher;
  node.last_report = now;
  node.told = NodeRecord::Told();  // a new stream has been told nothing yet

  Job& job = JobFor(hello.job);
  const bool new_job = job.generation() == 0;
  JobControl& control = ControlFor(job);
  // A generation the agent runs and we do not know (our state was lost) is
  // adopted, never restarted.
  job.ObserveGeneration(now, std::max<uint64_t>(hello.generation, 1));
  if (new_job) JournalJob(now, job);
  const bool fresh_agent = hello.launcher.state == LauncherState::kWaiting;
  if (fresh_agent &&
      (control.state == JobState::kFinished || control.state == JobState::kFailed)) {
    // The same job id, run again by new agents: a new generation, and a new
    // ledger (the idle time between the runs is nobody's loss).
    job.ObserveGeneration(now, job.generation() + 1);
    control.ledger = GoodputLedger();
    Transition(now, job, JobState::kPending, "run again by new agents");
  }
  AdoptPlans(control, hello.plans);
  result.session = session;
  result.generation = job.generation();
  result.restarts = !options_.observe_only;
  result.launch = !node.quarantined &&
                  (control.state == JobState::kPending || control.state == JobState::kRunning);
  // The welcome is this agent's start: no separate start for this generation.
  if (result.launch && fresh_agent) node.told.start_generation = job.generation();
  Reconcile(job);  // e.g. the quarantine notice, or the hold
  return result;
}

void Supervisor::Disconnected(absl::Time now, SessionId session) {
  NodeIndex index = NodeOfSession(session);
  if (index == kNoNode) return;
  sessions_.erase(session);
  NodeRecord& node = nodes_[index];
  node.connected = false;
  auto it = jobs_.find(node.job);
  if (it != jobs_.end()) it->second->ForgetLiveness(index);
}

void Supervisor::CountAgentRejects(NodeRecord& node, const NodeReportInfo& report) {
  for (const auto& [reason, count] : report.rejected) {
    uint64_t& seen = node.agent_rejected[reason];
    if (count > seen) {
      rejected_.Add(RejectReasonFromName(reason), count - seen);
      seen = count;
    }
  }
  if (report.dropped_total > node.agent_dropped) {
    agent_dropped_ += report.dropped_total - node.agent_dropped;
    node.agent_dropped = report.dropped_total;
  }
}

absl::Status Supervisor::Report(absl::Time now, SessionId session, const NodeReportInfo& report) {
  NodeIndex index = NodeOfSession(session);
  if (index == kNoNode) {
    return absl::FailedPreconditionError("unknown or superseded agent session; reconnect");
  }
  NodeRecord& node = nodes_[index];
  node.last_report = now;
  node.launcher = report.launcher;
  node.generation = report.generation;
  ++node.reports_received;
  ++reports_received_;
  CountAgentRejects(node, report);

  Job& job = JobFor(node.job);
  job.ObserveGeneration(now, report.generation);
  for (const Heartbeat& hb : report.heartbeats) {
    std::optional<RejectReason> reason = CheckHeartbeat(hb, node.job);
    if (!reason) reason = job.Apply(now, index, hb);
    if (reason) {
      rejected_.Add(*reason);
      continue;
    }
    ++node.heartbeats_received;
    ++heartbeats_received_;
  }
  for (const RankProcessInfo& process : report.processes) job.ApplyProcess(now, index, process);
  JobHealth& health = job.mutable_health();
  // O(1) per report (a report must not cost O(ranks) or O(nodes)): this
  // node's command, or a rank's certain failure.
  const bool launcher_failed = node.generation == job.generation() && node.launcher.failed();
  if (health.failure_first_heard == absl::InfinitePast() &&
      (job.has_certain_failure() || launcher_failed)) {
    health.failure_first_heard = now;  // the crash settle clock starts
  }
  JobControl& control = ControlFor(job);
  control.ledger.Advance(now, job.generation(), job.TakeFrontier());
  for (const auto& [blocking, async] : job.TakeCheckpoints()) {
    if (blocking > 0) control.checkpoint_costs.Add(blocking);
    if (async > 0) control.checkpoint_async.Add(async);
  }
  if (control.state == JobState::kPending && job.ranks_reporting() > 0) {
    Transition(now, job, JobState::kRunning,
               absl::StrCat("generation ", job.generation(), " ranks report"));
  }
  return absl::OkStatus();
}

const Job* Supervisor::FindJob(absl::string_view job_id) const {
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? nullptr : it->second.get();
}

std::vector<const Job*> Supervisor::Jobs() const {
  std::vector<const Job*> out;
  out.reserve(jobs_.size());
  for (const auto& [id, job] : jobs_) out.push_back(job.get());
  std::sort(out.begin(), out.end(), [](const Job* a, const Job* b) { return a->id() < b->id(); });
  return out;
}

uint32_t Supervisor::agents_connected() const { return static_cast<uint32_t>(sessions_.size()); }

}  // namespace trainsup

namespace trainsup {
namespace {

std::string ExitDescription(const RankDeath& death) {
  if (!death.exit_known) return "exit status unknown";
  if (death.signal != 0) return absl::StrCat("killed by signal ", death.signal);
  return absl::StrCat("exit code ", death.exit_code);
}

}  // namespace

const std::string& Supervisor::NodeName(NodeIndex index) const {
  static const std::string* const kUnknown = new std::string();
  return index == kNoNode || index >= nodes_.size() ? *kUnknown : nodes_[index].name;
}

NodeIndex Supervisor::FailedLauncherNode(const Job& job) const {
  for (NodeIndex i = 0; i < nodes_.size(); ++i) {
    const NodeRecord& node = nodes_[i];
    if (node.job == job.id() && node.generation == job.generation() && node.launcher.failed()) {
      return i;
    }
  }
  return kNoNode;
}

void Supervisor::Emit(Job* job, Event event) {
  if (job == nullptr && !event.job.empty()) {
    // A node's event names its job: count it there too.
    auto it = jobs_.find(event.job);
    if (it != jobs_.end()) job = it->second.get();
  }
  if (job != nullptr) {
    event.job = job->id();
    event.generation = job->generation();
    job->CountEvent(event.kind);
  }
  const Event& stored = events_.Append(std::move(event));
  output_.events.push_back(stored);
  output_.journal.events.push_back(stored);
}

SupervisorOutput Supervisor::TakeOutput() {
  SupervisorOutput out = std::move(output_);
  output_ = SupervisorOutput();
  return out;
}

std::vector<Event> Supervisor::Sweep(absl::Time now) {
  const size_t first = output_.events.size();
  for (auto& [id, job] : jobs_) SweepLifecycle(now, *job);
  return std::vector<Event>(output_.events.begin() + first, output_.events.end());
}

bool Supervisor::SweepCrash(absl::Time now, Job& job) {
  JobHealth& health = job.mutable_health();
  if (health.crash_reported || health.failure_first_heard == absl::InfinitePast()) return false;
  if (now - health.failure_first_heard < options_.crash.settle) return false;
  health.crash_reported = true;
  Event e;
  e.time = now;
  e.kind = EventKind::kCrash;
  const NodeIndex failed_node = FailedLauncherNode(job);
  std::optional<CrashVerdict> verdict =
      crash_detector_.Check(job, health.failure_first_heard, now, failed_node != kNoNode);
  if (!verdict) {
    // The command failed without a rank death to name (e.g. before any rank
    // reported): name the node.
    if (failed_node != kNoNode) {
      const NodeRecord& node = nodes_[failed_node];
      const LauncherInfo& l = node.launcher;
      e.node = node.name;
      e.message = absl::StrCat("the command on ", node.name, " failed (",
                               l.signal != 0 ? absl::StrCat("signal ", l.signal)
                                             : absl::StrCat("exit code ", l.exit_code),
                               ") with no rank death to name");
      e.figures = {{"exit_code", l.exit_code}, {"signal", l.signal}};
    }
    const std::string message = e.message;
    Emit(&job, std::move(e));
    OnFailure(now, job, "crash", failed_node, std::nullopt, health.failure_first_heard, message);
    return true;
  }
  const RankState& r = job.rank(verdict->rank);
  health.crash_rank = verdict->rank;
  e.rank = verdict->rank;
  e.node = NodeName(r.node);
  e.message = absl::StrCat("rank ", verdict->rank, " on ", e.node, " died first (",
                           ExitDescription(verdict->death), ")");
  if (!r.exception_type.empty()) {
    absl::StrAppend(&e.message, ": ", r.exception_type, ": ", r.exception_message);
  }
  absl::StrAppend(&e.message, "; ", verdict->failed_ranks, " of ", job.ranks_reporting(),
                  " ranks failed");
  e.figures = {{"exit_code", verdict->death.exit_code},
               {"signal", verdict->death.signal},
               {"failed_ranks", verdict->failed_ranks},
               {"step", static_cast<double>(r.step)}};
  const std::string what = absl::StrCat("crash of rank ", verdict->rank, " (",
                                        ExitDescription(verdict->death), ")");
  Emit(&job, std::move(e));
  OnFailure(now, job, "crash", r.node, verdict->rank, verdict->death.time, what);
  return true;
}

bool Supervisor::SweepStall(absl::Time now, Job& job, const JobStepStats& stats) {
  JobHealth& health = job.mutable_health();
  // A stall is acted on at once (the job is stopped and restarted), so it
  // lasts until the next generation resets the health.
  if (health.stalled) return false;
  const StallVerdict verdict = stall_detector_.Check(job, now, stats);
  if (!verdict.stalled) return false;
  health.stalled = true;
  health.stalled_since = now;
  const Culprit culprit = FindCulprit(job);
  health.stall_culprit = culprit.rank;
  Event e;
  e.time = now;
  e.kind = EventKind::kStall;
  e.message = verdict.startup
                  ? absl::StrCat("no first step ", TenthsOfSeconds(verdict.silent),
                                 " after the generation started (start-up grace ",
                                 TenthsOfSeconds(verdict.threshold), ")")
                  : absl::StrCat("no rank advanced for ", TenthsOfSeconds(verdict.silent), " (threshold ",
                                 TenthsOfSeconds(verdict.threshold), ") at step ", job.max_step());
  if (culprit.rank) {
    const RankState& r = job.rank(*culprit.rank);
    e.rank = *culprit.rank;
    e.node = NodeName(r.node);
    absl::StrAppend(&e.message, "; suspect rank ", *culprit.rank, " on ", e.node, ", ",
                    culprit.reason);
  } else {
    absl::StrAppend(&e.message, "; culprit: ", culprit.reason);
  }
  e.figures = {{"silent_seconds", absl::ToDoubleSeconds(verdict.silent)},
               {"threshold_seconds", absl::ToDoubleSeconds(verdict.threshold)},
               {"step", static_cast<double>(job.max_step())}};
  Emit(&job, std::move(e));
  // A hang burns its time from the last progress (or the generation start).
  const absl::Time failed_at = now - verdict.silent;
  const NodeIndex node = culprit.rank ? job.rank(*culprit.rank).node : kNoNode;
  OnFailure(now, job, "stall", node, culprit.rank, failed_at,
            culprit.rank ? absl::StrCat("hang at rank ", *culprit.rank) : "hang");
  return true;
}

void Supervisor::SweepStragglers(absl::Time now, Job& job) {
  std::unique_ptr<StragglerState>& state = stragglers_[job.id()];
  if (state == nullptr || state->generation != job.generation()) {
    state = std::make_unique<StragglerState>(
        StragglerState{job.generation(), StragglerDetector(options_.straggler)});
  }
  for (const StragglerChange& change : state->detector.Evaluate(job)) {
    const RankState& r = job.rank(change.rank);
    Event e;
    e.time = now;
    e.kind = change.flagged ? EventKind::kStraggler : EventKind::kStragglerCleared;
    e.rank = change.rank;
    e.node = NodeName(r.node);
    const double ratio = change.job_median_p99_s > 0 ? change.rank_p99_s / change.job_median_p99_s : 0;
    e.message = absl::StrFormat(
        "rank %d on %s: compute p99 %.3fs vs job median p99 %.3fs (%.1fx)%s", change.rank,
        e.node, change.rank_p99_s, change.job_median_p99_s, ratio,
        change.flagged ? absl::StrFormat(" for %d windows of %d steps", options_.straggler.persistence,
                                         options_.straggler.window)
                       : " again in line");
    e.figures = {{"rank_p99_seconds", change.rank_p99_s},
                 {"job_median_p99_seconds", change.job_median_p99_s},
                 {"ratio", ratio}};
    Emit(&job, std::move(e));
    if (change.flagged && r.node != kNoNode) {
      // A persistent straggler counts against its node, like a failure, but
      // does not restart the job by itself.
      const std::string what = absl::StrFormat("straggling rank %d (%.1fx)", change.rank, ratio);
      output_.journal.failures.push_back(
          {now, job.id(), job.generation(), "straggler", nodes_[r.node].name, change.rank, what});
      AttributeToNode(now, r.node, "straggler", what);
    }
  }
}

}  // namespace trainsup
