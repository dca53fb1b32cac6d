// --unfence-command through the real runner, host and SQLite store: an
// operator's unquarantine runs the unfence command after the node's fence
// (even one still running when the quarantine is lifted), as an event and in
// the counters; an unfence that failed stays pending in the store and runs
// again at the next start.
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "common/clock.h"
#include "daemon/server.h"
#include "daemon/state_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/null_channel.h"
#include "tests/support/wait.h"

namespace trainsup {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;
using testing::WaitFor;

class UnfenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/unfence_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    // Both commands append to one log, so the order they ran in shows. The
    // fence holds on until the test releases it; the unfence fails until the
    // test allows it (a slurmctld out of reach, say).
    WriteScript("fence.sh", "echo \"fence-start $1\" >> " + Path("calls") + "\n" +
                                "i=0; while [ ! -e " + Path("release") +
                                " ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done\n" +
                                "echo \"fence-end $1\" >> " + Path("calls") + "\n");
    WriteScript("unfence.sh", "echo \"unfence $1 $2\" >> " + Path("calls") + "\n" +
                                  "[ -e " + Path("allow") + " ] || { echo unreachable; exit 1; }\n" +
                                  "echo \"resumed $1\"\n");
  }

  void TearDown() override {
    for (const char* f : {"calls", "release", "allow", "fence.sh", "unfence.sh", "state.db",
                          "state.db-wal", "state.db-shm"}) {
      unlink(Path(f).c_str());
    }
    rmdir(dir_.c_str());
  }

  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  void WriteScript(const std::string& name, const std::string& body) {
    std::ofstream(Path(name)) << "#!/bin/sh\n" << body;
    ASSERT_EQ(chmod(Path(name).c_str(), 0755), 0);
  }

  void Touch(const std::string& name) { std::ofstream(Path(name).c_str()); }

  std::vector<std::string> Calls() const {
    std::ifstream in(Path("calls"));
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }

  std::unique_ptr<Server> Start() {
    ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.metrics_listen = "";
    options.state_path = Path("state.db");
    options.fence_command = Path("fence.sh");
    options.unfence_command = Path("unfence.sh");
    options.fence_timeout = absl::Seconds(30);
    absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options, &clock_);
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? *std::move(server) : nullptr;
  }

  static std::vector<Event> EventsOf(Server& server, EventKind kind) {
    std::vector<Event> out;
    for (const Event& e : server.host().Events(0, "", 1000)) {
      if (e.kind == kind) out.push_back(e);
    }
    return out;
  }

  PersistedState Stored() const {
    absl::StatusOr<std::unique_ptr<StateStore>> store = StateStore::Open(Path("state.db"));
    EXPECT_TRUE(store.ok()) << store.status();
    if (!store.ok()) return {};
    absl::StatusOr<PersistedState> state = (*store)->Load(1000, 1000, 1000);
    EXPECT_TRUE(state.ok()) << state.status();
    return state.ok() ? *state : PersistedState();
  }

  MonotonicClock clock_;
  std::string dir_;
};

TEST_F(UnfenceTest, AnUnfenceRunsAfterTheFenceItOvertookAndAFailedOneRunsAgainAtTheNextStart) {
  std::unique_ptr<Server> server = Start();
  ASSERT_NE(server, nullptr);
  AgentHelloInfo hello;
  hello.node = "node-a";
  hello.job = "j1";
  hello.incarnation = 1;
  ASSERT_TRUE(server->host().Hello(hello, std::make_shared<testing::NullChannel>()).ok());

  ASSERT_TRUE(server->host().Quarantine("node-a", "bad GPU 3").ok());
  ASSERT_TRUE(WaitFor([&] { return Calls().size() == 1; }));  // the fence runs, held
  ASSERT_TRUE(server->host().Unquarantine("node-a").ok());
  Touch("release");

  // The unfence waited for the fence, then failed (not allowed yet).
  ASSERT_TRUE(WaitFor([&] { return !EventsOf(*server, EventKind::kUnfence).empty(); }));
  EXPECT_THAT(Calls(), ElementsAre("fence-start node-a", "fence-end node-a",
                                   "unfence node-a quarantine lifted by an operator"));
  const Event failed = EventsOf(*server, EventKind::kUnfence)[0];
  EXPECT_EQ(failed.node, "node-a");
  EXPECT_THAT(failed.figures, ElementsAre(Pair("ok", 0)));
  EXPECT_THAT(failed.message, HasSubstr(": exit code 1; output: unreachable"));  // the command's
  EXPECT_EQ(server->host().fences_succeeded(), 1u);
  EXPECT_EQ(server->host().unfences_failed(), 1u);
  EXPECT_EQ(server->host().unfences_succeeded(), 0u);
  server->Shutdown();
  server.reset();

  PersistedState stored = Stored();
  ASSERT_EQ(stored.fences.size(), 1u);  // pending: the fence's row replaced by the unfence's
  EXPECT_EQ(stored.fences[0].node, "node-a");
  EXPECT_EQ(stored.fences[0].action, FenceAction::kUnfence);
  EXPECT_EQ(stored.fences[0].reason, "quarantine lifted by an operator");

  // The next start runs it again; now it succeeds and is cleared.
  Touch("allow");
  server = Start();
  ASSERT_NE(server, nullptr);
  // (The counter moves before the event is published: wait for the event.)
  ASSERT_TRUE(WaitFor([&] { return EventsOf(*server, EventKind::kUnfence).size() == 2; }));
  const Event succeeded = EventsOf(*server, EventKind::kUnfence).back();
  EXPECT_EQ(succeeded.node, "node-a");
  EXPECT_THAT(succeeded.figures, ElementsAre(Pair("ok", 1)));
  EXPECT_THAT(succeeded.message, HasSubstr(": exit code 0; output: resumed node-a"));
  EXPECT_EQ(server->host().unfences_succeeded(), 1u);
  server->Shutdown();
  server.reset();

  EXPECT_EQ(Calls().size(), 4u);  // the fence once, the unfence twice
  EXPECT_TRUE(Stored().fences.empty());
}

}  // namespace
}  // namespace trainsup
