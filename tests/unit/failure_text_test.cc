// What a failure's text says (common/failure_text.h): the markers of a
// broken node, torchrun's per-rank prefixes, and which of a command's last
// stderr lines go up with its failure.
#include "common/failure_text.h"

#include <deque>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainsup {
namespace {

using ::testing::ElementsAre;

// What torchrun 1.13 wrote (--redirects=2 --tee=2) when its two ranks could
// not import the helper: the ranks' lines, copied with their prefix, then
// its own traceback and its report of the failed children.
const std::deque<std::string> kImportFailure = {
    "WARNING:torch.distributed.run:",
    "*****************************************",
    "[default0]:Traceback (most recent call last):",
    "[default0]:  File \"/job/train.py\", line 2, in <module>",
    "[default0]:    import trainsup",
    "[default0]:ModuleNotFoundError: No module named 'trainsup'",
    "[default1]:Traceback (most recent call last):",
    "[default1]:  File \"/job/train.py\", line 2, in <module>",
    "[default1]:    import trainsup",
    "[default1]:ModuleNotFoundError: No module named 'trainsup'",
    "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 0",
    "Traceback (most recent call last):",
    "  File \"/usr/lib/python3/dist-packages/torch/distributed/launcher/api.py\", line 246",
    "    raise ChildFailedError(",
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    "============================================================",
    "train.py FAILED",
    "Root Cause (first observed failure):",
    "  exitcode  : 1 (pid: 24778)",
    "============================================================",
};

TEST(FailureTextTest, InfrastructureMarkers) {
  EXPECT_TRUE(HasInfrastructureMarker("RuntimeError: CUDA error: unspecified launch failure"));
  EXPECT_TRUE(HasInfrastructureMarker("NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus"));
  EXPECT_TRUE(HasInfrastructureMarker("NCCL WARN ... unhandled system error"));
  EXPECT_TRUE(HasInfrastructureMarker("uncorrectable ECC error encountered"));
  EXPECT_FALSE(HasInfrastructureMarker("oxide layer"));  // "xid" only as a word
  EXPECT_FALSE(HasInfrastructureMarker("CUDA out of memory. Tried to allocate 2.00 GiB"));
  EXPECT_FALSE(HasInfrastructureMarker("ModuleNotFoundError: No module named 'trainsup'"));
  EXPECT_FALSE(HasInfrastructureMarker(""));
}

TEST(FailureTextTest, CommunicationMarkers) {
  EXPECT_TRUE(HasCommunicationMarker("[gloo/transport/tcp/pair.cc:598] Connection closed by peer"));
  EXPECT_FALSE(HasCommunicationMarker("ValueError: bad batch"));
}

TEST(FailureTextTest, TorchrunsRankPrefix) {
  LauncherLine line = SplitLauncherLine("[default3]:RuntimeError: boom");
  EXPECT_EQ(line.local_rank, 3);
  EXPECT_EQ(line.text, "RuntimeError: boom");
  EXPECT_EQ(SplitLauncherLine("[trainer12]:x").local_rank, 12);
  for (const char* plain : {"plain", "[notarank]:x", "[]:x", "[3]:x", "[a b1]:x", "[a1] x"}) {
    EXPECT_EQ(SplitLauncherLine(plain).local_rank, -1) << plain;
    EXPECT_EQ(SplitLauncherLine(plain).text, plain);
  }
}

TEST(FailureTextTest, ExceptionLines) {
  EXPECT_TRUE(IsExceptionLine("ModuleNotFoundError: No module named 'trainsup'"));
  EXPECT_TRUE(IsExceptionLine("torch.cuda.OutOfMemoryError: CUDA out of memory"));
  EXPECT_TRUE(IsExceptionLine("KeyboardInterrupt"));
  EXPECT_FALSE(IsExceptionLine("ERROR:torch.distributed.elastic.multiprocessing.api:failed"));
  EXPECT_FALSE(IsExceptionLine("  File \"train.py\", line 2, in <module>"));
  EXPECT_FALSE(IsExceptionLine("Note: something"));
}

TEST(FailureTextTest, OutputLinesAreOneLineOfValidUtf8) {
  EXPECT_EQ(OutputLine("a\tb\x1b[31mc \r", 100), "a b [31mc");
  EXPECT_EQ(OutputLine("bad \xff byte", 100), "bad \xEF\xBF\xBD byte");
  EXPECT_EQ(OutputLine(std::string(300, 'x'), 256).size(), 256u);
}

TEST(FailureTextTest, TheExcerptEndsAtTheRanksErrorNotAtTorchrunsReport) {
  EXPECT_THAT(StderrExcerpt(kImportFailure),
              ElementsAre("[default1]:Traceback (most recent call last):",
                          "[default1]:  File \"/job/train.py\", line 2, in <module>",
                          "[default1]:    import trainsup",
                          "[default1]:ModuleNotFoundError: No module named 'trainsup'"));
}

TEST(FailureTextTest, InfrastructureEvidenceWinsOverALaterException) {
  const std::deque<std::string> tail = {
      "[default0]:NCCL WARN Call to ibv_create_cq failed: unhandled system error",
      "[default0]:Traceback (most recent call last):",
      "[default0]:RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1191",
  };
  EXPECT_THAT(StderrExcerpt(tail),
              ElementsAre("[default0]:NCCL WARN Call to ibv_create_cq failed: unhandled system "
                          "error"));
}

TEST(FailureTextTest, WithoutAnExceptionTheLastLineSaysIt) {
  EXPECT_THAT(StderrExcerpt({"starting", "bad config: --lr is missing", "", "  "}),
              ElementsAre("starting", "bad config: --lr is missing"));
  EXPECT_THAT(StderrExcerpt({"", " "}), ElementsAre());
  EXPECT_THAT(StderrExcerpt({}), ElementsAre());
  // At most max_lines, the cause last.
  EXPECT_THAT(StderrExcerpt({"a", "b", "c", "ValueError: x"}, 2), ElementsAre("c", "ValueError: x"));
}

TEST(FailureTextTest, ARanksInfrastructureLineIsItsOwnOrUnprefixed) {
  const std::deque<std::string> tail = {
      "[default0]:RuntimeError: CUDA error: unspecified launch failure",
      "[default1]:step 12",
  };
  EXPECT_EQ(InfrastructureLineOf(tail, 0), "RuntimeError: CUDA error: unspecified launch failure");
  EXPECT_EQ(InfrastructureLineOf(tail, 1), "");
  // Ranks that write to torchrun's own stderr (no --tee): no prefix.
  EXPECT_EQ(InfrastructureLineOf({"Xid 79: GPU has fallen off the bus", "ok"}, 5),
            "Xid 79: GPU has fallen off the bus");
}

}  // namespace
}  // namespace trainsup
