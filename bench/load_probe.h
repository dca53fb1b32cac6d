#ifndef TRAINSUP_BENCH_LOAD_PROBE_H_
#define TRAINSUP_BENCH_LOAD_PROBE_H_

// The operator's side of an agent_load run, each on its own thread and its
// own channel: the events (WatchEvents), the verbs' latencies while the load
// runs, the ranks' heartbeat ages, and /metrics scrapes.

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench/load_node.h"
#include "bench/load_report.h"
#include "trainsup/v1/operator.grpc.pb.h"

namespace trainsup {

struct SeenEvent {
  std::string kind;
  std::optional<uint32_t> rank;
  std::string node;
  uint64_t generation = 0;
  int64_t time_ns = 0;      // the supervisor's timestamp (else when received)
  int64_t received_ns = 0;
};

// Every event of the job, as WatchEvents delivers them.
class EventWatcher {
 public:
  EventWatcher(std::shared_ptr<grpc::Channel> channel, std::string job);
  ~EventWatcher();
  // The first event at or after `after_ns` that `match` accepts, waiting
  // until `deadline_ns`; nullopt if none came.
  std::optional<SeenEvent> AwaitFirst(int64_t after_ns, int64_t deadline_ns,
                                      const std::function<bool(const SeenEvent&)>& match);
  // Events of `kind` with time in [from_ns, to_ns).
  int Count(const std::string& kind, int64_t from_ns, int64_t to_ns);

 private:
  std::unique_ptr<v1::OperatorService::Stub> stub_;
  std::atomic<bool> cancelled_{false};
  std::mutex mu_;
  grpc::ClientContext* context_ = nullptr;  // the watch in progress
  std::condition_variable changed_;
  std::vector<SeenEvent> events_;
  std::thread thread_;
};

// How stale the supervisor's view of each rank is, from full listings
// compared with the schedule: for each rank, now - the production time of
// the oldest STEP heartbeat the supervisor has not seen (0 when it has seen
// every step produced by now). "now" is the listing's as_of when the server
// sets it, else the time the request was sent.
class AgeSampler {
 public:
  AgeSampler(const StepSchedule& schedule, int64_t origin_ns, uint32_t world_size,
             int64_t exclude_rank);
  // One full listing: (rank, step) of every rank listed; unlisted ranks
  // count as having no step seen.
  void Sample(int64_t now_ns, const std::vector<std::pair<uint32_t, int64_t>>& ranks);
  Summary ages() const;
  int samples() const;

 private:
  const StepSchedule schedule_;
  const int64_t origin_ns_;
  const uint32_t world_size_;
  const int64_t exclude_rank_;
  mutable std::mutex mu_;
  std::vector<double> ages_;
  int samples_ = 0;
};

// Calls each operator verb in turn until stopped, each with a 120 s
// deadline (a slow answer is measured, not lost). The full listing also
// feeds an AgeSampler.
class OperatorProber {
 public:
  struct Verb {
    std::string name;
    std::vector<double> seconds;
    int errors = 0;
    std::string first_error;
  };
  OperatorProber(std::shared_ptr<grpc::Channel> channel, std::string job, double pause_s);
  ~OperatorProber();
  void Start(AgeSampler* ages);
  // Returns once every verb was called at least once.
  void Stop();
  std::vector<Verb> verbs() const;
  // The full listing came from ListRanks: the server has no StreamRanks yet.
  bool listing_fell_back() const { return fell_back_.load(); }

 private:
  void Run();
  void Record(size_t verb, double seconds, const grpc::Status& status);
  bool FullListing(std::vector<std::pair<uint32_t, int64_t>>* ranks, int64_t* as_of_ns,
                   grpc::Status* status);

  std::unique_ptr<v1::OperatorService::Stub> stub_;
  const std::string job_;
  const double pause_s_;
  AgeSampler* ages_ = nullptr;
  std::atomic<bool> stop_{false};
  std::atomic<bool> fell_back_{false};
  mutable std::mutex mu_;
  std::vector<Verb> verbs_;
  std::thread thread_;
};

// ListEvents (limit 100) `calls` times in turn, before any load: the
// supervisor's own unloaded latency on this machine, that a gate's budget is
// a multiple of (docs/benchmarks.md, "The scale gate").
Summary UnloadedListEvents(const std::shared_ptr<grpc::Channel>& channel, const std::string& job,
                           int calls);

// `trainsupctl --supervisor ADDRESS jobs` as a new process every `every_s`,
// as an operator runs it: process start, channel, call, table, exit; timed
// from spawn to exit. Until stopped.
class CtlProber {
 public:
  CtlProber(std::string trainsupctl, std::string supervisor, double every_s);
  ~CtlProber();
  void Stop();
  std::vector<double> seconds() const;  // of the runs that exited 0
  int failures() const;

 private:
  void Run();

  const std::string trainsupctl_;
  const std::string supervisor_;
  const double every_s_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::vector<double> seconds_;
  int failures_ = 0;
  std::thread thread_;
};

// GET /metrics every `every_s` until stopped.
class MetricsScraper {
 public:
  MetricsScraper(std::string host_port, double every_s);
  ~MetricsScraper();
  void Stop();
  Summary seconds() const;
  size_t last_bytes() const;
  int errors() const;

 private:
  const std::string host_port_;
  mutable std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::vector<double> seconds_;
  size_t bytes_ = 0;
  int errors_ = 0;
  std::thread thread_;
};

}  // namespace trainsup

#endif  // TRAINSUP_BENCH_LOAD_PROBE_H_
