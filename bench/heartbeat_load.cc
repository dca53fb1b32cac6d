// heartbeat_load: how many rank heartbeats trainsupd takes in, side by side
// with what the same gRPC streams carry into a server that only reads them,
// in one run on one machine; and what one detector sweep costs per rank at
// scale. See docs/benchmarks.md.
//
//   heartbeat_load [agents] [ranks_per_agent] [steps_per_report] [seconds] [sweep_ranks]
//   defaults:        8        8                 4                  5         100000
//
// With TRAINSUP_BENCH_SIGNALS=1 every STEP also carries the training signals
// a script sends (loss, learning rate, gradient norm, samples, device
// memory), in both servers and in the core at scale.
//
// With TRAINSUP_BENCH_PKI=DIR (certificates from tests/support/make_test_pki.sh)
// both servers are measured again over TLS, side by side in the same run.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "bench/step_report.h"
#include "common/clock.h"
#include "common/credentials.h"
#include "daemon/core/supervisor.h"
#include "daemon/server.h"
#include "trainsup/v1/agent.grpc.pb.h"

namespace trainsup {
namespace {

struct Load {
  int agents = 8;
  int ranks_per_agent = 8;
  int steps_per_report = 4;
  double seconds = 5;
  bool signals = false;  // STEPs carry the training signals
};

// The training signals of `rank`'s STEP `step`: a healthy run's, varying
// from step to step and rank to rank as real ones do, the loss falling (a
// flat one would be the loss_flat event's).
double BenchLoss(int64_t step, int rank) {
  return 2.0 + 4.0 / (1.0 + static_cast<double>(step) / 100.0) +
         0.01 * static_cast<double>((step * 7 + rank) % 13);
}
void AddSignals(int64_t step, int rank, v1::RankHeartbeat* hb) {
  hb->set_loss(BenchLoss(step, rank));
  hb->set_learning_rate(3e-4);
  hb->set_grad_norm(1.0 + 0.02 * static_cast<double>((step + rank) % 5));
  hb->set_samples(8);
  hb->set_device_memory_bytes(40'000'000'000ULL + 4096ULL * static_cast<uint64_t>(rank % 8));
}
void AddSignals(int64_t step, int rank, Heartbeat* hb) {
  hb->loss = BenchLoss(step, rank);
  hb->learning_rate = 3e-4;
  hb->grad_norm = 1.0 + 0.02 * static_cast<double>((step + rank) % 5);
  hb->samples = 8;
  hb->device_memory_bytes = 40'000'000'000ULL + 4096ULL * static_cast<uint64_t>(rank % 8);
}

// A server that reads agent streams and drops every message: the ceiling of
// what gRPC itself carries on this machine.
class NullAgentService final : public v1::AgentService::CallbackService {
 public:
  grpc::ServerBidiReactor<v1::AgentMessage, v1::SupervisorMessage>* Connect(
      grpc::CallbackServerContext*) override {
    class Reader final : public grpc::ServerBidiReactor<v1::AgentMessage, v1::SupervisorMessage> {
     public:
      explicit Reader(std::atomic<uint64_t>* heartbeats) : heartbeats_(heartbeats) {
        StartRead(&in_);
      }
      void OnReadDone(bool ok) override {
        if (!ok) {
          Finish(grpc::Status::OK);
          return;
        }
        heartbeats_->fetch_add(in_.report().heartbeats_size(), std::memory_order_relaxed);
        StartRead(&in_);
      }
      void OnDone() override { delete this; }

     private:
      std::atomic<uint64_t>* heartbeats_;
      v1::AgentMessage in_;
    };
    return new Reader(&heartbeats_);
  }
  uint64_t heartbeats() const { return heartbeats_.load(); }

 private:
  std::atomic<uint64_t> heartbeats_{0};
};

// One agent: a stream, a hello, then reports of ranks_per_agent x
// steps_per_report STEP heartbeats as fast as the stream takes them.
uint64_t RunAgent(const std::string& address, const ClientTlsOptions& tls, int index,
                  const Load& load, std::chrono::steady_clock::time_point deadline) {
  grpc::ChannelArguments args;
  ApplyServerName(tls, &args);
  auto stub = v1::AgentService::NewStub(
      grpc::CreateCustomChannel(address, *MakeChannelCredentials(tls, ""), args));
  grpc::ClientContext context;
  auto stream = stub->Connect(&context);
  v1::AgentMessage hello;
  hello.mutable_hello()->set_node(absl::StrCat("bench-node-", index));
  hello.mutable_hello()->set_job("bench");
  hello.mutable_hello()->set_incarnation(index + 1);
  hello.mutable_hello()->set_generation(1);
  hello.mutable_hello()->mutable_launcher()->set_state(v1::LauncherStatus::STATE_RUNNING);
  if (!stream->Write(hello)) return 0;
  const int world = load.agents * load.ranks_per_agent;
  uint64_t sent = 0;
  int64_t step = 0;
  v1::AgentMessage message;
  while (std::chrono::steady_clock::now() < deadline) {
    v1::NodeReport* report = message.mutable_report();
    report->Clear();
    report->set_generation(1);
    for (int s = 0; s < load.steps_per_report; ++s, ++step) {
      for (int r = 0; r < load.ranks_per_agent; ++r) {
        v1::RankHeartbeat* hb = report->add_heartbeats();
        hb->set_kind(v1::HEARTBEAT_KIND_STEP);
        hb->set_job("bench");
        hb->set_rank(index * load.ranks_per_agent + r);
        hb->set_local_rank(r);
        hb->set_world_size(world);
        hb->set_pid(10000 + r);
        hb->set_step(step);
        hb->set_step_duration_seconds(0.1 + 0.001 * r);
        hb->set_compute_seconds(0.08);
        hb->set_generation(1);
        if (load.signals) AddSignals(step, hb->rank(), hb);
      }
    }
    if (!stream->Write(message)) break;
    sent += report->heartbeats_size();
  }
  stream->WritesDone();
  // Read what the server said (its welcome, plans) before Finish, which
  // otherwise waits for those messages to be read.
  v1::SupervisorMessage ignored;
  while (stream->Read(&ignored)) {
  }
  stream->Finish();
  return sent;
}

struct Result {
  double sent_per_second = 0;
  double taken_per_second = 0;
};

Result Drive(const std::string& address, const ClientTlsOptions& tls, const Load& load,
             const std::function<uint64_t()>& taken) {
  const uint64_t before = taken();
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::milliseconds(static_cast<int64_t>(load.seconds * 1000));
  std::vector<uint64_t> sent(load.agents, 0);
  std::vector<std::thread> threads;
  for (int i = 0; i < load.agents; ++i) {
    threads.emplace_back([&, i] { sent[i] = RunAgent(address, tls, i, load, deadline); });
  }
  for (std::thread& t : threads) t.join();
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  uint64_t total = 0;
  for (uint64_t s : sent) total += s;
  return {total / elapsed, (taken() - before) / elapsed};
}

// The supervisor's per-sweep cost with `ranks` ranks reporting (nodes of 8),
// and the memory the core holds per rank.
void SweepAtScale(int ranks, bool signals) {
  SupervisorOptions options;
  Supervisor core(options);
  const absl::Time t0 = absl::FromUnixSeconds(1'800'000'000);
  const int per_node = 8;
  const int nodes = (ranks + per_node - 1) / per_node;
  std::vector<SessionId> sessions;
  for (int n = 0; n < nodes; ++n) {
    AgentHelloInfo hello;
    hello.node = absl::StrCat("n", n);
    hello.job = "scale";
    hello.incarnation = n + 1;
    hello.generation = 1;
    hello.launcher.state = LauncherState::kRunning;
    sessions.push_back(core.Hello(t0, hello)->session);
  }
  // 60 steps per rank: full compute windows for the straggler detector.
  const auto fill_start = std::chrono::steady_clock::now();
  for (int step = 0; step < 60; ++step) {
    for (int n = 0; n < nodes; ++n) {
      NodeReportInfo report = StepReport("scale", n * per_node,
                                         std::min(ranks, (n + 1) * per_node), per_node, ranks, step);
      if (signals) {
        for (Heartbeat& hb : report.heartbeats) AddSignals(step, static_cast<int>(hb.rank), &hb);
      }
      (void)core.Report(t0 + absl::Milliseconds(100 * step), sessions[n], report);
    }
  }
  const double fill = std::chrono::duration<double>(std::chrono::steady_clock::now() - fill_start).count();
  core.TakeOutput();
  const int sweeps = 20;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < sweeps; ++i) core.Sweep(t0 + absl::Seconds(6) + absl::Milliseconds(i));
  const double per_sweep =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / sweeps;
  std::printf("core at %d ranks (%d nodes): %.0f heartbeats/s applied in one thread; one sweep "
              "%.1f ms (%.2f us per rank)\n",
              ranks, nodes, 60.0 * ranks / fill, per_sweep * 1e3, per_sweep * 1e6 / ranks);
}

// Measures the null server and trainsupd one after the other, plain text
// (`pki` empty) or TLS with the certificates in `pki`; prints both rows and
// the ratio. False if trainsupd would not start.
bool MeasurePair(const std::string& pki, const Load& load, double* ratio) {
  const bool tls = !pki.empty();
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.metrics_listen = "";
  ClientTlsOptions client;
  std::shared_ptr<grpc::ServerCredentials> null_credentials = grpc::InsecureServerCredentials();
  if (tls) {
    options.tls.cert_file = pki + "/server.crt";
    options.tls.key_file = pki + "/server.key";
    client.ca_file = pki + "/ca.crt";
    client.server_name = "trainsupd";
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back(
        {*ReadSmallFile(options.tls.key_file, 1 << 20, "key"),
         *ReadSmallFile(options.tls.cert_file, 1 << 20, "certificate")});
    null_credentials = grpc::SslServerCredentials(ssl);
  }
  const char* suffix = tls ? ", TLS" : "";

  // 1. The ceiling: the same streams into a server that only reads.
  NullAgentService null_service;
  int null_port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", null_credentials, &null_port);
  builder.RegisterService(&null_service);
  std::unique_ptr<grpc::Server> null_server = builder.BuildAndStart();
  Result ceiling = Drive(absl::StrCat("127.0.0.1:", null_port), client, load,
                         [&] { return null_service.heartbeats(); });
  null_server->Shutdown();

  // 2. trainsupd's own AgentService (validation, per-rank state, windows).
  MonotonicClock clock;
  auto server = Server::Start(options, &clock);
  if (!server.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(server.status().message()).c_str());
    return false;
  }
  Result supervisor = Drive((*server)->grpc_address(), client, load, [&] {
    return (*server)->host().Read(
        [](const Supervisor& core, absl::Time) { return core.heartbeats_received(); });
  });
  const uint64_t rejected = (*server)->host().Read(
      [](const Supervisor& core, absl::Time) { return core.rejected().Total(); });
  (*server)->Shutdown();

  std::printf("%-34s %14.0f %14.0f\n", absl::StrCat("null server (gRPC ceiling", suffix, ")").c_str(),
              ceiling.sent_per_second, ceiling.taken_per_second);
  std::printf("%-34s %14.0f %14.0f\n", absl::StrCat("trainsupd AgentService", tls ? " (TLS)" : "").c_str(),
              supervisor.sent_per_second, supervisor.taken_per_second);
  *ratio = supervisor.taken_per_second / ceiling.taken_per_second;
  std::printf("trainsupd / ceiling%s: %.2f (heartbeats refused: %llu)\n", suffix, *ratio,
              static_cast<unsigned long long>(rejected));
  return true;
}

}  // namespace
}  // namespace trainsup

int main(int argc, char** argv) {
  using namespace trainsup;
  setvbuf(stdout, nullptr, _IOLBF, 0);
  Load load;
  int sweep_ranks = 100000;
  if (argc > 1) load.agents = std::atoi(argv[1]);
  if (argc > 2) load.ranks_per_agent = std::atoi(argv[2]);
  if (argc > 3) load.steps_per_report = std::atoi(argv[3]);
  if (argc > 4) load.seconds = std::atof(argv[4]);
  if (argc > 5) sweep_ranks = std::atoi(argv[5]);
  const char* signals = std::getenv("TRAINSUP_BENCH_SIGNALS");
  load.signals = signals != nullptr && std::string(signals) == "1";
  std::printf("load: %d agent streams x %d ranks, %d steps per report (%d heartbeats per "
              "message), %.0fs per run%s\n",
              load.agents, load.ranks_per_agent, load.steps_per_report,
              load.ranks_per_agent * load.steps_per_report, load.seconds,
              load.signals ? ", STEPs with training signals" : "");

  std::printf("%-34s %14s %14s\n", "", "sent/s", "taken/s");
  double plain_ratio = 0;
  if (!MeasurePair("", load, &plain_ratio)) return 1;
  if (const char* pki = std::getenv("TRAINSUP_BENCH_PKI"); pki != nullptr && *pki != '\0') {
    double tls_ratio = 0;
    if (!MeasurePair(pki, load, &tls_ratio)) return 1;
    std::printf("trainsupd / ceiling: %.2f plain text, %.2f over TLS\n", plain_ratio, tls_ratio);
  }
  if (sweep_ranks > 0) SweepAtScale(sweep_ranks, load.signals);
  return 0;
}
