// trainsupctl: the operator's view of trainsupd.
#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "cli/client.h"
#include "cli/diagnose_render.h"
#include "cli/provenance_render.h"
#include "cli/render.h"
#include "cli/search_budget_render.h"
#include "cli/top.h"
#include "common/cli_options.h"
#include "common/limits.h"
#include "common/version.h"

namespace {

using namespace trainsup;

// Prints a result or the error; returns the exit code.
template <typename Response, typename TableFn>
int Emit(const absl::StatusOr<Response>& result, bool json, TableFn table) {
  if (!result.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(result.status().message()).c_str());
    return ExitCodeFor(result.status());
  }
  std::string out = json ? RenderJson(*result) : table(*result);
  std::fwrite(out.data(), 1, out.size(), stdout);
  return kExitOk;
}

v1::RankSort RankSortOf(const std::string& name) {
  if (name == "compute-p99") return v1::RANK_SORT_COMPUTE_P99;
  if (name == "step-p99") return v1::RANK_SORT_STEP_P99;
  if (name == "last-seen") return v1::RANK_SORT_LAST_SEEN;
  if (name == "step") return v1::RANK_SORT_STEP;
  return v1::RANK_SORT_RANK;
}

v1::RankFlag RankFlagOf(const std::string& name) {
  if (name == "straggler") return v1::RANK_FLAG_STRAGGLER;
  if (name == "culprit") return v1::RANK_FLAG_CULPRIT;
  if (name == "dead") return v1::RANK_FLAG_DEAD;
  return v1::RANK_FLAG_ANY;
}

absl::StatusOr<v1::JobProvenance> JobWithProvenance(OperatorClient& client,
                                                    const std::string& job_id,
                                                    uint64_t generation) {
  absl::StatusOr<v1::JobDetail> detail = client.GetJob(job_id);
  if (!detail.ok()) return detail.status();
  absl::StatusOr<v1::ProvenanceResponse> provenance = client.GetProvenance(job_id, generation);
  if (!provenance.ok()) return provenance.status();
  v1::JobProvenance view;
  *view.mutable_job() = *std::move(detail);
  *view.mutable_provenance() = *std::move(provenance);
  return view;
}

// `trainsupctl diff JOB GEN_A [JOB_B] GEN_B`.
int RunDiff(OperatorClient& client, const std::vector<std::string>& args, bool json) {
  const bool two_jobs = args.size() == 4;
  const std::string& job_a = args[0];
  const std::string& job_b = two_jobs ? args[2] : args[0];
  uint64_t generation_a = 0;
  uint64_t generation_b = 0;
  if (!absl::SimpleAtoi(args[1], &generation_a) ||
      !absl::SimpleAtoi(args[two_jobs ? 3 : 2], &generation_b)) {
    std::fprintf(stderr, "error: diff takes JOB GEN_A [JOB_B] GEN_B, generations as numbers\n");
    return kExitUsage;
  }
  absl::StatusOr<v1::ProvenanceResponse> a = client.GetProvenance(job_a, generation_a);
  if (!a.ok()) return Emit(a, json, RenderProvenance);  // the error
  absl::StatusOr<v1::ProvenanceResponse> b = client.GetProvenance(job_b, generation_b);
  if (!b.ok()) return Emit(b, json, RenderProvenance);
  return Emit(absl::StatusOr<v1::ProvenanceDiff>(MakeProvenanceDiff(*a, *b)), json,
              RenderProvenanceDiff);
}

// `trainsupctl ranks`, as asked.
struct RanksQuery {
  v1::ListRanksRequest request;
  bool sorted = false;  // --sort given
  bool all = false;     // --all
};

// Above this many ranks, the table shows the top kDefaultTop by compute p99
// (or by --sort) and a summary line, unless --top, --node, --flag or --all
// ask otherwise: a 100k-rank table is no one's view.
constexpr uint32_t kFullTableRanks = 256;
constexpr uint32_t kDefaultTop = 20;

int RunRanks(OperatorClient& client, RanksQuery query, bool json) {
  const bool narrowed = query.request.limit() != 0 || !query.request.node().empty() ||
                        query.request.flag() != v1::RANK_FLAG_ANY;
  // JSON and --all stream the listing: any number of ranks.
  if (json || query.all) {
    return Emit(client.StreamRanks(query.request), json, [](const v1::ListRanksResponse& r) {
      return RenderRanksSummary(r, "") + RenderRanksTable(r);
    });
  }
  if (narrowed) {
    return Emit(client.ListRanks(query.request), json, [](const v1::ListRanksResponse& r) {
      return RenderRanksSummary(r, absl::StrCat("showing ", r.ranks_size(), " of ", r.matched(),
                                                " matching")) +
             RenderRanksTable(r);
    });
  }
  // Every rank of a small job in one answer; a large one's top kDefaultTop.
  v1::ListRanksRequest probe = query.request;
  probe.set_limit(kFullTableRanks + 1);
  absl::StatusOr<v1::ListRanksResponse> answer = client.ListRanks(probe);
  if (answer.ok() && answer->matched() > kFullTableRanks) {
    v1::ListRanksRequest top = query.request;
    if (!query.sorted) top.set_sort(v1::RANK_SORT_COMPUTE_P99);
    top.set_limit(kDefaultTop);
    answer = client.ListRanks(top);
  }
  return Emit(answer, json, [&](const v1::ListRanksResponse& r) {
    if (static_cast<uint32_t>(r.ranks_size()) >= r.matched()) return RenderRanksTable(r);
    return RenderRanksSummary(r, absl::StrCat("showing the top ", r.ranks_size(), " of ",
                                              r.matched(), " by ",
                                              query.sorted ? "--sort" : "compute p99",
                                              " (--top N, --all)")) +
           RenderRanksTable(r);
  });
}

// `trainsupctl events`, as asked: which events, and how many of the newest.
struct EventsQuery {
  std::string job;
  std::vector<std::string> kinds;  // empty: every kind
  std::optional<absl::Time> since;
  uint32_t limit = 0;  // 0: every one kept
  bool json = false;
};

bool Wanted(const EventsQuery& query, const v1::Event& e) {
  if (!query.kinds.empty() &&
      std::find(query.kinds.begin(), query.kinds.end(), e.kind()) == query.kinds.end()) {
    return false;
  }
  return !query.since.has_value() ||
         absl::FromUnixSeconds(e.time().seconds()) + absl::Nanoseconds(e.time().nanos()) >=
             *query.since;
}

// The kept events the query wants, the newest `limit` of them.
v1::ListEventsResponse Filtered(const EventsQuery& query, const v1::ListEventsResponse& all) {
  v1::ListEventsResponse out;
  for (const v1::Event& e : all.events()) {
    if (Wanted(query, e)) *out.add_events() = e;
  }
  if (query.limit > 0 && static_cast<uint32_t>(out.events_size()) > query.limit) {
    out.mutable_events()->DeleteSubrange(0, out.events_size() - static_cast<int>(query.limit));
  }
  return out;
}

void PrintEvent(const EventsQuery& query, const v1::Event& e) {
  const std::string line = query.json ? RenderJsonLine(e) : RenderEventLine(e);
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fflush(stdout);
}

// `events --follow`: the newest events the query wants (10 unless --limit),
// then each new one, until interrupted. When trainsupd goes away (a restart,
// or a failover: the call goes to the leader of --supervisor's list) it says
// so on stderr and reconnects, going on after the last event it printed:
// nothing twice, nothing missed that trainsupd kept (a new leader numbers on
// from the ids it was shown, docs/ha.md).
int FollowEvents(OperatorClient& client, EventsQuery query) {
  constexpr absl::Duration kRetry = absl::Seconds(1);
  if (query.limit == 0) query.limit = 10;
  uint64_t last = 0;
  bool started = false;
  bool away = false;
  while (true) {
    absl::StatusOr<v1::ListEventsResponse> kept = client.ListEvents(query.job, started ? last : 0);
    absl::Status s = kept.status();
    if (kept.ok()) {
      if (away) std::fprintf(stderr, "reconnected to the supervisor\n");
      away = false;
      if (!started) {
        const v1::ListEventsResponse recent = Filtered(query, *kept);
        for (const v1::Event& e : recent.events()) PrintEvent(query, e);
        if (recent.events_size() == 0) {
          std::fprintf(stderr, "no %sevents yet%s; following (Ctrl-C to stop)\n",
                       query.kinds.empty() ? "" : "such ",
                       query.job.empty() ? "" : (" of job " + query.job).c_str());
        }
        started = true;
      } else {
        for (const v1::Event& e : kept->events()) {  // those of the outage
          if (Wanted(query, e)) PrintEvent(query, e);
        }
      }
      if (kept->events_size() > 0) last = kept->events(kept->events_size() - 1).id();
      s = client.WatchEvents(query.job, last, [&](const v1::Event& e) {
        last = e.id();
        if (Wanted(query, e)) PrintEvent(query, e);
        return true;
      });
    }
    if (!s.ok() && ExitCodeFor(s) != kExitUnreachable) {
      std::fprintf(stderr, "error: %s\n", std::string(s.message()).c_str());
      return ExitCodeFor(s);
    }
    if (!away) {
      std::fprintf(stderr, "%s; reconnecting\n",
                   s.ok() ? "the supervisor ended the stream" : std::string(s.message()).c_str());
    }
    away = true;
    absl::SleepFor(kRetry);
  }
}

// `trainsupctl kill-criteria JOB set`'s flags.
struct KillFlags {
  std::optional<double> loss_above;
  int64_t at_step = 0;
  std::string reference;
  double band = 0.1;
  bool band_absolute = false;
  uint32_t spikes = 5;
  std::optional<int64_t> total_steps;
  bool observe_only = false;
  bool all = false;
};

// The criteria the flags say; InvalidArgument for a --reference that is not
// STEP:LOSS pairs. trainsupd checks the rest.
absl::StatusOr<v1::KillCriteria> KillCriteriaOf(const KillFlags& f) {
  v1::KillCriteria c;
  if (f.loss_above) c.set_loss_above(*f.loss_above);
  c.set_at_step(f.at_step);
  for (absl::string_view point : absl::StrSplit(f.reference, ',', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> parts = absl::StrSplit(point, ':');
    int64_t step = 0;
    double loss = 0;
    if (!absl::SimpleAtoi(parts.first, &step) || !absl::SimpleAtod(parts.second, &loss)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--reference: '", point, "' is not STEP:LOSS"));
    }
    v1::ReferencePoint* p = c.add_reference();
    p->set_step(step);
    p->set_loss(loss);
  }
  c.set_band(f.band);
  c.set_band_absolute(f.band_absolute);
  c.set_spikes(f.spikes);
  if (f.total_steps) c.set_total_steps(*f.total_steps);
  c.set_observe_only(f.observe_only);
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  std::string supervisor = "127.0.0.1:7411";
  if (const char* env = std::getenv("TRAINSUP_SUPERVISOR"); env != nullptr && *env != '\0') {
    supervisor = env;
  }
  std::string output = "table";
  absl::Duration timeout = absl::Seconds(5);

  CLI::App app{"trainsupctl: ask trainsupd about jobs, ranks and nodes.", "trainsupctl"};
  ConfigureApp(app, VersionLine("trainsupctl"),
               "Exit codes: 0 ok; 1 the request failed (the error line says why); 2 bad usage;\n"
               "3 cannot reach the supervisor; 4 no such job or node; 5 refused (no identity, or\n"
               "not allowed).");
  app.require_subcommand(1);
  // Global options may also come after the verb: `trainsupctl ranks j1 -o json`.
  app.fallthrough();
  app.add_option("--supervisor", supervisor,
                 "trainsupd gRPC address, or the addresses of trainsupd under an election, "
                 "comma-separated: calls go to the leader ($TRAINSUP_SUPERVISOR)")
      ->capture_default_str()->type_name("HOST:PORT[,HOST:PORT...]")
      ->check(SupervisorListValidator());
  app.add_option("-o,--output", output, "output format")
      ->capture_default_str()->check(CLI::IsMember({"table", "json"}));
  AddDurationOption(app, "--timeout", &timeout, "deadline of each call to the supervisor",
                    DurationBound::kPositive);
  ClientTlsOptions tls;
  AddClientTlsOptions(app, &tls);
  std::string token_file;
  app.add_option("--token-file", token_file,
                 "file holding the operator bearer token (needs --tls-ca)")
      ->envname("TRAINSUP_TOKEN_FILE")->type_name("FILE");

  CLI::App* jobs = app.add_subcommand("jobs", "list the jobs the supervisor knows");
  CLI::App* status = app.add_subcommand(
      "status", "the trainsupd instances: who leads, since when, the epoch, the candidates "
                "(docs/ha.md); answered by the leader");
  std::string job_id;
  std::string sort = "rank";
  CLI::App* ranks = app.add_subcommand("ranks", "list the ranks of JOB with their step times");
  ranks->add_option("JOB", job_id, "job id")->required();
  ranks->add_option("--sort", sort,
                    "row order: rank, compute-p99 (the COMPUTE_P99 column: slowest own work "
                    "first), step-p99 (the STEP_P99 column), last-seen (longest silent first), "
                    "step (furthest behind first)")
      ->capture_default_str()
      ->check(CLI::IsMember({"rank", "compute-p99", "step-p99", "last-seen", "step"}));
  uint32_t top = 0;
  CLI::Option* top_option =
      ranks->add_option("--top", top, "only the first N ranks in --sort order")
          ->check(WholeNumberValidator(1));
  std::string rank_node;
  ranks->add_option("--node", rank_node, "only this node's ranks");
  std::string rank_flag;
  ranks->add_option("--flag", rank_flag, "only the ranks flagged so")
      ->check(CLI::IsMember({"straggler", "culprit", "dead"}));
  bool all_ranks = false;
  ranks->add_flag("--all", all_ranks,
                  "every rank, however many (streamed; the default above 256 ranks is the top "
                  "20 by compute p99)");
  CLI::App* nodes = app.add_subcommand("nodes", "list the nodes, their agents and quarantine");
  uint64_t stacks_generation = 0;
  CLI::App* stacks = app.add_subcommand(
      "stacks", "the Python stacks of JOB's ranks when it last hung, grouped (the culprit's "
                "group first)");
  stacks->add_option("JOB", job_id, "job id")->required();
  stacks->add_option("--generation", stacks_generation, "that generation's (default: the latest)")
      ->check(WholeNumberValidator(1));
  CLI::App* diagnose = app.add_subcommand(
      "diagnose", "what is wrong with JOB, as one verdict: is it progressing, input-bound, "
                  "straggling, communication-bound, showing a training signal, else healthy; "
                  "each finding with its numbers and the command that shows more");
  diagnose->add_option("JOB", job_id, "job id")->required();
  std::string node_name;
  std::string reason;
  CLI::App* resume = app.add_subcommand(
      "resume", "lift a held job (its restart cap was hit): it restarts now");
  resume->add_option("JOB", job_id, "job id")->required();
  CLI::App* quarantine = app.add_subcommand(
      "quarantine", "quarantine NODE: its agent stops and exits, the job restarts without it");
  quarantine->add_option("NODE", node_name, "node name")->required();
  quarantine->add_option("--reason", reason, "why (kept with the node; 1..512 bytes on one line)")
      ->required()
      ->check(CLI::Validator(
          [](std::string& text) {
            return IsValidReason(text) ? std::string() : std::string("must be ") + kReasonRule;
          },
          ""));
  bool force = false;
  quarantine->add_flag("--force", force,
                       "even past --quarantine-max-fraction of the nodes (refused without)");
  KillFlags kill_flags;
  CLI::App* kill = app.add_subcommand(
      "kill-criteria",
      "when to stop JOB for good (docs/kill-criteria.md): set the operator's criteria, list "
      "every job's (or JOB's) with how close each is to firing, clear the operator's");
  kill->add_option("JOB", job_id, "job id (list: every job without it)");
  kill->require_subcommand(1);
  CLI::App* kill_set = kill->add_subcommand("set", "set JOB's criteria (in force instead of the "
                                                   "script's)");
  CLI::Option* loss_above = kill_set->add_option(
      "--loss-above", kill_flags.loss_above, "stop when the smoothed loss is above this ...");
  kill_set->add_option("--at-step", kill_flags.at_step, "... from this step on")
      ->capture_default_str()->needs(loss_above);
  CLI::Option* reference = kill_set->add_option(
      "--reference", kill_flags.reference,
      "a good run's loss curve: STEP:LOSS,STEP:LOSS,... (steps increasing)");
  kill_set->add_option("--band", kill_flags.band,
                       "the band above the curve: a fraction of it (0.1 = 10 %)")
      ->capture_default_str()->needs(reference);
  kill_set->add_flag("--band-absolute", kill_flags.band_absolute, "--band in loss units")
      ->needs(reference);
  CLI::Option* spikes = kill_set->add_option(
      "--spikes", kill_flags.spikes, "loss shifts in a row with no recovery that stop it (0: off)");
  spikes->capture_default_str();
  kill_set->add_option("--total-steps", kill_flags.total_steps,
                       "the job's total steps (the GPU-time a kill saves is counted on them)");
  kill_set->add_flag("--observe-only", kill_flags.observe_only,
                     "report (a killed_by_criterion event) instead of stopping the job");
  CLI::App* kill_list = kill->add_subcommand("list", "the criteria and how close each is");
  kill_list->add_flag("--all", kill_flags.all, "every job's (the same as no JOB)");
  CLI::App* kill_clear = kill->add_subcommand("clear", "forget JOB's operator criteria");
  kill_set->fallthrough();
  kill_list->fallthrough();
  kill_clear->fallthrough();
  kill->fallthrough();
  CLI::App* job = app.add_subcommand(
      "job", "one job in depth: state, MTBF, checkpoint and restart cost, plan, goodput ledger");
  job->add_option("JOB", job_id, "job id")->required();
  std::optional<uint64_t> job_generation;
  job->add_option("--generation", job_generation,
                  "also what ran in that generation, node by node: command, code version, "
                  "environment, versions, what it resumed (docs/provenance.md)");
  std::vector<std::string> diff_args;
  CLI::App* diff = app.add_subcommand(
      "diff", "what changed between two generations, of JOB or of two jobs: command, code "
              "version and dirty files, environment, versions, world size, nodes");
  diff->add_option("ARGS", diff_args, "JOB GEN_A [JOB_B] GEN_B")->required()->expected(3, 4);
  CLI::App* checkpoint = app.add_subcommand(
      "checkpoint", "checkpoint JOB once, at a step every rank reaches after the plan horizon");
  checkpoint->add_option("JOB", job_id, "job id")->required();
  CLI::App* unquarantine = app.add_subcommand("unquarantine", "lift NODE's quarantine");
  unquarantine->add_option("NODE", node_name, "node name")->required();
  EventsQuery events_query;
  bool follow = false;
  CLI::App* events = app.add_subcommand(
      "events", "list recent events (stall, crash, straggler, ...), of JOB if given");
  events->add_option("JOB", events_query.job, "only this job's events");
  events->add_flag("-f,--follow", follow,
                   "after the newest events (10 unless --limit), print new ones as they happen "
                   "(one per line; -o json: one JSON object per line) until interrupted; "
                   "reconnects when the supervisor restarts");
  events->add_option("--kind", events_query.kinds,
                     "only events of this kind (repeatable; the kinds: docs/cli.md)")
      ->type_name("KIND")
      ->check(CLI::Validator(
          [](std::string& text) {
            const std::vector<std::string>& kinds = EventKindNames();
            if (std::find(kinds.begin(), kinds.end(), text) != kinds.end()) return std::string();
            return absl::StrCat("'", text, "' is not an event kind; the kinds: ",
                                absl::StrJoin(kinds, ", "));
          },
          ""));
  absl::Duration events_since = absl::ZeroDuration();
  CLI::Option* since_option = AddDurationOption(
      *events, "--since", &events_since, "only events of the last DURATION (e.g. 10m, 2h)",
      DurationBound::kPositive);
  events->add_option("--limit", events_query.limit, "only the newest N events")
      ->check(WholeNumberValidator(1));
  std::string top_job;
  CLI::App* top_view = app.add_subcommand(
      "top", "a live view of JOB like top(1), refreshed every second until q or Ctrl-C: its "
             "state, step rate, goodput and last event, and its slowest ranks by compute p99 "
             "with their flags, as many as fit the terminal (not a terminal: one frame)");
  top_view->add_option("JOB", top_job, "job id (default: the only job the supervisor knows)");

  // Offline calculators: they contact no supervisor.
  PlanFlags plan_flags;
  CLI::App* plan = app.add_subcommand(
      "plan", "offline: how often to checkpoint, from the MTBF and the checkpoint and restart "
              "costs (no supervisor contacted)");
  plan->add_option("--mtbf-hours", plan_flags.mtbf_hours,
                   "mean time between job-killing failures, hours")
      ->capture_default_str();
  plan->add_option("--checkpoint-seconds", plan_flags.checkpoint_seconds,
                   "time one writer takes to write a checkpoint, seconds")
      ->capture_default_str();
  plan->add_option("--restart-seconds", plan_flags.restart_seconds,
                   "from a failure to the first step of the next generation, seconds")
      ->capture_default_str();
  plan->add_option("--writers", plan_flags.writers,
                   "parallel writers: a checkpoint takes checkpoint-seconds / writers")
      ->capture_default_str();
  double async_snapshot_seconds = 0;
  CLI::Option* async_snapshot = plan->add_option(
      "--async-snapshot-seconds", async_snapshot_seconds,
      "training blocks only this long (snapshot); the write goes on in the background");
  double run_hours = 0;
  CLI::Option* run = plan->add_option("--run-hours", run_hours, "length of the run, hours");
  ComputeBudgetInputs budget_flags;
  CLI::App* budget = app.add_subcommand(
      "budget", "offline: GPU utilization, wall time and cost left by the input pipeline's "
                "rate (no supervisor contacted)");
  budget->add_option("--compute-samples-per-second", budget_flags.compute_samples_per_second,
                     "what the GPUs consume when never waiting for data")
      ->capture_default_str();
  budget->add_option("--loader-samples-per-second", budget_flags.loader_samples_per_second,
                     "what the data loader produces (same scope as the compute rate)")
      ->capture_default_str();
  bool no_overlap = false;
  budget->add_flag("--no-overlap", no_overlap,
                   "loading does not overlap compute (no prefetch): per-sample times add");
  int gpus = 0;
  CLI::Option* gpus_option = budget->add_option("--gpus", gpus, "GPUs in the job");
  double price = 0;
  CLI::Option* price_option =
      budget->add_option("--price-per-gpu-hour", price, "price of one GPU-hour");
  double useful = 0;
  CLI::Option* useful_option = budget->add_option(
      "--useful-gpu-hours", useful, "GPU-hours of pure compute the run needs");
  SearchBudgetInputs search_flags;
  CLI::App* search = app.add_subcommand(
      "search-budget", "offline: grid, random search or successive halving for a GPU-hour "
                       "budget, by seeded Monte Carlo (no supervisor contacted)");
  search->add_option("--budget-gpu-hours", search_flags.budget_gpu_hours,
                     "GPU-hours for the whole search")
      ->capture_default_str();
  search->add_option("--run-gpu-hours", search_flags.run_gpu_hours, "GPU-hours of one full run")
      ->capture_default_str();
  search->add_option("--dimensions", search_flags.dimensions,
                     "hyperparameters searched, of which one matters")
      ->capture_default_str();
  search->add_option("--reduction-factor", search_flags.reduction_factor,
                     "successive halving keeps 1 configuration in this many per rung")
      ->capture_default_str();
  search->add_option("--rungs", search_flags.rungs,
                     "successive halving's rungs, the last one of full runs")
      ->capture_default_str();
  search->add_option("--early-noise", search_flags.early_noise,
                     "how badly short runs rank configurations (0: perfectly)")
      ->capture_default_str();
  search->add_option("--seed", search_flags.seed, "the Monte Carlo's seed")->capture_default_str();
  search->add_option("--trials", search_flags.trials, "Monte Carlo trials")->capture_default_str();
  double search_mtbf = 0;
  CLI::Option* search_mtbf_option = search->add_option(
      "--mtbf", search_mtbf,
      "a run's mean time between job-killing failures, hours: GPU-hours then include "
      "checkpoints, re-done work and restarts");
  search->add_option("--restart-cost", search_flags.restart_seconds,
                     "with --mtbf: seconds from a failure to the next first step")
      ->capture_default_str();
  search->add_option("--checkpoint-cost", search_flags.checkpoint_seconds,
                     "with --mtbf: seconds one checkpoint blocks training")
      ->capture_default_str();
  // `trainsupctl plan -o json` works as well as `trainsupctl -o json plan`.
  plan->fallthrough();
  budget->fallthrough();
  search->fallthrough();
  if (int code = ParseOrExitCode(app, argc, argv); code >= 0) return code;

  const bool json = output == "json";
  if (*plan || *budget || *search) {
    absl::StatusOr<std::string> text;
    if (*search) {
      if (*search_mtbf_option) search_flags.mtbf_hours = search_mtbf;
      text = RunSearchBudgetCommand(search_flags, json);
    } else if (*plan) {
      if (*async_snapshot) plan_flags.async_snapshot_seconds = async_snapshot_seconds;
      if (*run) plan_flags.run_hours = run_hours;
      text = RunPlanCommand(plan_flags, json);
    } else {
      budget_flags.overlap = !no_overlap;
      if (*gpus_option) budget_flags.gpus = gpus;
      if (*price_option) budget_flags.price_per_gpu_hour = price;
      if (*useful_option) budget_flags.useful_gpu_hours = useful;
      text = RunBudgetCommand(budget_flags, json);
    }
    if (!text.ok()) {
      std::fprintf(stderr, "error: %s\n", std::string(text.status().message()).c_str());
      return kExitUsage;
    }
    std::fwrite(text->data(), 1, text->size(), stdout);
    return kExitOk;
  }
  std::string token;
  if (!token_file.empty()) {
    absl::StatusOr<std::string> read = ReadTokenFile(token_file);
    if (!read.ok()) {
      std::fprintf(stderr, "error: %s\n", std::string(read.status().message()).c_str());
      return kExitUsage;
    }
    token = *std::move(read);
  }
  absl::StatusOr<SupervisorAddresses> addresses = SupervisorAddresses::Parse(supervisor);
  if (!addresses.ok()) {
    std::fprintf(stderr, "error: --supervisor: %s\n",
                 std::string(addresses.status().message()).c_str());
    return kExitUsage;
  }
  // Bad TLS files or token are a usage error now, not at the first call.
  if (absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
          MakeOperatorChannel(addresses->current(), tls, token);
      !channel.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(channel.status().message()).c_str());
    return kExitUsage;
  }
  OperatorClient client(*addresses, timeout, tls, token);
  if (*status) {
    return Emit(client.GetSupervisorStatus(), json, [](const v1::SupervisorStatus& r) {
      return RenderSupervisorStatus(r, absl::Now());
    });
  }
  if (*jobs) {
    return Emit(client.ListJobs(), json,
                [](const v1::ListJobsResponse& r) { return RenderJobsTable(r, absl::Now()); });
  }
  if (*ranks) {
    RanksQuery query;
    query.request.set_job_id(job_id);
    query.request.set_sort(RankSortOf(sort));
    query.request.set_node(rank_node);
    query.request.set_flag(RankFlagOf(rank_flag));
    if (*top_option) query.request.set_limit(top);
    query.sorted = sort != "rank";
    query.all = all_ranks;
    return RunRanks(client, query, json);
  }
  if (*nodes) return Emit(client.ListNodes(), json, RenderNodesTable);
  if (*diagnose) return Emit(client.Diagnose(job_id), json, RenderDiagnosis);
  if (*stacks) return Emit(client.GetStacks(job_id, stacks_generation), json, RenderStacks);
  auto say = [](const v1::ActionResponse& r) { return r.message() + "\n"; };
  if (*resume) return Emit(client.ResumeJob(job_id), json, say);
  if (*kill) {
    if (*kill_list) {
      return Emit(client.ListKillCriteria(kill_flags.all ? "" : job_id), json,
                  RenderKillCriteriaTable);
    }
    if (job_id.empty()) {
      std::fprintf(stderr, "error: kill-criteria %s needs a JOB\n", *kill_set ? "set" : "clear");
      return kExitUsage;
    }
    if (*kill_clear) return Emit(client.SetKillCriteria(job_id, std::nullopt), json, say);
    // A set replaces the criteria in force: one without a criterion would
    // drop them and set none but the default --spikes.
    if (!*loss_above && !*reference && !*spikes) {
      return UsageErrorExit("kill-criteria set needs a criterion: --loss-above, --reference or "
                            "--spikes (the criteria in force are kept)");
    }
    absl::StatusOr<v1::KillCriteria> criteria = KillCriteriaOf(kill_flags);
    if (!criteria.ok()) {
      std::fprintf(stderr, "error: %s\n", std::string(criteria.status().message()).c_str());
      return kExitUsage;
    }
    return Emit(client.SetKillCriteria(job_id, *criteria), json, say);
  }
  if (*job && job_generation.has_value()) {
    return Emit(JobWithProvenance(client, job_id, *job_generation), json, RenderJobProvenance);
  }
  if (*job) return Emit(client.GetJob(job_id), json, RenderJobDetail);
  if (*diff) return RunDiff(client, diff_args, json);
  if (*checkpoint) return Emit(client.RequestCheckpoint(job_id), json, say);
  if (*quarantine) return Emit(client.QuarantineNode(node_name, reason, force), json, say);
  if (*unquarantine) return Emit(client.UnquarantineNode(node_name), json, say);
  if (*top_view) {
    if (json) {
      std::fprintf(stderr, "error: top has no -o json (`job JOB` and `ranks JOB` have)\n");
      return kExitUsage;
    }
    // A live view must not freeze on a supervisor that accepts calls and
    // never answers: each call waits at most 2 s, then the view says so.
    OperatorClient live(*addresses, std::min(timeout, absl::Seconds(2)), tls, token);
    return RunTop(live, top_job);
  }
  if (*events) {
    events_query.json = json;
    if (*since_option) events_query.since = absl::Now() - events_since;
    if (follow) return FollowEvents(client, events_query);
    absl::StatusOr<v1::ListEventsResponse> kept = client.ListEvents(events_query.job);
    if (kept.ok() && kept->events_size() == 0 && !events_query.job.empty()) {
      // None kept of it: a job the supervisor does not know either is no
      // job (exit 4, as for every verb), not an empty history.
      if (absl::StatusOr<v1::JobDetail> known = client.GetJob(events_query.job); !known.ok()) {
        kept = known.status();
      }
    }
    if (kept.ok()) kept = Filtered(events_query, *kept);
    return Emit(kept, json, RenderEventsTable);
  }
  return kExitUsage;
}
