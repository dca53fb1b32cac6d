#include "daemon/operator_snapshot.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/format.h"
#include "daemon/core/job_stats.h"
#include "daemon/core/job_view.h"

namespace trainsup {
namespace {

double SecondsSince(absl::Time then, absl::Time now) {
  if (then == absl::InfinitePast()) return -1;
  return absl::ToDoubleSeconds(now - then);
}

void RenderJob(const JobView& view, v1::Job* out) {
  const JobEntry& entry = *view.entry;
  const Job& job = entry.job();
  out->set_job_id(job.id());
  out->set_generation(job.generation());
  out->set_world_size(job.world_size());
  out->set_ranks_reporting(job.ranks_reporting());
  out->set_ranks_alive(job.ranks_alive());
  out->set_step(job.max_step());
  if (job.last_progress() != absl::InfinitePast()) {
    SetTimestamp(job.last_progress(), out->mutable_last_progress_time());
  }
  out->set_heartbeats_received(job.heartbeats_received());
  out->set_nodes(view.nodes);
  out->set_step_p50_seconds(view.step_stats.median_rank_p50_s);
  out->set_step_p99_seconds(view.step_stats.median_rank_p99_s);
  out->set_stalled(entry.verdicts().stalled);
  out->set_stragglers(static_cast<uint32_t>(entry.verdicts().straggler_ranks.size()));
  const JobLifecycle& life = entry.lifecycle;
  out->set_state(std::string(JobStateName(life.state)));
  out->set_state_reason(life.reason);
  if (life.since != absl::InfinitePast()) SetTimestamp(life.since, out->mutable_state_since());
  out->set_restarts(life.restarts);
}

void RenderMtbf(const MtbfEstimate& m, v1::Mtbf* out) {
  out->set_exposure_seconds(m.exposure_seconds);
  out->set_failures(static_cast<uint32_t>(m.failures));
  out->set_mtbf_seconds(m.mtbf_seconds);
  out->set_lower_seconds(m.lower_seconds);
  out->set_upper_seconds(m.upper_seconds);
  out->set_confidence(m.confidence);
  out->set_conservative_seconds(m.conservative_seconds);
}

void RenderLedger(const LedgerTotals& t, v1::LedgerBuckets* out) {
  out->set_useful_seconds(t.seconds[static_cast<int>(Bucket::kUseful)]);
  out->set_starved_seconds(t.seconds[static_cast<int>(Bucket::kStarved)]);
  out->set_checkpoint_blocked_seconds(t.seconds[static_cast<int>(Bucket::kCheckpointBlocked)]);
  out->set_lost_seconds(t.seconds[static_cast<int>(Bucket::kLost)]);
  out->set_wall_seconds(t.wall_seconds());
  out->set_goodput(t.goodput());
}

void RenderDetail(const JobView& view, const MtbfEstimate& cluster, v1::JobDetail* response) {
  const JobEntry* entry = view.entry;
  RenderJob(view, response->mutable_job());
  RenderMtbf(view.mtbf, response->mutable_job_mtbf());
  RenderMtbf(cluster, response->mutable_cluster_mtbf());
  response->set_checkpoint_cost_seconds(view.checkpoint_cost.seconds);
  response->set_checkpoint_cost_measured(view.checkpoint_cost.measured);
  response->set_checkpoint_async_seconds(view.checkpoint_async_s);
  response->set_restart_cost_seconds(view.restart_cost.seconds);
  response->set_restart_cost_measured(view.restart_cost.measured);
  if (const std::optional<CheckpointPlan>& p = entry->plans.figures(); p) {
    response->set_young_interval_seconds(p->young_interval_seconds);
    response->set_daly_interval_seconds(p->daly_interval_seconds);
    response->set_planned_interval_seconds(p->interval_seconds);
    response->set_expected_waste_fraction(p->at_interval.total_waste_fraction);
    response->set_plan_verdict(p->verdict_text);
    for (const std::string& w : p->warnings) response->add_plan_warnings(w);
  }
  for (const CheckpointPlanSpec& spec : entry->plans.plans()) {
    v1::PlanSpec* out = response->add_plans();
    out->set_plan_id(spec.plan_id);
    out->set_anchor_step(spec.anchor_step);
    out->set_interval_steps(spec.interval_steps);
    out->set_effective_from_step(spec.effective_from_step);
    for (int64_t s : spec.one_off_steps) out->add_one_off_steps(s);
  }
  response->set_next_checkpoint_step(view.next_checkpoint_step);
  RenderLedger(entry->ledger.totals(), response->mutable_ledger());
  for (const auto& [generation, totals] : entry->ledger.by_generation()) {
    v1::GenerationLedger* g = response->add_generations();
    g->set_generation(generation);
    RenderLedger(totals, g->mutable_buckets());
  }
}

std::shared_ptr<JobSnapshot> CaptureJob(const JobView& view, const MtbfEstimate& cluster) {
  auto out = std::make_shared<JobSnapshot>();
  RenderDetail(view, cluster, &out->detail);
  const JobEntry& entry = *view.entry;
  const Job& job = entry.job();
  const GenerationVerdicts& verdicts = entry.verdicts();
  out->ranks.reserve(job.ranks_reporting());
  for (const auto& [i, r] : job.ranks()) {
    if (!r.seen) continue;
    RankRow& row = out->ranks.emplace_back();
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
    row.has_loss = r.loss.has_value();
    row.loss = r.loss.value_or(0);
    row.has_learning_rate = r.learning_rate.has_value();
    row.learning_rate = r.learning_rate.value_or(0);
    row.phase = r.phase;
    row.liveness = r.liveness;
    row.straggler = verdicts.straggler_ranks.contains(i);
    row.stall_culprit = verdicts.stalled && verdicts.stall_culprit == i;
    row.crash_culprit = verdicts.crash_culprit == i;
    if (r.death || !r.exception_type.empty()) {
      row.texts = static_cast<uint32_t>(out->texts.size());
      RankTexts& texts = out->texts.emplace_back();
      if (r.death) {
        texts.exit = ExitStatusText(r.death->exit_known, r.death->exit_code, r.death->signal);
      }
      if (!r.exception_type.empty()) {
        texts.exception = absl::StrCat(r.exception_type, ": ", r.exception_message);
      }
    }
  }
  return out;
}

bool Matches(const RankRow& row, const v1::ListRanksRequest& request, NodeIndex node) {
  if (!request.node().empty() && row.node != node) return false;
  switch (request.flag()) {
    case v1::RANK_FLAG_STRAGGLER: return row.straggler;
    case v1::RANK_FLAG_CULPRIT: return row.stall_culprit || row.crash_culprit;
    case v1::RANK_FLAG_DEAD: return row.liveness == Liveness::kDead;
    default: return true;
  }
}

// Whether `a` comes before `b` in the order asked: the rank an operator
// looks for first (slowest, longest silent, furthest behind), then by rank.
bool Before(v1::RankSort sort, const RankRow& a, const RankRow& b) {
  switch (sort) {
    case v1::RANK_SORT_COMPUTE_P99:
      if (a.compute_p99 != b.compute_p99) return a.compute_p99 > b.compute_p99;
      if (a.step_p99 != b.step_p99) return a.step_p99 > b.step_p99;
      break;
    case v1::RANK_SORT_STEP_P99:
      if (a.step_p99 != b.step_p99) return a.step_p99 > b.step_p99;
      break;
    case v1::RANK_SORT_LAST_SEEN:
      if (a.last_heartbeat != b.last_heartbeat) return a.last_heartbeat < b.last_heartbeat;
      break;
    case v1::RANK_SORT_STEP:
      if (a.step != b.step) return a.step < b.step;
      break;
    default:
      break;
  }
  return a.rank < b.rank;
}

}  // namespace

void SetTimestamp(absl::Time t, google::protobuf::Timestamp* out) {
  const int64_t nanos = absl::ToUnixNanos(t);
  out->set_seconds(nanos / 1'000'000'000);
  out->set_nanos(static_cast<int32_t>(nanos % 1'000'000'000));
}

const JobSnapshot* OperatorSnapshot::FindJob(const std::string& id) const {
  auto it = by_id.find(id);
  return it == by_id.end() ? nullptr : it->second;
}

std::shared_ptr<OperatorSnapshot> CaptureSnapshot(const Supervisor& core, absl::Time now) {
  auto out = std::make_shared<OperatorSnapshot>();
  out->taken = now;
  out->last_event_id = core.events().last_id();
  const MtbfEstimate cluster = core.ClusterMtbf(now);
  for (const JobEntry* entry : core.Jobs()) {
    std::shared_ptr<JobSnapshot> job = CaptureJob(core.ViewOf(*entry, now), cluster);
    out->by_id[entry->job().id()] = job.get();
    out->jobs.push_back(std::move(job));
  }
  out->node_names.reserve(core.nodes().size());
  for (const NodeRecord& node : core.nodes()) out->node_names.push_back(node.name);
  for (const NodeView& view : core.NodeViews()) {
    const NodeRecord& node = *view.record;
    NodeRow& row = out->nodes.emplace_back();
    row.name = node.name;
    row.job = node.job;
    row.quarantine_reason = view.quarantine_reason;
    row.incarnation = node.incarnation;
    row.generation = node.generation;
    row.heartbeats = node.heartbeats_received;
    row.last_report = node.last_report;
    row.ranks = view.ranks;
    row.launcher = node.launcher.state;
    row.connected = node.connected;
    row.quarantined = view.quarantined;
    row.unreachable = node.unreachable;
  }
  std::sort(out->nodes.begin(), out->nodes.end(),
            [](const NodeRow& a, const NodeRow& b) { return a.name < b.name; });
  return out;
}

RankSelection SelectRanks(const OperatorSnapshot& snapshot, const JobSnapshot& job,
                          const v1::ListRanksRequest& request) {
  NodeIndex node = kNoNode;
  if (!request.node().empty()) {
    auto it = std::find(snapshot.node_names.begin(), snapshot.node_names.end(), request.node());
    if (it == snapshot.node_names.end()) return {};  // no rank of an unknown node
    node = static_cast<NodeIndex>(it - snapshot.node_names.begin());
  }
  RankSelection out;
  for (const RankRow& row : job.ranks) {
    if (Matches(row, request, node)) out.rows.push_back(&row);
  }
  out.matched = static_cast<uint32_t>(out.rows.size());
  const size_t keep = request.limit() == 0 ? out.rows.size()
                                           : std::min<size_t>(request.limit(), out.rows.size());
  const v1::RankSort sort = request.sort();
  // Rows are in rank order already; a top-N needs only a partial sort.
  if (sort != v1::RANK_SORT_RANK) {
    std::partial_sort(out.rows.begin(), out.rows.begin() + keep, out.rows.end(),
                      [sort](const RankRow* a, const RankRow* b) { return Before(sort, *a, *b); });
  }
  out.rows.resize(keep);
  return out;
}

void SummarizeRanks(const JobSnapshot& job, absl::Time now, v1::RankSummary* out) {
  if (job.ranks.empty()) return;
  std::vector<double> compute_p99;
  compute_p99.reserve(job.ranks.size());
  int64_t min_step = INT64_MAX;
  int64_t max_step = INT64_MIN;
  absl::Time oldest = absl::InfiniteFuture();
  for (const RankRow& row : job.ranks) {
    out->set_alive(out->alive() + (row.liveness == Liveness::kAlive ? 1 : 0));
    out->set_dead(out->dead() + (row.liveness == Liveness::kDead ? 1 : 0));
    out->set_unknown(out->unknown() + (row.liveness == Liveness::kUnknown ? 1 : 0));
    out->set_stragglers(out->stragglers() + (row.straggler ? 1 : 0));
    min_step = std::min(min_step, row.step);
    max_step = std::max(max_step, row.step);
    oldest = std::min(oldest, row.last_heartbeat);
    if (row.compute_p99 > 0) compute_p99.push_back(row.compute_p99);
  }
  out->set_ranks(static_cast<uint32_t>(job.ranks.size()));
  out->set_min_step(min_step);
  out->set_max_step(max_step);
  if (!compute_p99.empty()) {
    out->set_compute_p99_max_seconds(*std::max_element(compute_p99.begin(), compute_p99.end()));
    out->set_compute_p99_median_seconds(MedianInPlace(compute_p99));
  }
  out->set_oldest_heartbeat_age_seconds(SecondsSince(oldest, now));
}

void RenderRank(const OperatorSnapshot& snapshot, const JobSnapshot& job, const RankRow& row,
                absl::Time now, v1::Rank* out) {
  out->set_rank(row.rank);
  if (row.node < snapshot.node_names.size()) out->set_node(snapshot.node_names[row.node]);
  out->set_local_rank(row.local_rank);
  out->set_pid(row.pid);
  out->set_generation(job.detail.job().generation());
  out->set_step(row.step);
  out->set_step_p50_seconds(row.step_p50);
  out->set_step_p99_seconds(row.step_p99);
  out->set_last_heartbeat_age_seconds(SecondsSince(row.last_heartbeat, now));
  out->set_alive(row.liveness == Liveness::kAlive);
  if (row.has_loss) out->set_loss(row.loss);
  if (row.has_learning_rate) out->set_learning_rate(row.learning_rate);
  out->set_heartbeats(row.heartbeats);
  out->set_compute_p50_seconds(row.compute_p50);
  out->set_compute_p99_seconds(row.compute_p99);
  out->set_phase(std::string(StepPhaseName(row.phase)));
  out->set_straggler(row.straggler);
  out->set_stall_culprit(row.stall_culprit);
  out->set_crash_culprit(row.crash_culprit);
  out->set_liveness(std::string(LivenessName(row.liveness)));
  out->set_datagrams_dropped(row.datagrams_dropped);
  if (row.texts < job.texts.size()) {
    out->set_exit(job.texts[row.texts].exit);
    out->set_exception(job.texts[row.texts].exception);
  }
}

void RenderNode(const NodeRow& row, absl::Time now, v1::Node* out) {
  out->set_node(row.name);
  out->set_job_id(row.job);
  out->set_connected(row.connected);
  out->set_agent_incarnation(row.incarnation);
  out->set_last_report_age_seconds(SecondsSince(row.last_report, now));
  out->set_ranks(row.ranks);
  out->set_launcher_state(std::string(LauncherStateName(row.launcher)));
  out->set_heartbeats_received(row.heartbeats);
  out->set_quarantined(row.quarantined);
  out->set_quarantine_reason(row.quarantine_reason);
  out->set_generation(row.generation);
  out->set_unreachable(row.unreachable);
}

}  // namespace trainsup
