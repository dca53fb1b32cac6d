#include "daemon/agent_service.h"

#include <deque>
#include <memory>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "common/log.h"
#include "daemon/agent_intake.h"

namespace trainsup {
namespace {

class AgentStream;

// The host's handle on a stream. It outlives the stream: once the stream is
// done, Send and Close are dropped.
class StreamChannel final : public AgentChannel {
 public:
  explicit StreamChannel(AgentStream* stream) : stream_(stream) {}
  void Send(const v1::SupervisorMessage& message) override;
  void Close(const grpc::Status& status) override;
  // Called by the stream when it is done; blocks while a Send is in progress.
  void Detach() {
    absl::MutexLock lock(&mu_);
    stream_ = nullptr;
  }

 private:
  absl::Mutex mu_;
  AgentStream* stream_ ABSL_GUARDED_BY(mu_);
};

// One agent's stream. Reads: hello first, then reports. Writes: a queue, one
// write in flight at a time. Deletes itself in OnDone.
class AgentStream final : public grpc::ServerBidiReactor<v1::AgentMessage, v1::SupervisorMessage> {
 public:
  AgentStream(SupervisorHost* host, std::string peer)
      : host_(host), peer_(std::move(peer)), channel_(std::make_shared<StreamChannel>(this)) {
    StartRead(&incoming_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the agent closed its side, or the stream broke
      RequestFinish(grpc::Status::OK);
      return;
    }
    grpc::Status status = ApplyAgentMessage(*host_, incoming_, channel_, peer_, &session_);
    if (!status.ok()) {
      TRAINSUP_LOG_WARN("agent %s: %s", peer_, status.error_message());
      RequestFinish(status);
      return;
    }
    StartRead(&incoming_);
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    outbox_.pop_front();
    if (!ok) outbox_.clear();  // the stream is broken; nothing more will go out
    if (!outbox_.empty()) {
      StartWrite(&outbox_.front());
      return;
    }
    writing_ = false;
    if (finish_requested_ && !finished_) {
      finished_ = true;
      Finish(finish_status_);
    }
  }

  void OnDone() override {
    channel_->Detach();
    if (session_ != 0) host_->Disconnected(session_);
    delete this;
  }

  // Queues a message; starts writing it if nothing is in flight.
  void Enqueue(const v1::SupervisorMessage& message) {
    absl::MutexLock lock(&mu_);
    if (finish_requested_) return;
    outbox_.push_back(message);
    if (!writing_) {
      writing_ = true;
      StartWrite(&outbox_.front());
    }
  }

  // Finishes the stream once the writes in flight are done.
  void RequestFinish(const grpc::Status& status) {
    absl::MutexLock lock(&mu_);
    if (finish_requested_) return;
    finish_requested_ = true;
    finish_status_ = status;
    if (!writing_) {
      finished_ = true;
      Finish(status);
    }
  }

 private:
  SupervisorHost* const host_;
  const std::string peer_;
  const std::shared_ptr<StreamChannel> channel_;
  v1::AgentMessage incoming_;
  SessionId session_ = 0;  // touched by read reactions only, which never overlap

  absl::Mutex mu_;
  std::deque<v1::SupervisorMessage> outbox_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status finish_status_ ABSL_GUARDED_BY(mu_);
};

void StreamChannel::Send(const v1::SupervisorMessage& message) {
  absl::MutexLock lock(&mu_);
  if (stream_ != nullptr) stream_->Enqueue(message);
}

void StreamChannel::Close(const grpc::Status& status) {
  absl::MutexLock lock(&mu_);
  if (stream_ != nullptr) stream_->RequestFinish(status);
}

}  // namespace

grpc::ServerBidiReactor<v1::AgentMessage, v1::SupervisorMessage>* AgentServiceImpl::Connect(
    grpc::CallbackServerContext* context) {
  return new AgentStream(host_, context->peer());
}

}  // namespace trainsup

