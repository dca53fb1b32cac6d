// agent_load: simulated agents against the real trainsupd, over real gRPC
// (issue 11; docs/benchmarks.md "Agents at scale").
//
// N nodes x R ranks, each node one agent stream (hello, launcher status,
// rank processes, heartbeats on the report interval, plans held, stop and
// start obeyed), driven from --processes forked load processes; the parent
// only measures: offered vs taken heartbeats, heartbeat ages, trainsupd's
// CPU and memory, operator verbs' latencies and /metrics scrapes while the
// load runs, and the time to detect an injected hang or death. One table
// per run. Exit status 1 when the injected fault was not reported, or named
// the wrong rank or node, or a gate's budget (--max-verb-ratio,
// --max-bytes-per-rank) was exceeded.
//
// The parent forks its load processes before it creates anything of gRPC:
// a process that forks after gRPC started its threads cannot use gRPC in
// the child.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/load_node.h"
#include "bench/load_probe.h"
#include "bench/load_report.h"
#include "common/cli_options.h"
#include "common/log.h"

namespace trainsup {
namespace {

constexpr int64_t kNsPerS = 1'000'000'000;

struct Options {
  LoadConfig load;
  std::string spawn;                      // trainsupd binary to start, or empty
  std::vector<std::string> trainsupd_args;
  std::string supervisor;                 // else: one started elsewhere
  std::string metrics;
  int supervisor_pid = 0;
  int processes = 1;
  absl::Duration warmup = absl::Seconds(5);
  absl::Duration duration = absl::Seconds(20);
  absl::Duration fault_after = absl::InfiniteDuration();  // default: at the end of the steady phase
  absl::Duration detect_timeout = absl::Seconds(120);
  absl::Duration recovery_timeout = absl::Seconds(60);
  absl::Duration probe_pause = absl::Milliseconds(250);
  absl::Duration report_interval = absl::Milliseconds(200);
  std::string json;
  std::string trainsupctl;  // also time `trainsupctl jobs` as a new process
  // The gate (docs/benchmarks.md "The scale gate"); 0: off.
  double max_verb_ratio = 0;      // each verb's p99 / the unloaded ListEvents p99
  double max_bytes_per_rank = 0;  // trainsupd's steady RSS / ranks

  int64_t fault_rank() const { return load.hang_rank >= 0 ? load.hang_rank : load.kill_rank; }
};

double Seconds(int64_t ns) { return static_cast<double>(ns) / kNsPerS; }

void SleepUntil(int64_t wall_ns) {
  const int64_t left = wall_ns - WallNowNs();
  if (left > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(left));
}

// Descriptors: one TCP connection per simulated node (and trainsupd, when
// spawned, inherits the limit).
void RaiseFileLimit() {
  rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return;
  limit.rlim_cur = limit.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &limit) != 0) TRAINSUP_LOG_WARN("cannot raise RLIMIT_NOFILE");
}

// Lines over a socketpair between the parent and a load process.
class LineChannel {
 public:
  explicit LineChannel(int fd) : fd_(fd) {}
  int fd() const { return fd_; }
  void Send(const std::string& line) {
    const std::string data = line + "\n";
    size_t done = 0;
    while (done < data.size()) {
      const ssize_t n = write(fd_, data.data() + done, data.size() - done);
      if (n <= 0 && errno != EINTR) return;
      if (n > 0) done += static_cast<size_t>(n);
    }
  }
  // The next line, waiting until `deadline_ns`; nullopt on timeout or EOF.
  std::optional<std::string> Receive(int64_t deadline_ns) {
    for (;;) {
      const size_t eol = buffer_.find('\n');
      if (eol != std::string::npos) {
        std::string line = buffer_.substr(0, eol);
        buffer_.erase(0, eol + 1);
        return line;
      }
      const int64_t left_ms = (deadline_ns - WallNowNs()) / 1'000'000;
      if (left_ms < 0) return std::nullopt;
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(std::min<int64_t>(left_ms, 1000))) <= 0) continue;
      char chunk[4096];
      const ssize_t n = read(fd_, chunk, sizeof(chunk));
      if (n <= 0) return std::nullopt;
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }

 private:
  int fd_;
  std::string buffer_;
};

// What the load processes did, summed.
struct GeneratorCounts {
  double heartbeats = 0, reports = 0, late = 0, write_failures = 0, sessions = 0,
         sessions_ended = 0, welcomed = 0, stops = 0, starts = 0, plans = 0, cpu_seconds = 0,
         interval_s = 0;
  static constexpr int kFields = 12;
  void Add(const std::vector<double>& f) {
    double* fields[kFields] = {&heartbeats, &reports, &late,   &write_failures,
                               &sessions,   &sessions_ended, &welcomed, &stops,
                               &starts,     &plans,   &cpu_seconds, &interval_s};
    for (int i = 0; i < kFields && i < static_cast<int>(f.size()); ++i) *fields[i] += f[i];
  }
};

double SelfCpuSeconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// A load process: nodes [first, last), told what to do by the parent.
int LoadProcessMain(LineChannel parent, const LoadConfig& config, int first, int last) {
  LoadDriver driver(config, first, last);
  bool connecting = false;
  bool announced = false;
  int64_t connect_deadline = 0;
  for (;;) {
    std::optional<std::string> line = parent.Receive(WallNowNs() + 100'000'000);
    if (connecting && !announced) {
      const int welcomed = static_cast<int>(driver.counters().nodes_welcomed.load());
      if (welcomed == driver.node_count() || WallNowNs() > connect_deadline) {
        parent.Send(absl::StrCat("welcomed ", welcomed));
        announced = true;
      }
    }
    if (!line.has_value()) {
      if (getppid() == 1) break;  // the parent is gone
      continue;
    }
    std::vector<std::string> words = absl::StrSplit(*line, ' ');
    if (words[0] == "connect" && words.size() == 2) {
      driver.Start(words[1]);
      connecting = true;
      connect_deadline = WallNowNs() + static_cast<int64_t>(
          (30.0 + 3.0 * driver.node_count() / config.connect_rate) * kNsPerS);
    } else if (words[0] == "go" && words.size() == 3) {
      driver.Go(std::stoll(words[1]), std::stoll(words[2]));
    } else if (words[0] == "snap") {
      LoadCounters& c = driver.counters();
      parent.Send(absl::StrCat("snap ", c.heartbeats_sent.load(), " ", c.reports_sent.load(), " ",
                               c.reports_late.load(), " ", c.write_failures.load(), " ",
                               c.sessions.load(), " ", c.sessions_ended.load(), " ",
                               c.nodes_welcomed.load(), " ", c.stops.load(), " ", c.starts.load(),
                               " ", c.plans.load(), " ", SelfCpuSeconds(), " ",
                               driver.MeanIntervalSeconds() * driver.node_count()));
    } else if (words[0] == "stop") {
      break;
    }
  }
  driver.Shutdown();
  parent.Send("bye");
  return 0;
}

struct LoadProcess {
  pid_t pid;
  LineChannel channel;
};

std::vector<LoadProcess> ForkLoadProcesses(const Options& o) {
  std::vector<LoadProcess> children;
  const int p = std::max(1, std::min(o.processes, o.load.nodes));
  for (int i = 0; i < p; ++i) {
    int fds[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) break;
    const int first = static_cast<int>(static_cast<int64_t>(o.load.nodes) * i / p);
    const int last = static_cast<int>(static_cast<int64_t>(o.load.nodes) * (i + 1) / p);
    const pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      for (const LoadProcess& c : children) close(c.channel.fd());
      _exit(LoadProcessMain(LineChannel(fds[1]), o.load, first, last));
    }
    close(fds[1]);
    children.push_back({pid, LineChannel(fds[0])});
  }
  return children;
}

GeneratorCounts Snapshot(std::vector<LoadProcess>& children) {
  GeneratorCounts counts;
  for (LoadProcess& c : children) c.channel.Send("snap");
  for (LoadProcess& c : children) {
    std::optional<std::string> line = c.channel.Receive(WallNowNs() + 30 * kNsPerS);
    if (!line.has_value()) continue;
    std::vector<double> fields;
    for (absl::string_view w : absl::StrSplit(*line, ' ')) {
      if (w != "snap") fields.push_back(std::atof(std::string(w).c_str()));
    }
    counts.Add(fields);
  }
  return counts;
}

struct Supervisor {
  pid_t pid = 0;
  bool spawned = false;
  std::string grpc, metrics, directory, log;
};

// Starts trainsupd on free loopback ports (port 0) and reads the ports it
// got from its "listening grpc=... metrics=..." log line.
std::optional<Supervisor> SpawnTrainsupd(const Options& o) {
  Supervisor s;
  s.spawned = true;
  const char* tmp = getenv("TMPDIR");
  std::string pattern = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/agent_load.XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) return std::nullopt;
  s.directory = pattern;
  s.log = s.directory + "/trainsupd.log";
  std::vector<std::string> args = {o.spawn, "--listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0",
                                   "--state=" + s.directory + "/state.db"};
  args.insert(args.end(), o.trainsupd_args.begin(), o.trainsupd_args.end());
  s.pid = fork();
  if (s.pid == 0) {
    const int fd = open(s.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  const int64_t deadline = WallNowNs() + 30 * kNsPerS;
  while (WallNowNs() < deadline) {
    if (waitpid(s.pid, nullptr, WNOHANG) != 0) break;  // it died
    std::ifstream in(s.log);
    std::string line;
    while (std::getline(in, line)) {
      const size_t at = line.find("listening grpc=");
      if (at == std::string::npos) continue;
      std::istringstream words(line.substr(at));
      std::string grpc, metrics;
      words >> grpc >> grpc >> metrics;
      s.grpc = grpc.substr(grpc.find('=') + 1);
      s.metrics = metrics.substr(metrics.find('=') + 1);
      return s;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling the log, with a deadline
  }
  TRAINSUP_LOG_ERROR("trainsupd did not come up within 30s; its log: %s", s.log);
  kill(s.pid, SIGKILL);
  waitpid(s.pid, nullptr, 0);
  return std::nullopt;
}

void StopTrainsupd(const Supervisor& s) {
  if (!s.spawned) return;
  kill(s.pid, SIGTERM);
  const int64_t deadline = WallNowNs() + 30 * kNsPerS;
  while (waitpid(s.pid, nullptr, WNOHANG) == 0) {
    if (WallNowNs() > deadline) {
      kill(s.pid, SIGKILL);
      waitpid(s.pid, nullptr, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::shared_ptr<grpc::Channel> OperatorChannel(const std::string& target, int index) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt("trainsup.load_operator", index);
  // The ListRanks fallback answers ~107 bytes a rank: beyond gRPC's default
  // 4 MiB above ~39,000 ranks. The generator takes it to sample ages (the CLI
  // cannot); StreamRanks needs no such thing.
  args.SetMaxReceiveMessageSize(512 << 20);
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
}

std::string Triple(const Summary& s) {
  if (s.n == 0) return "n/a";
  return absl::StrCat(FormatSeconds(s.p50), " / ", FormatSeconds(s.p99), " / ", FormatSeconds(s.max));
}

// The figures at one end of the steady phase, each with its own time.
struct Mark {
  GeneratorCounts generator;
  int64_t generator_at;
  MetricsScrape metrics;
  ProcSample proc;
  int64_t proc_at;
};

Mark TakeMark(std::vector<LoadProcess>& children, const Supervisor& supervisor) {
  Mark m;
  m.generator = Snapshot(children);
  m.generator_at = WallNowNs();
  m.metrics = ScrapeMetrics(supervisor.metrics, 120);
  m.proc = ReadProc(supervisor.pid);
  m.proc_at = WallNowNs();
  return m;
}

struct Detection {
  std::optional<SeenEvent> event;
  int64_t reference_ns = 0;  // the hung rank's last heartbeat, or the death
  bool rank_right = false, node_right = false;
  std::optional<double> restart_to_first_step_s;
};

// Below this the unloaded ListEvents p99 is the scheduler's noise, not the
// machine's speed: measured 0.5-1.2 ms on one idle 2-core machine, run to
// run. The gate's yardstick never goes under it, so a quiet minute does not
// halve the budget.
constexpr double kGateYardstickFloorS = 0.001;

// The scale gate: every verb's p99 within --max-verb-ratio times the
// unloaded ListEvents p99 of the same run (the machine's own speed cancels
// out), and the steady RSS within --max-bytes-per-rank. Says what failed.
bool WithinGate(const Options& o, const Summary& unloaded, const std::vector<OperatorProber::Verb>& verbs,
                double bytes_per_rank) {
  bool within = true;
  if (o.max_verb_ratio > 0) {
    if (unloaded.n == 0) {
      std::printf("gate: FAILED: no unloaded ListEvents call answered\n");
      return false;
    }
    const double yardstick = std::max(unloaded.p99, kGateYardstickFloorS);
    const double budget = o.max_verb_ratio * yardstick;
    for (const OperatorProber::Verb& v : verbs) {
      const Summary s = Summarize(v.seconds);
      const bool ok = s.n > 0 && v.errors == 0 && s.p99 <= budget;
      std::printf("gate: %s p99 %s = %.0f x the yardstick %s (unloaded ListEvents p99 %s, at least %s); "
                  "budget %.0f x = %s: %s\n",
                  v.name.c_str(), s.n ? FormatSeconds(s.p99).c_str() : "n/a", s.n ? s.p99 / yardstick : NAN,
                  FormatSeconds(yardstick).c_str(), FormatSeconds(unloaded.p99).c_str(),
                  FormatSeconds(kGateYardstickFloorS).c_str(), o.max_verb_ratio,
                  FormatSeconds(budget).c_str(), ok ? "ok" : "FAILED");
      within &= ok;
    }
  }
  if (o.max_bytes_per_rank > 0) {
    const bool ok = bytes_per_rank <= o.max_bytes_per_rank;
    std::printf("gate: trainsupd RSS %.0f B/rank; budget %.0f: %s\n", bytes_per_rank,
                o.max_bytes_per_rank, ok ? "ok" : "FAILED");
    within &= ok;
  }
  return within;
}

int Run(const Options& o) {
  std::vector<LoadProcess> children = ForkLoadProcesses(o);
  std::optional<Supervisor> supervisor;
  if (!o.spawn.empty()) {
    supervisor = SpawnTrainsupd(o);
  } else {
    supervisor = Supervisor{static_cast<pid_t>(o.supervisor_pid), false, o.supervisor, o.metrics, "", ""};
  }
  auto end_children = [&children] {
    for (LoadProcess& c : children) c.channel.Send("stop");
    for (LoadProcess& c : children) c.channel.Receive(WallNowNs() + 60 * kNsPerS);
    for (LoadProcess& c : children) waitpid(c.pid, nullptr, 0);
  };
  if (!supervisor.has_value()) {
    end_children();
    return kExitFailure;
  }
  const LoadConfig& load = o.load;
  auto ops = OperatorChannel(supervisor->grpc, 0);
  if (!ops->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(30))) {
    TRAINSUP_LOG_ERROR("cannot reach trainsupd at %s", supervisor->grpc);
    end_children();
    StopTrainsupd(*supervisor);
    return kExitUnreachable;
  }
  EventWatcher events(OperatorChannel(supervisor->grpc, 1), load.job);
  // The same call before any load: what the gate compares the verbs with.
  const Summary unloaded = UnloadedListEvents(ops, load.job, 200);

  // Connect every node; the steps begin once all are welcomed.
  const int64_t connect_start = WallNowNs();
  for (LoadProcess& c : children) c.channel.Send("connect " + supervisor->grpc);
  int welcomed = 0;
  for (LoadProcess& c : children) {
    std::optional<std::string> line =
        c.channel.Receive(WallNowNs() + static_cast<int64_t>(
            (60.0 + 3.0 * load.nodes / load.connect_rate) * kNsPerS));
    if (line.has_value() && line->rfind("welcomed ", 0) == 0) welcomed += std::atoi(line->c_str() + 9);
  }
  const double connect_s = Seconds(WallNowNs() - connect_start);
  TRAINSUP_LOG_INFO("%d of %d nodes welcomed in %.1fs", welcomed, load.nodes, connect_s);

  const int64_t origin = (WallNowNs() / kNsPerS + 2) * kNsPerS;
  const int64_t steady_begin = origin + absl::ToInt64Nanoseconds(o.warmup);
  const int64_t steady_end = steady_begin + absl::ToInt64Nanoseconds(o.duration);
  const bool fault = o.fault_rank() >= 0;
  const int64_t fault_ns =
      !fault ? 0
             : steady_begin + (o.fault_after == absl::InfiniteDuration()
                                   ? absl::ToInt64Nanoseconds(o.duration)
                                   : absl::ToInt64Nanoseconds(o.fault_after));
  for (LoadProcess& c : children) c.channel.Send(absl::StrCat("go ", origin, " ", fault_ns));

  // The steady phase.
  SleepUntil(steady_begin);
  const Mark begin = TakeMark(children, *supervisor);
  const StepSchedule schedule(load.step_rate, load.phases);
  AgeSampler ages(schedule, origin, load.world_size(), o.fault_rank());
  OperatorProber prober(ops, load.job, absl::ToDoubleSeconds(o.probe_pause));
  prober.Start(&ages);
  MetricsScraper scraper(supervisor->metrics, 1.0);
  std::optional<CtlProber> ctl;
  if (!o.trainsupctl.empty()) ctl.emplace(o.trainsupctl, supervisor->grpc, 1.0);
  SleepUntil(steady_end);
  const Mark end = TakeMark(children, *supervisor);
  if (ctl.has_value()) ctl->Stop();
  scraper.Stop();
  prober.Stop();  // waits for the call in flight: it is measured too

  Detection d;
  if (fault) {
    const uint32_t rank = static_cast<uint32_t>(o.fault_rank());
    const std::string node = NodeName(static_cast<int>(rank) / load.ranks_per_node);
    const std::string kind = load.hang_rank >= 0 ? "stall" : "crash";
    d.reference_ns = fault_ns;
    if (load.hang_rank >= 0) {
      const int64_t n = std::min(schedule.EventsThrough(origin, rank, fault_ns),
                                 schedule.EventsBeforeHang(origin, rank, fault_ns, true));
      if (n > 0) d.reference_ns = schedule.EventAt(origin, rank, n - 1).at_ns;
    }
    d.event = events.AwaitFirst(d.reference_ns, fault_ns + absl::ToInt64Nanoseconds(o.detect_timeout),
                                [&kind](const SeenEvent& e) { return e.kind == kind; });
    if (d.event.has_value()) {
      d.rank_right = d.event->rank.has_value() && *d.event->rank == rank;
      d.node_right = d.event->node == node;
      const int64_t recovery_deadline =
          d.event->time_ns + absl::ToInt64Nanoseconds(o.recovery_timeout);
      auto is = [](const char* k) { return [k](const SeenEvent& e) { return e.kind == k; }; };
      std::optional<SeenEvent> restart = events.AwaitFirst(d.event->time_ns, recovery_deadline, is("restart"));
      std::optional<SeenEvent> recovered =
          restart.has_value() ? events.AwaitFirst(restart->time_ns, recovery_deadline, is("recovered"))
                              : std::nullopt;
      if (recovered.has_value()) d.restart_to_first_step_s = Seconds(recovered->time_ns - restart->time_ns);
    }
  }
  const GeneratorCounts g2 = Snapshot(children);
  const ProcSample p2 = ReadProc(supervisor->pid);
  const bool alive = supervisor->pid <= 0 || kill(supervisor->pid, 0) == 0;
  end_children();
  StopTrainsupd(*supervisor);

  // The table.
  ReportTable t;
  const double steady_s = Seconds(end.generator_at - begin.generator_at);
  const double per_step = load.phases ? 3.0 : 1.0;
  const double intended = load.world_size() * load.step_rate * per_step;
  const double offered = (end.generator.heartbeats - begin.generator.heartbeats) / steady_s;
  const double metrics_s = Seconds(end.proc_at - begin.proc_at);
  const double taken = (end.metrics.heartbeats_received - begin.metrics.heartbeats_received) / metrics_s;
  const double rejected = (end.metrics.heartbeats_rejected - begin.metrics.heartbeats_rejected) / metrics_s;
  const double interval = end.generator.interval_s / std::max(1, load.nodes);
  t.Row("load", absl::StrFormat("%d nodes x %d ranks = %d ranks, %.3g steps/s, %d process(es), %s",
                                load.nodes, load.ranks_per_node, load.world_size(), load.step_rate,
                                static_cast<int>(children.size()),
                                load.channels > 0 ? absl::StrCat(load.channels, " channels")
                                                  : std::string("one channel per node")),
        absl::StrFormat("steady phase %.1f s after %s warm-up; %s heartbeats a step",
                        steady_s, absl::FormatDuration(o.warmup), load.phases ? "3 (phases)" : "1"));
  t.Row("nodes welcomed", absl::StrFormat("%d of %d in %.1f s", welcomed, load.nodes, connect_s),
        "streams opened at --connect-rate");
  t.Row("report interval in force", FormatSeconds(interval),
        "mean over nodes: the supervisor's settings, else --report-interval");
  t.Row("offered heartbeats/s", absl::StrFormat("%.0f (intended %.0f)", offered, intended),
        "written by the load processes in the steady phase");
  t.Row("taken heartbeats/s", absl::StrFormat("%.0f (rejected %.0f/s)", taken, rejected),
        "trainsup_heartbeats_received_total (rejected_total) over the steady phase");
  t.Row("reports/s", absl::StrFormat("%.0f (intended %.0f; %.0f deferred: write in flight)",
                                     (end.generator.reports - begin.generator.reports) / steady_s,
                                     load.nodes / std::max(interval, 1e-3),
                                     end.generator.late - begin.generator.late),
        "node reports written");
  const Summary age = ages.ages();
  t.Row("heartbeat age p50 / p99 / max", Triple(age),
        absl::StrFormat("over %d listings x ranks: now - production time of the oldest step the "
                        "supervisor has not seen (0 if none)",
                        ages.samples()));
  const double cpu = end.proc.ok && begin.proc.ok ? 100.0 * (end.proc.cpu_seconds - begin.proc.cpu_seconds) / metrics_s : NAN;
  t.Row("trainsupd CPU", end.proc.ok ? absl::StrFormat("%.0f %%", cpu) : "n/a",
        "utime+stime over the steady phase (100 % = one core)");
  auto memory = [&load](const ProcSample& p, int64_t bytes) {
    return p.ok ? absl::StrFormat("%s (%.0f B/rank)", FormatBytes(static_cast<double>(bytes)),
                                  static_cast<double>(bytes) / load.world_size())
                : std::string("n/a");
  };
  t.Row("trainsupd RSS steady", memory(end.proc, end.proc.rss_bytes),
        "VmRSS at the end of the steady phase, over all ranks (streams included)");
  t.Row("trainsupd RSS peak", memory(p2, p2.hwm_bytes), "VmHWM at the end of the run");
  t.Row("ListEvents (limit 100), unloaded", Triple(unloaded) + absl::StrCat(" (", unloaded.n, " calls)"),
        "p50 / p99 / max before any node connected");
  for (const OperatorProber::Verb& v : prober.verbs()) {
    const Summary s = Summarize(v.seconds);
    t.Row(v.name, absl::StrCat(Triple(s), " (", s.n, " calls", v.errors > 0 ? absl::StrCat(", ", v.errors, " errors: ", v.first_error) : "", ")"),
          "p50 / p99 / max while the load runs; 120 s deadline");
  }
  std::vector<double> ctl_seconds;
  if (ctl.has_value()) {
    ctl_seconds = ctl->seconds();
    std::sort(ctl_seconds.begin(), ctl_seconds.end());
    // Nearest rank, as Summarize's percentiles.
    const double p90 = ctl_seconds.empty()
                           ? NAN
                           : ctl_seconds[static_cast<size_t>(std::ceil(0.9 * ctl_seconds.size())) - 1];
    const Summary s = Summarize(ctl_seconds);
    t.Row("`trainsupctl jobs`, a new process",
          s.n == 0 ? "n/a" : absl::StrCat(FormatSeconds(s.p50), " / ", FormatSeconds(p90), " / ",
                                          FormatSeconds(s.max), " (", s.n, " runs, ", ctl->failures(),
                                          " failed)"),
          "p50 / p90 / max, spawn to exit, one a second in the steady phase");
    t.JsonNumber("ctl_jobs_p50_s", s.n ? s.p50 : NAN);
    t.JsonNumber("ctl_jobs_p90_s", p90);
  }
  const Summary scrapes = scraper.seconds();
  t.Row("/metrics scrape", absl::StrCat(FormatSeconds(scrapes.p50), " / ", FormatSeconds(scrapes.p99),
                                        " p50 / p99, ", FormatBytes(static_cast<double>(scraper.last_bytes())),
                                        scraper.errors() > 0 ? absl::StrCat(", ", scraper.errors(), " errors") : ""),
        "GET every second in the steady phase");
  t.Row("false alarms in the steady phase",
        absl::StrFormat("%d stall, %d crash, %d node_unreachable",
                        events.Count("stall", origin, fault ? fault_ns : steady_end),
                        events.Count("crash", origin, fault ? fault_ns : steady_end),
                        events.Count("node_unreachable", origin, steady_end)),
        "events of the job before the fault");
  if (fault) {
    const std::string what = load.hang_rank >= 0 ? "hang" : "kill";
    t.Row(absl::StrCat("detection (", what, " of rank ", o.fault_rank(), ")"),
          d.event.has_value()
              ? absl::StrFormat("%s; named rank %s node %s: %s", FormatSeconds(Seconds(d.event->time_ns - d.reference_ns)),
                                d.event->rank.has_value() ? absl::StrCat(*d.event->rank) : "none",
                                d.event->node.empty() ? "none" : d.event->node,
                                d.rank_right && d.node_right ? "right" : "WRONG")
              : "not detected",
          load.hang_rank >= 0 ? "stall event time - production time of the rank's last heartbeat"
                              : "crash event time - the death");
    t.Row("restart -> first step",
          d.restart_to_first_step_s.has_value() ? FormatSeconds(*d.restart_to_first_step_s) : "n/a",
          "restart event -> recovered event");
  }
  t.Row("generator", absl::StrFormat("%.0f %% CPU, %.0f streams ended early, %.0f write failures, "
                                     "%.0f stops / %.0f starts / %.0f plans obeyed",
                                     100.0 * (end.generator.cpu_seconds - begin.generator.cpu_seconds) / steady_s,
                                     g2.sessions_ended, g2.write_failures, g2.stops, g2.starts, g2.plans),
        "the load processes themselves (CPU in the steady phase)");
  if (!alive) t.Row("trainsupd", "DIED during the run", supervisor->log);
  std::printf("%s\n", t.Markdown(absl::StrFormat("agent_load: %d ranks", load.world_size())).c_str());
  std::fflush(stdout);

  t.JsonNumber("nodes", load.nodes);
  t.JsonNumber("ranks", load.world_size());
  t.JsonNumber("step_rate", load.step_rate);
  t.JsonNumber("report_interval_s", interval);
  t.JsonNumber("offered_hb_per_s", offered);
  t.JsonNumber("intended_hb_per_s", intended);
  t.JsonNumber("taken_hb_per_s", taken);
  t.JsonNumber("rejected_hb_per_s", rejected);
  t.JsonNumber("age_p50_s", age.n ? age.p50 : NAN);
  t.JsonNumber("age_p99_s", age.n ? age.p99 : NAN);
  t.JsonNumber("age_max_s", age.n ? age.max : NAN);
  t.JsonNumber("cpu_percent", cpu);
  t.JsonNumber("rss_bytes", static_cast<double>(end.proc.rss_bytes));
  t.JsonNumber("hwm_bytes", static_cast<double>(p2.hwm_bytes));
  for (const OperatorProber::Verb& v : prober.verbs()) {
    const Summary s = Summarize(v.seconds);
    const std::string key = absl::StrCat("verb_", v.name.substr(0, v.name.find(' ')), v.name.find("top") != std::string::npos ? "_top20" : v.name.find("full") != std::string::npos ? "_full" : "");
    t.JsonNumber(key + "_p50_s", s.n ? s.p50 : NAN);
    t.JsonNumber(key + "_p99_s", s.n ? s.p99 : NAN);
    t.JsonNumber(key + "_errors", v.errors);
  }
  t.JsonNumber("metrics_scrape_p50_s", scrapes.n ? scrapes.p50 : NAN);
  t.JsonNumber("metrics_scrape_p99_s", scrapes.n ? scrapes.p99 : NAN);
  t.JsonNumber("metrics_bytes", static_cast<double>(scraper.last_bytes()));
  t.JsonNumber("detection_s", d.event.has_value() ? Seconds(d.event->time_ns - d.reference_ns) : NAN);
  t.Json("culprit_right", fault ? (d.rank_right && d.node_right ? "true" : "false") : "null");
  t.JsonNumber("restart_to_first_step_s", d.restart_to_first_step_s.value_or(NAN));
  if (!o.json.empty()) {
    std::ofstream out(o.json);
    out << t.ToJson();
  }
  if (supervisor->spawned) {
    // Kept (and named) when anything went wrong: its log says what.
    bool verb_errors = false;
    for (const OperatorProber::Verb& v : prober.verbs()) verb_errors |= v.errors > 0;
    if (alive && (!fault || (d.rank_right && d.node_right)) && g2.sessions_ended == 0 && !verb_errors) {
      std::remove((supervisor->directory + "/state.db").c_str());
      std::remove((supervisor->directory + "/state.db-wal").c_str());
      std::remove((supervisor->directory + "/state.db-shm").c_str());
      std::remove(supervisor->log.c_str());
      rmdir(supervisor->directory.c_str());
    } else {
      std::printf("trainsupd's log: %s\n", supervisor->log.c_str());
    }
  }
  if (!alive) return kExitFailure;
  if (fault && !(d.event.has_value() && d.rank_right && d.node_right)) return kExitFailure;
  if (!WithinGate(o, unloaded, prober.verbs(), static_cast<double>(end.proc.rss_bytes) / load.world_size())) {
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace
}  // namespace trainsup

int main(int argc, char** argv) {
  using namespace trainsup;
  SetLogProgramName("agent_load");
  Options o;
  bool no_phases = false;
  bool verbose = false;
  CLI::App app{"agent_load: simulated agents (one stream per node) against the real trainsupd; "
               "prints one table per run (docs/benchmarks.md).",
               "agent_load"};
  app.add_option("--spawn", o.spawn, "start this trainsupd binary on free loopback ports "
                 "(extra trainsupd arguments after --)")->type_name("PATH");
  app.add_option("trainsupd_args", o.trainsupd_args, "extra trainsupd arguments (after --)");
  app.add_option("--supervisor", o.supervisor, "trainsupd started elsewhere: its gRPC address")
      ->type_name("HOST:PORT")->check(HostPortValidator());
  app.add_option("--metrics", o.metrics, "its /metrics address")->type_name("HOST:PORT");
  app.add_option("--supervisor-pid", o.supervisor_pid, "its pid, for CPU and RSS");
  app.add_option("--nodes", o.load.nodes, "simulated nodes (one agent stream each)")
      ->capture_default_str()->check(CLI::Range(1, 1000000));
  app.add_option("--ranks-per-node", o.load.ranks_per_node, "ranks per node")
      ->capture_default_str()->check(CLI::Range(1, 1024));
  app.add_option("--step-rate", o.load.step_rate, "steps per second of every rank")
      ->capture_default_str()->check(CLI::Range(0.01, 1000.0));
  app.add_option("--job", o.load.job, "job id")->capture_default_str();
  AddDurationOption(app, "--warmup", &o.warmup, "stepping before the steady phase");
  AddDurationOption(app, "--duration", &o.duration, "the steady phase, when everything is measured");
  AddDurationOption(app, "--report-interval", &o.report_interval,
                    "the agents' report interval, unless the supervisor's settings give one");
  app.add_option("--hang-rank", o.load.hang_rank, "this rank stops stepping (its process stays alive)");
  app.add_option("--kill-rank", o.load.kill_rank, "this rank's process dies of SIGKILL");
  app.add_option_function<std::string>("--fault-after", [&o](const std::string& text) {
        absl::StatusOr<absl::Duration> d = ParseDurationOption(text);
        if (!d.ok()) throw CLI::ValidationError(std::string(d.status().message()));
        o.fault_after = *d;
      }, "inject the fault this long into the steady phase (default: at its end)")
      ->type_name("DURATION");
  AddDurationOption(app, "--detect-timeout", &o.detect_timeout, "wait this long for the fault's event");
  AddDurationOption(app, "--recovery-timeout", &o.recovery_timeout,
                    "after the detection, wait this long for restart and recovery (0: do not)");
  app.add_option("--channels", o.load.channels, "multiplex the nodes over K channels (0: one per node)")
      ->capture_default_str()->check(CLI::Range(0, 1000000));
  app.add_option("--processes", o.processes, "load processes, each driving a slice of the nodes")
      ->capture_default_str()->check(CLI::Range(1, 64));
  app.add_option("--connect-rate", o.load.connect_rate, "new agent streams per second")
      ->capture_default_str()->check(CLI::Range(1.0, 1e6));
  app.add_flag("--no-phases", no_phases, "only STEP heartbeats (no COMPUTE_BEGIN/END)");
  bool no_keepalive = false;
  app.add_flag("--no-keepalive", no_keepalive,
               "no keepalive pings on the agent streams: a starved load process then cannot "
               "drop its own streams (the agent's 5 s ping timeout)");
  AddDurationOption(app, "--probe-pause", &o.probe_pause, "pause between operator calls");
  app.add_option("--json", o.json, "also write the figures as JSON")->type_name("FILE");
  app.add_option("--trainsupctl", o.trainsupctl,
                 "also run `trainsupctl jobs` as a new process every second of the steady phase")
      ->type_name("PATH");
  app.add_option("--max-verb-ratio", o.max_verb_ratio,
                 "gate: exit 1 when a verb's p99 exceeds this many times the unloaded ListEvents p99 "
                 "(taken as at least 1 ms)");
  app.add_option("--max-bytes-per-rank", o.max_bytes_per_rank,
                 "gate: exit 1 when trainsupd's steady RSS exceeds this many bytes a rank");
  app.add_flag("-v,--verbose", verbose, "log debug lines");
  app.footer("Exit codes: 0 ok; 1 the run failed (trainsupd died, or the fault was not named);\n"
             "2 bad usage; 3 cannot reach the supervisor.");
  if (int code = ParseOrExitCode(app, argc, argv); code >= 0) return code;
  SetLogVerbose(verbose);
  o.load.phases = !no_phases;
  o.load.keepalive = !no_keepalive;
  o.load.report_interval_s = absl::ToDoubleSeconds(o.report_interval);
  if (o.spawn.empty() == o.supervisor.empty() || (o.spawn.empty() && o.metrics.empty())) {
    std::fprintf(stderr, "error: give --spawn PATH, or --supervisor and --metrics\n");
    return kExitUsage;
  }
  if (o.load.hang_rank >= 0 && o.load.kill_rank >= 0) {
    std::fprintf(stderr, "error: one fault at a time: --hang-rank or --kill-rank\n");
    return kExitUsage;
  }
  if (o.fault_rank() >= static_cast<int64_t>(o.load.world_size())) {
    std::fprintf(stderr, "error: the fault's rank is beyond the %u ranks\n", o.load.world_size());
    return kExitUsage;
  }
  signal(SIGPIPE, SIG_IGN);
  RaiseFileLimit();
  return Run(o);
}
