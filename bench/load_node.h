#ifndef TRAINSUP_BENCH_LOAD_NODE_H_
#define TRAINSUP_BENCH_LOAD_NODE_H_

// The simulated agents of agent_load: one LoadNode per node, each with its
// own stream to trainsupd, driven by one ticker thread per load process
// (LoadDriver). The ranks' heartbeats are not simulated one by one: every
// rank steps on a deterministic schedule (StepSchedule), so a node's report
// carries exactly the events its ranks produced since the last report, and
// the measuring process can tell when any step was produced without asking.

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "trainsup/v1/agent.grpc.pb.h"

namespace trainsup {

// Wall-clock nanoseconds since the epoch: the one clock every load process
// and trainsupd's event times share on one machine.
int64_t WallNowNs();

struct LoadConfig {
  std::string job = "load";
  int nodes = 50;
  int ranks_per_node = 8;
  double step_rate = 1.0;            // steps per second of every rank
  double report_interval_s = 0.2;    // until the supervisor's settings say otherwise
  int channels = 0;                  // 0: one channel (TCP connection) per node
  bool phases = true;                // COMPUTE_BEGIN/END around each STEP, as the helper sends
  double connect_rate = 2000;        // new streams per second while connecting
  bool keepalive = true;             // the agent's keepalive (10 s ping, 5 s timeout)
  int64_t hang_rank = -1;
  int64_t kill_rank = -1;

  uint32_t world_size() const { return static_cast<uint32_t>(nodes * ranks_per_node); }
};

// "load-n00042": the node name of node index 42 (the measuring process
// checks the culprit's node against it).
std::string NodeName(int index);

// When each rank's events happen. Rank r of a generation started at `origin`
// begins step k at origin + offset(r) + k * period and completes it one
// period later; offset(r) spreads the ranks evenly over a period (jittered
// phases), so that 100,000 ranks do not all step at the same instant. With
// phases, the events of a rank, numbered from 0, are COMPUTE_BEGIN(0), then
// per step k: COMPUTE_END(k) at 80% of the step, STEP(k) and COMPUTE_BEGIN(k+1)
// at its end. Without, only STEP(k).
class StepSchedule {
 public:
  StepSchedule(double step_rate, bool phases);

  struct Event {
    v1::HeartbeatKind kind;
    int64_t step;
    int64_t at_ns;
  };
  int64_t period_ns() const { return period_ns_; }
  int64_t Offset(uint32_t rank) const;
  // Events rank `rank` produced at or before `t_ns`.
  int64_t EventsThrough(int64_t origin_ns, uint32_t rank, int64_t t_ns) const;
  Event EventAt(int64_t origin_ns, uint32_t rank, int64_t index) const;
  // When STEP `step` was produced (completed).
  int64_t StepDoneAt(int64_t origin_ns, uint32_t rank, int64_t step) const;
  // Rank `hung` hangs at `fault_ns`: the events a rank produces at most. A
  // job's ranks meet in a collective every step, so the others finish the
  // steps the hung rank finished, then block in the next one's collective
  // (COMPUTE_END sent); the hung rank stops inside its compute
  // (COMPUTE_BEGIN sent), which is how the supervisor tells it apart.
  int64_t EventsBeforeHang(int64_t origin_ns, uint32_t hung, int64_t fault_ns, bool is_hung) const;

 private:
  int64_t period_ns_;
  int64_t compute_ns_;
  bool phases_;
};

// What one load process did, cumulative. Written by reactor and ticker
// threads, read by the control loop.
struct LoadCounters {
  std::atomic<uint64_t> heartbeats_sent{0};    // in reports whose write succeeded
  std::atomic<uint64_t> reports_sent{0};
  std::atomic<uint64_t> reports_late{0};       // due while the previous write was in flight
  std::atomic<uint64_t> write_failures{0};
  std::atomic<uint64_t> sessions{0};           // streams opened
  std::atomic<uint64_t> sessions_ended{0};     // streams that ended before shutdown
  std::atomic<uint64_t> nodes_welcomed{0};     // nodes welcomed at least once
  std::atomic<uint64_t> stops{0};              // stop commands obeyed
  std::atomic<uint64_t> starts{0};             // start commands obeyed
  std::atomic<uint64_t> plans{0};              // checkpoint plans taken
};

class LoadDriver;

// One simulated agent: its node's launcher, rank processes and report
// state, and the stream (a Session) while one is up. Thread-safe.
class LoadNode {
 public:
  LoadNode(LoadDriver* driver, int index);
  ~LoadNode();
  LoadNode(const LoadNode&) = delete;
  LoadNode& operator=(const LoadNode&) = delete;

  // The ticker's turn: opens a stream, or sends the report when due.
  // Returns when the node wants its next turn.
  int64_t Tick(int64_t now_ns);
  // Ends the stream for good (shutdown).
  void Cancel();
  // The report interval in force (the supervisor's settings, else ours).
  double interval_s() const;

 private:
  class Session;
  friend class Session;

  // Session callbacks (reactor threads).
  void OnMessage(const v1::SupervisorMessage& m);
  // Each returns true when the session must now release its hold on the call.
  bool WriteDone(bool ok);
  bool OnReadEnded();
  void OnSessionDone(const grpc::Status& status);

  void FillHello(v1::AgentHello* hello) const;
  void LaunchLocked(uint64_t generation, int64_t origin_ns);
  void StopLocked(bool collect_stacks);
  // Builds the next report into out_; returns its heartbeat count.
  uint64_t BuildReportLocked(int64_t now_ns);
  void BuildStacksLocked();
  void FillProcessesLocked(int64_t now_ns);
  int64_t FaultAtLocked(uint32_t local_rank) const;

  LoadDriver* const driver_;
  const int index_;
  const std::string name_;
  const uint64_t incarnation_;

  mutable std::mutex mu_;
  std::shared_ptr<Session> session_;  // the stream, while one is up
  bool session_alive_ = false;     // its read side has not ended
  bool welcomed_ = false;
  bool writing_ = false;           // out_ is being written: do not touch it
  bool ever_welcomed_ = false;
  bool cancelled_ = false;
  bool quarantined_ = false;
  int64_t reconnect_at_ns_ = 0;
  int64_t interval_ns_;
  uint64_t in_flight_heartbeats_ = 0;
  bool in_flight_is_report_ = false;

  // The launcher and its ranks.
  bool launched_ = false;
  bool running_ = false;
  bool first_generation_ = true;   // faults are injected in the first generation only
  uint64_t generation_ = 0;
  int64_t origin_ns_ = 0;          // 0: the driver's common origin (set at "go")
  int64_t stopped_at_ns_ = 0;
  bool start_pending_ = false;     // the ranks' START heartbeats are not sent yet
  bool stacks_pending_ = false;
  uint64_t sequence_ = 0;
  uint64_t plans_held_through_ = 0;
  std::vector<v1::CheckpointPlan> plans_;
  std::vector<int64_t> events_sent_;  // per local rank, in the current generation
  // As the agent's batcher: a report whose write failed goes again on the
  // next stream (events_sent_ back to before it), and a new stream first
  // re-sends each rank's latest step and phase (they may have been lost in
  // flight with the old connection).
  std::vector<int64_t> events_before_report_;
  uint64_t report_generation_ = 0;
  bool resend_latest_ = false;

  // Reused for every message: no allocation per heartbeat once warm.
  v1::AgentMessage out_;
};

// The nodes of one load process and the thread that gives them their turns.
class LoadDriver {
 public:
  // Nodes [first, last) of `config`.
  LoadDriver(LoadConfig config, int first, int last);
  ~LoadDriver();

  // Connects (paced by config.connect_rate) and starts the ticker.
  void Start(const std::string& target);
  // Steps begin at `origin_ns`; the fault rank stops at `fault_ns`.
  void Go(int64_t origin_ns, int64_t fault_ns);
  void Shutdown();
  // The mean report interval in force over the nodes, seconds.
  double MeanIntervalSeconds() const;

  const LoadConfig& config() const { return config_; }
  const StepSchedule& schedule() const { return schedule_; }
  LoadCounters& counters() { return counters_; }
  int node_count() const { return last_ - first_; }
  int64_t origin_ns() const { return origin_ns_.load(); }
  int64_t fault_ns() const { return fault_ns_.load(); }
  bool shutting_down() const { return shutting_down_.load(); }
  v1::AgentService::Stub* StubFor(int index);
  // A node wants its turn now (a command arrived).
  void Wake(int index);

 private:
  void Run();

  const LoadConfig config_;
  const StepSchedule schedule_;
  const int first_;
  const int last_;
  LoadCounters counters_;
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::vector<std::unique_ptr<v1::AgentService::Stub>> stubs_;
  std::vector<std::unique_ptr<LoadNode>> nodes_;
  std::atomic<int64_t> origin_ns_{0};
  std::atomic<int64_t> fault_ns_{0};
  std::atomic<bool> shutting_down_{false};
  std::atomic<int> live_sessions_{0};
  const int64_t mono_minus_wall_ns_;
  std::mutex wake_mu_;
  std::vector<int> woken_;
  std::thread ticker_;
  friend class LoadNode;
};

}  // namespace trainsup

#endif  // TRAINSUP_BENCH_LOAD_NODE_H_
