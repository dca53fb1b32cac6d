// trainsupd: the trainsup supervisor.
#include <csignal>
#include <cstdio>
#include <string>

#include "common/cli_options.h"
#include "common/log.h"
#include "daemon/server.h"

namespace {

// Blocks SIGTERM and SIGINT in every thread (call before starting any), so
// that the main thread can wait for them with sigwait.
sigset_t BlockShutdownSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace trainsup;
  SetLogProgramName("trainsupd");

  ServerOptions options;
  int step_window = static_cast<int>(options.core.step_window);
  bool verbose = false;
  CLI::App app{"trainsupd: supervises distributed PyTorch training jobs.", "trainsupd"};
  app.footer(ExitCodesHelp());
  app.set_version_flag("--version", TRAINSUP_VERSION);
  app.add_option("--listen", options.listen,
                 "gRPC address for agents and trainsupctl (port 0: any free port)")
      ->capture_default_str()->type_name("HOST:PORT")->check(HostPortValidator());
  app.add_option("--metrics-listen", options.metrics_listen,
                 "Prometheus /metrics address; empty disables it")
      ->capture_default_str();
  app.add_option("--state", options.state_path,
                 "SQLite state store (reserved for the persistence of a later release)");
  app.add_option("--step-window", step_window,
                 "step durations kept per rank for p50/p99")
      ->capture_default_str()->check(CLI::Range(8, 65536));
  app.add_option("--metrics-max-ranks", options.metrics.max_ranks_per_job,
                 "export per-rank series only for jobs with at most this many ranks")
      ->capture_default_str();
  app.add_flag("-v,--verbose", verbose, "log debug lines");
  if (int code = ParseOrExitCode(app, argc, argv); code >= 0) return code;
  options.core.step_window = static_cast<size_t>(step_window);
  SetLogVerbose(verbose);

  sigset_t signals = BlockShutdownSignals();
  MonotonicClock clock;
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options, &clock);
  if (!server.ok()) {
    TRAINSUP_LOG_ERROR("%s", server.status().message());
    std::fprintf(stderr, "error: %s\n", std::string(server.status().message()).c_str());
    return kExitFailure;
  }
  TRAINSUP_LOG_INFO("listening grpc=%s metrics=%s", (*server)->grpc_address(),
                    (*server)->metrics_address().empty() ? "off" : (*server)->metrics_address());
  if (!options.state_path.empty()) {
    TRAINSUP_LOG_INFO("--state %s accepted; persistence is not implemented yet", options.state_path);
  }

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  TRAINSUP_LOG_INFO("%s received; shutting down", signal_number == SIGINT ? "SIGINT" : "SIGTERM");
  (*server)->Shutdown();
  TRAINSUP_LOG_INFO("stopped");
  return kExitOk;
}
