#ifndef TRAINSUP_TESTS_INTEGRATION_FAKE_SUPERVISOR_H_
#define TRAINSUP_TESTS_INTEGRATION_FAKE_SUPERVISOR_H_

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "trainsup/v1/agent.grpc.pb.h"

namespace trainsup {
namespace testing {

// An AgentService played by the test on a loopback port, for the agent's
// side of the stream: it records every message an agent sends (with when it
// arrived), welcomes each hello as told (or refuses it with a status), and
// sends the commands the test queues. It can stop reading for a while, as a
// busy supervisor does (what an agent writes then waits in the transport).
// Thread-safe.
class FakeSupervisor final : public v1::AgentService::Service {
 public:
  struct Received {
    v1::AgentMessage message;
    absl::Time at;
  };

  FakeSupervisor() {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
    address_ = "127.0.0.1:" + std::to_string(port);
  }
  ~FakeSupervisor() override { Shutdown(); }

  const std::string& address() const { return address_; }

  // Ends every stream and stops serving. Idempotent.
  void Shutdown() {
    {
      absl::MutexLock lock(&mu_);
      shutting_down_ = true;
    }
    if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now());
    server_.reset();
  }

  // The welcome each hello gets from now on.
  void SetWelcome(const v1::Welcome& welcome) {
    absl::MutexLock lock(&mu_);
    welcome_ = welcome;
    refusal_.reset();
  }
  // From now on each hello is refused with `status`.
  void Refuse(const grpc::Status& status) {
    absl::MutexLock lock(&mu_);
    refusal_ = status;
  }
  // Sends `command` on the current stream (or the next one).
  void Send(const v1::SupervisorMessage& command) {
    absl::MutexLock lock(&mu_);
    commands_.push_back(command);
  }

  // From now on no message is read (after the hello) until ResumeReading.
  void PauseReading() {
    absl::MutexLock lock(&mu_);
    reading_paused_ = true;
  }
  void ResumeReading() {
    absl::MutexLock lock(&mu_);
    reading_paused_ = false;
  }

  // Every message received so far, across streams, in arrival order.
  std::vector<Received> received() const {
    absl::MutexLock lock(&mu_);
    return received_;
  }
  // How many hellos were refused.
  int refusals() const {
    absl::MutexLock lock(&mu_);
    return refusals_;
  }
  // Waits up to `timeout` until `condition(received())` holds; returns its last value.
  bool AwaitReceived(const std::function<bool(const std::vector<Received>&)>& condition,
                     absl::Duration timeout = absl::Seconds(10)) const {
    absl::MutexLock lock(&mu_);
    auto holds = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return condition(received_); };
    return mu_.AwaitWithTimeout(absl::Condition(&holds), timeout);
  }

  grpc::Status Connect(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::SupervisorMessage, v1::AgentMessage>* stream) override {
    v1::AgentMessage hello;
    if (!stream->Read(&hello) || !hello.has_hello()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no hello");
    }
    v1::SupervisorMessage welcome;
    {
      absl::MutexLock lock(&mu_);
      received_.push_back(Received{hello, absl::Now()});
      if (refusal_.has_value()) {
        ++refusals_;
        return *refusal_;
      }
      *welcome.mutable_welcome() = welcome_;
    }
    // One writer (this thread's helper) and one reader (this thread) at a time.
    bool ended = false;
    std::thread writer([&] {
      if (!stream->Write(welcome)) return;
      for (;;) {
        v1::SupervisorMessage command;
        {
          absl::MutexLock lock(&mu_);
          auto ready = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
            return ended || shutting_down_ || !commands_.empty();
          };
          mu_.Await(absl::Condition(&ready));
          if (ended || shutting_down_) return;
          command = commands_.front();
          commands_.pop_front();
        }
        if (!stream->Write(command)) return;
      }
    });
    v1::AgentMessage message;
    for (;;) {
      {
        absl::MutexLock lock(&mu_);
        auto reading = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
          return !reading_paused_ || shutting_down_;
        };
        mu_.Await(absl::Condition(&reading));
      }
      if (!stream->Read(&message)) break;
      absl::MutexLock lock(&mu_);
      received_.push_back(Received{message, absl::Now()});
    }
    {
      absl::MutexLock lock(&mu_);
      ended = true;
    }
    writer.join();
    return grpc::Status::OK;
  }

 private:
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  mutable absl::Mutex mu_;
  v1::Welcome welcome_ ABSL_GUARDED_BY(mu_);
  std::optional<grpc::Status> refusal_ ABSL_GUARDED_BY(mu_);
  std::deque<v1::SupervisorMessage> commands_ ABSL_GUARDED_BY(mu_);
  std::vector<Received> received_ ABSL_GUARDED_BY(mu_);
  int refusals_ ABSL_GUARDED_BY(mu_) = 0;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  bool reading_paused_ ABSL_GUARDED_BY(mu_) = false;
};

// The reports among `received`, in order.
inline std::vector<v1::NodeReport> Reports(const std::vector<FakeSupervisor::Received>& received) {
  std::vector<v1::NodeReport> reports;
  for (const FakeSupervisor::Received& r : received) {
    if (r.message.has_report()) reports.push_back(r.message.report());
  }
  return reports;
}

}  // namespace testing
}  // namespace trainsup

#endif  // TRAINSUP_TESTS_INTEGRATION_FAKE_SUPERVISOR_H_
