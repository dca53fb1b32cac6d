#include "daemon/metrics.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/core/job_view.h"
#include "daemon/metric_family.h"

namespace trainsup {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

// The families of one scrape, in exposition order.
struct Families {
  MetricFamily build_info = Family("trainsup_build_info",
      "Always 1; the labels say which trainsup is running.", MetricType::Gauge);
  MetricFamily agents_connected = Family("trainsup_agents_connected",
      "Agent streams currently open.", MetricType::Gauge);
  MetricFamily report_interval = Family("trainsup_report_interval_seconds",
      "The report interval agents are told, from the agents connected and --report-budget "
      "(0: adaptive reporting off, each agent keeps its own).", MetricType::Gauge);
  MetricFamily nodes = Family("trainsup_nodes",
      "Nodes the supervisor has heard of since it started.", MetricType::Gauge);
  MetricFamily jobs = Family("trainsup_jobs", "Jobs the supervisor knows.", MetricType::Gauge);
  MetricFamily reports = Family("trainsup_agent_reports_received_total",
      "Node reports received from agents.", MetricType::Counter);
  MetricFamily heartbeats = Family("trainsup_heartbeats_received_total",
      "Rank heartbeats accepted, all jobs.", MetricType::Counter);
  MetricFamily rejected = Family("trainsup_heartbeats_rejected_total",
      "Rank heartbeats refused, by reason (agent-side and supervisor-side).",
      MetricType::Counter);
  MetricFamily dropped = Family("trainsup_heartbeats_dropped_total",
      "Rank heartbeats agents dropped because their backlog was full.", MetricType::Counter);
  MetricFamily nodes_quarantined = Family("trainsup_nodes_quarantined",
      "Nodes quarantined now.", MetricType::Gauge);
  MetricFamily node_quarantined = Family("trainsup_node_quarantined",
      "1 for each quarantined node (only quarantined nodes are listed).", MetricType::Gauge);
  MetricFamily nodes_unreachable = Family("trainsup_nodes_unreachable",
      "Nodes whose agent has not been heard for --node-lost-after while running their job.",
      MetricType::Gauge);
  MetricFamily node_unreachable = Family("trainsup_node_unreachable",
      "1 for each unreachable node (only unreachable nodes are listed).", MetricType::Gauge);
  MetricFamily quarantine_skipped = Family("trainsup_quarantine_skipped_total",
      "Quarantines the policy decided but --quarantine-max-fraction refused.",
      MetricType::Counter);
  MetricFamily store_errors = Family("trainsup_state_store_errors_total",
      "Writes to the state store that failed.", MetricType::Counter);
  MetricFamily persist_failures = Family("trainsup_persist_failures_total",
      "Commands and fences not acted on because their decision could not be persisted.",
      MetricType::Counter);
  MetricFamily fences = Family("trainsup_fences_total",
      "Fence commands that ended, by result (succeeded, failed: non-zero exit, killed at "
      "--fence-timeout, or could not run).", MetricType::Counter);
  MetricFamily unfences = Family("trainsup_unfences_total",
      "Unfence commands that ended, by result (succeeded, failed: non-zero exit, killed at "
      "--fence-timeout, or could not run).", MetricType::Counter);
  MetricFamily limit_refusals = Family("trainsup_limit_refusals_total",
      "What a limit refused, by limit: max_jobs (hellos of new jobs), max_nodes (hellos of new "
      "nodes), max_agents (new "
      "streams), max_stream_outbox (streams ended: their agent did not read).",
      MetricType::Counter);
  MetricFamily reports_refused = Family("trainsup_agent_reports_refused_total",
      "Agent reports refused whole: about a generation the supervisor never started.",
      MetricType::Counter);
  MetricFamily jobs_forgotten = Family("trainsup_jobs_forgotten_total",
      "Jobs that left memory after --job-retention without an agent.", MetricType::Counter);
  MetricFamily nodes_forgotten = Family("trainsup_nodes_forgotten_total",
      "Nodes that left memory after --job-retention without an agent.", MetricType::Counter);
  MetricFamily verdicts = Family("trainsup_verdicts_total",
      "Failures the job's own verdict decided, by action (restart_elsewhere, transient, stop) "
      "and by what gave it (script: hb.verdict; exit_code, exception: the verdict table).",
      MetricType::Counter);
  MetricFamily early_failures = Family("trainsup_early_failures_total",
      "Commands that failed before any rank reported, by whose failure trainsupd judged it: "
      "node (charged to it), workload (the job held), undecided (first seen, restarted).",
      MetricType::Counter);
  MetricFamily job_state = Family("trainsup_job_state",
      "1 for the job's lifecycle state, 0 for the others.", MetricType::Gauge);
  MetricFamily job_restarts = Family("trainsup_job_restarts_total",
      "Coordinated restarts of the job, kept across trainsupd restarts.", MetricType::Counter);
  MetricFamily job_time = Family("trainsup_job_time_seconds_total",
      "Where the job's wall time went since its first step, by bucket: useful, starved (waiting on "
      "input), checkpoint_blocked, lost (re-done work and failure -> first step of the next "
      "generation). The buckets add up to the wall time.", MetricType::Counter);
  MetricFamily job_goodput = Family("trainsup_job_goodput_ratio",
      "useful / wall time since the job's first step.", MetricType::Gauge);
  MetricFamily job_mtbf = Family("trainsup_job_mtbf_seconds",
      "Mean time between the job's crashes and stalls, with the prior (estimate) and its "
      "confidence bounds (lower, upper).", MetricType::Gauge);
  MetricFamily cluster_mtbf = Family("trainsup_cluster_mtbf_seconds",
      "Mean time between job-killing failures over all jobs (estimate, lower, upper).",
      MetricType::Gauge);
  MetricFamily job_checkpoint_cost = Family("trainsup_job_checkpoint_cost_seconds",
      "C: blocking seconds per checkpoint the planner uses (measured median, or the prior).",
      MetricType::Gauge);
  MetricFamily job_restart_cost = Family("trainsup_job_restart_cost_seconds",
      "R: failure -> first step of the next generation the planner uses (measured median, or "
      "the prior).", MetricType::Gauge);
  MetricFamily job_checkpoint_interval = Family("trainsup_job_checkpoint_interval_seconds",
      "The planned checkpoint interval (absent before the first plan).", MetricType::Gauge);
  MetricFamily job_checkpoint_interval_steps = Family("trainsup_job_checkpoint_interval_steps",
      "The planned checkpoint interval in steps, as the ranks hold it.", MetricType::Gauge);
  MetricFamily job_generation = Family("trainsup_job_generation",
      "Current generation of the job (1 for the first launch).", MetricType::Gauge);
  MetricFamily job_world_size = Family("trainsup_job_world_size",
      "Ranks in the job's current generation.", MetricType::Gauge);
  MetricFamily job_step = Family("trainsup_job_step",
      "Highest training step any rank completed in the current generation.", MetricType::Gauge);
  MetricFamily job_last_progress = Family("trainsup_job_last_progress_timestamp_seconds",
      "When any rank's step last advanced (Unix time).", MetricType::Gauge);
  MetricFamily job_ranks_reporting = Family("trainsup_job_ranks_reporting",
      "Ranks that sent a heartbeat in the current generation.", MetricType::Gauge);
  MetricFamily job_ranks_alive = Family("trainsup_job_ranks_alive",
      "Ranks whose process the agents report alive.", MetricType::Gauge);
  MetricFamily job_ranks_unknown = Family("trainsup_job_ranks_unknown",
      "Ranks whose liveness is unknown: no agent report yet, or their agent cannot be heard.",
      MetricType::Gauge);
  MetricFamily job_ranks_dead = Family("trainsup_job_ranks_dead",
      "Ranks of the current generation whose process ended (not counting finished ones).",
      MetricType::Gauge);
  MetricFamily job_ranks_finished = Family("trainsup_job_ranks_finished",
      "Ranks whose process exited 0 in a job that finished: the end of the run, not a death.",
      MetricType::Gauge);
  MetricFamily job_datagrams_dropped = Family("trainsup_job_datagrams_dropped_total",
      "Datagrams the ranks' helpers could not hand to their agents, in the current generation.",
      MetricType::Counter);
  MetricFamily job_heartbeats = Family("trainsup_job_heartbeats_received_total",
      "Rank heartbeats accepted for the job.", MetricType::Counter);
  MetricFamily job_stalled = Family("trainsup_job_stalled",
      "1 while the stall detector holds the job hung (no rank advanced for longer than its "
      "threshold while every rank process is alive), else 0.", MetricType::Gauge);
  MetricFamily job_stall_culprit = Family("trainsup_job_stall_culprit_info",
      "1 for the rank (and its node) the stall detector suspects of holding up a stalled job; "
      "present only while the job is stalled and a rank is named.", MetricType::Gauge);
  MetricFamily job_stall_threshold = Family("trainsup_job_stall_threshold_seconds",
      "The silence after which the job counts as stalled now.", MetricType::Gauge);
  MetricFamily job_stragglers = Family("trainsup_job_stragglers",
      "Ranks flagged as stragglers now.", MetricType::Gauge);
  MetricFamily job_events = Family("trainsup_job_events_total",
      "Events recorded for the job, by kind.", MetricType::Counter);
  // Training signals (docs/signals.md).
  MetricFamily job_loss = Family("trainsup_job_loss",
      "The job's loss at its last step: the mean of its ranks' finite losses.", MetricType::Gauge);
  MetricFamily job_grad_norm = Family("trainsup_job_grad_norm",
      "The largest finite gradient norm of the job's ranks at its last step.", MetricType::Gauge);
  MetricFamily job_nonfinite_steps = Family("trainsup_job_nonfinite_steps_total",
      "Steps with a non-finite value, by value: loss (any rank's), grad_norm (fp16 overflow "
      "steps: a non-finite gradient norm with finite losses).", MetricType::Counter);
  MetricFamily job_loss_shifted = Family("trainsup_job_loss_shifted",
      "1 while the job's loss holds a level shift (loss_shift event), else 0.", MetricType::Gauge);
  MetricFamily job_kill_ratio = Family("trainsup_job_kill_criterion_ratio",
      "How close a kill criterion in force is to firing, by criterion (loss_above, "
      "reference_curve: the median loss / limit over the window; loss_spikes: shifts in a row / "
      "the count): at 1 or above it fires (docs/kill-criteria.md).", MetricType::Gauge);
  MetricFamily job_loss_flat = Family("trainsup_job_loss_flat",
      "1 when the generation's loss did not go down from the start (loss_flat event), else 0.",
      MetricType::Gauge);
  MetricFamily job_checkpoint_age = Family("trainsup_job_checkpoint_age_steps",
      "Steps trained since the last committed checkpoint (or the step resumed from, or the plan's "
      "first step), while a periodic plan is in force.", MetricType::Gauge);
  MetricFamily job_checkpoint_overdue = Family("trainsup_job_checkpoint_overdue",
      "1 while no checkpoint was committed for more than twice the planned interval "
      "(checkpoint_overdue event), else 0.", MetricType::Gauge);
  MetricFamily job_step_time_ratio = Family("trainsup_job_step_time_ratio",
      "The job's recent step time over the generation's reference (after its warm-up): above 1 "
      "slower.", MetricType::Gauge);
  MetricFamily job_memory = Family("trainsup_job_memory_bytes",
      "The largest rank's memory at the job's last step, by memory: device, host (RSS).",
      MetricType::Gauge);
  MetricFamily job_memory_growth = Family("trainsup_job_memory_growth_bytes_per_second",
      "How fast the largest rank's memory grows while it rises steadily (memory_growth), else 0.",
      MetricType::Gauge);
  MetricFamily job_memory_to_limit = Family("trainsup_job_memory_seconds_to_limit",
      "While device memory grows steadily and the device's capacity is known: the seconds until "
      "it is full at that rate.", MetricType::Gauge);
  MetricFamily job_replica_mismatches = Family("trainsup_job_replica_mismatches_total",
      "Ranks found disagreeing with their replica group's majority, one per rank and step.",
      MetricType::Counter);
  MetricFamily job_resume_findings = Family("trainsup_job_resume_findings_total",
      "Resumes found wrong, by check: resumed_behind, lr_mismatch, data_position_mismatch, "
      "resume_spike (docs/signals.md, Resume).", MetricType::Counter);
  MetricFamily job_resume_repeated_steps = Family("trainsup_job_resume_repeated_steps_total",
      "Steps re-done because a generation resumed from before the last checkpoint seen complete.",
      MetricType::Counter);
  MetricFamily job_last_checkpoint_step = Family("trainsup_job_last_checkpoint_step",
      "The step of the checkpoint last seen complete (every rank reporting ended it).",
      MetricType::Gauge);
  MetricFamily straggler_compute = Family("trainsup_straggler_compute_seconds",
      "p99 compute time of each flagged straggler (all of them below the per-rank caps, the "
      "slowest few above them).", MetricType::Gauge);
  MetricFamily job_step_duration = Family("trainsup_job_step_duration_seconds",
      "Median over ranks of each rank's step-time percentile over its recent steps.",
      MetricType::Gauge);
  MetricFamily rank_step = Family("trainsup_rank_step",
      "Last step the rank completed (jobs up to the per-rank cap only).", MetricType::Gauge);
  MetricFamily rank_step_duration = Family("trainsup_rank_step_duration_seconds",
      "Step-time percentile of the rank over its recent steps (jobs up to the per-rank cap only).",
      MetricType::Gauge);
  MetricFamily rank_datagrams_dropped = Family("trainsup_rank_datagrams_dropped_total",
      "Datagrams the rank's helper could not hand to its agent, in the current generation (jobs "
      "up to the per-rank cap only).", MetricType::Counter);
  MetricFamily rank_compute_duration = Family("trainsup_rank_compute_duration_seconds",
      "Percentile of the rank's own work per step (hb.compute()) over its recent steps (jobs up "
      "to the per-rank cap only).", MetricType::Gauge);
  MetricFamily rank_series_omitted = Family("trainsup_rank_series_omitted",
      "Ranks whose trainsup_rank_* series this scrape left out, by the cap that left them out: "
      "max_ranks_per_job (--metrics-max-ranks), max_ranks_total (--metrics-max-ranks-total).",
      MetricType::Gauge);

  std::vector<MetricFamily> Take() {
    std::vector<MetricFamily> out;
    for (MetricFamily* f :
         {&build_info, &agents_connected, &report_interval, &nodes, &jobs, &reports, &heartbeats, &rejected,
          &dropped, &nodes_quarantined, &node_quarantined, &nodes_unreachable, &node_unreachable,
          &quarantine_skipped, &store_errors, &persist_failures, &fences, &unfences, &limit_refusals,
          &reports_refused, &jobs_forgotten, &nodes_forgotten, &verdicts, &early_failures,
          &cluster_mtbf, &job_state, &job_restarts, &job_time, &job_goodput, &job_mtbf,
          &job_checkpoint_cost, &job_restart_cost, &job_checkpoint_interval,
          &job_checkpoint_interval_steps, &job_generation, &job_world_size, &job_step, &job_last_progress,
          &job_ranks_reporting, &job_ranks_alive, &job_ranks_unknown, &job_ranks_dead, &job_ranks_finished,
          &job_datagrams_dropped,
          &job_heartbeats, &job_stalled, &job_stall_culprit,
          &job_stall_threshold, &job_stragglers, &job_events, &job_loss, &job_grad_norm,
          &job_nonfinite_steps, &job_loss_shifted, &job_kill_ratio, &job_loss_flat, &job_step_time_ratio,
          &job_checkpoint_age, &job_checkpoint_overdue,
          &job_memory, &job_memory_growth, &job_memory_to_limit, &job_replica_mismatches,
          &job_resume_findings, &job_resume_repeated_steps, &job_last_checkpoint_step,
          &straggler_compute,
          &job_step_duration, &rank_step, &rank_step_duration, &rank_compute_duration,
          &rank_datagrams_dropped, &rank_series_omitted}) {
      if (!f->metric.empty()) out.push_back(std::move(*f));
    }
    return out;
  }
};

// The job's own verdicts acted on, every action and source always present,
// and the early failures judged.
void CollectVerdicts(const ClusterView& cluster, Families& f) {
  for (const ClusterView::VerdictCount& v : cluster.verdicts_acted) {
    AddSample(f.verdicts, {{"action", v.action}, {"source", v.source}},
              static_cast<double>(v.count));
  }
  AddSample(f.early_failures, {{"attributed", "node"}},
            static_cast<double>(cluster.early_failures_node));
  AddSample(f.early_failures, {{"attributed", "undecided"}},
            static_cast<double>(cluster.early_failures_undecided));
  AddSample(f.early_failures, {{"attributed", "workload"}},
            static_cast<double>(cluster.early_failures_workload));
}

// An MTBF estimate as three series: the estimate and its bounds.
void AddMtbf(MetricFamily& family, const MtbfEstimate& m, std::vector<ClientMetric::Label> labels) {
  for (const auto& [bound, value] : {std::pair<const char*, double>{"estimate", m.mtbf_seconds},
                                     {"lower", m.lower_seconds},
                                     {"upper", m.upper_seconds}}) {
    std::vector<ClientMetric::Label> l = labels;
    l.push_back({"bound", bound});
    std::sort(l.begin(), l.end());
    AddSample(family, l, value);
  }
}

// The flagged stragglers' p99 compute time: every one for jobs whose
// per-rank series are exported, else the slowest max_stragglers_per_job.
void CollectStragglers(const JobView& job, bool ranks_exported, const MetricsOptions& options,
                       Families& f) {
  std::vector<StragglerView> flagged = job.stragglers;
  size_t keep = flagged.size();
  if (!ranks_exported) {
    keep = std::min<size_t>(keep, options.max_stragglers_per_job);
    std::partial_sort(flagged.begin(), flagged.begin() + keep, flagged.end(),
                      [](const StragglerView& a, const StragglerView& b) {
                        return a.compute_p99_s > b.compute_p99_s;
                      });
  }
  for (size_t k = 0; k < keep; ++k) {
    AddSample(f.straggler_compute,
              {{"job_id", job.id}, {"percentile", "p99"}, {"rank", absl::StrCat(flagged[k].rank)}},
              flagged[k].compute_p99_s);
  }
}

// The per-rank series of a job below the per-rank cap.
void CollectRanks(const std::string& job, const std::vector<RankView>& ranks, Families& f) {
  for (const RankView& r : ranks) {
    const std::string rank = absl::StrCat(r.rank);
    AddSample(f.rank_step, {{"job_id", job}, {"rank", rank}}, static_cast<double>(r.step));
    AddSample(f.rank_datagrams_dropped, {{"job_id", job}, {"rank", rank}},
              static_cast<double>(r.datagrams_dropped));
    if (!r.has_step_samples) continue;
    AddSample(f.rank_step_duration, {{"job_id", job}, {"percentile", "p50"}, {"rank", rank}}, r.step_p50);
    AddSample(f.rank_step_duration, {{"job_id", job}, {"percentile", "p99"}, {"rank", rank}}, r.step_p99);
    if (!r.has_compute_samples) continue;
    AddSample(f.rank_compute_duration, {{"job_id", job}, {"percentile", "p50"}, {"rank", rank}}, r.compute_p50);
    AddSample(f.rank_compute_duration, {{"job_id", job}, {"percentile", "p99"}, {"rank", rank}}, r.compute_p99);
  }
}

// What the per-rank caps leave: the ranks still exportable this scrape
// (max_ranks_total, over all jobs) and the ranks left out, by cap.
struct RankSeriesBudget {
  uint64_t left = 0;
  uint64_t omitted_per_job = 0;
  uint64_t omitted_total = 0;
};

// Whether `job`'s per-rank series fit both caps; takes its ranks from the
// budget when they do, counts them as omitted when not. A job is exported
// whole or not at all.
bool TakeRankSeries(const JobView& job, const MetricsOptions& options, RankSeriesBudget& budget) {
  if (job.world_size > options.max_ranks_per_job) {
    budget.omitted_per_job += job.ranks_reporting;
    return false;
  }
  if (job.ranks_reporting > budget.left) {
    budget.omitted_total += job.ranks_reporting;
    return false;
  }
  budget.left -= job.ranks_reporting;
  return true;
}

// The signal registry's gauges (SignalRule::Gauges) as metrics: one row a
// gauge, naming its family and the label that tells it from the family's
// other gauges. A gauge without a row is not exported.
struct SignalGaugeMetric {
  const char* gauge;
  MetricFamily Families::*family;
  const char* label = nullptr;
  const char* label_value = nullptr;
};
const SignalGaugeMetric kSignalGaugeMetrics[] = {
    {"loss_flat", &Families::job_loss_flat},
    {"step_time_ratio", &Families::job_step_time_ratio},
    {"device_memory_growth_bytes_per_second", &Families::job_memory_growth, "memory", "device"},
    {"host_memory_growth_bytes_per_second", &Families::job_memory_growth, "memory", "host"},
    {"device_memory_seconds_to_limit", &Families::job_memory_to_limit},
    {"checkpoint_age_steps", &Families::job_checkpoint_age},
    {"checkpoint_overdue", &Families::job_checkpoint_overdue},
};

// What the job's training signals show (docs/signals.md).
void CollectSignals(const JobView& job, Families& f) {
  const SignalsView& signals = job.signals;
  const std::vector<ClientMetric::Label> id = {{"job_id", job.id}};
  if (signals.loss) AddSample(f.job_loss, id, *signals.loss);
  if (signals.grad_norm) AddSample(f.job_grad_norm, id, *signals.grad_norm);
  AddSample(f.job_nonfinite_steps, {{"job_id", job.id}, {"value", "grad_norm"}},
            static_cast<double>(signals.overflow_steps));
  AddSample(f.job_nonfinite_steps, {{"job_id", job.id}, {"value", "loss"}},
            static_cast<double>(signals.nonfinite_loss_steps));
  AddSample(f.job_loss_shifted, id, signals.loss_shifted ? 1 : 0);
  for (const CriterionStatus& c : job.kill_criteria) {
    if (!c.judged) continue;
    AddSample(f.job_kill_ratio,
              {{"criterion", std::string(KillCriterionName(c.kind))}, {"job_id", job.id}}, c.ratio);
  }
  for (bool host : {false, true}) {
    const std::optional<double>& bytes =
        host ? signals.host_memory_bytes : signals.device_memory_bytes;
    if (!bytes) continue;
    AddSample(f.job_memory, {{"job_id", job.id}, {"memory", host ? "host" : "device"}}, *bytes);
  }
  for (const auto& [gauge, value] : signals.gauges) {
    for (const SignalGaugeMetric& row : kSignalGaugeMetrics) {
      if (gauge != row.gauge) continue;
      std::vector<ClientMetric::Label> labels = id;
      if (row.label != nullptr) labels.push_back({row.label, row.label_value});
      AddSample(f.*row.family, labels, value);
    }
  }
  AddSample(f.job_replica_mismatches, id, static_cast<double>(signals.replica_mismatches));
  for (const auto& [check, count] : signals.resume_findings) {
    AddSample(f.job_resume_findings, {{"job_id", job.id}, {"check", check}},
              static_cast<double>(count));
  }
  AddSample(f.job_resume_repeated_steps, id, static_cast<double>(signals.resume_repeated_steps));
  if (signals.last_checkpoint_step >= 0) {
    AddSample(f.job_last_checkpoint_step, id, static_cast<double>(signals.last_checkpoint_step));
  }
}

void CollectJob(const Supervisor& core, const JobView& job, const MetricsOptions& options,
                RankSeriesBudget& budget, Families& f) {
  const std::vector<ClientMetric::Label> id = {{"job_id", job.id}};
  for (int k = 0; k < kJobStateCount; ++k) {
    JobState state = static_cast<JobState>(k);
    AddSample(f.job_state, {{"job_id", job.id}, {"state", std::string(JobStateName(state))}},
              job.state == state ? 1 : 0);
  }
  AddSample(f.job_restarts, id, static_cast<double>(job.restarts));
  for (int b = 0; b < kBucketCount; ++b) {
    AddSample(f.job_time,
              {{"bucket", std::string(BucketName(static_cast<Bucket>(b)))}, {"job_id", job.id}},
              job.ledger.seconds[b]);
  }
  AddSample(f.job_goodput, id, job.ledger.goodput());
  AddMtbf(f.job_mtbf, job.mtbf, id);
  AddSample(f.job_checkpoint_cost, id, job.checkpoint_cost.seconds);
  AddSample(f.job_restart_cost, id, job.restart_cost.seconds);
  if (job.plan) AddSample(f.job_checkpoint_interval, id, job.plan->interval_s);
  if (!job.plans.empty()) {
    AddSample(f.job_checkpoint_interval_steps, id,
              static_cast<double>(job.plans.back().interval_steps));
  }
  AddSample(f.job_generation, id, static_cast<double>(job.generation));
  AddSample(f.job_world_size, id, job.world_size);
  AddSample(f.job_step, id, static_cast<double>(job.step));
  if (job.last_progress != absl::InfinitePast()) {
    AddSample(f.job_last_progress, id, absl::ToDoubleSeconds(job.last_progress - absl::UnixEpoch()));
  }
  AddSample(f.job_ranks_reporting, id, job.ranks_reporting);
  AddSample(f.job_ranks_alive, id, job.ranks_alive);
  AddSample(f.job_ranks_unknown, id, job.seen.unknown);
  AddSample(f.job_ranks_dead, id, job.seen.dead);
  AddSample(f.job_ranks_finished, id, job.seen.finished);
  AddSample(f.job_datagrams_dropped, id, static_cast<double>(job.datagrams_dropped));
  AddSample(f.job_heartbeats, id, static_cast<double>(job.heartbeats_received));
  AddSample(f.job_stalled, id, job.stalled ? 1 : 0);
  // The suspected rank of a stalled job and its node, for the page to name
  // them. One series per stalled job at most: bounded, unlike a per-rank label.
  if (job.stall_culprit) {
    AddSample(f.job_stall_culprit,
              {{"job_id", job.id}, {"node", job.stall_culprit_node},
               {"rank", absl::StrCat(*job.stall_culprit)}},
              1);
  }
  if (job.stall_threshold) {
    AddSample(f.job_stall_threshold, id, absl::ToDoubleSeconds(*job.stall_threshold));
  }
  AddSample(f.job_stragglers, id, static_cast<double>(job.stragglers.size()));
  for (int k = 0; k < kEventKindCount; ++k) {
    EventKind kind = static_cast<EventKind>(k);
    AddSample(f.job_events, {{"job_id", job.id}, {"kind", std::string(EventKindName(kind))}},
              static_cast<double>(job.events[k]));
  }
  const bool ranks_exported = TakeRankSeries(job, options, budget);
  CollectSignals(job, f);
  CollectStragglers(job, ranks_exported, options, f);
  const JobStepStats& stats = job.step_stats;
  if (stats.ranks_with_samples > 0) {
    AddSample(f.job_step_duration, {{"job_id", job.id}, {"percentile", "p50"}}, stats.median_rank_p50_s);
    AddSample(f.job_step_duration, {{"job_id", job.id}, {"percentile", "p99"}}, stats.median_rank_p99_s);
  }
  if (!ranks_exported) return;
  std::vector<RankView> ranks;
  std::vector<RankTexts> texts;
  if (core.RankViewsOf(job.id, &ranks, &texts)) CollectRanks(job.id, ranks, f);
}

}  // namespace

std::vector<MetricFamily> SupervisorCollector::Collect() const {
  Families f;
  host_->Read([&](const Supervisor& core, absl::Time now) {
    AddSample(f.build_info, {{"version", TRAINSUP_VERSION}}, 1);
    AddSample(f.agents_connected, {}, core.agents_connected());
    AddSample(f.report_interval, {}, absl::ToDoubleSeconds(core.report_interval()));
    const ClusterView cluster = core.Cluster(now);
    AddSample(f.nodes, {}, cluster.nodes);
    std::vector<JobView> jobs = core.JobViews(now);
    AddSample(f.jobs, {}, static_cast<double>(jobs.size()));
    AddSample(f.reports, {}, static_cast<double>(core.reports_received()));
    AddSample(f.heartbeats, {}, static_cast<double>(core.heartbeats_received()));
    // Every reason, zeros included, so that rate() works from the first scrape.
    for (int i = 0; i < kRejectReasonCount; ++i) {
      RejectReason reason = static_cast<RejectReason>(i);
      AddSample(f.rejected, {{"reason", std::string(RejectReasonName(reason))}},
                static_cast<double>(core.rejected().Get(reason)));
    }
    AddSample(f.dropped, {}, static_cast<double>(core.heartbeats_dropped_by_agents()));
    for (const std::string& node : cluster.quarantined_nodes) {
      AddSample(f.node_quarantined, {{"node", node}}, 1);
    }
    AddSample(f.nodes_quarantined, {}, cluster.nodes_quarantined);
    for (const std::string& node : cluster.unreachable_nodes) {
      AddSample(f.node_unreachable, {{"node", node}}, 1);
    }
    AddSample(f.nodes_unreachable, {}, static_cast<double>(cluster.unreachable_nodes.size()));
    AddSample(f.quarantine_skipped, {}, static_cast<double>(cluster.quarantine_skipped));
    AddSample(f.store_errors, {}, static_cast<double>(host_->store_errors()));
    AddSample(f.persist_failures, {}, static_cast<double>(host_->persist_failures()));
    AddSample(f.fences, {{"result", "succeeded"}}, static_cast<double>(host_->fences_succeeded()));
    AddSample(f.fences, {{"result", "failed"}}, static_cast<double>(host_->fences_failed()));
    AddSample(f.unfences, {{"result", "succeeded"}}, static_cast<double>(host_->unfences_succeeded()));
    AddSample(f.unfences, {{"result", "failed"}}, static_cast<double>(host_->unfences_failed()));
    const uint64_t streams_refused = streams_ ? streams_->refused_max_streams.load() : 0;
    const uint64_t outboxes_full = streams_ ? streams_->ended_max_outbox.load() : 0;
    AddSample(f.limit_refusals, {{"limit", "max_jobs"}}, static_cast<double>(core.jobs_refused()));
    AddSample(f.limit_refusals, {{"limit", "max_nodes"}}, static_cast<double>(core.nodes_refused()));
    AddSample(f.limit_refusals, {{"limit", "max_agents"}}, static_cast<double>(streams_refused));
    AddSample(f.limit_refusals, {{"limit", "max_stream_outbox"}}, static_cast<double>(outboxes_full));
    AddSample(f.reports_refused, {}, static_cast<double>(core.reports_refused()));
    AddSample(f.jobs_forgotten, {}, static_cast<double>(core.jobs_forgotten()));
    AddSample(f.nodes_forgotten, {}, static_cast<double>(core.nodes_forgotten()));
    CollectVerdicts(cluster, f);
    AddMtbf(f.cluster_mtbf, cluster.mtbf, {});
    RankSeriesBudget budget;
    budget.left = options_.max_ranks_total;
    for (const JobView& job : jobs) CollectJob(core, job, options_, budget, f);
    AddSample(f.rank_series_omitted, {{"cap", "max_ranks_per_job"}},
              static_cast<double>(budget.omitted_per_job));
    AddSample(f.rank_series_omitted, {{"cap", "max_ranks_total"}},
              static_cast<double>(budget.omitted_total));
    return 0;
  });
  return f.Take();
}

}  // namespace trainsup
