// A fence whose output is not UTF-8, end to end in-process: the runner's
// event reaches trainsupctl's client over real gRPC and parses (one bad byte
// in a protobuf string makes a C++ client refuse the whole ListEvents).
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <string>

#include "cli/client.h"
#include "common/clock.h"
#include "common/format.h"
#include "daemon/server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/null_channel.h"
#include "tests/support/wait.h"

namespace trainsup {
namespace {

using ::testing::HasSubstr;
using testing::WaitFor;

TEST(FenceEventTest, AFenceEventWithInvalidUtf8OutputParsesInTheClient) {
  std::string dir = ::testing::TempDir() + "/fence_event_test.XXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  const std::string script = dir + "/fence.sh";
  {
    std::ofstream out(script);
    out << "#!/bin/sh\nprintf 'drained \\377\\376 %s' \"$1\"; exit 3\n";
  }
  ASSERT_EQ(chmod(script.c_str(), 0755), 0);
  FakeClock clock;
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.metrics_listen = "";
  options.fence_command = script;
  options.fence_timeout = absl::Seconds(10);
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options, &clock);
  ASSERT_TRUE(server.ok()) << server.status();
  AgentHelloInfo hello;
  hello.node = "node-a";
  hello.job = "j1";
  hello.incarnation = 1;
  ASSERT_TRUE((*server)->host().Hello(hello, std::make_shared<testing::NullChannel>()).ok());
  OperatorClient client((*server)->grpc_address(), absl::Seconds(5),
                        *MakeOperatorChannel((*server)->grpc_address(), {}, ""));

  ASSERT_TRUE(client.QuarantineNode("node-a", "bad GPU 3").ok());

  absl::StatusOr<v1::ListEventsResponse> events;
  const v1::Event* fence = nullptr;
  ASSERT_TRUE(WaitFor([&] {
    events = client.ListEvents("");
    if (!events.ok()) return true;  // a parse failure ends the wait: asserted below
    for (const v1::Event& e : events->events()) {
      if (e.kind() == "fence") fence = &e;
    }
    return fence != nullptr;
  }));
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_NE(fence, nullptr);
  EXPECT_EQ(fence->node(), "node-a");
  EXPECT_EQ(fence->figures().at("ok"), 0);
  // The command's status and output are quoted, as valid UTF-8.
  EXPECT_TRUE(IsValidUtf8(fence->message()));
  EXPECT_THAT(fence->message(), HasSubstr(": exit code 3"));
  EXPECT_THAT(fence->message(), HasSubstr("drained \xEF\xBF\xBD\xEF\xBF\xBD node-a"));

  (*server)->Shutdown();
  unlink(script.c_str());
  rmdir(dir.c_str());
}

}  // namespace
}  // namespace trainsup
