// Ingest's steady path allocates nothing per heartbeat: a stream reads each
// message into an arena emptied before the next read, converts the report
// into a reused buffer, and the core applies heartbeats to state that
// already exists. Counted with a replaced global
// operator new, so that a regression shows as a number, not a benchmark.
#include <atomic>
#include <cstdlib>
#include <new>
#include <string>

#include <gtest/gtest.h>

#include "daemon/agent_service.h"
#include "daemon/core/supervisor.h"
#include "daemon/proto_convert.h"
#include "trainsup/v1/agent.pb.h"

namespace {
std::atomic<uint64_t> g_allocations{0};
}  // namespace

void* operator new(std::size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace trainsup {
namespace {

// A node's report: `ranks` ranks, each one step further. The agent leaves
// out its own job's name (a long one would be a heap string per heartbeat).
void MakeReport(uint32_t ranks, int64_t step, v1::NodeReport* report) {
  report->Clear();
  for (uint32_t r = 0; r < ranks; ++r) {
    v1::RankHeartbeat* hb = report->add_heartbeats();
    hb->set_kind(v1::HEARTBEAT_KIND_STEP);
    hb->set_rank(r);
    hb->set_local_rank(r);
    hb->set_world_size(ranks);
    hb->set_pid(1000 + r);
    hb->set_step(step);
    hb->set_step_duration_seconds(1.0);
    hb->set_compute_seconds(0.5);
    hb->set_loss(2.0);
    hb->set_generation(1);
  }
}

// Allocations per report over `reports` steady reports of `ranks` ranks.
double AllocationsPerReport(uint32_t ranks, int reports) {
  Supervisor core{SupervisorOptions()};
  absl::Time now = absl::FromUnixSeconds(1000);
  AgentHelloInfo hello;
  hello.node = "node-a";
  hello.job = "llama-70b-pretrain-slurm-1234567";
  hello.incarnation = 1;
  hello.generation = 1;
  absl::StatusOr<Supervisor::HelloResult> session = core.Hello(now, hello);
  EXPECT_TRUE(session.ok());
  v1::AgentMessage built;
  google::protobuf::Arena arena(AgentReadArenaOptions());
  NodeReportInfo scratch;
  int64_t step = 0;
  auto report = [&] {
    now += absl::Seconds(1);
    // As gRPC delivers it: parsed into the stream's reused message.
    const uint64_t not_counted = g_allocations.load();
    MakeReport(ranks, ++step, built.mutable_report());
    const std::string bytes = built.SerializeAsString();
    g_allocations.store(not_counted);
    arena.Reset();
    auto* wire = google::protobuf::Arena::CreateMessage<v1::AgentMessage>(&arena);
    EXPECT_TRUE(wire->ParseFromString(bytes));
    FromProto(wire->report(), &scratch);
    EXPECT_TRUE(core.Report(now, session->session, scratch).ok());
    core.TakeOutput();
  };
  // Warm up: every rank's state and step windows exist, the buffers are grown.
  for (int i = 0; i < 200; ++i) report();
  const uint64_t before = g_allocations.load();
  for (int i = 0; i < reports; ++i) report();
  return static_cast<double>(g_allocations.load() - before) / reports;
}

TEST(IngestAllocationTest, SteadyReportsAllocateNothingPerHeartbeat) {
  const double small = AllocationsPerReport(8, 100);
  const double large = AllocationsPerReport(512, 100);
  std::printf("allocations per steady report: %.2f at 8 heartbeats, %.2f at 512\n", small,
              large);
  // A report costs a few allocations (the arena's blocks, which grow
  // geometrically), never one per heartbeat.
  EXPECT_LE(small, 4.0);
  EXPECT_LE(large, 10.0);
}

}  // namespace
}  // namespace trainsup
