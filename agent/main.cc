// trainsup-agent: runs a training command on one node under trainsupd.
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "agent/agent.h"
#include "common/cli_options.h"
#include "common/log.h"
#include "common/limits.h"
#include "common/verdict_rule.h"
#include "common/version.h"

namespace {

// The index of the first `--` in argv, or argc when there is none.
int SeparatorIndex(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--") return i;
  }
  return argc;
}

std::string Hostname() {
  char name[256] = {0};
  if (gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace trainsup;
  SetLogProgramName("trainsup-agent");
  BlockAgentSignals();  // before any thread starts

  AgentOptions options;
  options.node = Hostname();
  if (const char* env = std::getenv("TRAINSUP_SUPERVISOR"); env != nullptr) options.supervisor = env;
  bool verbose = false;

  CLI::App app{"trainsup-agent: runs a training command (normally torchrun) on this node under "
               "trainsupd.",
               "trainsup-agent"};
  ConfigureApp(app, VersionLine("trainsup-agent"),
               "Exit codes: the command's own (128+N when signal N killed it); 1 the agent failed\n"
               "(the error line says why); 2 bad usage; 75 this node is quarantined (do not\n"
               "reschedule the work here); 76 another agent serves this --node, nothing was\n"
               "launched; 77 --fail-mode closed and no supervisor by --connect-timeout, nothing\n"
               "was launched.");
  app.require_subcommand(1);
  CLI::App* run = app.add_subcommand(
      "run",
      "run COMMAND (after --; torchrun gets --max_restarts=0) under the supervisor: launch, "
      "report its ranks, stop and relaunch it as the supervisor decides; exit with COMMAND's "
      "exit code, 75 when this node is quarantined, 76 when another agent serves this --node, "
      "or 77 when --fail-mode is closed and no supervisor answered");
  run->add_option("--supervisor", options.supervisor,
                  "trainsupd gRPC address, or the addresses of trainsupd under an election, "
                  "comma-separated: the agent finds the leader and follows it across failovers "
                  "(default: $TRAINSUP_SUPERVISOR)")
      ->type_name("HOST:PORT[,HOST:PORT...]")->check(SupervisorListValidator());
  AddClientTlsOptions(*run, &options.tls);
  run->add_option("--job", options.job, "job id: 1..128 characters of [A-Za-z0-9._-]")->required();
  run->add_option("--node", options.node, "node name (default: the hostname)")
      ->capture_default_str();
  AddDurationOption(*run, "--report-interval", &options.report_interval,
                    "how often a report (the heartbeats batched since the last) goes to the "
                    "supervisor, news or not", DurationBound::kPositive);
  AddDurationOption(*run, "--stop-grace", &options.timeouts.stop_grace,
                    "after forwarding SIGTERM/SIGINT, SIGKILL the command after this long");
  AddDurationOption(*run, "--reconnect-max", &options.reconnect_max,
                    "cap of the reconnect backoff when the supervisor is away");
  AddDurationOption(*run, "--connect-timeout", &options.timeouts.connect_timeout,
                    "at start, wait this long for the supervisor's go before launching anyway "
                    "(--fail-mode open) or exiting 77 (closed); a supervisor that says another "
                    "agent serves this --node has the agent exit 76 at once");
  std::string fail_mode = "open";
  run->add_option("--fail-mode", fail_mode,
                  "without a word from the supervisor by --connect-timeout: open launches the "
                  "command anyway, UNSUPERVISED (no detection, restart or checkpoint plan until "
                  "the supervisor answers; logged as an error); closed launches nothing and "
                  "exits 77")
      ->capture_default_str()->envname("TRAINSUP_FAIL_MODE")
      ->check(CLI::IsMember({"open", "closed"}));
  AddDurationOption(*run, "--decision-timeout", &options.timeouts.decision_timeout,
                    "after the command failed or was stopped, wait this long for the supervisor's "
                    "decision (restart, hold, quarantine) before exiting with its code");
  AddDurationOption(*run, "--hold-timeout", &options.timeouts.hold_timeout,
                    "while the job is held, wait this long for `trainsupctl resume` before exiting");
  run->add_option("--max-backlog", options.max_backlog,
                  "heartbeats kept while the supervisor is away (oldest dropped beyond)")
      ->capture_default_str()->check(CLI::Range(1, 1 << 24));
  run->add_option("--socket-dir", options.socket_parent,
                  "parent of the private rank-socket directory (default: $XDG_RUNTIME_DIR or /tmp)");
  CLI::Option* drain = AddDurationOption(
      *run, "--drain-interval", &options.drain_interval,
      "while ranks send, read their socket this often instead of waking for each datagram (which "
      "costs the sending rank); 0s: for each. Used only where net.unix.max_dgram_qlen is 47 or "
      "more, unless given");
  run->add_option("--min-nodes", options.min_nodes,
                  "the fewest nodes the job runs on, for the supervisor to leave a node out of a "
                  "restart (a restart-elsewhere verdict); default: torchrun's --nnodes MIN[:MAX]")
      ->check(CLI::Range(1, 1 << 20));
  run->add_option("--verdict", options.verdict_rules,
                  "the job's own verdict rule, before trainsupd's: exit:CODE=ACTION or "
                  "exception:TYPE=ACTION, ACTION one of restart-elsewhere, transient, stop, "
                  "default; repeatable")
      ->type_name("RULE")->allow_extra_args(false);
  run->add_option("--provenance-env", options.provenance.env_patterns,
                  "record these environment variables too in each generation's provenance "
                  "(fnmatch patterns, e.g. 'MY_*'; beside CUDA_VISIBLE_DEVICES, NCCL_*, TORCH_*, "
                  "OMP_NUM_THREADS, PYTHONPATH); names holding TOKEN, SECRET, KEY or PASSWORD are "
                  "never recorded; repeatable")
      ->type_name("GLOB")->allow_extra_args(false);
  run->add_option("--advertise-address", options.advertise_address,
                  "the address this node's peers reach it on: trainsupd then decides where each "
                  "generation's torchrun rendezvous meets (moving it off a lost node) and the "
                  "agent rewrites --rdzv_endpoint and is_host (c10d) or --master_addr, "
                  "--master_port and --node_rank (static) for it; default: the command's own "
                  "rendezvous arguments always apply")
      ->type_name("HOST")->envname("TRAINSUP_ADVERTISE_ADDRESS");
  run->add_option("--rendezvous-port", options.rendezvous_port,
                  "with --advertise-address: the port a rendezvous store on this node listens on "
                  "(default: a free port found at start)")
      ->check(CLI::Range(1, 65535));
  run->add_option("--kernel-log", options.kernel_log,
                  "follow this kernel log for the NVIDIA driver's Xid lines, from what is written "
                  "after the start (docs/gpu.md): /dev/kmsg (read as it is readable), a file "
                  "that grows, or none")
      ->capture_default_str()->type_name("PATH");
  run->add_option("--nvidia-smi", options.nvidia_smi,
                  "asked once at start which GPU is at which PCI address, to name the GPU and "
                  "ranks of an Xid: a path, a name on PATH, or none")
      ->capture_default_str()->type_name("PATH");
  run->add_option("--dcgm-exporter", options.dcgm_exporter,
                  "read the GPUs' health (clock event reasons, uncorrectable ECC errors, "
                  "remapped rows) from this dcgm-exporter /metrics URL as well as from "
                  "nvidia-smi -q (docs/gpu.md), e.g. http://127.0.0.1:9400/metrics; default: none")
      ->type_name("URL");
  AddDurationOption(*run, "--gpu-health-interval", &options.gpu_health_interval,
                    "how often the GPUs' health is read (nvidia-smi -q, --dcgm-exporter); 0 "
                    "reads none");
  run->add_option("--dcgm-job-mapping-dir", options.dcgm_job_mapping_dir,
                  "write dcgm-exporter's HPC job-mapping files here (one a GPU, named by its "
                  "index, holding the job id) at each generation, so the exporter labels the "
                  "GPUs' series with the job (docs/gpu.md); default: none")
      ->type_name("DIR");
  run->add_option("--preflight", options.preflight,
                  "a health check run with /bin/sh -c before the node joins (docs/gpu.md), e.g. "
                  "'dcgmi diag -r 1': a node whose check fails never joins and is quarantined "
                  "with its output; default: none")
      ->type_name("CMD");
  AddDurationOption(*run, "--preflight-timeout", &options.preflight_timeout,
                    "the preflight's time limit: past it the check is killed and failed",
                    DurationBound::kPositive);
  run->add_option("command", options.command, "the command to run, after --");
  app.add_flag("-v,--verbose", verbose, "log debug lines");
  // The command is what follows `--`, set aside before parsing: CLI11 would
  // take a stray word before `--` as the command's first word, then call
  // the real command unexpected ("`true` was not expected").
  const int separator = SeparatorIndex(argc, argv);
  if (int code = ParseOrExitCode(app, separator, argv); code >= 0) return code;
  if (separator < argc) {
    if (!options.command.empty()) {
      return UsageErrorExit(absl::StrCat("unexpected argument '", options.command.front(),
                                         "' (the command to run comes after --)"));
    }
    options.command.assign(argv + separator + 1, argv + argc);
  }
  if (options.command.empty()) return UsageErrorExit("no command to run: give it after --");
  SetLogVerbose(verbose);
  options.timeouts.fail_closed = fail_mode == "closed";
  options.drain_forced = drain->count() > 0;

  if (options.supervisor.empty()) {
    std::fprintf(stderr, "error: --supervisor or $TRAINSUP_SUPERVISOR is required\n");
    return kExitUsage;
  }
  if (absl::StatusOr<SupervisorAddresses> list = SupervisorAddresses::Parse(options.supervisor);
      !list.ok()) {
    std::fprintf(stderr, "error: --supervisor: %s\n", std::string(list.status().message()).c_str());
    return kExitUsage;
  }
  if (!IsValidName(options.job) || !IsValidName(options.node)) {
    std::fprintf(stderr, "error: job and node must be 1..%zu characters of [A-Za-z0-9._-]\n",
                 kMaxNameLength);
    return kExitUsage;
  }
  if (absl::Status rules = CheckJobVerdictRules(options.verdict_rules); !rules.ok()) {
    std::fprintf(stderr, "error: --verdict: %s\n", std::string(rules.message()).c_str());
    return kExitUsage;
  }
  // Bad TLS files are a usage error now, not a warning at every reconnect.
  if (absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
          MakeChannelCredentials(options.tls, "");
      !credentials.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(credentials.status().message()).c_str());
    return kExitUsage;
  }
  Agent agent(std::move(options));
  return agent.Run();
}
