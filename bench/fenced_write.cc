// fenced_write: what sharing the state through etcd costs (docs/ha.md).
//
//   fenced_write ETCD_ENDPOINTS [decisions] [nodes] [rounds]
//   defaults:                    400         64      5
//
// 1. The decision path: `decisions` commits of a quarantine's journal (the
//    node's record, its failure, its pending fence, its event; fsynced, as
//    before a fence runs) to the SQLite store alone, and to the store then
//    etcd fenced on an election key (SharedJournalSink): p50 and p99 of each,
//    interleaved in one run. And as many journals of an event alone (a
//    checkpoint plan published: history, no decision), not fsynced.
// 2. Heartbeat ingest: SupervisorHost::Report of `nodes` nodes x 8 ranks for
//    3000 steps, with no sink (nothing persisted), the SQLite store, and the
//    store + etcd, while a thread quarantines and lifts spare nodes (a
//    decision every 10 ms, each a journal for the sink), and the store + an
//    etcd that does not answer (every decision waits). `rounds` rounds, the
//    four interleaved; the median rate of each and its ratio to no sink.
// 3. The snapshot: a store that kept 20000 events (and a quarantine), its
//    snapshot of the shared state (bytes, the events it carries), the fenced
//    compaction that writes it to etcd, and a new leader's load of it
//    (LoadSharedState: read from etcd, replayed into an empty store).
//
// bench/fenced_write.py starts a 3-member etcd on loopback and runs it.
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/step_report.h"
#include "common/clock.h"
#include "daemon/ha/etcd_election.h"
#include "daemon/ha/etcd_state_log.h"
#include "daemon/shared_journal_sink.h"
#include "daemon/state_store.h"
#include "daemon/supervisor_host.h"

namespace trainsup {
namespace {

using Seconds = std::chrono::duration<double>;

double Percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

Journal QuarantineJournal(int i, absl::Time now) {
  Journal j;
  const std::string node = absl::StrCat("node-", i % 512);
  j.nodes.push_back({node, true, "3 failures within 1h", now, "policy"});
  FailureRow f;
  f.time = now;
  f.job = "bench";
  f.generation = 1;
  f.kind = "crash";
  f.node = node;
  f.rank = 3;
  f.message = "rank 3 exited with code 1";
  j.failures.push_back(f);
  j.fences.push_back({node, "3 failures within 1h", now, true, FenceAction::kFence});
  Event e;
  e.id = static_cast<uint64_t>(i) + 1;
  e.time = now;
  e.kind = EventKind::kQuarantine;
  e.job = "bench";
  e.node = node;
  e.message = "quarantined: 3 failures within 1h";
  j.events.push_back(e);
  return j;
}

// An event alone, as most are (a checkpoint plan published, a straggler
// named, a training signal): history, no change to the decisions' tables.
Event PlanEvent(uint64_t id, absl::Time now) {
  Event e;
  e.id = id;
  e.time = now;
  e.kind = EventKind::kCheckpointPlan;
  e.job = "bench";
  e.generation = 1;
  e.message = "checkpoint every 120 steps from step 4200 (Young: C 4.1 s, MTBF 18.3 h)";
  e.figures = {{"interval_steps", 120}, {"anchor_step", 4200}, {"checkpoint_seconds", 4.1}};
  return e;
}

class NullChannel : public AgentChannel {
 public:
  void Send(const v1::SupervisorMessage&) override {}
  void Close(const grpc::Status&) override {}
};

// What the ingest took: heartbeats per second of wall time, and per second
// of the ingesting thread's own CPU (the same when it never waits and no
// other process takes the cores from it).
struct Rate {
  double wall = 0;
  double cpu = 0;
};

double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// How fast `host` ingested heartbeats, with decisions flowing through its
// sink meanwhile.
// `before_flush` runs once the ingest is timed, before the host drains its
// writes.
Rate IngestRate(SupervisorHost& host, int nodes, std::function<void()> before_flush = {}) {
  const int per_node = 8;
  const int ranks = nodes * per_node;
  std::vector<SessionId> sessions;
  auto hello = [&](const std::string& node, const std::string& job, int incarnation) {
    AgentHelloInfo info;
    info.node = node;
    info.job = job;
    info.incarnation = incarnation;
    info.generation = 1;
    info.launcher.state = LauncherState::kRunning;
    return host.Hello(info, std::make_shared<NullChannel>())->session;
  };
  for (int n = 0; n < nodes; ++n) sessions.push_back(hello(absl::StrCat("n", n), "bench", n + 1));
  for (int s = 0; s < 8; ++s) hello(absl::StrCat("spare", s), "other", 1000 + s);
  std::atomic<bool> stop{false};
  std::thread decisions([&] {
    for (int i = 0; !stop.load(); ++i) {
      const std::string node = absl::StrCat("spare", i % 8);
      if ((i / 8) % 2 == 0) {
        (void)host.Quarantine(node, "bench", /*force=*/true);
      } else {
        (void)host.Unquarantine(node);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  const int steps = 3000;
  uint64_t heartbeats = 0;
  const auto start = std::chrono::steady_clock::now();
  const double cpu_start = ThreadCpuSeconds();
  for (int step = 0; step < steps; ++step) {
    for (int n = 0; n < nodes; ++n) {
      const NodeReportInfo report =
          StepReport("bench", n * per_node, (n + 1) * per_node, per_node, ranks, step);
      (void)host.Report(sessions[n], report);
      heartbeats += per_node;
    }
  }
  const double took = Seconds(std::chrono::steady_clock::now() - start).count();
  const double cpu = ThreadCpuSeconds() - cpu_start;
  stop = true;
  decisions.join();
  if (before_flush) before_flush();
  host.FlushWrites();
  return {static_cast<double>(heartbeats) / took, static_cast<double>(heartbeats) / cpu};
}

int Main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: fenced_write ETCD_ENDPOINTS [decisions] [nodes] [rounds]\n");
    return 2;
  }
  const int decisions = argc > 2 ? std::atoi(argv[2]) : 400;
  const int nodes = argc > 3 ? std::atoi(argv[3]) : 64;
  const int rounds = argc > 4 ? std::atoi(argv[4]) : 5;
  EtcdElectionOptions etcd;
  etcd.endpoints = absl::StrSplit(argv[1], ',');
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = MakeEtcdChannel(etcd);
  if (!channel.ok()) {
    std::fprintf(stderr, "%s\n", std::string(channel.status().message()).c_str());
    return 1;
  }
  // The election key the writes are fenced on, as a leader holds it.
  auto kv = etcdserverpb::KV::NewStub(*channel);
  etcdserverpb::PutRequest put;
  put.set_key("/trainsup/bench/leader/1");
  put.set_value("bench 127.0.0.1:0");
  etcdserverpb::PutResponse put_response;
  {
    grpc::ClientContext context;
    context.set_wait_for_ready(true);
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    grpc::Status s = kv->Put(&context, put, &put_response);
    if (!s.ok()) {
      std::fprintf(stderr, "etcd: %s\n", s.error_message().c_str());
      return 1;
    }
  }
  const FencingToken token{put.key(), put_response.header().revision()};
  EtcdStateLog::Options log_options;
  log_options.key_prefix = "/trainsup/bench/";

  char dir_template[] = "/tmp/fenced_write.XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  int stores = 0;
  auto open_store = [&] {
    return std::move(*StateStore::Open(absl::StrCat(dir, "/s", ++stores, ".db")));
  };

  // 1. The decision path.
  {
    std::unique_ptr<StateStore> alone = open_store();
    std::unique_ptr<StateStore> shared_store = open_store();
    EtcdStateLog log(*channel, log_options, [&] { return token; });
    SharedJournalSink shared(shared_store.get(), &log, [](const std::string&) {});
    std::vector<double> sqlite_s, fenced_s, event_sqlite_s, event_fenced_s;
    const absl::Time now = absl::Now();
    for (int i = 0; i < decisions; ++i) {
      const Journal j = QuarantineJournal(i, now);
      auto t0 = std::chrono::steady_clock::now();
      if (!alone->Apply(j, JournalSink::Sync::kFull).ok()) return 1;
      auto t1 = std::chrono::steady_clock::now();
      if (absl::Status s = shared.Apply(j, JournalSink::Sync::kFull); !s.ok()) {
        std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
        return 1;
      }
      auto t2 = std::chrono::steady_clock::now();
      sqlite_s.push_back(Seconds(t1 - t0).count());
      fenced_s.push_back(Seconds(t2 - t1).count());
      Journal history;
      history.events.push_back(PlanEvent(static_cast<uint64_t>(decisions + i) + 1, now));
      t0 = std::chrono::steady_clock::now();
      if (!alone->Apply(history, JournalSink::Sync::kNormal).ok()) return 1;
      t1 = std::chrono::steady_clock::now();
      if (!shared.Apply(history, JournalSink::Sync::kNormal).ok()) return 1;
      t2 = std::chrono::steady_clock::now();
      event_sqlite_s.push_back(Seconds(t1 - t0).count());
      event_fenced_s.push_back(Seconds(t2 - t1).count());
    }
    std::printf("decision commit (%d quarantines, fsynced), p50 / p99:\n", decisions);
    std::printf("  SQLite only           %7.2f / %7.2f ms\n", Percentile(sqlite_s, 0.5) * 1e3,
                Percentile(sqlite_s, 0.99) * 1e3);
    std::printf("  SQLite + etcd fenced  %7.2f / %7.2f ms  (%d log entries, %d compactions)\n",
                Percentile(fenced_s, 0.5) * 1e3, Percentile(fenced_s, 0.99) * 1e3,
                static_cast<int>(log.counts().appended),
                static_cast<int>(log.counts().compactions));
    std::printf("event alone (%d, not fsynced), p50 / p99:\n", decisions);
    std::printf("  SQLite only           %7.2f / %7.2f ms\n", Percentile(event_sqlite_s, 0.5) * 1e3,
                Percentile(event_sqlite_s, 0.99) * 1e3);
    std::printf("  SQLite + etcd fenced  %7.2f / %7.2f ms\n", Percentile(event_fenced_s, 0.5) * 1e3,
                Percentile(event_fenced_s, 0.99) * 1e3);
  }

  // 2. Heartbeat ingest, side by side.
  std::vector<Rate> none, sqlite, fenced, away;
  uint64_t fenced_entries = 0;  // what the decisions wrote to etcd meanwhile
  MonotonicClock clock;
  // etcd that does not answer (nothing listens there): every decision waits,
  // retried, until the bench ends its leadership.
  EtcdElectionOptions nowhere;
  nowhere.endpoints = {"127.0.0.1:1"};
  std::shared_ptr<grpc::Channel> dead = *MakeEtcdChannel(nowhere);
  for (int round = 0; round < rounds; ++round) {
    {
      SupervisorHost host(SupervisorOptions{}, &clock);
      none.push_back(IngestRate(host, nodes));
    }
    {
      std::unique_ptr<StateStore> store = open_store();
      SupervisorHost host(SupervisorOptions{}, &clock, store.get());
      sqlite.push_back(IngestRate(host, nodes));
    }
    {
      std::unique_ptr<StateStore> store = open_store();
      EtcdStateLog log(*channel, log_options, [&] { return token; });
      if (!log.Load().ok()) return 1;
      SharedJournalSink sink(store.get(), &log, [](const std::string&) {});
      SupervisorHost host(SupervisorOptions{}, &clock, store.get(), &sink);
      fenced.push_back(IngestRate(host, nodes));
      fenced_entries += log.counts().appended;
    }
    {
      std::unique_ptr<StateStore> store = open_store();
      std::atomic<bool> elected{true};
      EtcdStateLog log(dead, log_options,
                       [&] { return elected.load() ? token : FencingToken{}; });
      SharedJournalSink sink(store.get(), &log, [](const std::string&) {});
      SupervisorHost host(SupervisorOptions{}, &clock, store.get(), &sink);
      away.push_back(IngestRate(host, nodes, [&] { elected = false; }));
    }
  }
  std::printf("heartbeat ingest (%d nodes x 8 ranks, a decision every 10 ms meanwhile), "
              "median of %d rounds; heartbeats/s of wall time, and of the ingesting thread's "
              "CPU time; each as a ratio to no sink:\n", nodes, rounds);
  auto median = [](const std::vector<Rate>& rates, double Rate::*field) {
    std::vector<double> v;
    for (const Rate& r : rates) v.push_back(r.*field);
    return Percentile(v, 0.5);
  };
  const double wall = median(none, &Rate::wall);
  const double cpu = median(none, &Rate::cpu);
  auto row = [&](const char* name, const std::vector<Rate>& rates, const std::string& note) {
    std::printf("  %-20s %10.0f /s  %.2f   %10.0f /s-cpu  %.2f  %s\n", name,
                median(rates, &Rate::wall), median(rates, &Rate::wall) / wall,
                median(rates, &Rate::cpu), median(rates, &Rate::cpu) / cpu, note.c_str());
  };
  row("no sink", none, "");
  row("SQLite", sqlite, "");
  row("SQLite + etcd fenced", fenced,
      absl::StrCat("(", fenced_entries, " etcd log entries written meanwhile)"));
  row("SQLite + etcd away", away, "(every decision waiting)");

  // 3. The snapshot of a store that kept many events, and a new leader's load.
  {
    constexpr int kEvents = 20000;
    std::unique_ptr<StateStore> store = open_store();
    const absl::Time now = absl::Now();
    if (!store->Apply(QuarantineJournal(0, now)).ok()) return 1;
    for (int i = 0; i < kEvents; i += 100) {
      Journal j;
      for (int k = 0; k < 100; ++k) j.events.push_back(PlanEvent(i + k + 2, now));
      if (!store->Apply(j).ok()) return 1;
    }
    EtcdStateLog::Options snap_options = log_options;
    snap_options.key_prefix = "/trainsup/bench-snapshot/";
    EtcdStateLog log(*channel, snap_options, [&] { return token; });
    if (!log.Load().ok()) return 1;
    std::string snapshot;
    auto t0 = std::chrono::steady_clock::now();
    if (!store->SnapshotShared(&snapshot).ok()) return 1;
    auto t1 = std::chrono::steady_clock::now();
    if (absl::Status s = log.Compact(snapshot); !s.ok()) {
      std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
      return 1;
    }
    auto t2 = std::chrono::steady_clock::now();
    std::unique_ptr<StateStore> fresh = std::move(*StateStore::OpenInMemory());
    EtcdStateLog reader(*channel, snap_options, [&] { return token; });
    auto t3 = std::chrono::steady_clock::now();
    if (!LoadSharedState(&reader, fresh.get()).ok()) return 1;
    auto t4 = std::chrono::steady_clock::now();
    absl::StatusOr<PersistedState> loaded = fresh->Load(kEvents, 10, 10);
    if (!loaded.ok()) return 1;
    std::printf("snapshot of a store with %d events: %zu bytes carrying %zu events; taken in "
                "%.1f ms, compacted into etcd (fenced) in %.1f ms; a new leader loads it in "
                "%.1f ms\n", kEvents, snapshot.size(), loaded->events.size(),
                Seconds(t1 - t0).count() * 1e3, Seconds(t2 - t1).count() * 1e3,
                Seconds(t4 - t3).count() * 1e3);
  }
  std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace trainsup

int main(int argc, char** argv) { return trainsup::Main(argc, argv); }
