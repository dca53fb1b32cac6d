#include "bench/load_probe.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <utility>

namespace trainsup {
namespace {

constexpr int64_t kNsPerS = 1'000'000'000;

int64_t TimestampNs(const google::protobuf::Timestamp& t) {
  return t.seconds() * kNsPerS + t.nanos();
}

// Operator calls get 120 s: a slow answer is a figure, not an error.
void SetDeadline(grpc::ClientContext* context) {
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
}

double SecondsSince(int64_t start_ns) {
  return static_cast<double>(WallNowNs() - start_ns) / kNsPerS;
}

// The call the operator probe times under load and the gate's yardstick
// times before it: one page of the job's events (limit 100).
grpc::Status ListEventsPage(v1::OperatorService::Stub* stub, grpc::ClientContext* context,
                            const std::string& job) {
  v1::ListEventsRequest q;
  q.set_job_id(job);
  q.set_limit(100);
  v1::ListEventsResponse r;
  return stub->ListEvents(context, q, &r);
}

}  // namespace

EventWatcher::EventWatcher(std::shared_ptr<grpc::Channel> channel, std::string job)
    : stub_(v1::OperatorService::NewStub(channel)) {
  thread_ = std::thread([this, job = std::move(job)] {
    // The stream can break under load (trainsupd not reading for seconds):
    // watch again from the last event seen, until cancelled.
    uint64_t last_id = 0;
    while (!cancelled_.load()) {
      grpc::ClientContext context;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (cancelled_.load()) break;
        context_ = &context;
      }
      v1::WatchEventsRequest request;
      request.set_job_id(job);
      request.set_after_id(last_id);
      std::unique_ptr<grpc::ClientReader<v1::Event>> reader = stub_->WatchEvents(&context, request);
      v1::Event e;
      while (reader->Read(&e)) {
        last_id = std::max<uint64_t>(last_id, e.id());
        SeenEvent seen;
        seen.kind = e.kind();
        if (e.has_rank()) seen.rank = e.rank();
        seen.node = e.node();
        seen.generation = e.generation();
        seen.received_ns = WallNowNs();
        seen.time_ns = e.has_time() ? TimestampNs(e.time()) : seen.received_ns;
        std::lock_guard<std::mutex> lock(mu_);
        events_.push_back(std::move(seen));
        changed_.notify_all();
      }
      reader->Finish();
      {
        std::lock_guard<std::mutex> lock(mu_);
        context_ = nullptr;
      }
      if (!cancelled_.load()) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  });
}

EventWatcher::~EventWatcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_.store(true);
    if (context_ != nullptr) context_->TryCancel();
  }
  thread_.join();
}

std::optional<SeenEvent> EventWatcher::AwaitFirst(
    int64_t after_ns, int64_t deadline_ns, const std::function<bool(const SeenEvent&)>& match) {
  std::unique_lock<std::mutex> lock(mu_);
  size_t checked = 0;
  for (;;) {
    for (; checked < events_.size(); ++checked) {
      const SeenEvent& e = events_[checked];
      if (e.time_ns >= after_ns && match(e)) return e;
    }
    const int64_t left = deadline_ns - WallNowNs();
    if (left <= 0) return std::nullopt;
    changed_.wait_for(lock, std::chrono::nanoseconds(left));
  }
}

int EventWatcher::Count(const std::string& kind, int64_t from_ns, int64_t to_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  int n = 0;
  for (const SeenEvent& e : events_) n += e.kind == kind && e.time_ns >= from_ns && e.time_ns < to_ns;
  return n;
}

AgeSampler::AgeSampler(const StepSchedule& schedule, int64_t origin_ns, uint32_t world_size,
                       int64_t exclude_rank)
    : schedule_(schedule), origin_ns_(origin_ns), world_size_(world_size), exclude_rank_(exclude_rank) {}

void AgeSampler::Sample(int64_t now_ns, const std::vector<std::pair<uint32_t, int64_t>>& ranks) {
  std::vector<int64_t> seen(world_size_, -1);
  for (const auto& [rank, step] : ranks) {
    if (rank < world_size_) seen[rank] = step;
  }
  std::vector<double> ages;
  ages.reserve(world_size_);
  for (uint32_t rank = 0; rank < world_size_; ++rank) {
    if (static_cast<int64_t>(rank) == exclude_rank_) continue;  // the fault's rank lags on purpose
    const int64_t oldest_unseen = schedule_.StepDoneAt(origin_ns_, rank, seen[rank] + 1);
    ages.push_back(oldest_unseen <= now_ns ? static_cast<double>(now_ns - oldest_unseen) / kNsPerS
                                           : 0.0);
  }
  std::lock_guard<std::mutex> lock(mu_);
  ages_.insert(ages_.end(), ages.begin(), ages.end());
  ++samples_;
}

Summary AgeSampler::ages() const {
  std::lock_guard<std::mutex> lock(mu_);
  return Summarize(ages_);
}

int AgeSampler::samples() const {
  std::lock_guard<std::mutex> lock(mu_);
  return samples_;
}

OperatorProber::OperatorProber(std::shared_ptr<grpc::Channel> channel, std::string job,
                               double pause_s)
    : stub_(v1::OperatorService::NewStub(channel)), job_(std::move(job)), pause_s_(pause_s) {
  for (const char* name : {"ListJobs", "GetJob", "ListNodes", "ListEvents (limit 100)",
                           "ListRanks (top 20 by compute p99)", "StreamRanks (full listing)"}) {
    verbs_.push_back(Verb{name, {}, 0, ""});
  }
}

OperatorProber::~OperatorProber() { Stop(); }

void OperatorProber::Start(AgeSampler* ages) {
  ages_ = ages;
  thread_ = std::thread([this] { Run(); });
}

void OperatorProber::Stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

std::vector<OperatorProber::Verb> OperatorProber::verbs() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Verb> copy = verbs_;
  if (fell_back_.load()) copy.back().name = "ListRanks (full listing; no StreamRanks yet)";
  return copy;
}

void OperatorProber::Record(size_t verb, double seconds, const grpc::Status& status) {
  std::lock_guard<std::mutex> lock(mu_);
  Verb& v = verbs_[verb];
  if (status.ok()) {
    v.seconds.push_back(seconds);
    return;
  }
  if (v.errors++ == 0) v.first_error = std::to_string(status.error_code()) + ": " + status.error_message();
}

bool OperatorProber::FullListing(std::vector<std::pair<uint32_t, int64_t>>* ranks,
                                 int64_t* as_of_ns, grpc::Status* status) {
  v1::ListRanksRequest request;
  request.set_job_id(job_);
  v1::ListRanksResponse page;
  auto take = [&](const v1::ListRanksResponse& p) {
    if (p.has_as_of() && *as_of_ns == 0) *as_of_ns = TimestampNs(p.as_of());
    for (const v1::Rank& r : p.ranks()) ranks->emplace_back(r.rank(), r.step());
  };
  if (!fell_back_.load()) {
    grpc::ClientContext context;
    SetDeadline(&context);
    std::unique_ptr<grpc::ClientReader<v1::ListRanksResponse>> reader =
        stub_->StreamRanks(&context, request);
    while (reader->Read(&page)) take(page);
    *status = reader->Finish();
    if (status->error_code() != grpc::StatusCode::UNIMPLEMENTED) return status->ok();
    // The server predates StreamRanks: one ListRanks (which fails with
    // RESOURCE_EXHAUSTED, or beyond the receive limit, for big jobs).
    fell_back_.store(true);
    ranks->clear();
  }
  grpc::ClientContext context;
  SetDeadline(&context);
  *status = stub_->ListRanks(&context, request, &page);
  if (status->ok()) take(page);
  return status->ok();
}

void OperatorProber::Run() {
  // Every verb at least once, even when the first answers outlast the
  // steady phase (the load still runs until the end of the run).
  for (size_t turn = 0; !stop_.load() || turn < verbs_.size(); ++turn) {
    const size_t verb = turn % verbs_.size();
    grpc::ClientContext context;
    SetDeadline(&context);
    grpc::Status status;
    const int64_t start = WallNowNs();
    switch (verb) {
      case 0: {
        v1::ListJobsResponse r;
        status = stub_->ListJobs(&context, v1::ListJobsRequest(), &r);
        break;
      }
      case 1: {
        v1::GetJobRequest q;
        q.set_job_id(job_);
        v1::JobDetail r;
        status = stub_->GetJob(&context, q, &r);
        break;
      }
      case 2: {
        v1::ListNodesResponse r;
        status = stub_->ListNodes(&context, v1::ListNodesRequest(), &r);
        break;
      }
      case 3:
        status = ListEventsPage(stub_.get(), &context, job_);
        break;
      case 4: {
        v1::ListRanksRequest q;  // `trainsupctl ranks --top 20`
        q.set_job_id(job_);
        q.set_sort(v1::RANK_SORT_COMPUTE_P99);
        q.set_limit(20);
        v1::ListRanksResponse r;
        status = stub_->ListRanks(&context, q, &r);
        break;
      }
      default: {
        std::vector<std::pair<uint32_t, int64_t>> ranks;
        int64_t as_of = 0;
        if (FullListing(&ranks, &as_of, &status) && ages_ != nullptr) {
          ages_->Sample(as_of != 0 ? as_of : start, ranks);
        }
        break;
      }
    }
    Record(verb, SecondsSince(start), status);
    // A pause between calls: an operator, not a flood.
    if (!stop_.load()) std::this_thread::sleep_for(std::chrono::duration<double>(pause_s_));
  }
}

Summary UnloadedListEvents(const std::shared_ptr<grpc::Channel>& channel, const std::string& job,
                           int calls) {
  std::unique_ptr<v1::OperatorService::Stub> stub = v1::OperatorService::NewStub(channel);
  std::vector<double> seconds;
  for (int i = 0; i < calls; ++i) {
    grpc::ClientContext context;
    SetDeadline(&context);
    const int64_t start = WallNowNs();
    if (ListEventsPage(stub.get(), &context, job).ok()) seconds.push_back(SecondsSince(start));
  }
  return Summarize(std::move(seconds));
}

CtlProber::CtlProber(std::string trainsupctl, std::string supervisor, double every_s)
    : trainsupctl_(std::move(trainsupctl)), supervisor_(std::move(supervisor)), every_s_(every_s) {
  thread_ = std::thread([this] { Run(); });
}

CtlProber::~CtlProber() { Stop(); }

void CtlProber::Stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

std::vector<double> CtlProber::seconds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return seconds_;
}

int CtlProber::failures() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failures_;
}

void CtlProber::Run() {
  const std::string address = "--supervisor=" + supervisor_;
  while (!stop_.load()) {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
    std::vector<char*> argv = {const_cast<char*>(trainsupctl_.c_str()),
                               const_cast<char*>(address.c_str()), const_cast<char*>("jobs"),
                               nullptr};
    const int64_t start = WallNowNs();
    pid_t pid = 0;
    int status = 0;
    const bool ran = posix_spawn(&pid, trainsupctl_.c_str(), &actions, nullptr, argv.data(),
                                 environ) == 0 &&
                     waitpid(pid, &status, 0) == pid;
    const double seconds = SecondsSince(start);
    posix_spawn_file_actions_destroy(&actions);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (ran && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        seconds_.push_back(seconds);
      } else {
        ++failures_;
      }
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(every_s_));
  }
}

MetricsScraper::MetricsScraper(std::string host_port, double every_s)
    : host_port_(std::move(host_port)) {
  thread_ = std::thread([this, every_s] {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      lock.unlock();
      MetricsScrape s = ScrapeMetrics(host_port_, 120);
      lock.lock();
      if (s.ok) {
        seconds_.push_back(s.seconds);
        bytes_ = s.bytes;
      } else {
        ++errors_;
      }
      stop_cv_.wait_for(lock, std::chrono::duration<double>(every_s), [this] { return stop_; });
    }
  });
}

MetricsScraper::~MetricsScraper() { Stop(); }

void MetricsScraper::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Summary MetricsScraper::seconds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return Summarize(seconds_);
}

size_t MetricsScraper::last_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

int MetricsScraper::errors() const {
  std::lock_guard<std::mutex> lock(mu_);
  return errors_;
}

}  // namespace trainsup
