// trainsupd: the trainsup supervisor.
#include <malloc.h>

#include <csignal>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/mutex.h"
#include "common/cli_options.h"
#include "common/limits.h"
#include "common/log.h"
#include "common/version.h"
#include "daemon/core/verdicts.h"
#include "daemon/descriptors.h"
#include "daemon/grpc_log.h"
#include "daemon/ha_server.h"
#include "daemon/server.h"

namespace {

// Blocks SIGTERM, SIGINT and SIGHUP in every thread (call before starting
// any), so that the main thread can wait for them with sigwait.
sigset_t BlockHandledSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

// Raises the soft descriptor limit to the hard one and keeps --max-agents
// within what it allows, with headroom; logs how many agent streams
// trainsupd can hold.
void ApplyDescriptorLimit(bool max_agents_given, size_t* max_agents) {
  using namespace trainsup;
  const DescriptorLimit limit = RaiseDescriptorLimit();
  const size_t allowed = AgentStreamsAllowed(limit.soft);
  if (*max_agents > allowed) {
    if (max_agents_given) {
      TRAINSUP_LOG_WARN("--max-agents=%d lowered to %d: the descriptor limit (%d) holds no more "
                        "agent streams beside %d descriptors for everything else; raise the "
                        "hard limit (LimitNOFILE in systemd, ulimit -Hn)",
                        *max_agents, allowed, limit.soft, DescriptorHeadroom(limit.soft));
    }
    *max_agents = allowed;
  }
  TRAINSUP_LOG_INFO("descriptors: limit %d (soft was %d, hard %d); up to %d agent streams "
                    "(--max-agents; %d descriptors could hold %d)",
                    limit.soft, limit.soft_before, limit.hard, *max_agents, limit.soft, allowed);
}

// "non_finite, loss_shift, ...": every rule's switch, from the settings table.
std::string RuleSwitchNames() {
  std::vector<std::string> names;
  for (const trainsup::SignalSetting& setting : trainsup::SignalSettings()) {
    if (setting.rule_switch) names.push_back(setting.name);
  }
  return absl::StrJoin(names, ", ");
}

// The training signals' options (docs/signals.md): one flag per number of
// SignalSettings() (--loss-shift-window, ...), --on-non-finite for what a
// non-finite loss does, and --signals-off for the rules not to run.
void AddSignalOptions(CLI::App& app, trainsup::SignalOptions& signals) {
  using namespace trainsup;
  for (const SignalSetting& setting : SignalSettings()) {
    // Switches are --signals-off's; the spike action is --on-loss-spike.
    if (setting.rule_switch || absl::string_view(setting.name) == "on_loss_spike") continue;
    const SignalSetting* s = &setting;
    app.add_option_function<double>(
           "--" + absl::StrReplaceAll(s->name, {{"_", "-"}}),
           [s, &signals](double value) { s->set(signals, value); }, s->help)
        ->check(CLI::Validator(
            [s](std::string& text) -> std::string {
              double value = 0;
              if (!absl::SimpleAtod(text, &value) || !SettingAllows(*s, value)) {
                return absl::StrFormat("must be %s from %g to %g",
                                       s->integer ? "a whole number" : "a number", s->min, s->max);
              }
              return std::string();
            },
            ""))
        ->type_name(s->integer ? "INT" : "NUMBER")
        ->default_str(absl::StrFormat("%g", s->get(signals)));
  }
  app.add_option_function<std::string>(
         "--on-non-finite",
         [&signals](const std::string& action) {
           signals.non_finite.action = action == "restart"  ? NonFiniteAction::kRestart
                                       : action == "report" ? NonFiniteAction::kReport
                                                            : NonFiniteAction::kOff;
         },
         "a NaN/Inf loss: restart (stop the generation on every node, restart it from its last "
         "checkpoint), report (an event only), off")
      ->check(CLI::IsMember({"restart", "report", "off"}))
      ->default_str("restart");
  app.add_option_function<std::string>(
         "--on-loss-spike",
         [&signals](const std::string& action) {
           signals.fallback.on_loss_spike =
               action == "rollback" ? LossSpikeAction::kRollback : LossSpikeAction::kReport;
         },
         "a loss level shift: report (an event only), rollback (restart from the newest "
         "checkpoint before it, hand the script the batches to skip: hb.skip_range())")
      ->check(CLI::IsMember({"report", "rollback"}))
      ->default_str("report");
  app.add_option_function<std::string>(
         "--signals-off",
         [&signals](const std::string& names) {
           absl::Status s = TurnOffRules(names, &signals);
           if (!s.ok()) throw CLI::ValidationError("--signals-off", std::string(s.message()));
         },
         absl::StrCat("training-signal rules not to run, comma-separated: ", RuleSwitchNames()))
      ->type_name("RULES");
}

// A start that failed on the options or the files they name is a usage
// error (fix the command line); one that failed on the world (an address in
// use, a store another trainsupd holds, a full disk) is a failure.
int ExitCodeForStart(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kFailedPrecondition:
      return trainsup::kExitUsage;
    default:
      return trainsup::kExitFailure;
  }
}

// The verdict table: the defaults, then the rules of `file` (if any), then
// `rules`, each replacing the rule of the same key.
absl::Status AddVerdictRules(const std::string& file, const std::vector<std::string>& rules,
                             trainsup::VerdictTable* table) {
  using namespace trainsup;
  if (!file.empty()) {
    std::ifstream in(file);
    std::stringstream text;
    text << in.rdbuf();
    if (!in) return absl::InvalidArgumentError(absl::StrCat("--verdict-table ", file, ": unreadable"));
    if (absl::Status added = table->AddText(text.str()); !added.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--verdict-table ", file, ": ", added.message()));
    }
  }
  for (const std::string& text : rules) {
    absl::StatusOr<VerdictRule> rule = ParseVerdictRule(text);
    if (!rule.ok()) return absl::InvalidArgumentError(absl::StrCat("--verdict: ", rule.status().message()));
    table->Set(*std::move(rule));
  }
  std::vector<std::string> in_force;
  for (const VerdictRule& rule : table->rules()) in_force.push_back(rule.ToString());
  TRAINSUP_LOG_INFO("verdicts: %s", in_force.empty() ? "none" : absl::StrJoin(in_force, ", "));
  return absl::OkStatus();
}

// Waits for SIGTERM or SIGINT, re-reading the TLS certificates on SIGHUP
// through `reload`; returns the signal that ended the wait.
template <typename Reload>
int AwaitTermination(sigset_t* signals, Reload reload) {
  int signal_number = 0;
  while (sigwait(signals, &signal_number) == 0 && signal_number == SIGHUP) {
    absl::Status reloaded = reload();
    if (reloaded.ok()) {
      TRAINSUP_LOG_INFO("SIGHUP: TLS certificates re-read; new connections use them");
    } else {
      TRAINSUP_LOG_ERROR("SIGHUP: %s; serving the previous certificates", reloaded.message());
    }
  }
  TRAINSUP_LOG_INFO("%s received; shutting down", signal_number == SIGINT ? "SIGINT" : "SIGTERM");
  return signal_number;
}

// Says once, at start, what a trainsupd without --state loses when it
// stops: nothing else would tell, until the restart that loses it.
void WarnIfStateless(const trainsup::ServerOptions& options, bool elected) {
  if (!options.state_path.empty()) {
    TRAINSUP_LOG_INFO("state store %s", options.state_path);
  } else if (elected) {
    TRAINSUP_LOG_WARN("no --state: this instance's own history (events, stacks, provenance) is "
                      "kept in memory only and lost when it stops; the decisions are shared "
                      "through etcd");
  } else {
    TRAINSUP_LOG_WARN("no --state: jobs, events, quarantines, the failure history (the MTBF) "
                      "and provenance are kept in memory only and lost when trainsupd stops; "
                      "--state PATH keeps them in SQLite");
  }
}

// trainsupd under an election (--etcd-endpoints, --instance): a standby
// until elected; on SIGTERM it stops acting and resigns before it stops.
int RunElected(const trainsup::ServerOptions& options, const trainsup::HaOptions& ha,
               const trainsup::Clock* clock, sigset_t* signals) {
  using namespace trainsup;
  absl::StatusOr<std::unique_ptr<HaServer>> server = HaServer::Start(options, ha, clock);
  if (!server.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(server.status().message()).c_str());
    return ExitCodeForStart(server.status());
  }
  TRAINSUP_LOG_INFO("listening grpc=%s metrics=%s (standby until elected)",
                    (*server)->grpc_address(),
                    (*server)->metrics_address().empty() ? "off" : (*server)->metrics_address());
  WarnIfStateless(options, /*elected=*/true);
  AwaitTermination(signals, [&] { return (*server)->ReloadCertificates(); });
  (*server)->Shutdown();
  TRAINSUP_LOG_INFO("stopped");
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace trainsup;
  SetLogProgramName("trainsupd");
  // Debian's Abseil is built with deadlock detection on: every Mutex lock
  // then updates a global lock graph, ~10 % of trainsupd's CPU at 12,500
  // agent streams. The tests keep it on; the daemon does without.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // glibc's allocator, for a daemon with some 30 threads and a read model
  // copied a few times a second: two arenas, not one per thread that ever
  // allocated (8 x cores), each keeping what it freed; and a block of 128
  // KiB or more always mapped on its own, so that a snapshot's big vectors
  // go back to the kernel when the snapshot goes (the default threshold
  // rises with each such free until they stay in the heap). At 100,000
  // ranks: 7,922 and 7,965 bytes a rank instead of 8,228-8,329, no CPU
  // measurably added (docs/benchmarks.md, "Operator calls at 100,000 ranks").
  mallopt(M_ARENA_MAX, 2);
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);

  ServerOptions options;
  int step_window = static_cast<int>(options.core.step_window);
  bool verbose = false;
  CLI::App app{"trainsupd: supervises distributed PyTorch training jobs.", "trainsupd"};
  ConfigureApp(app, VersionLine("trainsupd"),
               "Exit codes: 0 stopped by SIGTERM or SIGINT; 1 could not start (an address in use,\n"
               "the state store locked or unreadable; the error line says why); 2 bad usage or\n"
               "configuration (an option, or a file it names).");
  app.add_option("--listen", options.listen,
                 "gRPC address for agents and trainsupctl (port 0: any free port)")
      ->capture_default_str()->type_name("HOST:PORT")->check(HostPortValidator());
  app.add_option("--metrics-listen", options.metrics_listen,
                 "Prometheus /metrics address; empty disables it")
      ->capture_default_str()->type_name("HOST:PORT")->check(HostPortValidator(true));
  app.add_option("--state", options.state_path,
                 "SQLite state store: quarantine, failures, restarts, job states and events "
                 "survive a restart (empty: kept in memory only)");
  app.add_option("--step-window", step_window,
                 "step durations kept per rank for p50/p99")
      ->capture_default_str()->check(CLI::Range(8, 65536));
  app.add_option("--metrics-max-ranks", options.metrics.max_ranks_per_job,
                 "export per-rank series only for jobs with at most this many ranks")
      ->capture_default_str()->check(WholeNumberValidator(0));
  app.add_option("--metrics-max-ranks-total", options.metrics.max_ranks_total,
                 "and per-rank series of at most this many ranks over all jobs (whole jobs, "
                 "by job id)")
      ->capture_default_str()->check(WholeNumberValidator(0));
  AddDurationOption(app, "--sweep-interval", &options.sweep_interval,
                    "how often the detectors run (detection lags a condition by at most this)",
                    DurationBound::kPositive);
  SupervisorOptions& core = options.core;
  AddDurationOption(app, "--stall-floor", &core.stall.floor,
                    "a job is stalled after max(floor, factor x p99 step time) without progress");
  app.add_option("--stall-factor", core.stall.factor, "see --stall-floor")
      ->capture_default_str()->check(PositiveValidator());
  AddDurationOption(app, "--startup-grace", &core.stall.startup_grace,
                    "stall threshold before a generation's first step (imports, rendezvous, loading)");
  AddDurationOption(app, "--start-timeout", &core.start_timeout,
                    "a generation whose command runs and of which no rank reported by then (a "
                    "rendezvous that cannot complete, an import that hangs) is a failure: "
                    "start_timeout, restarted like any other", DurationBound::kPositive);
  AddDurationOption(app, "--checkpoint-grace", &core.stall.checkpoint_grace,
                    "stall threshold at least this while a rank is blocked in a checkpoint");
  AddDurationOption(app, "--exit-grace", &core.stall.exit_grace,
                    "stall threshold at least this while a rank said it is exiting and has not "
                    "ended (its teardown after sys.exit or the script's end)");
  AddDurationOption(app, "--crash-settle", &core.crash.settle,
                    "wait this long for all agents' reports before naming a crash's first death");
  AddDurationOption(app, "--crash-culprit-wait", &core.crash.culprit_wait,
                    "while only victims of a peer's failure have failed and ranks still run, wait "
                    "up to this long for the rank that failed on its own (it may be tearing down)");
  AddDurationOption(app, "--node-lost-after", &core.node_loss.lost_after,
                    "an agent not heard for this long is unreachable: an event, its ranks "
                    "unknown; the job is stopped only if it then fails or stalls (never before 3 "
                    "of its report intervals)");
  app.add_option("--report-budget", core.cadence.budget,
                 "reports per second wanted from all agents together: each agent is told to "
                 "report every (agents connected / budget), within the bounds below; 0: agents "
                 "keep their own --report-interval")
      ->capture_default_str()->check(NumberValidator(0, 1e9));
  AddDurationOption(app, "--min-report-interval", &core.cadence.min_interval,
                    "the shortest report interval agents are told");
  AddDurationOption(app, "--max-report-interval", &core.cadence.max_interval,
                    "the longest report interval agents are told");
  app.add_option("--straggler-window", core.straggler.window,
                 "steps per straggler window (each rank's p99 compute time over its last N steps)")
      ->capture_default_str()->check(CLI::Range(4, 100000));
  app.add_option("--straggler-ratio", core.straggler.ratio,
                 "slow when p99 > ratio x the job's median p99 (and beyond 3 MADs of it)")
      ->capture_default_str()->check(NumberValidator(1, 1000));
  app.add_option("--straggler-windows", core.straggler.persistence,
                 "consecutive windows that must agree to flag (and to clear) a straggler")
      ->capture_default_str()->check(CLI::Range(1, 1000));
  AddSignalOptions(app, core.signals);
  app.add_option("--event-log-size", core.event_log_size, "events kept in memory")
      ->capture_default_str()->check(CLI::Range(1, 10000000));
  app.add_option("--restart-limit", core.restart.limit,
                 "at most this many restarts of a job within --restart-window; then it is held")
      ->capture_default_str()->check(CLI::Range(0, 1000000));
  AddDurationOption(app, "--restart-window", &core.restart.window, "see --restart-limit");
  AddDurationOption(app, "--restart-backoff", &core.restart.backoff_initial,
                    "wait before a restart; doubles with each restart in the window");
  AddDurationOption(app, "--restart-backoff-max", &core.restart.backoff_max,
                    "cap of the restart backoff");
  AddDurationOption(app, "--stop-timeout", &core.stop_timeout,
                    "wait at most this long for every agent to stop before restarting anyway");
  AddDurationOption(app, "--stop-grace", &core.stop_grace,
                    "agents SIGKILL a stopping command after this long");
  app.add_option("--quarantine-after", core.quarantine.after,
                 "quarantine a node with this many failures attributed within --quarantine-window")
      ->capture_default_str()->check(CLI::Range(1, 1000000));
  AddDurationOption(app, "--quarantine-window", &core.quarantine.window,
                    "see --quarantine-after");
  app.add_option("--quarantine-max-fraction", core.quarantine.max_fraction,
                 "never quarantine more than this fraction of known nodes (yet always allow one)")
      ->capture_default_str()->check(NumberValidator(0, 1));
  app.add_option_function<std::string>(
         "--mtbf-prior",
         [&core](const std::string& text) {
           absl::StatusOr<absl::Duration> d = ParseDurationOption(text);
           if (!d.ok() || *d <= absl::ZeroDuration()) {
             throw CLI::ValidationError("--mtbf-prior must be a positive duration, e.g. 24h");
           }
           core.mtbf.prior_seconds = absl::ToDoubleSeconds(*d);
         },
         "the MTBF prior: one pseudo-failure over this much running time, so that a young "
         "cluster is not told its MTBF is infinite")
      ->type_name("DURATION")->default_str("24h");
  AddDurationOption(app, "--checkpoint-cost-prior", &core.checkpoint_cost_prior,
                    "C until a job has reported its own checkpoints (hb.checkpointing)");
  AddDurationOption(app, "--restart-cost-prior", &core.restart_cost_prior,
                    "R until a job has been restarted once");
  AddDurationOption(app, "--plan-horizon", &core.publish.horizon,
                    "a new checkpoint plan takes effect this far ahead (at least 5 steps)");
  app.add_option("--replan-threshold", core.publish.replan_threshold,
                 "publish a new plan only when the interval moves by more than this fraction")
      ->capture_default_str()->check(NumberValidator(0, 10));
  bool no_plan = false;
  app.add_flag("--no-checkpoint-plan", no_plan, "do not publish checkpoint plans");
  app.add_flag("--observe-only", core.observe_only,
               "detect and report only: never stop, restart or quarantine; agents exit with "
               "their command's code (to roll trainsup out, or to watch a job on its own)");
  app.add_option("--fence-command", options.fence_command,
                 "run as `COMMAND NODE REASON` when a node is quarantined (e.g. to drain it in "
                 "Slurm or cordon it in Kubernetes); output and result become a `fence` event");
  app.add_option("--unfence-command", options.unfence_command,
                 "run as `COMMAND NODE REASON` when an operator lifts a node's quarantine, after "
                 "its fence (e.g. to resume it in Slurm); output and result become an `unfence` "
                 "event");
  AddDurationOption(app, "--fence-timeout", &options.fence_timeout,
                    "kill the fence or unfence command after this long");
  // Security: docs/security.md.
  app.add_option("--tls-cert", options.tls.cert_file,
                 "PEM certificate chain of trainsupd: serve TLS (with --tls-key); re-read on SIGHUP")
      ->type_name("FILE");
  app.add_option("--tls-key", options.tls.key_file, "PEM private key of --tls-cert")
      ->type_name("FILE");
  app.add_option("--tls-client-ca", options.tls.client_ca_file,
                 "PEM CA bundle of agents' and operators' certificates: require mutual TLS; an "
                 "agent's certificate must name its node")
      ->type_name("FILE");
  app.add_option("--operator-token-file", options.operator_token_file,
                 "file holding a bearer token that allows operator changes (needs TLS)")
      ->type_name("FILE");
  app.add_flag("--insecure", options.insecure,
               "allow plain text on a non-loopback --listen (anyone who reaches it may "
               "quarantine nodes and stop jobs)");
  // Bounds on what clients can make trainsupd hold (docs/limits.md).
  app.add_option("--max-jobs", core.limits.max_jobs,
                 "jobs held in memory at once; a hello for a new job past it is refused")
      ->capture_default_str()->check(CLI::Range(1, 10000000));
  app.add_option("--max-nodes", core.limits.max_nodes,
                 "nodes held in memory at once; a hello from a new node past it is refused")
      ->capture_default_str()->check(CLI::Range(1, 10000000));
  app.add_option("--max-world-size", core.limits.max_world_size,
                 "largest world size a heartbeat may claim (bigger ones are refused, counted)")
      ->capture_default_str()->check(CLI::Range(1u, kMaxWorldSize));
  AddDurationOption(app, "--job-retention", &core.limits.job_retention,
                    "a job (and a node) no agent spoke for in this long leaves memory; its "
                    "records stay in the state store");
  AddDurationOption(app, "--history-retention", &options.history_retention,
                    "the state store's failures, restarts, events, stacks and ended jobs older "
                    "than this are deleted");
  CLI::Option* max_agents =
      app.add_option("--max-agents", options.streams.max_streams,
                     "agent streams open at once; past it new streams are refused. Kept below "
                     "what the descriptor limit allows (a larger value is lowered, with a "
                     "warning; docs/limits.md)")
          ->capture_default_str()->check(CLI::Range(1, 10000000));
  app.add_option("--max-stream-outbox", options.streams.max_outbox,
                 "messages queued to an agent that does not read; past it its stream is ended")
      ->capture_default_str()->check(CLI::Range(16, 10000000));
  std::string verdict_table;
  app.add_option("--verdict-table", verdict_table,
                 "a file of verdict rules, one a line (# comments), on top of the defaults; see "
                 "--verdict")
      ->check(CLI::ExistingFile);
  std::vector<std::string> verdict_rules;
  app.add_option("--verdict", verdict_rules,
                 "what to do when a failing rank ended with an exit code or an exception type: "
                 "exit:CODE=ACTION or exception:TYPE=ACTION, ACTION one of restart-elsewhere, "
                 "transient, stop, default (no verdict); repeatable, after --verdict-table. "
                 "Defaults: exit:16=restart-elsewhere, exit:17=transient (Megatron-LM), "
                 "exception:LossSpikeError=stop, exception:HighLossError=stop (llm-foundry)")
      ->type_name("RULE")->allow_extra_args(false);
  std::vector<std::string> xid_actions;
  app.add_option("--xid-action", xid_actions,
                 "what to do on an Xid a node's GPU driver reports, against NVIDIA's catalog "
                 "(docs/gpu.md): CODE=ACTION, ACTION one of leave (quarantine the node at once), "
                 "drain (after its generation), workload (its next crash is not the node's), "
                 "report; repeatable")
      ->type_name("CODE=ACTION")->allow_extra_args(false);
  // Leader election through etcd (docs/ha.md).
  HaOptions ha;
  app.add_option("--etcd-endpoints", ha.etcd.endpoints,
                 "etcd's client addresses, HOST:PORT,...: campaign for leadership with the other "
                 "trainsupd of the same etcd, and act only while leading (needs --instance)")
      ->delimiter(',')->type_name("ADDRS");
  app.add_option("--instance", ha.instance,
                 "this trainsupd's name in the election (with --etcd-endpoints)")
      ->type_name("NAME");
  app.add_option("--advertise-address", ha.advertise,
                 "the gRPC address the election names for this instance, which agents and "
                 "trainsupctl follow to it: HOST:PORT, or HOST with the port of --listen "
                 "(default: --listen's address; needed when it is 0.0.0.0)")
      ->type_name("ADDR");
  app.add_option("--etcd-tls-ca", ha.etcd.tls.ca_file,
                 "PEM bundle of the CA that signed etcd's certificates: TLS to etcd (https)")
      ->type_name("FILE");
  app.add_option("--etcd-tls-cert", ha.etcd.tls.cert_file,
                 "this trainsupd's client certificate for etcd (PEM; etcd --client-cert-auth)")
      ->type_name("FILE");
  app.add_option("--etcd-tls-key", ha.etcd.tls.key_file, "the key of --etcd-tls-cert (PEM)")
      ->type_name("FILE");
  app.add_option("--etcd-tls-server-name", ha.etcd.tls.server_name,
                 "the name expected in etcd's certificate, when not the endpoint's host")
      ->type_name("NAME");
  AddDurationOption(app, "--etcd-lease-ttl", &ha.etcd.ttl,
                    "the election lease's TTL (at least 2s): a standby takes over within about "
                    "this long after the leader dies; renewed every TTL/3");
  app.add_flag("-v,--verbose", verbose, "log debug lines");
  if (int code = ParseOrExitCode(app, argc, argv); code >= 0) return code;
  if (absl::Status table = AddVerdictRules(verdict_table, verdict_rules, &core.verdicts);
      !table.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(table.message()).c_str());
    return kExitUsage;
  }
  if (absl::StatusOr<XidCatalog> catalog = XidCatalog::WithOverrides(xid_actions); catalog.ok()) {
    core.xid_catalog = *std::move(catalog);
  } else {
    std::fprintf(stderr, "error: %s\n", std::string(catalog.status().message()).c_str());
    return kExitUsage;
  }
  if (ha.etcd.endpoints.empty() != ha.instance.empty()) {
    std::fprintf(stderr, "error: --etcd-endpoints and --instance go together\n");
    return kExitUsage;
  }
  if (!ha.advertise.empty() && ha.instance.empty()) {
    std::fprintf(stderr, "error: --advertise-address needs --etcd-endpoints and --instance\n");
    return kExitUsage;
  }
  options.core.step_window = static_cast<size_t>(step_window);
  options.core.plan_checkpoints = !no_plan;
  SetLogVerbose(verbose);
  InstallGrpcLogHook();
  ApplyDescriptorLimit(max_agents->count() > 0, &options.streams.max_streams);

  sigset_t signals = BlockHandledSignals();
  MonotonicClock clock;
  if (!ha.instance.empty()) return RunElected(options, ha, &clock, &signals);
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options, &clock);
  if (!server.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(server.status().message()).c_str());
    return ExitCodeForStart(server.status());
  }
  TRAINSUP_LOG_INFO("listening grpc=%s metrics=%s", (*server)->grpc_address(),
                    (*server)->metrics_address().empty() ? "off" : (*server)->metrics_address());
  WarnIfStateless(options, /*elected=*/false);

  AwaitTermination(&signals, [&] { return (*server)->ReloadCertificates(); });
  (*server)->Shutdown();
  TRAINSUP_LOG_INFO("stopped");
  return kExitOk;
}
