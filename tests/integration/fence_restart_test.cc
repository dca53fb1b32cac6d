// kill -9 of the supervisor between "quarantine decided" and "fence ran":
// after a restart on the same state file the fence runs exactly once more
// (at least once overall, so fence commands must be idempotent), and the
// node is still quarantined. Each supervisor is a real process (forked
// before this process touches gRPC) on a real SQLite file, killed with
// SIGKILL while its fence command is blocked.
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "common/clock.h"
#include "daemon/server.h"
#include "daemon/state_store.h"
#include "gtest/gtest.h"
#include "tests/support/null_channel.h"
#include "tests/support/wait.h"

namespace trainsup {
namespace {

using testing::WaitFor;

class FenceRestartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/fence_restart_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    log_ = dir_ + "/fence.log";
    release_ = dir_ + "/release";
    script_ = dir_ + "/fence.sh";
    std::ofstream out(script_);
    // Records each call, then blocks until the test releases it (at most 30s).
    out << "#!/bin/sh\necho \"$1\" >> '" << log_ << "'\n"
        << "i=0; while [ ! -e '" << release_ << "' ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done\n"
        << "echo \"drained $1\"\n";
    out.close();
    ASSERT_EQ(chmod(script_.c_str(), 0755), 0);
  }

  void TearDown() override {
    for (const char* f : {"/fence.log", "/release", "/fence.sh", "/state.db", "/state.db-wal",
                          "/state.db-shm"}) {
      unlink((dir_ + f).c_str());
    }
    rmdir(dir_.c_str());
  }

  // A supervisor in a child process on the state file. With `quarantine`, it
  // says hello for node-a and quarantines it. SIGTERM ends it cleanly.
  pid_t StartSupervisor(bool quarantine) {
    const pid_t pid = fork();
    if (pid != 0) return pid;
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &term, nullptr);  // taken by sigwait below
    MonotonicClock clock;
    ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.metrics_listen = "";
    options.state_path = dir_ + "/state.db";
    options.fence_command = script_;
    options.fence_timeout = absl::Seconds(30);
    absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options, &clock);
    if (!server.ok()) _exit(2);
    if (quarantine) {
      AgentHelloInfo hello;
      hello.node = "node-a";
      hello.job = "j1";
      hello.incarnation = 1;
      auto channel = std::make_shared<testing::NullChannel>();
      if (!(*server)->host().Hello(hello, channel).ok()) _exit(3);
      if (!(*server)->host().Quarantine("node-a", "bad GPU 3").ok()) _exit(4);
    }
    int signal = 0;
    sigwait(&term, &signal);
    (*server)->Shutdown();
    server->reset();
    _exit(0);
  }

  int Calls() {
    std::ifstream in(log_);
    std::string line;
    int n = 0;
    while (std::getline(in, line)) n += line == "node-a" ? 1 : 0;
    return n;
  }

  static int Reap(pid_t pid) {
    int status = 0;
    waitpid(pid, &status, 0);
    return status;
  }

  std::string dir_, log_, release_, script_;
};

TEST_F(FenceRestartTest, AFenceCutShortByKill9RunsExactlyOnceMoreAfterRestart) {
  const pid_t first = StartSupervisor(/*quarantine=*/true);
  ASSERT_TRUE(WaitFor([&] { return Calls() == 1; }, std::chrono::seconds(20)));
  // Quarantine decided, fence running (blocked): the supervisor dies.
  kill(first, SIGKILL);
  ASSERT_TRUE(WIFSIGNALED(Reap(first)));
  // The fence it started may still be blocked; free it (it was killed with
  // its supervisor or finishes on its own, unrecorded).
  { std::ofstream(release_.c_str()); }

  const pid_t second = StartSupervisor(/*quarantine=*/false);
  ASSERT_TRUE(WaitFor([&] { return Calls() == 2; }, std::chrono::seconds(20)));
  kill(second, SIGTERM);  // a clean stop: the fence in flight finishes and is committed
  const int status = Reap(second);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;

  absl::StatusOr<std::unique_ptr<StateStore>> store = StateStore::Open(dir_ + "/state.db");
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<PersistedState> state = (*store)->Load(1000, 1000, 1000);
  ASSERT_TRUE(state.ok()) << state.status();
  bool quarantined = false;
  for (const NodeRecordRow& node : state->nodes) quarantined |= node.name == "node-a" && node.quarantined;
  EXPECT_TRUE(quarantined);
  EXPECT_TRUE(state->fences.empty());  // it succeeded: a later start does not run it again
  EXPECT_EQ(Calls(), 2);
}

}  // namespace
}  // namespace trainsup
