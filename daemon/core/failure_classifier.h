#ifndef TRAINSUP_DAEMON_CORE_FAILURE_CLASSIFIER_H_
#define TRAINSUP_DAEMON_CORE_FAILURE_CLASSIFIER_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "daemon/core/job.h"

namespace trainsup {

// What a rank's failure says about where the fault lies. One table for the
// whole core (failure_classifier.cc; docs/detection.md lists it).
enum class FailureClass {
  // The rank failed on its own: an exception of the training code, a
  // non-zero exit, a crash signal, a process that vanished.
  kOwn = 0,
  // A communication error caused by a peer (gloo "Connection closed by
  // peer", NCCL "communicator was aborted", ...): the rank is a victim.
  kCommunication,
  // Stopped from outside (SIGTERM, SIGINT, SIGHUP): its launcher or the
  // scheduler tearing the job down after another failure.
  kStopped,
  // The hardware or its driver failed (CUDA "unspecified launch failure",
  // ECC, Xid, NCCL "unhandled system error"): the node is at fault.
  kInfrastructure,
};
absl::string_view FailureClassName(FailureClass c);  // "own", "communication", ...

// The class of an uncaught exception, from its type and message.
FailureClass ClassifyException(absl::string_view type, absl::string_view message);

// The class of a rank's failure: its exception if it reported one (or the
// one it caught before its sys.exit), else how its process ended, else the
// infrastructure fault its last stderr line names. REQUIRES: the rank failed
// (a failed death or an exception).
FailureClass ClassifyRankFailure(const RankState& rank);

// Whether a signal is a native crash (SIGSEGV, SIGBUS, SIGILL, SIGFPE,
// SIGABRT, SIGKILL — the OOM killer's).
bool IsCrashSignal(int signal);

// What a failure looked like, to tell a failure that repeats: the exception
// type and its message with numbers, addresses and paths blanked out, or the
// exit status. "ValueError: bad batch at index N".
std::string FailureSignature(const RankState& rank);

// The message as a signature keeps it: digits -> "N", hex addresses -> "0xX",
// runs of whitespace -> one space, at most 200 bytes.
std::string NormalizeMessage(absl::string_view message);

// A job-killing failure as the supervisor remembers it, to tell one that
// repeats.
struct FailureFingerprint {
  uint64_t generation = 0;
  std::string signature;  // FailureSignature()
  int64_t step = -1;
  uint32_t rank = 0;
  NodeIndex node = kNoNode;
  FailureClass failure_class = FailureClass::kOwn;
  int32_t signal = 0;  // the signal that ended the process, if one did
};

// The fingerprint of `rank`'s failure in `job`'s generation.
FailureFingerprint FingerprintOf(const Job& job, uint32_t rank);

// Whether a failure counts against its node: an infrastructure error, or a
// native crash signal. The training code's own errors and exits do not.
bool ChargesNode(const FailureFingerprint& failure);

// When `later` repeats `earlier` (an earlier generation's failure) as the
// training code's own: the same signature at the same step (within
// max(2, 1%) steps), and either not a communication, infrastructure or
// crash-signal failure, or one that followed its rank to another node. The
// reason for people ("the same ValueError at step 120 in generations 2 and
// 3: a bug in the training code, not a node"); nullopt when it is not.
std::optional<std::string> WorkloadRepeat(const FailureFingerprint& earlier,
                                          const FailureFingerprint& later);

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_FAILURE_CLASSIFIER_H_
