#include "daemon/core/failure_classifier.h"

#include <algorithm>
#include <csignal>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/failure_text.h"
#include "common/format.h"

namespace trainsup {

absl::string_view FailureClassName(FailureClass c) {
  switch (c) {
    case FailureClass::kOwn:
      return "own";
    case FailureClass::kCommunication:
      return "communication";
    case FailureClass::kStopped:
      return "stopped";
    case FailureClass::kInfrastructure:
      return "infrastructure";
  }
  return "unknown";
}

FailureClass ClassifyException(absl::string_view type, absl::string_view message) {
  const std::string text = absl::StrCat(type, ": ", message);
  if (HasInfrastructureMarker(text)) return FailureClass::kInfrastructure;
  if (HasCommunicationMarker(text)) return FailureClass::kCommunication;
  return FailureClass::kOwn;
}

bool IsCrashSignal(int signal) {
  switch (signal) {
    case SIGSEGV:
    case SIGBUS:
    case SIGILL:
    case SIGFPE:
    case SIGABRT:
    case SIGKILL:
      return true;
  }
  return false;
}

FailureClass ClassifyRankFailure(const RankState& rank) {
  if (!rank.exception_type.empty()) {
    return ClassifyException(rank.exception_type, rank.exception_message);
  }
  // It began to exit on its own (sys.exit with a failing code, or the
  // interpreter shutting down), whatever ended its teardown.
  if (rank.exiting && rank.exiting_code.value_or(1) != 0) return FailureClass::kOwn;
  if (rank.death && rank.death->exit_known) {
    const int s = rank.death->signal;
    if (s == SIGTERM || s == SIGINT || s == SIGHUP) return FailureClass::kStopped;
  }
  // It said nothing of its end, but its last words on stderr name a broken
  // node (the agent read them: a CUDA error before a SIGKILL or os._exit).
  if (HasInfrastructureMarker(rank.stderr_line)) return FailureClass::kInfrastructure;
  return FailureClass::kOwn;
}

std::string NormalizeMessage(absl::string_view message) {
  std::string out;
  out.reserve(std::min<size_t>(message.size(), 200));
  for (size_t i = 0; i < message.size() && out.size() < 200;) {
    const unsigned char c = static_cast<unsigned char>(message[i]);
    if (c == '0' && i + 1 < message.size() && (message[i + 1] == 'x' || message[i + 1] == 'X')) {
      size_t j = i + 2;
      while (j < message.size() && absl::ascii_isxdigit(static_cast<unsigned char>(message[j]))) ++j;
      if (j > i + 2) {
        out += "0xX";
        i = j;
        continue;
      }
    }
    if (absl::ascii_isdigit(c)) {
      while (i < message.size() && absl::ascii_isdigit(static_cast<unsigned char>(message[i]))) ++i;
      out += 'N';
      continue;
    }
    if (absl::ascii_isspace(c)) {
      while (i < message.size() && absl::ascii_isspace(static_cast<unsigned char>(message[i]))) ++i;
      if (!out.empty()) out += ' ';
      continue;
    }
    out += static_cast<char>(c);
    ++i;
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

std::string FailureSignature(const RankState& rank) {
  if (!rank.exception_type.empty()) {
    return absl::StrCat(rank.exception_type, ": ", NormalizeMessage(rank.exception_message));
  }
  if (rank.death) {
    return ExitStatusText(rank.death->exit_known, rank.death->exit_code, rank.death->signal);
  }
  return "failed";
}

FailureFingerprint FingerprintOf(const Job& job, uint32_t rank) {
  const RankState& r = job.rank(rank);
  FailureFingerprint f;
  f.generation = job.generation();
  f.signature = FailureSignature(r);
  f.step = r.step;
  f.rank = rank;
  f.node = r.node;
  f.failure_class = ClassifyRankFailure(r);
  if (r.death && r.death->exit_known) f.signal = r.death->signal;
  return f;
}

bool ChargesNode(const FailureFingerprint& failure) {
  return failure.failure_class == FailureClass::kInfrastructure ||
         (failure.failure_class == FailureClass::kOwn && IsCrashSignal(failure.signal));
}

std::optional<std::string> WorkloadRepeat(const FailureFingerprint& earlier,
                                          const FailureFingerprint& later) {
  if (earlier.generation >= later.generation || earlier.signature != later.signature) {
    return std::nullopt;
  }
  const int64_t tolerance = std::max<int64_t>(2, later.step / 100);
  if (std::abs(later.step - earlier.step) > tolerance) return std::nullopt;
  const bool moved = earlier.rank == later.rank && earlier.node != later.node;
  const bool codes_own = later.failure_class == FailureClass::kOwn && !IsCrashSignal(later.signal);
  if (!codes_own && !moved) return std::nullopt;
  return absl::StrCat("the same ", later.signature, " at step ", later.step, " in generations ",
                      earlier.generation, " and ", later.generation,
                      moved ? absl::StrCat(", following rank ", later.rank, " to another node")
                            : "",
                      ": a bug in the training code, not a node");
}

}  // namespace trainsup
