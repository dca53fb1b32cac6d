// The one table of what a failure says about where the fault lies, and how
// a failure that repeats is told to be the training code's.
#include "daemon/core/failure_classifier.h"

#include <csignal>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainsup {
namespace {

using ::testing::HasSubstr;

TEST(ClassifyExceptionTest, PeersCommunicationErrorsAreVictims) {
  for (const char* message : {
           "[../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer "
           "[127.0.0.1]:40215",
           "[../third_party/gloo/gloo/transport/tcp/pair.cc:589] Read error [127.0.0.1]:5542: "
           "Connection reset by peer",
           "Socket Timeout",
           "[gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1800000ms for recv",
           "NCCL communicator was aborted on rank 3.",
           "[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=42)",
           "NCCL error in: ProcessGroupNCCL.cpp:1191, remote process exited or there was a "
           "network error"}) {
    EXPECT_EQ(ClassifyException("RuntimeError", message), FailureClass::kCommunication)
        << message;
  }
  EXPECT_EQ(ClassifyException("DistBackendError", "NCCL error"), FailureClass::kCommunication);
  EXPECT_EQ(ClassifyException("torch.distributed.DistNetworkError", "x"),
            FailureClass::kCommunication);
}

TEST(ClassifyExceptionTest, HardwareAndDriverErrorsAreInfrastructure) {
  for (const char* message : {
           "CUDA error: unspecified launch failure",
           "CUDA error: uncorrectable ECC error encountered",
           "NCCL error in: ProcessGroupNCCL.cpp:1191, unhandled system error, NCCL version 2.18",
           "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus",
           "CUDA error: unknown error"}) {
    EXPECT_EQ(ClassifyException("RuntimeError", message), FailureClass::kInfrastructure)
        << message;
  }
}

TEST(ClassifyExceptionTest, TheTrainingCodesOwnErrorsAreItsOwn) {
  EXPECT_EQ(ClassifyException("ValueError", "bad batch at index 17"), FailureClass::kOwn);
  EXPECT_EQ(ClassifyException("RuntimeError", "CUDA error: an illegal memory access was encountered"),
            FailureClass::kOwn);
  EXPECT_EQ(ClassifyException("RuntimeError", "CUDA out of memory. Tried to allocate 2.00 GiB"),
            FailureClass::kOwn);
  // "xid" only as a word.
  EXPECT_EQ(ClassifyException("ValueError", "unknown oxide layer"), FailureClass::kOwn);
}

RankState Died(int exit_code, int signal) {
  RankState r(4, 4);
  r.seen = true;
  RankDeath d;
  d.exit_known = true;
  d.exit_code = exit_code;
  d.signal = signal;
  r.death = d;
  return r;
}

TEST(ClassifyRankFailureTest, AStopFromOutsideIsCollateral) {
  EXPECT_EQ(ClassifyRankFailure(Died(0, SIGTERM)), FailureClass::kStopped);
  EXPECT_EQ(ClassifyRankFailure(Died(0, SIGKILL)), FailureClass::kOwn);
  EXPECT_EQ(ClassifyRankFailure(Died(1, 0)), FailureClass::kOwn);
}

TEST(ClassifyRankFailureTest, ARankThatBeganToExitFailedOnItsOwnEvenIfStoppedLater) {
  RankState r = Died(0, SIGTERM);  // its launcher stopped it while it tore down
  r.exiting = true;
  r.exiting_code = 1;
  EXPECT_EQ(ClassifyRankFailure(r), FailureClass::kOwn);
}

TEST(ClassifyRankFailureTest, ASilentDeathIsTheNodesWhenItsLastStderrLineNamesAFault) {
  RankState r = Died(1, 0);  // os._exit(1): no word of its end
  EXPECT_EQ(ClassifyRankFailure(r), FailureClass::kOwn);
  r.stderr_line = "RuntimeError: CUDA error: unspecified launch failure";
  EXPECT_EQ(ClassifyRankFailure(r), FailureClass::kInfrastructure);
  r.stderr_line = "step 12 loss 0.4";
  EXPECT_EQ(ClassifyRankFailure(r), FailureClass::kOwn);
  // A rank stopped from outside is a victim, whatever it wrote.
  RankState stopped = Died(0, SIGTERM);
  stopped.stderr_line = "NCCL WARN unhandled system error";
  EXPECT_EQ(ClassifyRankFailure(stopped), FailureClass::kStopped);
}

TEST(ClassifyRankFailureTest, TheExceptionCaughtBeforeSysExitClassifiesTheFailure) {
  RankState r = Died(1, 0);
  r.exiting = true;
  r.exiting_code = 1;
  r.exception_type = "RuntimeError";
  r.exception_message = "CUDA error: unspecified launch failure";
  r.exception_caught = true;
  EXPECT_EQ(ClassifyRankFailure(r), FailureClass::kInfrastructure);
}

TEST(NormalizeMessageTest, BlanksNumbersAddressesAndSpaces) {
  EXPECT_EQ(NormalizeMessage("bad   batch 17 at 0x7fffa0\tof 3"), "bad batch N at 0xX of N");
  EXPECT_EQ(NormalizeMessage(std::string(500, 'a')).size(), 200u);
}

FailureFingerprint Print(uint64_t generation, std::string signature, int64_t step, uint32_t rank,
                         NodeIndex node, FailureClass c = FailureClass::kOwn, int signal = 0) {
  FailureFingerprint f;
  f.generation = generation;
  f.signature = std::move(signature);
  f.step = step;
  f.rank = rank;
  f.node = node;
  f.failure_class = c;
  f.signal = signal;
  return f;
}

TEST(WorkloadRepeatTest, TheSameErrorAtTheSameStepAgainIsTheTrainingCodes) {
  std::optional<std::string> reason =
      WorkloadRepeat(Print(2, "ValueError: bad batch N", 120, 3, 1),
                     Print(3, "ValueError: bad batch N", 121, 3, 1));
  ASSERT_TRUE(reason.has_value());
  EXPECT_THAT(*reason, HasSubstr("the same ValueError: bad batch N at step 121 in generations 2 "
                                 "and 3: a bug in the training code, not a node"));
}

TEST(WorkloadRepeatTest, ADifferentStepOrErrorIsNotARepeat) {
  EXPECT_FALSE(WorkloadRepeat(Print(2, "ValueError: x", 120, 3, 1), Print(3, "ValueError: x", 150, 3, 1)));
  EXPECT_FALSE(WorkloadRepeat(Print(2, "ValueError: x", 120, 3, 1), Print(3, "KeyError: x", 120, 3, 1)));
  EXPECT_FALSE(WorkloadRepeat(Print(3, "ValueError: x", 120, 3, 1), Print(3, "ValueError: x", 120, 3, 1)));
}

TEST(WorkloadRepeatTest, ACrashSignalOnTheSameNodeIsTheNodesButFollowingTheRankIsTheCodes) {
  const FailureFingerprint first = Print(2, "killed by SIGSEGV (signal 11)", 80, 5, 1,
                                         FailureClass::kOwn, SIGSEGV);
  EXPECT_FALSE(WorkloadRepeat(first, Print(3, first.signature, 80, 5, 1, FailureClass::kOwn, SIGSEGV)));
  std::optional<std::string> moved =
      WorkloadRepeat(first, Print(3, first.signature, 80, 5, 2, FailureClass::kOwn, SIGSEGV));
  ASSERT_TRUE(moved.has_value());
  EXPECT_THAT(*moved, HasSubstr("following rank 5 to another node"));
}

TEST(WorkloadRepeatTest, AnInfrastructureErrorOnTheSameNodeIsNeverTheCodes) {
  EXPECT_FALSE(WorkloadRepeat(
      Print(2, "RuntimeError: CUDA error: unspecified launch failure", 10, 0, 1,
            FailureClass::kInfrastructure),
      Print(3, "RuntimeError: CUDA error: unspecified launch failure", 10, 0, 1,
            FailureClass::kInfrastructure)));
}

TEST(ChargesNodeTest, OnlyInfrastructureAndNativeCrashes) {
  EXPECT_TRUE(ChargesNode(Print(1, "x", 0, 0, 0, FailureClass::kInfrastructure)));
  EXPECT_TRUE(ChargesNode(Print(1, "x", 0, 0, 0, FailureClass::kOwn, SIGSEGV)));
  EXPECT_TRUE(ChargesNode(Print(1, "x", 0, 0, 0, FailureClass::kOwn, SIGKILL)));
  EXPECT_FALSE(ChargesNode(Print(1, "ValueError: x", 0, 0, 0)));
  EXPECT_FALSE(ChargesNode(Print(1, "exit code 1", 0, 0, 0)));
  EXPECT_FALSE(ChargesNode(Print(1, "x", 0, 0, 0, FailureClass::kCommunication)));
}

}  // namespace
}  // namespace trainsup
