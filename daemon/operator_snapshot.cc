#include "daemon/operator_snapshot.h"

#include <algorithm>
#include <utility>

#include "daemon/core/job_stats.h"
#include "daemon/core/supervisor.h"
#include "daemon/proto_convert.h"

namespace trainsup {
namespace {

double SecondsSince(absl::Time then, absl::Time now) {
  if (then == absl::InfinitePast()) return -1;
  return absl::ToDoubleSeconds(now - then);
}

void RenderJob(const JobView& view, v1::Job* out) {
  out->set_job_id(view.id);
  out->set_generation(view.generation);
  out->set_world_size(view.world_size);
  out->set_ranks_reporting(view.ranks_reporting);
  out->set_ranks_alive(view.ranks_alive);
  out->set_step(view.step);
  if (view.last_progress != absl::InfinitePast()) {
    SetTimestamp(view.last_progress, out->mutable_last_progress_time());
  }
  out->set_heartbeats_received(view.heartbeats_received);
  out->set_nodes(view.nodes);
  out->set_step_p50_seconds(view.step_stats.median_rank_p50_s);
  out->set_step_p99_seconds(view.step_stats.median_rank_p99_s);
  out->set_stalled(view.stalled);
  out->set_stragglers(static_cast<uint32_t>(view.stragglers.size()));
  out->set_state(std::string(JobStateName(view.state)));
  out->set_state_reason(view.state_reason);
  if (view.state_since != absl::InfinitePast()) {
    SetTimestamp(view.state_since, out->mutable_state_since());
  }
  out->set_restarts(view.restarts);
  out->set_agents_waiting(view.agents_waiting);
  auto& signals = *out->mutable_signals();
  signals["loss_shifted"] = view.signals.loss_shifted ? 1 : 0;
  for (const auto& [name, value] : view.signals.gauges) signals[name] = value;
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

void RenderDetail(const JobView& view, const MtbfEstimate& cluster, v1::JobDetail* response) {
  RenderJob(view, response->mutable_job());
  RenderMtbf(view.mtbf, response->mutable_job_mtbf());
  RenderMtbf(cluster, response->mutable_cluster_mtbf());
  response->set_checkpoint_cost_seconds(view.checkpoint_cost.seconds);
  response->set_checkpoint_cost_measured(view.checkpoint_cost.measured);
  response->set_checkpoint_async_seconds(view.checkpoint_async_s);
  response->set_restart_cost_seconds(view.restart_cost.seconds);
  response->set_restart_cost_measured(view.restart_cost.measured);
  if (const std::optional<PlanFigures>& p = view.plan; p) {
    response->set_young_interval_seconds(p->young_interval_s);
    response->set_daly_interval_seconds(p->daly_interval_s);
    response->set_planned_interval_seconds(p->interval_s);
    response->set_expected_waste_fraction(p->expected_waste_fraction);
    response->set_plan_verdict(p->verdict);
    for (const std::string& w : p->warnings) response->add_plan_warnings(w);
  }
  for (const CheckpointPlanSpec& spec : view.plans) ToProto(spec, response->add_plans());
  response->set_next_checkpoint_step(view.next_checkpoint_step);
  RenderLedger(view.ledger, response->mutable_ledger());
  for (const auto& [generation, totals] : view.ledger_by_generation) {
    v1::GenerationLedger* g = response->add_generations();
    g->set_generation(generation);
    RenderLedger(totals, g->mutable_buckets());
  }
}

std::shared_ptr<JobSnapshot> CaptureJob(const Supervisor& core, const JobView& view,
                                        const MtbfEstimate& cluster) {
  auto out = std::make_shared<JobSnapshot>();
  RenderDetail(view, cluster, &out->detail);
  core.RankViewsOf(view.id, &out->ranks, &out->texts);
  out->counts = view.seen;
  out->stragglers = static_cast<uint32_t>(view.stragglers.size());
  return out;
}

bool Matches(const RankView& row, const v1::ListRanksRequest& request, NodeIndex node) {
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
bool Before(v1::RankSort sort, const RankView& a, const RankView& b) {
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

void RenderLedger(const LedgerTotals& t, v1::LedgerBuckets* out) {
  out->set_useful_seconds(t.seconds[static_cast<int>(Bucket::kUseful)]);
  out->set_starved_seconds(t.seconds[static_cast<int>(Bucket::kStarved)]);
  out->set_checkpoint_blocked_seconds(t.seconds[static_cast<int>(Bucket::kCheckpointBlocked)]);
  out->set_lost_seconds(t.seconds[static_cast<int>(Bucket::kLost)]);
  out->set_wall_seconds(t.wall_seconds());
  out->set_goodput_fraction(t.goodput());
}

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
  const MtbfEstimate cluster = core.Cluster(now).mtbf;
  for (const JobView& view : core.JobViews(now)) {
    std::shared_ptr<JobSnapshot> job = CaptureJob(core, view, cluster);
    out->by_id[view.id] = job.get();
    out->jobs.push_back(std::move(job));
  }
  out->nodes = core.NodeViews();
  out->node_names.reserve(out->nodes.size());
  for (const NodeView& node : out->nodes) out->node_names.push_back(node.name);
  std::sort(out->nodes.begin(), out->nodes.end(),
            [](const NodeView& a, const NodeView& b) { return a.name < b.name; });
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
  for (const RankView& row : job.ranks) {
    if (Matches(row, request, node)) out.rows.push_back(&row);
  }
  out.matched = static_cast<uint32_t>(out.rows.size());
  const size_t keep = request.limit() == 0 ? out.rows.size()
                                           : std::min<size_t>(request.limit(), out.rows.size());
  const v1::RankSort sort = request.sort();
  // Rows are in rank order already; a top-N needs only a partial sort.
  if (sort != v1::RANK_SORT_RANK) {
    std::partial_sort(out.rows.begin(), out.rows.begin() + keep, out.rows.end(),
                      [sort](const RankView* a, const RankView* b) { return Before(sort, *a, *b); });
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
  for (const RankView& row : job.ranks) {
    min_step = std::min(min_step, row.step);
    max_step = std::max(max_step, row.step);
    oldest = std::min(oldest, row.last_heartbeat);
    if (row.compute_p99 > 0) compute_p99.push_back(row.compute_p99);
  }
  out->set_ranks(static_cast<uint32_t>(job.ranks.size()));
  out->set_alive(job.counts.alive);
  out->set_dead(job.counts.dead);
  out->set_unknown(job.counts.unknown);
  out->set_finished(job.counts.finished);
  out->set_stragglers(job.stragglers);
  out->set_min_step(min_step);
  out->set_max_step(max_step);
  if (!compute_p99.empty()) {
    out->set_compute_p99_max_seconds(*std::max_element(compute_p99.begin(), compute_p99.end()));
    out->set_compute_p99_median_seconds(MedianInPlace(compute_p99));
  }
  out->set_oldest_heartbeat_age_seconds(SecondsSince(oldest, now));
}

void RenderRank(const OperatorSnapshot& snapshot, const JobSnapshot& job, const RankView& row,
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
  if (row.has_loss) out->set_loss(row.loss);
  if (row.has_learning_rate) out->set_learning_rate(row.learning_rate);
  out->set_heartbeats_received(row.heartbeats);
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

void RenderNode(const NodeView& row, absl::Time now, v1::Node* out) {
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
  if (!row.last_gpu_error.empty()) {
    out->set_last_gpu_error(row.last_gpu_error);
    out->set_last_gpu_error_age_seconds(SecondsSince(row.last_gpu_error_at, now));
  }
}

}  // namespace trainsup
