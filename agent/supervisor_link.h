#ifndef TRAINSUP_AGENT_SUPERVISOR_LINK_H_
#define TRAINSUP_AGENT_SUPERVISOR_LINK_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "common/credentials.h"
#include "common/supervisor_addresses.h"

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "agent/report_batcher.h"
#include "trainsup/v1/agent.grpc.pb.h"

namespace trainsup {

// The report interval in force: what the supervisor said last (seconds; 0,
// negative or not a number: nothing), else the agent's own.
absl::Duration ReportIntervalInForce(absl::Duration own, double told_seconds);

struct LinkOptions {
  // The supervisor's gRPC address, HOST:PORT, or several trainsupd under an
  // election (docs/ha.md), comma-separated: the link talks to the leader,
  // following a standby's word to it, else trying the next address.
  std::string address;
  // TLS to it. The files are read at each reconnect, so that a renewed
  // certificate is used without restarting the agent. Default: plain text.
  ClientTlsOptions tls;
  // A report goes out this often, news or not: the supervisor judges an
  // agent silent after some intervals without one (the hello tells it the
  // interval). The supervisor may say another (its welcome and settings
  // messages): that one is in force until it says otherwise, and this one
  // again when it says 0. Default: 200ms.
  absl::Duration report_interval = absl::Milliseconds(200);
  // Reconnect backoff: starts here, doubles per failed attempt, capped.
  // Defaults: 100ms, 5s.
  absl::Duration backoff_initial = absl::Milliseconds(100);
  absl::Duration backoff_max = absl::Seconds(5);
  // While trainsupd instances answer but none leads (a failover), the
  // backoff is capped here instead, so that the agent finds the new leader
  // soon after its election. Default: 1s.
  absl::Duration standby_backoff_max = absl::Seconds(1);
};

// The agent's stream to the supervisor, on a thread of its own: connects,
// says hello, sends the batcher's reports every interval (and other messages
// queued with Send before them), hands commands to `on_command`, tells
// `on_refused` when the supervisor refused the hello, and reconnects with
// capped exponential backoff (with jitter) whenever the stream breaks: to the
// same address after a welcomed stream, else to the leader a standby named or
// the next address of the list.
// Fail-open: nothing here ever waits on the training job, nor the job on it.
// Thread-safe.
class SupervisorLink {
 public:
  // The hello to send; the link adds its report interval.
  using HelloFn = std::function<v1::AgentHello()>;
  // Called on the link's reader thread; must not block for long.
  using CommandFn = std::function<void(const v1::SupervisorMessage&)>;
  // A stream ended before the supervisor's welcome with this status, sent by
  // the supervisor (ALREADY_EXISTS: another agent serves the node). Not
  // called for a supervisor that could not be reached (UNAVAILABLE) nor for
  // Stop. Called on the link's thread; must not block for long.
  using RefusedFn = std::function<void(const grpc::Status&)>;

  SupervisorLink(LinkOptions options, ReportBatcher* batcher, HelloFn hello, CommandFn on_command,
                 RefusedFn on_refused = nullptr);
  ~SupervisorLink();

  SupervisorLink(const SupervisorLink&) = delete;
  SupervisorLink& operator=(const SupervisorLink&) = delete;

  void Start();
  // Ends the stream and the thread. Idempotent. What was written and not
  // yet read by the supervisor may be lost with the stream: an agent that
  // is done ends with Close.
  void Stop();
  // The agent is done: its last word goes to the supervisor, then the link
  // ends as Stop() does. Sends the queued messages and a last report, closes
  // the agent's side of the stream and waits until the supervisor has read
  // everything and ended the stream in turn; a stream that breaks first is
  // dialled again (its hello says the launcher's last state). True when the
  // supervisor ended the stream after the last report; false when
  // `timeout` passed first (or is zero while no stream is up). Call once.
  bool Close(absl::Duration timeout);

  // Sends a report now and waits until it was written (with the messages
  // queued before it). False when not connected or `timeout` passed first.
  bool Flush(absl::Duration timeout);

  // Asks for a report now and returns at once (the reading thread may call
  // it): for news the supervisor waits on, such as a checkpoint plan held.
  // Nothing when not connected; the report carries it anyway.
  void RequestReport();

  // Queues `message` (not a hello) to be written before the next report, on
  // this stream or, when none is up, on the next one. At most
  // kMaxQueuedMessages wait; beyond, the oldest is dropped.
  void Send(v1::AgentMessage message);
  static constexpr size_t kMaxQueuedMessages = 8;

  // True between the supervisor's welcome and the end of that stream.
  bool connected() const;
  uint64_t sessions() const;  // streams that were welcomed
  // The interval reports go out at now (ReportIntervalInForce).
  absl::Duration report_interval() const;

 private:
  using Stream = grpc::ClientReaderWriter<v1::AgentMessage, v1::SupervisorMessage>;

  void Run();
  // How a stream ended.
  enum class SessionEnd {
    kWelcomed,  // after the supervisor's welcome
    kRefused,   // the supervisor refused the hello (on_refused was called)
    kUnreached,  // no supervisor answered, or Stop()
    kStandby,    // a trainsupd answered as a standby (or not acting)
  };
  // One stream, from hello to its end.
  SessionEnd RunSession(v1::AgentService::Stub& stub, const std::string& address);
  void ReadCommands(Stream* stream, const std::string& address);
  // Once the stream is welcomed, sends queued messages and reports until it
  // breaks or Stop(), or, on Close(), until it has sent the last report and
  // closed its side (then true). Returns on any of them.
  bool WriteReports(Stream* stream);

  const LinkOptions options_;
  ReportBatcher* const batcher_;
  const HelloFn hello_;
  const CommandFn on_command_;
  const RefusedFn on_refused_;
  std::thread thread_;
  // The link's thread only: why the last session failed to connect, the
  // leader a standby named then, and the address to dial.
  std::string last_unreached_;
  std::string named_leader_;
  std::optional<SupervisorAddresses> addresses_;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Close(): send the last word, then end; until `close_deadline_`. Closed
  // in order once the supervisor ended the stream after the last report.
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  absl::Duration close_deadline_ ABSL_GUARDED_BY(mu_) = absl::InfiniteDuration();
  bool closed_in_order_ ABSL_GUARDED_BY(mu_) = false;
  bool thread_done_ ABSL_GUARDED_BY(mu_) = false;
  bool connected_ ABSL_GUARDED_BY(mu_) = false;
  bool session_ended_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;
  uint64_t flush_requested_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t flush_done_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t sessions_ ABSL_GUARDED_BY(mu_) = 0;
  // What the supervisor said in its last welcome or settings (0: nothing).
  double told_interval_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<v1::AgentMessage> outbox_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainsup

#endif  // TRAINSUP_AGENT_SUPERVISOR_LINK_H_
