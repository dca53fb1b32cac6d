#include "daemon/agent_service.h"

#include <deque>
#include <memory>
#include <utility>

#include <google/protobuf/arena.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
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
  // `stats->open` counts this stream from here until OnDone.
  AgentStream(grpc::CallbackServerContext* context, SupervisorHost* host, AccessControl* access,
              Caller caller, std::string peer, size_t max_outbox, AgentStreamStats* stats)
      : context_(context),
        host_(host),
        access_(access),
        caller_(std::move(caller)),
        peer_(std::move(peer)),
        max_outbox_(max_outbox),
        stats_(stats),
        channel_(std::make_shared<StreamChannel>(this)),
        arena_(AgentReadArenaOptions()) {
    ReadNext();
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the agent closed its side, or the stream broke
      // Every message of the stream was handled: the node is free before
      // the agent learns that its stream ended (and exits, and the next
      // job's agent for the node says hello).
      if (session_ != 0) host_->Disconnected(std::exchange(session_, 0));
      RequestFinish(grpc::Status::OK);
      return;
    }
    grpc::Status status = Handle(*incoming_);
    if (!status.ok()) {
      TRAINSUP_LOG_WARN("agent %s: %s", peer_, status.error_message());
      RequestFinish(status);
      return;
    }
    ReadNext();
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
    stats_->open.fetch_sub(1);
    delete this;
  }

  // Queues a message; starts writing it if nothing is in flight. An agent
  // that lets --max-stream-outbox messages pile up is cut off rather than
  // grow the supervisor's memory (or lose a command silently): it
  // reconnects and is told its state afresh.
  void Enqueue(const v1::SupervisorMessage& message) {
    absl::MutexLock lock(&mu_);
    if (finish_requested_) return;
    if (outbox_.size() >= max_outbox_) {
      stats_->ended_max_outbox.fetch_add(1);
      TRAINSUP_LOG_WARN("agent %s: %d messages unread; ending its stream", peer_, outbox_.size());
      RequestFinishLocked(grpc::Status(
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          absl::StrCat("the agent left ", outbox_.size(),
                       " supervisor messages unread (--max-stream-outbox); reconnect")));
      return;
    }
    outbox_.push_back(message);
    if (!writing_) {
      writing_ = true;
      StartWrite(&outbox_.front());
    }
  }

  // Finishes the stream once the writes in flight are done.
  void RequestFinish(const grpc::Status& status) {
    absl::MutexLock lock(&mu_);
    RequestFinishLocked(status);
  }

 private:
  void RequestFinishLocked(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finish_requested_) return;
    finish_requested_ = true;
    finish_status_ = status;
    if (!writing_) {
      finished_ = true;
      Finish(status);
    }
  }

  // Each message is read into an arena emptied before the next read. Parsing
  // into a reused AgentMessage is not enough: clearing its oneof deletes the
  // report, so every heartbeat would be allocated again on the heap. On the
  // arena a report costs a block or two, whatever its heartbeats.
  void ReadNext() {
    arena_.Reset();
    incoming_ = google::protobuf::Arena::CreateMessage<v1::AgentMessage>(&arena_);
    StartRead(incoming_);
  }

  // Only a caller whose identity allows it may say hello for a node; the
  // rest of the stream is the session that hello opened.
  grpc::Status Handle(const v1::AgentMessage& message) {
    // A leader that stops acting (docs/ha.md) ends every stream at its next
    // message: nothing an agent says reaches the core then. A standby's
    // refusal names the leader for the agent to go to.
    if (grpc::Status s = access_->ServingFor(context_); !s.ok()) return s;
    if (message.has_hello() && session_ == 0) {
      const v1::AgentHello& h = message.hello();
      if (grpc::Status s = access_->Check(
              caller_, peer_, Access::kAgentHello,
              absl::StrCat("hello node=", absl::CEscape(h.node().substr(0, 128)),
                           " job=", absl::CEscape(h.job().substr(0, 128))),
              h.node());
          !s.ok()) {
        return s;
      }
    }
    // One conversion buffer per thread, not per stream: its memory then
    // grows with the threads gRPC runs reactions on, not with the agents.
    thread_local NodeReportInfo report;
    return ApplyAgentMessage(*host_, message, channel_, peer_, &session_, &report);
  }

  grpc::CallbackServerContext* const context_;  // outlives the stream
  SupervisorHost* const host_;
  AccessControl* const access_;
  const Caller caller_;  // who the TLS handshake says is at the other end
  const std::string peer_;
  const size_t max_outbox_;
  AgentStreamStats* const stats_;
  const std::shared_ptr<StreamChannel> channel_;
  google::protobuf::Arena arena_;
  v1::AgentMessage* incoming_ = nullptr;  // on arena_
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

// A stream past --max-agents: refused at once, holding nothing.
class RefusedStream final
    : public grpc::ServerBidiReactor<v1::AgentMessage, v1::SupervisorMessage> {
 public:
  explicit RefusedStream(size_t max_streams) {
    Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        absl::StrCat("trainsupd holds --max-agents=", max_streams,
                                     " agent streams; retry later, or raise --max-agents "
                                     "(and trainsupd's descriptor limit, LimitNOFILE)")));
  }
  void OnDone() override { delete this; }
};

}  // namespace

google::protobuf::ArenaOptions AgentReadArenaOptions() {
  google::protobuf::ArenaOptions options;
  options.start_block_size = 1024;  // held between reads, by each of 12,500 streams
  options.max_block_size = 64 * 1024;
  return options;
}

grpc::ServerBidiReactor<v1::AgentMessage, v1::SupervisorMessage>* AgentServiceImpl::Connect(
    grpc::CallbackServerContext* context) {
  if (stats_.open.fetch_add(1) >= static_cast<int64_t>(limits_.max_streams)) {
    stats_.open.fetch_sub(1);
    stats_.refused_max_streams.fetch_add(1);
    return new RefusedStream(limits_.max_streams);
  }
  return new AgentStream(context, host_, access_, access_->CallerOf(*context), context->peer(),
                         limits_.max_outbox, &stats_);
}

}  // namespace trainsup

