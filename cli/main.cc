// trainsupctl: the operator's view of trainsupd.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
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

// ---- Verbs ----
//
// One registration function a verb: it adds the verb's subcommand and its
// flags to the app and returns what to run once the command line is parsed
// (the flags live in the closure). Verbs that call trainsupd run with a
// client; the offline calculators contact no supervisor.

// What a verb that calls trainsupd runs with.
struct Call {
  OperatorClient& client;
  bool json;
  // For a verb that opens a client of its own (top's shorter deadline).
  const SupervisorAddresses& addresses;
  const ClientTlsOptions& tls;
  const std::string& token;
  absl::Duration timeout;
};

struct Verb {
  CLI::App* command;
  std::function<int(const Call&)> run;
};

// An offline calculator: the text to print, or a usage error.
struct OfflineVerb {
  CLI::App* command;
  std::function<absl::StatusOr<std::string>(bool json)> run;
};

// The action verbs answer one line.
std::string Said(const v1::ActionResponse& r) { return r.message() + "\n"; }

// A verb about one job: its required JOB, kept by the returned pointer.
std::shared_ptr<std::string> AddJobArgument(CLI::App* command) {
  auto job = std::make_shared<std::string>();
  command->add_option("JOB", *job, "job id")->required();
  return job;
}

Verb AddJobs(CLI::App& app) {
  return {app.add_subcommand("jobs", "list the jobs the supervisor knows"), [](const Call& c) {
            return Emit(c.client.ListJobs(), c.json, [](const v1::ListJobsResponse& r) {
              return RenderJobsTable(r, absl::Now());
            });
          }};
}

Verb AddStatus(CLI::App& app) {
  return {app.add_subcommand("status",
                             "the trainsupd instances: who leads, since when, the epoch, the "
                             "candidates (docs/ha.md); answered by the leader"),
          [](const Call& c) {
            return Emit(c.client.GetSupervisorStatus(), c.json,
                        [](const v1::SupervisorStatus& r) {
                          return RenderSupervisorStatus(r, absl::Now());
                        });
          }};
}

Verb AddRanks(CLI::App& app) {
  struct Flags {
    std::string job;
    std::string sort = "rank";
    uint32_t top = 0;
    std::string node;
    std::string flag;
    bool all = false;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* ranks = app.add_subcommand("ranks", "list the ranks of JOB with their step times");
  ranks->add_option("JOB", f->job, "job id")->required();
  ranks->add_option("--sort", f->sort,
                    "row order: rank, compute-p99 (the COMPUTE_P99 column: slowest own work "
                    "first), step-p99 (the STEP_P99 column), last-seen (longest silent first), "
                    "step (furthest behind first)")
      ->capture_default_str()
      ->check(CLI::IsMember({"rank", "compute-p99", "step-p99", "last-seen", "step"}));
  CLI::Option* top = ranks->add_option("--top", f->top, "only the first N ranks in --sort order")
                         ->check(WholeNumberValidator(1));
  ranks->add_option("--node", f->node, "only this node's ranks");
  ranks->add_option("--flag", f->flag, "only the ranks flagged so")
      ->check(CLI::IsMember({"straggler", "culprit", "dead"}));
  ranks->add_flag("--all", f->all,
                  "every rank, however many (streamed; the default above 256 ranks is the top "
                  "20 by compute p99)");
  return {ranks, [f, top](const Call& c) {
            RanksQuery query;
            query.request.set_job_id(f->job);
            query.request.set_sort(RankSortOf(f->sort));
            query.request.set_node(f->node);
            query.request.set_flag(RankFlagOf(f->flag));
            if (*top) query.request.set_limit(f->top);
            query.sorted = f->sort != "rank";
            query.all = f->all;
            return RunRanks(c.client, query, c.json);
          }};
}

Verb AddNodes(CLI::App& app) {
  return {app.add_subcommand("nodes", "list the nodes, their agents and quarantine"),
          [](const Call& c) { return Emit(c.client.ListNodes(), c.json, RenderNodesTable); }};
}

Verb AddStacks(CLI::App& app) {
  CLI::App* stacks = app.add_subcommand(
      "stacks", "the Python stacks of JOB's ranks when it last hung, grouped (the culprit's "
                "group first)");
  auto job = AddJobArgument(stacks);
  auto generation = std::make_shared<uint64_t>(0);
  stacks->add_option("--generation", *generation, "that generation's (default: the latest)")
      ->check(WholeNumberValidator(1));
  return {stacks, [job, generation](const Call& c) {
            return Emit(c.client.GetStacks(*job, *generation), c.json, RenderStacks);
          }};
}

Verb AddDiagnose(CLI::App& app) {
  CLI::App* diagnose = app.add_subcommand(
      "diagnose", "what is wrong with JOB, as one verdict: is it progressing, input-bound, "
                  "straggling, communication-bound, showing a training signal, else healthy; "
                  "each finding with its numbers and the command that shows more");
  auto job = AddJobArgument(diagnose);
  return {diagnose,
          [job](const Call& c) { return Emit(c.client.Diagnose(*job), c.json, RenderDiagnosis); }};
}

Verb AddResume(CLI::App& app) {
  CLI::App* resume = app.add_subcommand(
      "resume", "lift a held job (its restart cap was hit): it restarts now");
  auto job = AddJobArgument(resume);
  return {resume, [job](const Call& c) { return Emit(c.client.ResumeJob(*job), c.json, Said); }};
}

Verb AddQuarantine(CLI::App& app) {
  struct Flags {
    std::string node;
    std::string reason;
    bool force = false;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* quarantine = app.add_subcommand(
      "quarantine", "quarantine NODE: its agent stops and exits, the job restarts without it");
  quarantine->add_option("NODE", f->node, "node name")->required();
  quarantine->add_option("--reason", f->reason, "why (kept with the node; 1..512 bytes on one line)")
      ->required()
      ->check(CLI::Validator(
          [](std::string& text) {
            return IsValidReason(text) ? std::string() : std::string("must be ") + kReasonRule;
          },
          ""));
  quarantine->add_flag("--force", f->force,
                       "even past --quarantine-max-fraction of the nodes (refused without)");
  return {quarantine, [f](const Call& c) {
            return Emit(c.client.QuarantineNode(f->node, f->reason, f->force), c.json, Said);
          }};
}

Verb AddKillCriteria(CLI::App& app) {
  struct Flags {
    std::string job;
    KillFlags kill;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* kill = app.add_subcommand(
      "kill-criteria",
      "when to stop JOB for good (docs/kill-criteria.md): set the operator's criteria, list "
      "every job's (or JOB's) with how close each is to firing, clear the operator's");
  kill->add_option("JOB", f->job, "job id (list: every job without it)");
  kill->require_subcommand(1);
  CLI::App* set = kill->add_subcommand("set", "set JOB's criteria (in force instead of the "
                                              "script's)");
  CLI::Option* loss_above = set->add_option(
      "--loss-above", f->kill.loss_above, "stop when the smoothed loss is above this ...");
  set->add_option("--at-step", f->kill.at_step, "... from this step on")
      ->capture_default_str()->needs(loss_above);
  CLI::Option* reference = set->add_option(
      "--reference", f->kill.reference,
      "a good run's loss curve: STEP:LOSS,STEP:LOSS,... (steps increasing)");
  set->add_option("--band", f->kill.band, "the band above the curve: a fraction of it (0.1 = 10 %)")
      ->capture_default_str()->needs(reference);
  set->add_flag("--band-absolute", f->kill.band_absolute, "--band in loss units")->needs(reference);
  CLI::Option* spikes = set->add_option(
      "--spikes", f->kill.spikes, "loss shifts in a row with no recovery that stop it (0: off)");
  spikes->capture_default_str();
  set->add_option("--total-steps", f->kill.total_steps,
                  "the job's total steps (the GPU-time a kill saves is counted on them)");
  set->add_flag("--observe-only", f->kill.observe_only,
                "report (a killed_by_criterion event) instead of stopping the job");
  CLI::App* list = kill->add_subcommand("list", "the criteria and how close each is");
  list->add_flag("--all", f->kill.all, "every job's (the same as no JOB)");
  CLI::App* clear = kill->add_subcommand("clear", "forget JOB's operator criteria");
  set->fallthrough();
  list->fallthrough();
  clear->fallthrough();
  kill->fallthrough();
  return {kill, [f, set, list, clear, loss_above, reference, spikes](const Call& c) -> int {
            if (*list) {
              return Emit(c.client.ListKillCriteria(f->kill.all ? "" : f->job), c.json,
                          RenderKillCriteriaTable);
            }
            if (f->job.empty()) {
              std::fprintf(stderr, "error: kill-criteria %s needs a JOB\n", *set ? "set" : "clear");
              return kExitUsage;
            }
            if (*clear) return Emit(c.client.SetKillCriteria(f->job, std::nullopt), c.json, Said);
            // A set replaces the criteria in force: one without a criterion
            // would drop them and set none but the default --spikes.
            if (!*loss_above && !*reference && !*spikes) {
              return UsageErrorExit(
                  "kill-criteria set needs a criterion: --loss-above, --reference or "
                  "--spikes (the criteria in force are kept)");
            }
            absl::StatusOr<v1::KillCriteria> criteria = KillCriteriaOf(f->kill);
            if (!criteria.ok()) {
              std::fprintf(stderr, "error: %s\n", std::string(criteria.status().message()).c_str());
              return kExitUsage;
            }
            return Emit(c.client.SetKillCriteria(f->job, *criteria), c.json, Said);
          }};
}

Verb AddJob(CLI::App& app) {
  CLI::App* job = app.add_subcommand(
      "job", "one job in depth: state, MTBF, checkpoint and restart cost, plan, goodput ledger");
  auto id = AddJobArgument(job);
  auto generation = std::make_shared<std::optional<uint64_t>>();
  job->add_option("--generation", *generation,
                  "also what ran in that generation, node by node: command, code version, "
                  "environment, versions, what it resumed (docs/provenance.md)");
  return {job, [id, generation](const Call& c) {
            if (generation->has_value()) {
              return Emit(JobWithProvenance(c.client, *id, **generation), c.json,
                          RenderJobProvenance);
            }
            return Emit(c.client.GetJob(*id), c.json, RenderJobDetail);
          }};
}

Verb AddDiff(CLI::App& app) {
  auto args = std::make_shared<std::vector<std::string>>();
  CLI::App* diff = app.add_subcommand(
      "diff", "what changed between two generations, of JOB or of two jobs: command, code "
              "version and dirty files, environment, versions, world size, nodes");
  diff->add_option("ARGS", *args, "JOB GEN_A [JOB_B] GEN_B")->required()->expected(3, 4);
  return {diff, [args](const Call& c) { return RunDiff(c.client, *args, c.json); }};
}

Verb AddCheckpoint(CLI::App& app) {
  CLI::App* checkpoint = app.add_subcommand(
      "checkpoint", "checkpoint JOB once, at a step every rank reaches after the plan horizon");
  auto job = AddJobArgument(checkpoint);
  return {checkpoint,
          [job](const Call& c) { return Emit(c.client.RequestCheckpoint(*job), c.json, Said); }};
}

Verb AddUnquarantine(CLI::App& app) {
  CLI::App* unquarantine = app.add_subcommand("unquarantine", "lift NODE's quarantine");
  auto node = std::make_shared<std::string>();
  unquarantine->add_option("NODE", *node, "node name")->required();
  return {unquarantine, [node](const Call& c) {
            return Emit(c.client.UnquarantineNode(*node), c.json, Said);
          }};
}

Verb AddEvents(CLI::App& app) {
  struct Flags {
    EventsQuery query;
    bool follow = false;
    absl::Duration since = absl::ZeroDuration();
  };
  auto f = std::make_shared<Flags>();
  CLI::App* events = app.add_subcommand(
      "events", "list recent events (stall, crash, straggler, ...), of JOB if given");
  events->add_option("JOB", f->query.job, "only this job's events");
  events->add_flag("-f,--follow", f->follow,
                   "after the newest events (10 unless --limit), print new ones as they happen "
                   "(one per line; -o json: one JSON object per line) until interrupted; "
                   "reconnects when the supervisor restarts");
  events->add_option("--kind", f->query.kinds,
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
  CLI::Option* since = AddDurationOption(*events, "--since", &f->since,
                                         "only events of the last DURATION (e.g. 10m, 2h)",
                                         DurationBound::kPositive);
  events->add_option("--limit", f->query.limit, "only the newest N events")
      ->check(WholeNumberValidator(1));
  return {events, [f, since](const Call& c) -> int {
            EventsQuery query = f->query;
            query.json = c.json;
            if (*since) query.since = absl::Now() - f->since;
            if (f->follow) return FollowEvents(c.client, query);
            absl::StatusOr<v1::ListEventsResponse> kept = c.client.ListEvents(query.job);
            if (kept.ok() && kept->events_size() == 0 && !query.job.empty()) {
              // None kept of it: a job the supervisor does not know either is
              // no job (exit 4, as for every verb), not an empty history.
              if (absl::StatusOr<v1::JobDetail> known = c.client.GetJob(query.job); !known.ok()) {
                kept = known.status();
              }
            }
            if (kept.ok()) kept = Filtered(query, *kept);
            return Emit(kept, c.json, RenderEventsTable);
          }};
}

Verb AddTop(CLI::App& app) {
  auto job = std::make_shared<std::string>();
  CLI::App* top = app.add_subcommand(
      "top", "a live view of JOB like top(1), refreshed every second until q or Ctrl-C: its "
             "state, step rate, goodput and last event, and its slowest ranks by compute p99 "
             "with their flags, as many as fit the terminal (not a terminal: one frame)");
  top->add_option("JOB", *job, "job id (default: the only job the supervisor knows)");
  return {top, [job](const Call& c) -> int {
            if (c.json) {
              std::fprintf(stderr, "error: top has no -o json (`job JOB` and `ranks JOB` have)\n");
              return kExitUsage;
            }
            // A live view must not freeze on a supervisor that accepts calls
            // and never answers: each call waits at most 2 s, then the view
            // says so.
            OperatorClient live(c.addresses, std::min(c.timeout, absl::Seconds(2)), c.tls, c.token);
            return RunTop(live, *job);
          }};
}

OfflineVerb AddPlan(CLI::App& app) {
  struct Flags {
    PlanFlags plan;
    double async_snapshot_seconds = 0;
    double run_hours = 0;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* plan = app.add_subcommand(
      "plan", "offline: how often to checkpoint, from the MTBF and the checkpoint and restart "
              "costs (no supervisor contacted)");
  plan->add_option("--mtbf-hours", f->plan.mtbf_hours,
                   "mean time between job-killing failures, hours")
      ->capture_default_str();
  plan->add_option("--checkpoint-seconds", f->plan.checkpoint_seconds,
                   "time one writer takes to write a checkpoint, seconds")
      ->capture_default_str();
  plan->add_option("--restart-seconds", f->plan.restart_seconds,
                   "from a failure to the first step of the next generation, seconds")
      ->capture_default_str();
  plan->add_option("--writers", f->plan.writers,
                   "parallel writers: a checkpoint takes checkpoint-seconds / writers")
      ->capture_default_str();
  CLI::Option* async_snapshot = plan->add_option(
      "--async-snapshot-seconds", f->async_snapshot_seconds,
      "training blocks only this long (snapshot); the write goes on in the background");
  CLI::Option* run = plan->add_option("--run-hours", f->run_hours, "length of the run, hours");
  // `trainsupctl plan -o json` works as well as `trainsupctl -o json plan`.
  plan->fallthrough();
  return {plan, [f, async_snapshot, run](bool json) {
            PlanFlags flags = f->plan;
            if (*async_snapshot) flags.async_snapshot_seconds = f->async_snapshot_seconds;
            if (*run) flags.run_hours = f->run_hours;
            return RunPlanCommand(flags, json);
          }};
}

OfflineVerb AddBudget(CLI::App& app) {
  struct Flags {
    ComputeBudgetInputs budget;
    bool no_overlap = false;
    int gpus = 0;
    double price = 0;
    double useful = 0;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* budget = app.add_subcommand(
      "budget", "offline: GPU utilization, wall time and cost left by the input pipeline's "
                "rate (no supervisor contacted)");
  budget->add_option("--compute-samples-per-second", f->budget.compute_samples_per_second,
                     "what the GPUs consume when never waiting for data")
      ->capture_default_str();
  budget->add_option("--loader-samples-per-second", f->budget.loader_samples_per_second,
                     "what the data loader produces (same scope as the compute rate)")
      ->capture_default_str();
  budget->add_flag("--no-overlap", f->no_overlap,
                   "loading does not overlap compute (no prefetch): per-sample times add");
  CLI::Option* gpus = budget->add_option("--gpus", f->gpus, "GPUs in the job");
  CLI::Option* price = budget->add_option("--price-per-gpu-hour", f->price, "price of one GPU-hour");
  CLI::Option* useful = budget->add_option("--useful-gpu-hours", f->useful,
                                           "GPU-hours of pure compute the run needs");
  budget->fallthrough();
  return {budget, [f, gpus, price, useful](bool json) {
            ComputeBudgetInputs inputs = f->budget;
            inputs.overlap = !f->no_overlap;
            if (*gpus) inputs.gpus = f->gpus;
            if (*price) inputs.price_per_gpu_hour = f->price;
            if (*useful) inputs.useful_gpu_hours = f->useful;
            return RunBudgetCommand(inputs, json);
          }};
}

OfflineVerb AddSearchBudget(CLI::App& app) {
  struct Flags {
    SearchBudgetInputs search;
    double mtbf = 0;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* search = app.add_subcommand(
      "search-budget", "offline: grid, random search or successive halving for a GPU-hour "
                       "budget, by seeded Monte Carlo (no supervisor contacted)");
  SearchBudgetInputs& s = f->search;
  search->add_option("--budget-gpu-hours", s.budget_gpu_hours, "GPU-hours for the whole search")
      ->capture_default_str();
  search->add_option("--run-gpu-hours", s.run_gpu_hours, "GPU-hours of one full run")
      ->capture_default_str();
  search->add_option("--dimensions", s.dimensions, "hyperparameters searched, of which one matters")
      ->capture_default_str();
  search->add_option("--reduction-factor", s.reduction_factor,
                     "successive halving keeps 1 configuration in this many per rung")
      ->capture_default_str();
  search->add_option("--rungs", s.rungs, "successive halving's rungs, the last one of full runs")
      ->capture_default_str();
  search->add_option("--early-noise", s.early_noise,
                     "how badly short runs rank configurations (0: perfectly)")
      ->capture_default_str();
  search->add_option("--seed", s.seed, "the Monte Carlo's seed")->capture_default_str();
  search->add_option("--trials", s.trials, "Monte Carlo trials")->capture_default_str();
  CLI::Option* mtbf = search->add_option(
      "--mtbf", f->mtbf,
      "a run's mean time between job-killing failures, hours: GPU-hours then include "
      "checkpoints, re-done work and restarts");
  search->add_option("--restart-cost", s.restart_seconds,
                     "with --mtbf: seconds from a failure to the next first step")
      ->capture_default_str();
  search->add_option("--checkpoint-cost", s.checkpoint_seconds,
                     "with --mtbf: seconds one checkpoint blocks training")
      ->capture_default_str();
  search->fallthrough();
  return {search, [f, mtbf](bool json) {
            SearchBudgetInputs inputs = f->search;
            if (*mtbf) inputs.mtbf_hours = f->mtbf;
            return RunSearchBudgetCommand(inputs, json);
          }};
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

  // In the order `--help` lists them.
  const std::vector<Verb> verbs = {
      AddJobs(app),       AddStatus(app),     AddRanks(app),        AddNodes(app),
      AddStacks(app),     AddDiagnose(app),   AddResume(app),       AddQuarantine(app),
      AddKillCriteria(app), AddJob(app),      AddDiff(app),         AddCheckpoint(app),
      AddUnquarantine(app), AddEvents(app),   AddTop(app)};
  // Offline calculators: they contact no supervisor.
  const std::vector<OfflineVerb> offline = {AddPlan(app), AddBudget(app), AddSearchBudget(app)};
  if (int code = ParseOrExitCode(app, argc, argv); code >= 0) return code;

  const bool json = output == "json";
  for (const OfflineVerb& verb : offline) {
    if (!*verb.command) continue;
    absl::StatusOr<std::string> text = verb.run(json);
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
  const Call call{client, json, *addresses, tls, token, timeout};
  for (const Verb& verb : verbs) {
    if (*verb.command) return verb.run(call);
  }
  return kExitUsage;
}
