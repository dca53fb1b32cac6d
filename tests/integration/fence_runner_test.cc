// The fence command runner on real processes: small /bin/sh scripts in a
// temporary directory.
#include "daemon/fence_runner.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/wait.h"

namespace trainsup {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

class FenceRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/fence_runner_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }

  void TearDown() override {
    for (const std::string& f : files_) unlink(f.c_str());
    rmdir(dir_.c_str());
  }

  // An executable /bin/sh script `name` in the temp dir with `body`.
  std::string Script(const std::string& name, const std::string& body) {
    const std::string path = dir_ + "/" + name;
    {
      std::ofstream out(path);
      out << "#!/bin/sh\n" << body << "\n";
    }
    EXPECT_EQ(chmod(path.c_str(), 0755), 0);
    files_.push_back(path);
    return path;
  }

  std::string PathOf(const std::string& name) {
    files_.push_back(dir_ + "/" + name);
    return files_.back();
  }

  static std::string ReadFile(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  // True when `pid` is gone or a zombie (killed, not yet reaped).
  static bool IsDeadOrZombie(pid_t pid) {
    const std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
    if (stat.empty()) return true;
    const size_t close = stat.rfind(')');
    return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z';
  }

  std::string dir_;
  std::vector<std::string> files_;
};

TEST_F(FenceRunnerTest, CommandGetsNodeAndReasonAsArguments) {
  const std::string out = PathOf("args.txt");
  const std::string cmd =
      Script("fence.sh", "printf '%s\\n%s\\n%d\\n' \"$1\" \"$2\" \"$#\" > '" + out + "'");

  auto [ok, detail] = FenceRunner::RunOnce(cmd, "gpu-node-7",
                                           "3 failures within 1h: crash of rank 3; hang",
                                           absl::Seconds(30));

  EXPECT_TRUE(ok) << detail;
  EXPECT_EQ(ReadFile(out), "gpu-node-7\n3 failures within 1h: crash of rank 3; hang\n2\n");
}

TEST_F(FenceRunnerTest, ExitZeroIsOkWithTheOutputCaptured) {
  const std::string cmd = Script("fence.sh", "echo \"drained $1\"; echo 'on stderr' >&2");

  auto [ok, detail] = FenceRunner::RunOnce(cmd, "n1", "why", absl::Seconds(30));

  EXPECT_TRUE(ok);
  EXPECT_THAT(detail, StartsWith("exit code 0"));
  EXPECT_THAT(detail, HasSubstr("drained n1"));
  EXPECT_THAT(detail, HasSubstr("on stderr"));
}

TEST_F(FenceRunnerTest, OutputIsCappedAtOneKibibyteWithTheCutMarked) {
  // 3000 'x' then a marker that must not appear.
  const std::string cmd = Script(
      "fence.sh", "i=0; while [ $i -lt 3000 ]; do printf x; i=$((i+1)); done; printf END");

  auto [ok, detail] = FenceRunner::RunOnce(cmd, "n1", "why", absl::Seconds(30));

  EXPECT_TRUE(ok) << detail;
  EXPECT_EQ(detail, "exit code 0; output: " + std::string(1021, 'x') + "...");
}

TEST_F(FenceRunnerTest, OutputCutInsideACharacterStaysValidUtf8) {
  // 1023 'x' and a euro sign (3 bytes): the 1 KiB cut falls inside it.
  const std::string cmd = Script(
      "fence.sh", "i=0; while [ $i -lt 1023 ]; do printf x; i=$((i+1)); done; printf '\342\202\254 tail'");

  auto [ok, detail] = FenceRunner::RunOnce(cmd, "n1", "why", absl::Seconds(30));

  EXPECT_TRUE(ok) << detail;
  EXPECT_TRUE(IsValidUtf8(detail));
  EXPECT_THAT(detail, ::testing::EndsWith("..."));
}

TEST_F(FenceRunnerTest, ANodeNameBeginningWithADashIsRefusedUnrun) {
  const std::string out = PathOf("ran.txt");
  const std::string cmd = Script("fence.sh", "touch '" + out + "'");

  auto [ok, detail] = FenceRunner::RunOnce(cmd, "--all", "why", absl::Seconds(30));

  EXPECT_FALSE(ok);
  EXPECT_THAT(detail, HasSubstr("refused"));
  EXPECT_EQ(access(out.c_str(), F_OK), -1);
}

TEST_F(FenceRunnerTest, NonZeroExitIsNotOkAndNamesTheExitCode) {
  const std::string cmd = Script("fence.sh", "echo 'scontrol: node unknown'; exit 3");

  auto [ok, detail] = FenceRunner::RunOnce(cmd, "n1", "why", absl::Seconds(30));

  EXPECT_FALSE(ok);
  EXPECT_THAT(detail, HasSubstr("exit code 3"));
  EXPECT_THAT(detail, HasSubstr("scontrol: node unknown"));
}

TEST_F(FenceRunnerTest, KilledBySignalIsNotOk) {
  const std::string cmd = Script("fence.sh", "kill -9 $$");

  auto [ok, detail] = FenceRunner::RunOnce(cmd, "n1", "why", absl::Seconds(30));

  EXPECT_FALSE(ok);
  EXPECT_THAT(detail, HasSubstr("killed (SIGKILL: out of memory?)"));
}

TEST_F(FenceRunnerTest, CommandOutlastingTheTimeoutIsKilledAndReported) {
  const std::string cmd = Script("fence.sh", "echo started; sleep 60; echo never");
  const absl::Duration timeout = absl::Milliseconds(500);

  const auto start = std::chrono::steady_clock::now();
  auto [ok, detail] = FenceRunner::RunOnce(cmd, "n1", "why", timeout);
  const auto elapsed = std::chrono::steady_clock::now() - start;

  EXPECT_FALSE(ok);
  EXPECT_THAT(detail, HasSubstr("timed out"));
  EXPECT_THAT(detail, HasSubstr("started"));
  EXPECT_THAT(detail, ::testing::Not(HasSubstr("never")));
  EXPECT_GE(elapsed, std::chrono::milliseconds(500));
  EXPECT_LT(elapsed, std::chrono::milliseconds(500) + std::chrono::seconds(5));
}

TEST_F(FenceRunnerTest, TimeoutKillsTheCommandsChildrenToo) {
  // The script's child keeps the output pipe open; the whole group is killed.
  const std::string cmd = Script("fence.sh", "sleep 60 & sleep 60");

  const auto start = std::chrono::steady_clock::now();
  auto [ok, detail] = FenceRunner::RunOnce(cmd, "n1", "why", absl::Milliseconds(300));
  const auto elapsed = std::chrono::steady_clock::now() - start;

  EXPECT_FALSE(ok);
  EXPECT_THAT(detail, HasSubstr("timed out"));
  EXPECT_LT(elapsed, std::chrono::milliseconds(300) + std::chrono::seconds(5));
}

// The impolite fence commands: each returns within its timeout and a second,
// with a result that says what happened and text that is valid UTF-8 (it
// goes into an event that every client must be able to parse).
struct EdgeCase {
  const char* name;
  const char* body;
  bool ok;
  const char* says;
};

class FenceEdgeCaseTest : public FenceRunnerTest,
                          public ::testing::WithParamInterface<EdgeCase> {};

TEST_P(FenceEdgeCaseTest, ReturnsWithinTheTimeoutAndASecondWithValidText) {
  const EdgeCase& c = GetParam();
  const std::string cmd = Script("fence.sh", c.body);
  const absl::Duration timeout = absl::Milliseconds(700);

  const auto start = std::chrono::steady_clock::now();
  auto [ok, detail] = FenceRunner::RunOnce(cmd, "n1", "why", timeout);
  const auto elapsed = std::chrono::steady_clock::now() - start;

  EXPECT_EQ(ok, c.ok) << detail;
  EXPECT_THAT(detail, HasSubstr(c.says));
  EXPECT_TRUE(IsValidUtf8(detail)) << detail;
  EXPECT_LT(elapsed, std::chrono::milliseconds(700) + std::chrono::seconds(1));
}

INSTANTIATE_TEST_SUITE_P(
    Fences, FenceEdgeCaseTest,
    ::testing::Values(
        EdgeCase{"Hangs", "echo hanging; sleep 60", false, "timed out"},
        // Output closed, still running: EOF comes at once, the exit never.
        EdgeCase{"ClosesOutputAndLivesOn", "exec >/dev/null 2>&1; exec sleep 60", false,
                 "its output closed, still running"},
        // Exits at once, but a child it left holds the output open.
        EdgeCase{"LeavesAChildHoldingItsOutput", "sleep 60 & echo drained", true,
                 "were killed after"},
        EdgeCase{"PrintsInvalidUtf8", "printf 'bad \377\376 bytes \300\257'", true,
                 "bad \xEF\xBF\xBD\xEF\xBF\xBD bytes"},
        EdgeCase{"ExitsNonZero", "echo 'no such node' >&2; exit 4", false, "exit code 4"}),
    [](const ::testing::TestParamInfo<EdgeCase>& info) { return info.param.name; });

TEST_F(FenceRunnerTest, ATimeoutKillsTheWholeProcessGroup) {
  const std::string pids = PathOf("pids.txt");
  // A child and the script itself, both still running at the timeout.
  const std::string cmd =
      Script("fence.sh", "sleep 60 & echo $! > '" + pids + "'; exec >/dev/null; sleep 60");

  auto [ok, detail] = FenceRunner::RunOnce(cmd, "n1", "why", absl::Milliseconds(500));

  EXPECT_FALSE(ok);
  const pid_t child = std::stoi(ReadFile(pids));
  // The orphaned child is reaped by init, maybe later: dead means gone or a
  // zombie.
  EXPECT_TRUE(testing::WaitFor([&] { return IsDeadOrZombie(child); })) << child;
}

TEST_F(FenceRunnerTest, MissingCommandIsNotOkAndCannotRun) {
  const std::string missing = dir_ + "/no-such-fence-command";

  auto [ok, detail] = FenceRunner::RunOnce(missing, "n1", "why", absl::Seconds(5));

  EXPECT_FALSE(ok);
  EXPECT_THAT(detail, HasSubstr("cannot run"));
  EXPECT_THAT(detail, HasSubstr(missing));
}

// Collects the runner's `done` calls; waits on a condition with a deadline.
class DoneLog {
 public:
  FenceRunner::DoneFn Fn() {
    return [this](const FenceRequest& request, bool ok, const std::string& detail) {
      absl::MutexLock lock(&mu_);
      calls_.emplace_back(request.node, ok, detail);
    };
  }

  // True when `n` calls arrived within `timeout`.
  bool WaitFor(size_t n, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return calls_.size() >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
  }

  std::vector<std::tuple<std::string, bool, std::string>> calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }

 private:
  absl::Mutex mu_;
  std::vector<std::tuple<std::string, bool, std::string>> calls_ ABSL_GUARDED_BY(mu_);
};

TEST_F(FenceRunnerTest, QueuedRunnerCallsDoneForEachEnqueueInOrder) {
  const std::string log = PathOf("order.txt");
  // n2 fails; the others succeed. Each call appends its node to a file.
  const std::string cmd = Script(
      "fence.sh", "echo \"$1\" >> '" + log + "'; echo \"fenced $1: $2\"; [ \"$1\" != n2 ]");
  DoneLog done;
  {
    FenceRunner runner({cmd, ""}, absl::Seconds(30), done.Fn());
    runner.Enqueue({"n1", "r1"});
    runner.Enqueue({"n2", "r2"});
    runner.Enqueue({"n3", "r3"});
    ASSERT_TRUE(done.WaitFor(3, absl::Seconds(30)));
  }

  auto calls = done.calls();
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(std::get<0>(calls[0]), "n1");
  EXPECT_TRUE(std::get<1>(calls[0]));
  EXPECT_THAT(std::get<2>(calls[0]), HasSubstr("fenced n1: r1"));
  EXPECT_EQ(std::get<0>(calls[1]), "n2");
  EXPECT_FALSE(std::get<1>(calls[1]));
  EXPECT_THAT(std::get<2>(calls[1]), HasSubstr("exit code 1"));
  EXPECT_EQ(std::get<0>(calls[2]), "n3");
  EXPECT_TRUE(std::get<1>(calls[2]));
  EXPECT_THAT(std::get<2>(calls[2]), HasSubstr("fenced n3: r3"));
  EXPECT_EQ(ReadFile(log), "n1\nn2\nn3\n");  // one at a time, in order
}

TEST_F(FenceRunnerTest, RunnerWithNothingQueuedStopsPromptly) {
  DoneLog done;
  const std::string cmd = Script("fence.sh", "exit 0");
  const auto start = std::chrono::steady_clock::now();
  { FenceRunner runner({cmd, ""}, absl::Seconds(30), done.Fn()); }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_TRUE(done.calls().empty());
}

}  // namespace
}  // namespace trainsup
