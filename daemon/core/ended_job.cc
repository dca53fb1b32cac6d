#include "daemon/core/ended_job.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"

namespace trainsup {
namespace {

// The value whose name(value) is `name`, among first..last; `fallback` when none.
template <typename Enum, typename NameOf>
Enum FromName(absl::string_view name, Enum first, Enum last, NameOf name_of, Enum fallback) {
  for (int v = static_cast<int>(first); v <= static_cast<int>(last); ++v) {
    if (name_of(static_cast<Enum>(v)) == name) return static_cast<Enum>(v);
  }
  return fallback;
}

EndedNodeRow NodeRow(const JobEntry& job, const NodeRecord& node) {
  EndedNodeRow row;
  row.job = job.id();
  row.node = node.name;
  row.generation = node.generation;
  row.incarnation = node.incarnation;
  row.last_report = node.last_report;
  row.heartbeats_received = node.heartbeats_received;
  row.launcher_state = std::string(LauncherStateName(node.launcher.state));
  row.launcher_pid = node.launcher.pid;
  row.exit_code = node.launcher.exit_code;
  row.signal = node.launcher.signal;
  return row;
}

EndedRankRow RankRow(const JobEntry& job, const AgentRegistry& agents, const RankState& r) {
  EndedRankRow row;
  row.job = job.id();
  row.rank = r.rank;
  row.node = agents.NameOf(r.node);
  row.local_rank = r.local_rank;
  row.pid = r.pid;
  row.step = r.step;
  row.last_heartbeat = r.last_heartbeat;
  row.last_progress = r.last_progress;
  row.heartbeats = r.heartbeats;
  const StepWindow::Quantiles step = r.step_durations.P50P99();
  const StepWindow::Quantiles compute = r.compute_durations.P50P99();
  row.step_p50 = step.p50;
  row.step_p99 = step.p99;
  row.compute_p50 = compute.p50;
  row.compute_p99 = compute.p99;
  row.phase = std::string(StepPhaseName(r.phase));
  row.liveness = std::string(LivenessName(r.liveness));
  if (r.death) {
    row.death_time = r.death->time;
    row.exit_known = r.death->exit_known;
    row.exit_code = r.death->exit_code;
    row.signal = r.death->signal;
  }
  row.exception_type = r.exception_type;
  row.exception_message = r.exception_message;
  row.loss = r.loss;
  row.learning_rate = r.learning_rate;
  row.samples = r.samples;
  row.datagrams_dropped = r.datagrams_dropped;
  row.straggler = job.verdicts().straggler_ranks.count(r.rank) > 0;
  return row;
}

NodeRecord NodeFromRow(const EndedNodeRow& row) {
  NodeRecord node;
  node.name = row.node;
  node.job = row.job;
  node.generation = row.generation;
  node.member_generation = row.generation;
  node.incarnation = row.incarnation;
  node.last_report = row.last_report;
  node.heartbeats_received = row.heartbeats_received;
  node.launcher.state = FromName(row.launcher_state, LauncherState::kUnspecified,
                                 LauncherState::kExited, LauncherStateName,
                                 LauncherState::kUnspecified);
  node.launcher.pid = row.launcher_pid;
  node.launcher.exit_code = row.exit_code;
  node.launcher.signal = row.signal;
  return node;
}

RankState RankFromRow(const EndedRankRow& row, NodeIndex node, const SupervisorOptions& options) {
  RankState r(options.step_window, options.straggler.window);
  r.rank = row.rank;
  r.seen = true;
  r.node = node;
  r.local_rank = row.local_rank;
  r.pid = row.pid;
  r.step = row.step;
  r.last_heartbeat = row.last_heartbeat;
  r.last_progress = row.last_progress;
  r.heartbeats = row.heartbeats;
  r.step_durations.RestoreQuantiles(std::min(row.step_p50, row.step_p99), row.step_p99);
  r.compute_durations.RestoreQuantiles(std::min(row.compute_p50, row.compute_p99),
                                       row.compute_p99);
  r.phase = FromName(row.phase, StepPhase::kBetweenSteps, StepPhase::kComputeDone, StepPhaseName,
                     StepPhase::kBetweenSteps);
  r.liveness = FromName(row.liveness, Liveness::kUnknown, Liveness::kDead, LivenessName,
                        Liveness::kUnknown);
  if (row.death_time != absl::InfinitePast()) {
    r.death = RankDeath{row.death_time, row.exit_known, row.exit_code, row.signal};
  }
  r.exception_type = row.exception_type;
  r.exception_message = row.exception_message;
  r.loss = row.loss;
  r.learning_rate = row.learning_rate;
  r.samples = row.samples;
  r.datagrams_dropped = row.datagrams_dropped;
  return r;
}

}  // namespace

bool HasEnded(JobState state) {
  return state == JobState::kFinished || state == JobState::kFailed;
}

void JournalEndedJob(const JobEntry& job, const AgentRegistry& agents, Journal& journal) {
  const Job& observed = job.job();
  EndedJobRow& row = journal.ended_jobs.emplace_back();
  row.job = job.id();
  row.generation = observed.generation();
  row.world_size = observed.world_size();
  row.heartbeats_received = observed.heartbeats_received();
  row.plans = job.plans().plans();
  if (job.plans().figures()) row.plan_inputs = job.plans().figures()->inputs;
  row.signals = job.signals().State();
  for (NodeIndex i : agents.NodesOf(job.id())) {
    journal.ended_nodes.push_back(NodeRow(job, agents.node(i)));
  }
  for (const auto& [i, r] : observed.ranks()) {
    if (r.seen) journal.ended_ranks.push_back(RankRow(job, agents, r));
  }
}

void JournalEndedNode(const JobEntry& job, const AgentRegistry& agents, NodeIndex index,
                      Journal& journal) {
  journal.ended_nodes.push_back(NodeRow(job, agents.node(index)));
  for (uint32_t rank : job.job().RanksOn(index)) {
    const RankState& r = job.job().rank(rank);
    if (r.seen) journal.ended_ranks.push_back(RankRow(job, agents, r));
  }
}

void RestoreEndedJobs(const PersistedState& state, const SupervisorOptions& options,
                      AgentRegistry& agents, JobTable& jobs) {
  // The jobs whose picture goes back, in the order they ended.
  std::vector<std::pair<JobEntry*, const EndedJobRow*>> ended;
  for (const EndedJobRow& row : state.ended_jobs) {
    JobEntry* job = jobs.Find(row.job);
    if (job == nullptr || !HasEnded(job->lifecycle().state) ||
        job->job().generation() != row.generation) {
      continue;  // run again since, or not restored
    }
    ended.emplace_back(job, &row);
  }
  std::sort(ended.begin(), ended.end(), [](const auto& a, const auto& b) {
    return a.first->lifecycle().since < b.first->lifecycle().since;
  });
  absl::flat_hash_map<std::string, std::vector<const EndedNodeRow*>> nodes;
  for (const EndedNodeRow& row : state.ended_nodes) nodes[row.job].push_back(&row);
  absl::flat_hash_map<std::string, std::vector<const EndedRankRow*>> ranks;
  for (const EndedRankRow& row : state.ended_ranks) ranks[row.job].push_back(&row);

  for (const auto& [job, row] : ended) {
    job->job().RestoreTotals(row->world_size, row->heartbeats_received);
    if (job->plans().CheckHeld(row->plans).ok()) job->mutable_plans().Adopt(row->plans);
    if (row->plan_inputs) {
      absl::StatusOr<CheckpointPlan> figures = PlanCheckpoints(*row->plan_inputs);
      if (figures.ok()) job->mutable_plans().set_figures(*figures);
    }
    job->mutable_signals().RestoreEnded(row->generation, row->signals);
    for (const EndedNodeRow* node : nodes[job->id()]) agents.Restore(NodeFromRow(*node));
  }
  // Once every node is back under the job that has it.
  for (const auto& [job, row] : ended) {
    for (const EndedRankRow* rank : ranks[job->id()]) {
      if (rank->rank >= row->world_size || job->job().ranks().Find(rank->rank) != nullptr) continue;
      job->job().RestoreRank(RankFromRow(*rank, agents.Find(rank->node), options));
      if (rank->straggler) job->verdicts().straggler_ranks.insert(rank->rank);
    }
  }
}

}  // namespace trainsup
