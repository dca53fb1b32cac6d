// trainsup-sim: what a supervision policy would have cost, replayed through
// trainsup's own rules on a simulated clock (docs/simulator.md).
//
//   trainsup-sim run [--ranks 16384,100000] [--trace FILE] [policy lists...]
//   trainsup-sim trace [--ranks N] [--days D] [--seed S]     (CSV on stdout)
//   trainsup-sim stragglers [--ranks 8,64,...] [--sigma S]

#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/str_join.h"
#include "cli/render.h"
#include "cli/table.h"
#include "common/cli_options.h"
#include "common/version.h"
#include "sim/failure_trace.h"
#include "sim/goodput_sim.h"
#include "sim/stragglers.h"
#include "trainsup/v1/calculators.pb.h"

namespace trainsup::sim {
namespace {

bool ParseList(const std::string& text, std::vector<uint64_t>* out) {
  out->clear();
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    uint64_t v = 0;
    if (!absl::SimpleAtoi(part, &v)) return false;
    out->push_back(v);
  }
  return !out->empty();
}

// "planned" or a fixed interval in seconds.
bool ParseIntervals(const std::string& text, std::vector<std::optional<double>>* out) {
  out->clear();
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    double v = 0;
    if (part == "planned") {
      out->push_back(std::nullopt);
    } else if (absl::SimpleAtod(part, &v) && v > 0) {
      out->push_back(v);
    } else {
      return false;
    }
  }
  return !out->empty();
}

bool ParseYesNo(const std::string& text, std::vector<bool>* out) {
  out->clear();
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    if (part != "yes" && part != "no") return false;
    out->push_back(part == "yes");
  }
  return !out->empty();
}

std::string Hours(double seconds) { return absl::StrFormat("%.0f", seconds / 3600); }

int Usage(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return kExitUsage;
}

struct RunFlags {
  std::string ranks = "16384,100000";
  std::string trace_file;
  double days = 54;
  uint64_t seed = 1;
  double spare_fraction = 0.05;
  std::string quarantine_after = "3,0";
  double quarantine_window_hours = 1;
  std::string checkpoint = "planned,3600";
  std::string hot_spares = "no";
  std::string output = "table";
  SimJob job;
  TraceOptions trace;
  // The detectors' and the governor's options that every policy shares,
  // as trainsupd's flags of the same names set them.
  SimPolicy rules;
};

// One policy's figures, for `-o json` (seconds and counts).
v1::SimPolicyResult PolicyResult(uint64_t ranks, const std::string& checkpoint,
                                 const std::string& quarantine, bool hot_spares,
                                 const SimResult& res) {
  const SimLedger& l = res.ledger;
  v1::SimPolicyResult out;
  out.set_ranks(ranks);
  out.set_checkpoint(checkpoint);
  out.set_quarantine(quarantine);
  out.set_hot_spares(hot_spares);
  out.set_effective_fraction(l.effective_fraction());
  out.set_wall_seconds(l.wall);
  out.set_useful_seconds(l.useful);
  out.set_checkpoint_seconds(l.checkpoint);
  out.set_rework_seconds(l.rework);
  out.set_detection_seconds(l.detection);
  out.set_restart_seconds(l.restart);
  out.set_replacement_seconds(l.replacement);
  out.set_held_seconds(l.held);
  out.set_slow_seconds(l.slow);
  out.set_lost_seconds(l.lost());
  out.set_failures(res.failures);
  out.set_spikes(res.spikes);
  out.set_restarts(res.restarts);
  out.set_holds(res.holds);
  out.set_quarantines(res.quarantines);
  out.set_lemons_quarantined(res.lemons_quarantined);
  out.set_ignored(res.ignored);
  out.set_interval_seconds(res.mean_interval_seconds);
  for (const SimFailure& f : res.failure_log) {
    v1::SimFailureRecord* r = out.add_failure_log();
    r->set_time_seconds(f.time);
    r->set_kind(FailureKindName(f.kind));
    r->set_node(f.node == kNoNode ? -1 : static_cast<int64_t>(f.node));
    r->set_rework_seconds(f.rework);
    r->set_detection_seconds(f.detection);
    r->set_down_seconds(f.down);
  }
  return out;
}

int Run(RunFlags& f) {
  std::vector<uint64_t> ranks, quarantine_after;
  std::vector<std::optional<double>> intervals;
  std::vector<bool> spares;
  if (!ParseList(f.ranks, &ranks)) return Usage("--ranks: a list of rank counts, e.g. 16384,100000");
  if (!ParseList(f.quarantine_after, &quarantine_after)) {
    return Usage("--quarantine-after: a list of failure counts (0: no quarantine)");
  }
  if (!ParseIntervals(f.checkpoint, &intervals)) {
    return Usage("--checkpoint: a list of \"planned\" or intervals in seconds");
  }
  if (!ParseYesNo(f.hot_spares, &spares)) return Usage("--hot-spares: a list of yes and no");
  if (f.output != "table" && f.output != "json") return Usage("-o: table or json");
  const bool json = f.output == "json";
  const SimJob& j = f.job;
  if (j.gpus_per_node == 0 || !(j.step_seconds > 0) || !(j.checkpoint_seconds > 0) ||
      !(f.days > 0) || !(j.slow_factor >= 1) || !(j.restart_seconds >= 0) ||
      !(f.spare_fraction >= 0) || !(j.replace_minutes >= 0) || !(j.repair_hours >= 0) ||
      !(j.human_hours >= 0) || !(j.bug_fix_hours >= 0) || !(j.bug_refail_seconds > 0) ||
      !(j.sdc_detection_hours >= 0) || !(j.slow_hours >= 0) || !(j.hang_stop_seconds >= 0) ||
      !(f.quarantine_window_hours > 0)) {
    return Usage("--gpus-per-node, --step-seconds, --checkpoint-seconds, --days, "
                 "--bug-refail-seconds and --quarantine-window-hours must be > 0, "
                 "--slow-factor >= 1, and the other times >= 0");
  }
  std::vector<FailureEvent> file_trace;
  if (!f.trace_file.empty()) {
    std::ifstream in(f.trace_file);
    std::stringstream text;
    text << in.rdbuf();
    if (!in) return Usage(absl::StrCat("cannot read the trace ", f.trace_file));
    absl::StatusOr<std::vector<FailureEvent>> parsed = ParseTraceCsv(text.str());
    if (!parsed.ok()) return Usage(std::string(parsed.status().message()));
    file_trace = *std::move(parsed);
  }

  Table table({"RANKS", "CHECKPOINT", "QUARANTINE", "HOT_SPARES", "EFFECTIVE", "USEFUL_H",
               "CHECKPOINT_H", "REWORK_H", "DOWN_H", "HELD_H", "FAILURES", "SPIKES", "RESTARTS",
               "HOLDS", "QUARANTINED", "LEMONS", "INTERVAL_S"});
  v1::SimRunResult json_result;
  double simulated_hours = 0;
  const std::clock_t cpu_start = std::clock();
  for (uint64_t r : ranks) {
    SimJob job = f.job;
    job.days = f.days;
    job.nodes = static_cast<uint32_t>((r + job.gpus_per_node - 1) / job.gpus_per_node);
    TraceOptions topt = f.trace;
    topt.days = f.days;
    topt.seed = f.seed;
    topt.nodes = static_cast<uint32_t>(job.nodes * (1 + f.spare_fraction) + 0.5);
    const std::vector<FailureEvent> trace = f.trace_file.empty() ? GenerateTrace(topt) : file_trace;
    const std::vector<uint32_t> lemons = f.trace_file.empty() ? LemonNodes(topt)
                                                              : std::vector<uint32_t>{};
    if (!json) {
      std::printf("%llu ranks on %u nodes (%u in the cluster): %zu trace events%s\n",
                  static_cast<unsigned long long>(r), job.nodes, topt.nodes, trace.size(),
                  f.trace_file.empty() ? " drawn from Llama 3's rates" : " from the file");
    }
    for (const std::optional<double>& interval : intervals) {
      for (uint64_t after : quarantine_after) {
        for (bool hot : spares) {
          SimPolicy policy = f.rules;
          policy.fixed_interval_seconds = interval;
          policy.quarantine = after > 0;
          if (after > 0) policy.quarantine_options.after = static_cast<int>(after);
          policy.quarantine_options.window = absl::Hours(f.quarantine_window_hours);
          policy.hot_spares = hot;
          const SimResult res = Simulate(job, policy, trace, topt.nodes, lemons);
          const SimLedger& l = res.ledger;
          simulated_hours += l.wall / 3600;
          const std::string checkpoint =
              interval ? absl::StrFormat("%gs", *interval) : "planned";
          const std::string quarantine =
              after > 0 ? absl::StrFormat("%d/%.0fh", after, f.quarantine_window_hours) : "off";
          if (json) {
            *json_result.add_policies() = PolicyResult(r, checkpoint, quarantine, hot, res);
            continue;
          }
          table.AddRow({absl::StrCat(r), checkpoint, quarantine,
                        hot ? "yes" : "no", absl::StrFormat("%.2f%%", 100 * l.effective_fraction()),
                        Hours(l.useful), Hours(l.checkpoint), Hours(l.rework),
                        Hours(l.detection + l.restart + l.replacement), Hours(l.held),
                        absl::StrCat(res.failures), absl::StrCat(res.spikes),
                        absl::StrCat(res.restarts), absl::StrCat(res.holds),
                        absl::StrCat(res.quarantines), absl::StrCat(res.lemons_quarantined),
                        absl::StrFormat("%.0f", res.mean_interval_seconds)});
        }
      }
    }
  }
  const double cpu = static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC;
  if (json) {
    json_result.set_simulated_hours(simulated_hours);
    json_result.set_cpu_seconds(cpu);
    std::fputs(RenderJson(json_result).c_str(), stdout);
    return kExitOk;
  }
  std::printf("\n%s", table.Render().c_str());
  std::printf("\nsimulated %.0f job-hours in %.3f s of CPU (%.0f simulated hours per CPU second)\n",
              simulated_hours, cpu, cpu > 0 ? simulated_hours / cpu : 0);
  return kExitOk;
}

}  // namespace
}  // namespace trainsup::sim

int main(int argc, char** argv) {
  using namespace trainsup::sim;  // NOLINT: one file, one namespace
  using trainsup::kExitOk;
  CLI::App app{"trainsup-sim: a goodput simulator on trainsup's own rules (docs/simulator.md)",
               "trainsup-sim"};
  trainsup::ConfigureApp(app, trainsup::VersionLine("trainsup-sim"),
                         "Exit codes: 0 ok; 2 bad usage (an option, or a trace file it cannot "
                         "read).");
  app.require_subcommand(1);

  RunFlags f;
  CLI::App* run = app.add_subcommand("run", "replay a failure trace through the policies");
  run->add_option("--ranks", f.ranks, "rank counts to simulate, a list")->capture_default_str();
  run->add_option("--trace", f.trace_file,
                  "CSV trace (time,node,kind[,cause[,deterministic]]) instead of Llama 3's rates");
  run->add_option("--days", f.days, "simulated days")->capture_default_str();
  run->add_option("--seed", f.seed, "the generated trace's seed")->capture_default_str();
  run->add_option("--spare-fraction", f.spare_fraction,
                  "nodes in the cluster beyond the job's, as a fraction of the job's")
      ->capture_default_str();
  run->add_option("--quarantine-after", f.quarantine_after,
                  "failures within the window that quarantine a node, a list (0: off)")
      ->capture_default_str();
  run->add_option("--quarantine-window-hours", f.quarantine_window_hours,
                  "the quarantine rule's window")
      ->capture_default_str();
  run->add_option("--checkpoint", f.checkpoint,
                  "\"planned\" (from the measured MTBF) or a fixed interval in seconds, a list")
      ->capture_default_str();
  run->add_option("--hot-spares", f.hot_spares,
                  "yes: a node that leaves is replaced at once; no: after --replace-minutes; a list")
      ->capture_default_str();
  run->add_option("--gpus-per-node", f.job.gpus_per_node)->capture_default_str();
  run->add_option("--step-seconds", f.job.step_seconds)->capture_default_str();
  run->add_option("--checkpoint-seconds", f.job.checkpoint_seconds, "C")->capture_default_str();
  run->add_option("--restart-seconds", f.job.restart_seconds, "R")->capture_default_str();
  run->add_option("--replace-minutes", f.job.replace_minutes)->capture_default_str();
  run->add_option("--repair-hours", f.job.repair_hours)->capture_default_str();
  run->add_option("--human-hours", f.job.human_hours, "a held job waits this long for a person")
      ->capture_default_str();
  run->add_option("--bug-fix-hours", f.job.bug_fix_hours)->capture_default_str();
  run->add_option("--bug-refail-seconds", f.job.bug_refail_seconds,
                  "a software bug fails again this long into each generation")
      ->capture_default_str();
  run->add_option("--sdc-detection-hours", f.job.sdc_detection_hours,
                  "silent data corruption is found this long after it happened")
      ->capture_default_str();
  run->add_option("--hang-stop-seconds", f.job.hang_stop_seconds,
                  "a hang's stop beyond R: stack collection and the stop grace")
      ->capture_default_str();
  run->add_option("--slow-hours", f.job.slow_hours)->capture_default_str();
  run->add_option("--slow-factor", f.job.slow_factor)->capture_default_str();
  trainsup::AddDurationOption(*run, "--crash-settle", &f.rules.crash.settle,
                    "a crash is detected this long after it (trainsupd's option)");
  trainsup::AddDurationOption(*run, "--stall-floor", &f.rules.stall.floor,
                    "a hang is detected after max(this, --stall-factor x the step time)");
  run->add_option("--stall-factor", f.rules.stall.factor, "see --stall-floor")
      ->capture_default_str();
  trainsup::AddDurationOption(*run, "--restart-backoff", &f.rules.restart.backoff_initial,
                    "the wait before the first restart in the window, doubling after");
  run->add_option("-o,--output", f.output, "table or json (seconds and counts)")
      ->capture_default_str();
  run->add_option("--lemon-fraction", f.trace.lemon_fraction)->capture_default_str();
  run->add_option("--lemon-factor", f.trace.lemon_factor)->capture_default_str();
  run->add_option("--loss-spikes", f.trace.loss_spikes, "loss spikes per run of --days")
      ->capture_default_str();

  uint64_t trace_ranks = 16384;
  TraceOptions trace_options;
  CLI::App* trace = app.add_subcommand("trace", "print a generated trace as CSV");
  trace->add_option("--ranks", trace_ranks)->capture_default_str();
  trace->add_option("--days", trace_options.days)->capture_default_str();
  trace->add_option("--seed", trace_options.seed)->capture_default_str();

  std::string straggler_ranks = "8,64,512,4096,16384,100000";
  double sigma = 0.05;
  int trials = 100;
  CLI::App* stragglers = app.add_subcommand(
      "stragglers", "throughput lost to the slowest rank, by rank count (log-normal step times)");
  stragglers->add_option("--ranks", straggler_ranks)->capture_default_str();
  stragglers->add_option("--sigma", sigma, "log-space standard deviation of a rank's step time")
      ->capture_default_str();
  stragglers->add_option("--trials", trials)->capture_default_str();

  if (int code = trainsup::ParseOrExitCode(app, argc, argv); code >= 0) return code;
  if (*run) return Run(f);
  if (*trace) {
    trace_options.nodes = static_cast<uint32_t>((trace_ranks + 7) / 8);
    std::fputs(TraceToCsv(GenerateTrace(trace_options)).c_str(), stdout);
    return kExitOk;
  }
  std::vector<uint64_t> ranks;
  if (!ParseList(straggler_ranks, &ranks) || sigma < 0 || trials < 1) {
    return Usage("--ranks: a list of rank counts; --sigma >= 0; --trials >= 1");
  }
  trainsup::Table table({"RANKS", "JOB_STEP", "THROUGHPUT_LOSS"});
  for (const StragglerPoint& p : StragglerLoss(ranks, sigma, trials, 1)) {
    table.AddRow({absl::StrCat(p.ranks), absl::StrFormat("%.3f", p.mean_step),
                  absl::StrFormat("%.1f%%", 100 * p.throughput_loss)});
  }
  std::printf("step times log-normal, median 1, sigma %g; the job steps at its slowest rank\n\n%s",
              sigma, table.Render().c_str());
  return kExitOk;
}
