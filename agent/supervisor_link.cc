#include "agent/supervisor_link.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/grpc_util.h"
#include "common/log.h"

namespace trainsup {
namespace {

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const LinkOptions& options,
                                                           const std::string& address) {
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      MakeChannelCredentials(options.tls, /*token=*/"");
  if (!credentials.ok()) return credentials.status();
  grpc::ChannelArguments args;
  ApplyServerName(options.tls, &args);
  // Notice a vanished supervisor (host down, cable cut) within ~15s even
  // when no report is due; loopback and RSTs are noticed at once anyway.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10'000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5'000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // Our own loop does the backoff; keep the channel's from adding minutes.
  const int max_ms = static_cast<int>(absl::ToInt64Milliseconds(options.backoff_max));
  const int min_ms = static_cast<int>(absl::ToInt64Milliseconds(options.backoff_initial));
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, std::max(min_ms, 1));
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, std::max(min_ms, 1));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, std::max(max_ms, 1));
  args.SetMaxSendMessageSize(16 << 20);
  return grpc::CreateCustomChannel(address, *credentials, args);
}

}  // namespace

SupervisorLink::SupervisorLink(LinkOptions options, ReportBatcher* batcher, HelloFn hello,
                               CommandFn on_command, RefusedFn on_refused)
    : options_(std::move(options)),
      batcher_(batcher),
      hello_(std::move(hello)),
      on_command_(std::move(on_command)),
      on_refused_(std::move(on_refused)) {}

SupervisorLink::~SupervisorLink() { Stop(); }

void SupervisorLink::Start() { thread_ = std::thread([this] { Run(); }); }

bool SupervisorLink::Close(absl::Duration timeout) {
  bool in_order = false;
  if (timeout > absl::ZeroDuration()) {
    absl::MutexLock lock(&mu_);
    closing_ = true;
    close_deadline_ = SteadyNow() + timeout;
    // A stream not welcomed yet starts over, bounded by the deadline.
    if (!connected_ && context_ != nullptr) context_->TryCancel();
    auto done = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return closed_in_order_ || thread_done_;
    };
    mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
    in_order = closed_in_order_;
  }
  Stop();
  return in_order;
}

void SupervisorLink::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    if (context_ != nullptr) context_->TryCancel();
  }
  if (thread_.joinable()) thread_.join();
}

bool SupervisorLink::connected() const {
  absl::MutexLock lock(&mu_);
  return connected_;
}
uint64_t SupervisorLink::sessions() const {
  absl::MutexLock lock(&mu_);
  return sessions_;
}

bool SupervisorLink::Flush(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  if (!connected_) return false;
  const uint64_t ticket = ++flush_requested_;
  auto done = [this, ticket]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return flush_done_ >= ticket || !connected_ || stopping_;
  };
  mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
  return flush_done_ >= ticket;
}

void SupervisorLink::RequestReport() {
  absl::MutexLock lock(&mu_);
  if (connected_) ++flush_requested_;
}

void SupervisorLink::Send(v1::AgentMessage message) {
  absl::MutexLock lock(&mu_);
  if (outbox_.size() >= kMaxQueuedMessages) outbox_.pop_front();
  outbox_.push_back(std::move(message));
}

void SupervisorLink::Run() {
  // Close() waits for this thread's end as well as for the supervisor's.
  struct Done {
    SupervisorLink* link;
    ~Done() {
      absl::MutexLock lock(&link->mu_);
      link->thread_done_ = true;
    }
  } done{this};
  if (absl::StatusOr<SupervisorAddresses> parsed = SupervisorAddresses::Parse(options_.address);
      parsed.ok()) {
    addresses_ = *std::move(parsed);
  } else {
    TRAINSUP_LOG_ERROR("cannot connect to the supervisor: %s", parsed.status().message());
    return;
  }
  std::mt19937_64 rng(std::random_device{}());
  absl::Duration backoff = options_.backoff_initial;
  bool warned = false;
  for (;;) {
    bool closing = false;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_ || closed_in_order_) return;
      if (closing_ && SteadyNow() >= close_deadline_) return;
      closing = closing_;
    }
    // A new channel after every session that ended, so that renewed TLS
    // files are read without restarting the agent. The channel goes before
    // the backoff: its connection is closed while the agent waits, so that a
    // refused agent holds none of the supervisor's descriptors.
    SessionEnd end = SessionEnd::kUnreached;
    const std::string address = addresses_->current();
    {
      absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = MakeChannel(options_, address);
      if (channel.ok()) {
        std::unique_ptr<v1::AgentService::Stub> stub = v1::AgentService::NewStub(*channel);
        end = RunSession(*stub, address);
      } else if (!warned) {
        TRAINSUP_LOG_ERROR("cannot connect to the supervisor: %s", channel.status().message());
      }
    }
    absl::Duration cap = options_.backoff_max;
    if (end == SessionEnd::kWelcomed) {
      backoff = options_.backoff_initial;
      warned = false;
    } else if (end == SessionEnd::kUnreached || end == SessionEnd::kStandby) {
      if (!warned) {
        TRAINSUP_LOG_WARN("cannot reach the supervisor at %s (%s); retrying%s", address,
                          last_unreached_,
                          addresses_->list().size() > 1
                              ? absl::StrCat(" the leader among ", addresses_->Joined())
                              : std::string());
        warned = true;
      }
      // The leader a standby named, else the list's next address.
      addresses_->Next(end == SessionEnd::kStandby ? named_leader_ : "");
      // Instances that answer will have a leader within a lease's TTL:
      // ask again soon.
      if (end == SessionEnd::kStandby) cap = std::min(cap, options_.standby_backoff_max);
    }
    // Full jitter in [backoff/2, backoff], so that a thousand agents that lost
    // the same supervisor do not come back in lockstep.
    backoff = std::min(backoff, cap);
    std::uniform_real_distribution<double> jitter(0.5, 1.0);
    absl::Duration wait = backoff * jitter(rng);
    backoff = std::min(backoff * 2, cap);
    // The agent's last word cannot wait long.
    if (closing) wait = std::min(wait, options_.backoff_initial);
    absl::MutexLock lock(&mu_);
    auto woken = [this, closing]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return stopping_ || closed_in_order_ || closing_ != closing;
    };
    mu_.AwaitWithTimeout(absl::Condition(&woken), wait);
  }
}

absl::Duration ReportIntervalInForce(absl::Duration own, double told_seconds) {
  if (!(told_seconds > 0) || !std::isfinite(told_seconds)) return own;
  return absl::Seconds(told_seconds);
}

absl::Duration SupervisorLink::report_interval() const {
  absl::MutexLock lock(&mu_);
  return ReportIntervalInForce(options_.report_interval, told_interval_seconds_);
}

SupervisorLink::SessionEnd SupervisorLink::RunSession(v1::AgentService::Stub& stub,
                                                      const std::string& address) {
  grpc::ClientContext context;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return SessionEnd::kUnreached;
    if (closing_) {
      const absl::Duration left = std::max(absl::ZeroDuration(), close_deadline_ - SteadyNow());
      context.set_deadline(std::chrono::system_clock::now() + absl::ToChronoNanoseconds(left));
    }
    context_ = &context;
    session_ended_ = false;
  }
  std::unique_ptr<Stream> stream = stub.Connect(&context);
  v1::AgentMessage hello;
  *hello.mutable_hello() = hello_();
  hello.mutable_hello()->set_report_interval_seconds(
      absl::ToDoubleSeconds(options_.report_interval));
  bool welcomed = false;
  bool half_closed = false;  // the agent's side closed after its last report
  if (stream->Write(hello)) {
    batcher_->BeginSession();
    std::thread reader([this, &stream, &address] { ReadCommands(stream.get(), address); });
    half_closed = WriteReports(stream.get());
    bool reader_done;
    {
      absl::MutexLock lock(&mu_);
      if (half_closed) {
        // The supervisor ends the stream once it has read all of it.
        auto ended = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
          return session_ended_ || stopping_;
        };
        mu_.AwaitWithTimeout(absl::Condition(&ended),
                             std::max(absl::ZeroDuration(), close_deadline_ - SteadyNow()));
      }
      reader_done = session_ended_;
    }
    // Ends the reader's Read if the stream is still up (a write failed).
    // Not once the supervisor ended it: its status would become CANCELLED.
    if (!reader_done) context.TryCancel();
    reader.join();
    absl::MutexLock lock(&mu_);
    welcomed = connected_;  // the reader saw this stream's welcome
  }
  grpc::Status status = stream->Finish();
  bool refused = false;
  {
    absl::MutexLock lock(&mu_);
    if (half_closed && status.ok()) closed_in_order_ = true;
    if (connected_ && !stopping_ && !closed_in_order_) {
      TRAINSUP_LOG_WARN("stream to the supervisor ended: %s",
                        status.ok() ? std::string("closed") : status.error_message());
    }
    refused = !welcomed && !stopping_ && !status.ok() &&
              status.error_code() != grpc::StatusCode::UNAVAILABLE &&
              status.error_code() != grpc::StatusCode::CANCELLED;
    connected_ = false;
    context_ = nullptr;
  }
  if (welcomed) return SessionEnd::kWelcomed;
  if (!refused) {
    last_unreached_ = status.error_message();  // a TLS handshake failure says so here
    if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
      if (std::optional<std::string> leader = LeaderNamedIn(context); leader.has_value()) {
        named_leader_ = *leader;
        return SessionEnd::kStandby;
      }
    }
    return SessionEnd::kUnreached;
  }
  if (on_refused_) on_refused_(status);
  return SessionEnd::kRefused;
}

void SupervisorLink::ReadCommands(Stream* stream, const std::string& address) {
  v1::SupervisorMessage message;
  while (stream->Read(&message)) {
    if (message.has_welcome()) {
      absl::MutexLock lock(&mu_);
      connected_ = true;
      ++sessions_;
      // Every welcome says it: a supervisor that says nothing (0) gets the
      // agent's own interval back.
      told_interval_seconds_ = message.welcome().settings().report_interval_seconds();
      TRAINSUP_LOG_INFO("connected to the supervisor at %s (generation %d, report every %s)",
                        address, message.welcome().generation(),
                        absl::FormatDuration(ReportIntervalInForce(options_.report_interval,
                                                                   told_interval_seconds_)));
    }
    if (message.has_settings()) {
      absl::MutexLock lock(&mu_);
      told_interval_seconds_ = message.settings().report_interval_seconds();
      TRAINSUP_LOG_INFO("the supervisor asks for a report every %s",
                        absl::FormatDuration(ReportIntervalInForce(options_.report_interval,
                                                                   told_interval_seconds_)));
    }
    on_command_(message);
  }
  absl::MutexLock lock(&mu_);
  session_ended_ = true;
}

bool SupervisorLink::WriteReports(Stream* stream) {
  {
    // Nothing before the welcome: on a stream the supervisor refuses, what
    // was written is lost.
    absl::MutexLock lock(&mu_);
    auto welcomed = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return stopping_ || session_ended_ || connected_;
    };
    mu_.Await(absl::Condition(&welcomed));
    if (stopping_ || session_ended_) return false;
  }
  // The next report is due one interval in force after the last; a new
  // interval takes effect from the last report on.
  absl::Duration last_report = SteadyNow();
  for (;;) {
    const absl::Duration next_report = last_report + report_interval();
    uint64_t flush_ticket = 0;
    bool flushing = false;
    bool closing = false;
    std::deque<v1::AgentMessage> queued;
    {
      absl::MutexLock lock(&mu_);
      auto wake = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return stopping_ || session_ended_ || closing_ || flush_requested_ > flush_done_ ||
               !outbox_.empty();
      };
      mu_.AwaitWithTimeout(absl::Condition(&wake),
                           std::max(absl::ZeroDuration(), next_report - SteadyNow()));
      if (stopping_ || session_ended_) return false;
      flush_ticket = flush_requested_;
      flushing = flush_requested_ > flush_done_;
      closing = closing_;
      queued.swap(outbox_);
    }
    // Queued messages first: they tell what happened before the report's news.
    while (!queued.empty()) {
      if (!stream->Write(queued.front())) {
        absl::MutexLock lock(&mu_);
        while (!queued.empty() && outbox_.size() < kMaxQueuedMessages) {
          outbox_.push_front(std::move(queued.back()));
          queued.pop_back();
        }
        return false;
      }
      queued.pop_front();
    }
    const absl::Duration now = SteadyNow();
    if (now < next_report && !flushing && !closing) continue;
    v1::AgentMessage message;
    bool more = false;
    *message.mutable_report() =
        batcher_->TakeReport(now, ReportBatcher::kMaxReportBytes, &more);
    if (!stream->Write(message)) {
      batcher_->Restore(std::move(*message.mutable_report()));
      return false;
    }
    if (more) continue;  // a backlog beyond one message: the rest goes at once
    // The last word is out: the agent's side closes, in order.
    if (closing) return stream->WritesDone();
    // On the schedule, unless it fell behind by a whole interval; a report
    // asked for early is an extra one and leaves the schedule be.
    if (now >= next_report) {
      last_report = now - next_report >= report_interval() ? now : next_report;
    }
    absl::MutexLock lock(&mu_);
    flush_done_ = std::max(flush_done_, flush_ticket);
  }
}

}  // namespace trainsup
