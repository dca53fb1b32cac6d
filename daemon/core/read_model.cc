#include "daemon/core/read_model.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/format.h"
#include "daemon/core/checkpoint_schedule.h"
#include "daemon/core/signals/signal_monitor.h"

namespace trainsup {
namespace {

SignalsView SignalsOf(const SignalMonitor& signals) {
  SignalsView view;
  const std::optional<StepSignals>& last = signals.last_step();
  if (last) {
    view.loss = last->loss;
    view.grad_norm = last->grad_norm;
  }
  view.nonfinite_loss_steps = signals.nonfinite_loss_steps();
  view.overflow_steps = signals.overflow_steps();
  view.replica_mismatches = signals.replica_mismatches();
  const SignalMonitor::ResumeCounts& resume = signals.resume_counts();
  view.resume_findings = {{"resumed_behind", resume.behind},
                          {"lr_mismatch", resume.lr},
                          {"data_position_mismatch", resume.data},
                          {"resume_spike", resume.spike}};
  view.resume_repeated_steps = resume.repeated_steps;
  view.last_checkpoint_step = signals.last_checkpoint_step();
  view.loss_shifted = signals.loss_shifted();
  view.gauges = signals.Gauges();
  if (last) {
    view.device_memory_bytes = last->device_memory_bytes;
    view.host_memory_bytes = last->host_rss_bytes;
  }
  return view;
}

}  // namespace

JobView ReadModel::JobViewOf(const JobEntry& entry, absl::Time now) const {
  const Job& job = entry.job();
  const GenerationVerdicts& verdicts = entry.verdicts();
  JobView view;
  view.id = job.id();

  view.generation = job.generation();
  view.world_size = job.world_size();
  view.ranks_reporting = job.ranks_reporting();
  view.ranks_alive = job.ranks_alive();
  view.seen = {job.seen_alive(), job.seen_dead(), job.seen_unknown(), 0};
  if (entry.lifecycle().state == JobState::kFinished) {
    view.seen.finished = job.seen_exited_cleanly();
    view.seen.dead -= view.seen.finished;
  }
  view.step = job.max_step();
  view.last_progress = job.last_progress();
  view.heartbeats_received = job.heartbeats_received();
  view.datagrams_dropped = job.datagrams_dropped();
  // Once it ended, the nodes its last generation ran on: their names may
  // serve other jobs by now.
  const bool ended = entry.lifecycle().state == JobState::kFinished ||
                     entry.lifecycle().state == JobState::kFailed;
  view.nodes = static_cast<uint32_t>(ended && !verdicts.nodes_ran.empty()
                                         ? verdicts.nodes_ran.size()
                                         : agents_.NodesOf(job.id()).size());
  view.agents_waiting = agents_.AgentsWaiting(job.id());

  view.step_stats = verdicts.step_stats;
  view.stall_threshold = verdicts.stall_threshold;
  view.stalled = verdicts.stalled;
  if (verdicts.stalled && verdicts.stall_culprit) {
    view.stall_culprit = verdicts.stall_culprit;
    view.stall_culprit_node = agents_.NameOf(job.rank(*verdicts.stall_culprit).node);
  }
  view.crash_culprit = verdicts.crash_culprit;
  view.stragglers.reserve(verdicts.straggler_ranks.size());
  for (uint32_t rank : verdicts.straggler_ranks) {
    view.stragglers.push_back({rank, job.rank(rank).compute_durations.P50P99().p99});
  }

  const JobLifecycle& life = entry.lifecycle();
  view.state = life.state;
  view.state_reason = life.reason;
  view.state_since = life.since;
  view.restarts = life.restarts;
  view.restart_at = life.restart_at;
  view.last_failure = life.last_recorded_failure;
  view.resume_limit = entry.fallback().advice().limit;
  view.resume_advice = ResumeAdviceText(entry.fallback());

  view.mtbf = planner_.JobMtbf(entry, now);
  view.checkpoint_cost = planner_.CheckpointCost(entry);
  view.restart_cost = planner_.RestartCost(entry);
  view.checkpoint_async_s = entry.costs().AsyncWrite();
  if (const std::optional<CheckpointPlan>& p = entry.plans().figures(); p) {
    view.plan = PlanFigures{p->young_interval_seconds, p->daly_interval_seconds,
                            p->interval_seconds,       p->at_interval.total_waste_fraction,
                            p->verdict_text,           p->warnings};
  }
  view.plans = entry.plans().plans();
  if (!view.plans.empty()) {
    view.next_checkpoint_step = NextCheckpointStep(view.plans, job.max_step() + 1);
  }
  view.ledger = entry.ledger().totals();
  view.ledger_by_generation = entry.ledger().by_generation();
  for (int k = 0; k < kEventKindCount; ++k) {
    view.events[k] = entry.event_count(static_cast<EventKind>(k));
  }
  view.signals = SignalsOf(entry.signals());
  view.kill_criteria = entry.kill().Status();
  return view;
}

std::vector<JobView> ReadModel::JobViews(absl::Time now) const {
  std::vector<JobView> views;
  views.reserve(jobs_.size());
  for (const JobEntry* job : jobs_.Sorted()) views.push_back(JobViewOf(*job, now));
  return views;
}

void ReadModel::RankViewsOf(const JobEntry& entry, std::vector<RankView>* rows,
                            std::vector<RankTexts>* texts) const {
  const Job& job = entry.job();
  const GenerationVerdicts& verdicts = entry.verdicts();
  rows->clear();
  texts->clear();
  rows->reserve(job.ranks_reporting());
  // Both in rank order: the flagged ranks are walked beside the ranks.
  auto straggler = verdicts.straggler_ranks.begin();
  const bool finished = entry.lifecycle().state == JobState::kFinished;
  for (const auto& [i, r] : job.ranks()) {
    if (!r.seen) continue;
    RankView& row = rows->emplace_back();
    row.rank = i;
    row.node = r.node;
    row.local_rank = r.local_rank;
    row.pid = r.pid;
    row.step = r.step;
    row.last_heartbeat = r.last_heartbeat;
    row.heartbeats = r.heartbeats;
    row.datagrams_dropped = r.datagrams_dropped;
    const StepWindow::Quantiles q = r.step_durations.P50P99();
    const StepWindow::Quantiles c = r.compute_durations.P50P99();
    row.step_p50 = static_cast<float>(q.p50);
    row.step_p99 = static_cast<float>(q.p99);
    row.compute_p50 = static_cast<float>(c.p50);
    row.compute_p99 = static_cast<float>(c.p99);
    row.has_step_samples = !r.step_durations.empty();
    row.has_compute_samples = !r.compute_durations.empty();
    row.has_step_shares = !r.shares.empty();
    row.data_wait_share = static_cast<float>(r.shares.data_wait_share());
    if (const std::optional<double> comm = r.shares.comm_share(); comm) {
      row.has_comm_share = true;
      row.comm_share = static_cast<float>(*comm);
      row.comm_share_trend = static_cast<float>(r.shares.comm_share_trend().value_or(0));
    }
    row.has_loss = r.loss.has_value();
    row.loss = r.loss.value_or(0);
    row.has_learning_rate = r.learning_rate.has_value();
    row.learning_rate = r.learning_rate.value_or(0);
    row.phase = r.phase;
    row.liveness = finished && r.liveness == Liveness::kDead && r.ended_cleanly()
                       ? Liveness::kFinished
                       : r.liveness;
    while (straggler != verdicts.straggler_ranks.end() && *straggler < i) ++straggler;
    row.straggler = straggler != verdicts.straggler_ranks.end() && *straggler == i;
    row.stall_culprit = verdicts.stalled && verdicts.stall_culprit == i;
    row.crash_culprit = verdicts.crash_culprit == i;
    if (r.death || !r.exception_type.empty()) {
      row.texts = static_cast<uint32_t>(texts->size());
      RankTexts& text = texts->emplace_back();
      if (r.death) {
        text.exit = ExitStatusText(r.death->exit_known, r.death->exit_code, r.death->signal);
      }
      if (!r.exception_type.empty()) {
        text.exception = absl::StrCat(r.exception_type, ": ", r.exception_message);
      }
    }
  }
}

std::vector<NodeView> ReadModel::NodeViews() const {
  std::vector<NodeView> views(agents_.size());
  for (NodeIndex i = 0; i < agents_.size(); ++i) {
    const NodeRecord& node = agents_.node(i);
    NodeView& view = views[i];
    view.name = node.name;
    view.job = node.job;
    view.quarantine_reason = quarantine_.ReasonOf(node.name);
    view.last_gpu_error = node.last_gpu_error;
    view.last_gpu_error_at = node.last_gpu_error_at;
    view.incarnation = node.incarnation;
    view.generation = node.generation;
    view.heartbeats = node.heartbeats_received;
    view.last_report = node.last_report;
    view.launcher = node.launcher.state;
    view.connected = node.connected;
    view.quarantined = quarantine_.IsQuarantined(node.name);
    view.unreachable = node.unreachable;
  }
  // Ranks per node: those of the job it serves now (the ranks of a job its
  // name served before still name it).
  jobs_.ForEach([&](const JobEntry& job) {
    for (const auto& [i, r] : job.job().ranks()) {
      if (r.seen && r.node != kNoNode && r.node < views.size() &&
          views[r.node].job == job.id()) {
        ++views[r.node].ranks;
      }
    }
  });
  return views;
}

ClusterView ReadModel::Cluster(absl::Time now) const {
  ClusterView view;
  view.nodes = static_cast<uint32_t>(agents_.size());
  view.mtbf = planner_.ClusterMtbf(jobs_, now);
  view.nodes_quarantined = static_cast<uint32_t>(quarantine_.quarantined_count());
  view.quarantine_skipped = quarantine_.skipped();
  for (const NodeRecord& node : agents_.nodes()) {
    if (quarantine_.IsQuarantined(node.name)) view.quarantined_nodes.push_back(node.name);
    if (node.unreachable) view.unreachable_nodes.push_back(node.name);
  }
  for (VerdictAction action :
       {VerdictAction::kRestartElsewhere, VerdictAction::kTransient, VerdictAction::kStop}) {
    std::string name(VerdictActionName(action));
    std::replace(name.begin(), name.end(), '-', '_');
    for (Verdict::Source source :
         {Verdict::Source::kScript, Verdict::Source::kExitCode, Verdict::Source::kException}) {
      view.verdicts_acted.push_back(
          {name, std::string(VerdictSourceName(source)), verdicts_.Get(action, source)});
    }
  }
  view.early_failures_node = early_failures_.node;
  view.early_failures_workload = early_failures_.workload;
  view.early_failures_undecided = early_failures_.first;
  return view;
}

std::optional<StacksView> ReadModel::StacksOf(const JobEntry& job, uint64_t generation) const {
  const JobStacks* stacks = job.stacks().Find(generation);
  if (stacks == nullptr) return std::nullopt;
  StacksView view;
  view.generation = stacks->generation;
  view.event_id = stacks->event_id;
  view.time = stacks->time;
  view.collect_seconds = stacks->collect_seconds;
  view.groups = GroupStacks(*stacks);
  view.unanswered = UnansweredRanks(*stacks);
  view.flight_records = stacks->flight_records.size();
  view.collective = stacks->collective;
  view.unread_dumps = stacks->unread_dumps;
  return view;
}

}  // namespace trainsup
