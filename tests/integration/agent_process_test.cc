// The agent with real processes: what its command inherits, the reaper and
// the death signal that keep the command from outliving the agent, the
// plan file, and the real trainsup-agent binary (killed outright; refused
// by a real trainsupd; collecting a python rank's stack before a stop).
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "agent/launcher.h"
#include "agent/plan_file.h"
#include "agent/rank_log.h"
#include "agent/rank_socket.h"
#include "agent/reaper.h"
#include "agent/report_batcher.h"
#include "agent/stderr_tee.h"
#include "agent/supervisor_link.h"
#include "common/clock.h"
#include "common/failure_text.h"
#include "common/options.h"
#include "daemon/server.h"
#include "google/protobuf/util/json_util.h"
#include "tests/integration/fake_supervisor.h"
#include "tests/support/wait.h"

extern char** environ;

namespace trainsup {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testing::FakeSupervisor;
using testing::Reports;
using testing::WaitFor;
using Received = FakeSupervisor::Received;

// --- processes as /proc shows them ---

struct ProcStat {
  char state = 0;  // 0: no such process
  pid_t pgid = 0;
};

ProcStat ReadStat(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  ProcStat stat;
  if (!std::getline(in, line)) return stat;
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return stat;
  std::vector<std::string> fields = absl::StrSplit(line.substr(close + 2), ' ');
  if (fields.size() < 3) return stat;
  stat.state = fields[0][0];
  (void)absl::SimpleAtoi(fields[2], &stat.pgid);
  return stat;
}

// Gone, or a zombie nobody reaped yet (orphans are reaped late here): dead either way.
bool IsDead(pid_t pid) {
  const char state = ReadStat(pid).state;
  return state == 0 || state == 'Z' || state == 'X';
}

// The numeric entries of a /proc directory (processes, descriptors).
std::vector<int> NumericEntries(const std::string& path) {
  std::vector<int> numbers;
  DIR* dir = opendir(path.c_str());
  if (dir == nullptr) return numbers;
  while (dirent* e = readdir(dir)) {
    int n = 0;
    if (absl::SimpleAtoi(e->d_name, &n)) numbers.push_back(n);
  }
  closedir(dir);
  std::sort(numbers.begin(), numbers.end());
  return numbers;
}

// The live (not zombie) processes of process group `pgid`.
std::vector<pid_t> LiveMembers(pid_t pgid) {
  std::vector<pid_t> members;
  for (int pid : NumericEntries("/proc")) {
    if (ReadStat(pid).pgid == pgid && !IsDead(pid)) members.push_back(pid);
  }
  return members;
}

// The descriptors open in `pid`, with what each refers to.
std::vector<std::pair<int, std::string>> OpenFds(pid_t pid) {
  std::vector<std::pair<int, std::string>> fds;
  const std::string dir = absl::StrCat("/proc/", pid, "/fd");
  for (int fd : NumericEntries(dir)) {
    char target[256] = {0};
    const ssize_t n = readlink(absl::StrCat(dir, "/", fd).c_str(), target, sizeof(target) - 1);
    fds.emplace_back(fd, n > 0 ? std::string(target, static_cast<size_t>(n)) : "");
  }
  return fds;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

bool Exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

// A fresh directory under the test's temporary directory, removed with
// everything in it when this goes out of scope.
class TempDir {
 public:
  TempDir() : path_(::testing::TempDir() + "trainsup-agent-test.XXXXXX") {
    EXPECT_NE(mkdtemp(path_.data()), nullptr) << strerror(errno);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Starts `argv` in a process group of its own (a stand-in for a command's
// group); stdout and stderr to `log` when given.
pid_t Spawn(const std::vector<std::string>& argv, const std::string& log = "") {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (!log.empty()) {
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(),
                                     O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  }
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  pid_t pid = 0;
  EXPECT_EQ(posix_spawn(&pid, args[0], &actions, &attr, args.data(), environ), 0);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  return pid;
}

// Waits up to `timeout` for child `pid` to end; its wait status, or -1.
int AwaitExit(pid_t pid, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  int status = -1;
  const bool ended = WaitFor([&] { return waitpid(pid, &status, WNOHANG) == pid; }, timeout);
  return ended ? status : -1;
}

// Runs the launcher's command to its end, reaping as the agent does.
bool AwaitCommandEnd(Launcher& launcher) {
  return WaitFor([&] { return launcher.ReapChildren() || !launcher.running(); });
}

// --- the launcher and its reaper ---

TEST(LauncherTest, TheCommandInheritsNoDescriptorOfTheAgent) {
  TempDir temp;
  const std::string& dir = temp.path();
  // What an agent holds: the rank socket (close-on-exec), and a descriptor
  // some library opened without O_CLOEXEC.
  absl::StatusOr<std::unique_ptr<RankSocket>> socket = RankSocket::Open(dir);
  ASSERT_TRUE(socket.ok()) << socket.status();
  const int leaky = open("/dev/null", O_RDONLY);
  ASSERT_GE(leaky, 0);
  const std::string out = dir + "/fds";
  Launcher launcher;
  ASSERT_TRUE(launcher
                  .Start({"python3", "-c",
                          "import os, sys\n"
                          "fds = []\n"
                          "for name in sorted(os.listdir('/proc/self/fd'), key=int):\n"
                          "    try:\n"
                          "        os.readlink('/proc/self/fd/' + name)\n"
                          "        fds.append(name)\n"
                          "    except OSError:\n"
                          "        pass  # listdir's own, closed by now\n"
                          "open(sys.argv[1], 'w').write(' '.join(fds))\n",
                          out},
                         {})
                  .ok());
  ASSERT_TRUE(AwaitCommandEnd(launcher));
  launcher.EndGroup();
  close(leaky);

  EXPECT_EQ(launcher.status().exit_code(), 0);
  EXPECT_EQ(ReadFile(out), "0 1 2");
}

TEST(LauncherTest, ACommandThatCannotRunIsAnError) {
  Launcher launcher;
  absl::Status started = launcher.Start({"/nonexistent/torchrun"}, {});
  EXPECT_FALSE(started.ok());
  EXPECT_THAT(std::string(started.message()), HasSubstr("No such file"));
  EXPECT_FALSE(launcher.running());
}

TEST(LauncherTest, TheReaperHoldsNothingButItsEndOfThePipe) {
  TempDir temp;
  const std::string& dir = temp.path();
  absl::StatusOr<std::unique_ptr<RankSocket>> socket = RankSocket::Open(dir);
  ASSERT_TRUE(socket.ok()) << socket.status();
  Launcher launcher;
  ASSERT_TRUE(launcher.Start({"sleep", "1000"}, {}).ok());
  const pid_t reaper = launcher.reaper_pid();
  ASSERT_GT(reaper, 0);

  // Once it closed what it inherited: stdio and the pipe, nothing else.
  std::vector<std::pair<int, std::string>> fds;
  EXPECT_TRUE(WaitFor([&] {
    fds = OpenFds(reaper);
    return fds.size() == 4;
  }));
  ASSERT_EQ(fds.size(), 4u);
  EXPECT_EQ(fds[0].second, "/dev/null");
  EXPECT_EQ(fds[1].second, "/dev/null");
  EXPECT_EQ(fds[3].first, 3);
  EXPECT_THAT(fds[3].second, HasSubstr("socket:"));
  EXPECT_EQ(ReadStat(reaper).pgid, reaper);  // out of the agent's group
  EXPECT_EQ(ReadFile(absl::StrCat("/proc/", reaper, "/comm")), "trainsup-reaper\n");
  // The command is in a group of its own.
  EXPECT_EQ(ReadStat(launcher.pid()).pgid, launcher.pid());

  launcher.SignalGroup(SIGKILL);
  ASSERT_TRUE(AwaitCommandEnd(launcher));
  launcher.EndGroup();
  // Released, the reaper exits (and the agent reaps it like any child).
  EXPECT_TRUE(WaitFor([&] {
    launcher.ReapChildren();
    return ReadStat(reaper).state == 0;
  }));
}

TEST(ReaperTest, AReleasedReaperExitsWithoutKilling) {
  const pid_t group = Spawn({"/bin/sleep", "1000"});
  absl::StatusOr<std::unique_ptr<Reaper>> reaper = Reaper::Start(group);
  ASSERT_TRUE(reaper.ok()) << reaper.status();
  const pid_t reaper_pid = (*reaper)->pid();

  (*reaper)->Release();

  const int status = AwaitExit(reaper_pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_FALSE(IsDead(group));
  kill(group, SIGKILL);
  AwaitExit(group);
}

TEST(ReaperTest, AReaperKillsTheWholeGroupWhenItsOwnerDies) {
  const pid_t group = Spawn({"/bin/sh", "-c", "sleep 1000 & sleep 1000 & wait"});
  ASSERT_TRUE(WaitFor([&] { return LiveMembers(group).size() == 3; }));
  // The owner: a process that starts the reaper and dies without a word.
  const pid_t owner = fork();
  ASSERT_GE(owner, 0);
  if (owner == 0) {
    absl::StatusOr<std::unique_ptr<Reaper>> reaper = Reaper::Start(group);
    _exit(reaper.ok() ? 0 : 1);  // no destructor: the pipe closes with the process
  }
  const int status = AwaitExit(owner);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;

  EXPECT_TRUE(WaitFor([&] { return LiveMembers(group).empty(); }));
  AwaitExit(group);
}

TEST(LauncherTest, TheCommandDiesWithTheAgentEvenWithoutTheReaper) {
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  // The agent: launches, loses its reaper, dies.
  const pid_t agent = fork();
  ASSERT_GE(agent, 0);
  if (agent == 0) {
    Launcher launcher;
    if (!launcher.Start({"sleep", "1000"}, {}).ok()) _exit(1);
    kill(launcher.reaper_pid(), SIGKILL);
    waitpid(launcher.reaper_pid(), nullptr, 0);
    const pid_t pid = launcher.pid();
    if (write(pipe_fds[1], &pid, sizeof(pid)) != sizeof(pid)) _exit(1);
    _exit(0);
  }
  close(pipe_fds[1]);
  pid_t command = 0;
  ASSERT_EQ(read(pipe_fds[0], &command, sizeof(command)), static_cast<ssize_t>(sizeof(command)));
  close(pipe_fds[0]);
  ASSERT_EQ(AwaitExit(agent), 0);

  EXPECT_TRUE(WaitFor([&] { return IsDead(command); }));
}

// --- the plan file ---

TEST(PlanFileTest, HoldsEveryPlanAndAcksTheHighestWritten) {
  TempDir temp;
  const std::string& dir = temp.path();
  PlanFile file(dir + "/plans.json");
  EXPECT_EQ(file.held_through(), 0u);
  v1::CheckpointPlan plan;
  plan.set_plan_id(1);
  plan.set_interval_steps(100);
  ASSERT_TRUE(file.Add(plan).ok());
  plan.set_plan_id(2);
  plan.set_interval_steps(50);
  ASSERT_TRUE(file.Add(plan).ok());
  ASSERT_TRUE(file.Add(plan).ok());  // resent after a reconnect

  EXPECT_EQ(file.held_through(), 2u);
  v1::CheckpointPlans written;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(ReadFile(file.path()), &written).ok());
  ASSERT_EQ(written.plans_size(), 2);
  EXPECT_EQ(written.plans(0).plan_id(), 1u);
  EXPECT_EQ(written.plans(1).interval_steps(), 50);
  EXPECT_EQ(file.plans().plans_size(), 2);
}

TEST(PlanFileTest, APlanNotWrittenIsNotAckedUntilARewriteSucceeds) {
  TempDir temp;
  const std::string dir = temp.path() + "/later";
  PlanFile file(dir + "/plans.json");
  v1::CheckpointPlan plan;
  plan.set_plan_id(5);
  EXPECT_FALSE(file.Add(plan).ok());
  EXPECT_EQ(file.held_through(), 0u);
  EXPECT_EQ(file.plans().plans_size(), 1);  // held, and in the hello

  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  EXPECT_TRUE(file.Rewrite().ok());
  EXPECT_EQ(file.held_through(), 5u);
}

// --- the command's stderr ---

// A pipe whose read end a StderrTee takes, and one for where it writes.
struct TeePipes {
  TeePipes() {
    EXPECT_EQ(pipe2(command, O_CLOEXEC), 0);
    EXPECT_EQ(pipe2(out, O_CLOEXEC | O_NONBLOCK), 0);
  }
  ~TeePipes() {
    for (int fd : {command[1], out[0], out[1]}) {
      if (fd >= 0) close(fd);
    }
  }
  // What reached `out` so far.
  std::string Out() const {
    std::string text;
    char buffer[4096];
    ssize_t n;
    while ((n = read(out[0], buffer, sizeof(buffer))) > 0) text.append(buffer, n);
    return text;
  }
  void Write(const std::string& text) {
    ASSERT_EQ(write(command[1], text.data(), text.size()), static_cast<ssize_t>(text.size()));
  }
  void CloseCommand() {
    close(command[1]);
    command[1] = -1;
  }
  int command[2] = {-1, -1};
  int out[2] = {-1, -1};
};

TEST(StderrTeeTest, PassesEverythingOnAndKeepsTheLastLines) {
  TeePipes pipes;
  StderrTee tee(pipes.command[0], pipes.out[1], /*max_lines=*/3);
  pipes.Write("one\ntwo\nthree\n");
  pipes.Write("progress 10%\rprogress 90%\rfour\nfi");
  pipes.Write("ve");
  pipes.CloseCommand();
  ASSERT_TRUE(tee.AwaitEnd(absl::Seconds(10)));

  EXPECT_THAT(tee.Tail(), ::testing::ElementsAre("three", "four", "five"));
  EXPECT_EQ(tee.lines(), 5u);
  EXPECT_EQ(pipes.Out(), "one\ntwo\nthree\nprogress 10%\rprogress 90%\rfour\nfive");
}

TEST(StderrTeeTest, TheLineBeingWrittenIsInTheTailAndLinesAreCut) {
  TeePipes pipes;
  StderrTee tee(pipes.command[0], pipes.out[1]);
  pipes.Write(std::string(5000, 'x') + "\x1b[31m\nTraceback (most");
  ASSERT_TRUE(WaitFor([&] { return tee.Tail().size() == 2; }));
  const std::deque<std::string> tail = tee.Tail();
  EXPECT_EQ(tail[0].size(), kMaxStderrLineBytes);
  EXPECT_EQ(tail[1], "Traceback (most");
  EXPECT_FALSE(tee.AwaitEnd(absl::Milliseconds(50)));  // the writer is still there
}

TEST(StderrTeeTest, AWriterNeverWaitsForItsReaderButForTheAgentsOwnStderr) {
  TeePipes pipes;
  const int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
  ASSERT_GE(devnull, 0);
  StderrTee tee(pipes.command[0], devnull);
  // 16 MB, far beyond a pipe's 64 KiB: it goes through only if the tee
  // reads as it comes, with nobody calling it.
  const pid_t writer = fork();
  ASSERT_GE(writer, 0);
  if (writer == 0) {
    const std::string line = std::string(1023, 'w') + "\n";
    for (int i = 0; i < 16 * 1024; ++i) {
      if (write(pipes.command[1], line.data(), line.size()) != 1024) _exit(1);
    }
    _exit(0);
  }
  pipes.CloseCommand();
  const int status = AwaitExit(writer, std::chrono::seconds(30));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_TRUE(tee.AwaitEnd(absl::Seconds(10)));
  EXPECT_EQ(tee.lines(), 16u * 1024);
  close(devnull);
}

TEST(StderrTeeTest, AClosedAgentStderrEndsNothingButThePassingOn) {
  TeePipes pipes;
  close(pipes.out[0]);  // the agent's stderr is gone: writes fail with EPIPE
  pipes.out[0] = -1;
  StderrTee tee(pipes.command[0], pipes.out[1]);
  pipes.Write("first\nsecond\n");
  pipes.CloseCommand();
  ASSERT_TRUE(tee.AwaitEnd(absl::Seconds(10)));
  EXPECT_THAT(tee.Tail(), ::testing::ElementsAre("first", "second"));
}

TEST(LauncherTest, TheCommandsStderrIsKeptAndPassedOn) {
  Launcher launcher;
  ASSERT_TRUE(launcher
                  .Start({"/bin/sh", "-c",
                          "echo to-stdout; echo 'ValueError: bad config' >&2; exit 3"},
                         {})
                  .ok());
  ASSERT_TRUE(AwaitCommandEnd(launcher));
  launcher.EndGroup();
  ASSERT_TRUE(launcher.AwaitStderr(absl::Seconds(10)));
  EXPECT_THAT(launcher.StderrTail(), ::testing::ElementsAre("ValueError: bad config"));
  EXPECT_EQ(launcher.status().exit_code(), 3);
}

// What torch 1.13's torchrun writes with --redirects: LOG_DIR/RUN_ID/attempt_N/LOCAL_RANK/stderr.log.
TEST(RankStderrLogTest, ReadsTheNewestLogOfTheLocalRankFromItsEnd) {
  TempDir temp;
  const std::string& dir = temp.path();
  auto write = [&](const std::string& path, const std::string& text) {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path) << text;
  };
  write(dir + "/job_a1/attempt_0/1/stderr.log", "old generation\n");
  write(dir + "/job_a1/attempt_0/0/stderr.log", "another rank\n");
  const std::string current = dir + "/job_b2/attempt_0/1/stderr.log";
  write(current, "step 1\nRuntimeError: CUDA error: unspecified launch failure\n");
  std::filesystem::last_write_time(
      dir + "/job_a1/attempt_0/1/stderr.log",
      std::filesystem::last_write_time(current) - std::chrono::seconds(60));

  EXPECT_THAT(RankStderrLog(dir, 1), ::testing::ElementsAre(
                                         "step 1",
                                         "RuntimeError: CUDA error: unspecified launch failure"));
  EXPECT_EQ(InfrastructureLineOf(RankStderrLog(dir, 1), 1),
            "RuntimeError: CUDA error: unspecified launch failure");
  // From its end: a line cut by the limit is dropped.
  EXPECT_THAT(RankStderrLog(dir, 1, 56),
              ::testing::ElementsAre("RuntimeError: CUDA error: unspecified launch failure"));
  EXPECT_THAT(RankStderrLog(dir, 7), IsEmpty());
  EXPECT_THAT(RankStderrLog(dir + "/none", 1), IsEmpty());
  EXPECT_THAT(RankStderrLog("", 1), IsEmpty());
}

// --- the trainsup-agent binary ---

// A supervisor's welcome that says: launch now as `generation`; failures
// are restarted.
v1::Welcome LaunchWelcome(uint64_t generation) {
  v1::Welcome welcome;
  welcome.set_launch(true);
  welcome.set_generation(generation);
  welcome.set_restarts(true);
  return welcome;
}

class AgentBinaryTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = temp_.path(); }
  void TearDown() override {
    if (agent_ > 0 && waitpid(agent_, nullptr, WNOHANG) == 0) {
      kill(agent_, SIGKILL);
      AwaitExit(agent_);
    }
  }

  // Starts the agent for job j1 with `options` and `command`; its log in log().
  void StartAgent(const std::vector<std::string>& options, const std::vector<std::string>& command) {
    std::vector<std::string> argv = {TRAINSUP_AGENT_BINARY, "run", "--job", "j1",
                                     "--socket-dir", dir_};
    argv.insert(argv.end(), options.begin(), options.end());
    argv.push_back("--");
    argv.insert(argv.end(), command.begin(), command.end());
    agent_ = Spawn(argv, log_path());
    ASSERT_GT(agent_, 0);
  }
  // Starts the agent (welcomed to launch generation 1, reporting every 50ms)
  // on a command that writes its plan file's path to `plan_path`, then
  // sleeps; returns once the path is written.
  void StartSleeperTellingItsPlanFile(FakeSupervisor& supervisor, const std::string& plan_path,
                                      const std::string& report_interval = "50ms") {
    supervisor.SetWelcome(LaunchWelcome(1));
    StartAgent({"--supervisor", supervisor.address(), "--node", "n1", "--report-interval",
                report_interval},
               {"/bin/sh", "-c",
                absl::StrCat("echo $TRAINSUP_PLAN_FILE > ", plan_path, ".tmp && mv ", plan_path,
                             ".tmp ", plan_path, "; exec sleep 1000")});
    ASSERT_TRUE(WaitFor([&] { return Exists(plan_path); })) << log();
  }
  std::string log_path() const { return dir_ + "/agent.log"; }
  std::string log() const { return ReadFile(log_path()); }
  // The agent's wait status once it exited, or -1.
  int AwaitAgent() {
    const int status = AwaitExit(agent_);
    if (status != -1) agent_ = 0;
    return status;
  }

  TempDir temp_;
  std::string dir_;
  pid_t agent_ = 0;
};

TEST_F(AgentBinaryTest, AKilledAgentTakesItsCommandsWholeGroupWithIt) {
  // No supervisor: the agent launches anyway (fail-open) after 100ms.
  const std::string pgid_file = dir_ + "/pgid";
  StartAgent({"--supervisor", "127.0.0.1:1", "--node", "n1", "--connect-timeout", "100ms"},
             {"/bin/sh", "-c",
              absl::StrCat("sleep 1000 & sleep 1000 & echo $$ > ", pgid_file, ".tmp && mv ",
                           pgid_file, ".tmp ", pgid_file, "; wait")});
  ASSERT_TRUE(WaitFor([&] { return Exists(pgid_file); })) << log();
  pid_t group = 0;
  ASSERT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadFile(pgid_file)), &group));
  ASSERT_TRUE(WaitFor([&] { return LiveMembers(group).size() == 3; })) << log();

  kill(agent_, SIGKILL);
  const int status = AwaitAgent();
  ASSERT_TRUE(WIFSIGNALED(status));

  EXPECT_TRUE(WaitFor([&] { return LiveMembers(group).empty(); }))
      << "still alive in group " << group << ": " << LiveMembers(group).size();
}

TEST_F(AgentBinaryTest, AnAgentRefusedForItsNodeExits76AndLaunchesNothing) {
  FakeClock clock;  // never moves: the node's first agent stays heard
  ServerOptions server_options;
  server_options.listen = "127.0.0.1:0";
  server_options.metrics_listen = "";
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(server_options, &clock);
  ASSERT_TRUE(server.ok()) << server.status();
  ReportBatcher batcher(16);
  LinkOptions link_options;
  link_options.address = (*server)->grpc_address();
  SupervisorLink first(
      link_options, &batcher,
      [] {
        v1::AgentHello hello;
        hello.set_node("node-a");
        hello.set_job("j1");
        hello.set_incarnation(1);
        return hello;
      },
      [](const v1::SupervisorMessage&) {});
  first.Start();
  ASSERT_TRUE(WaitFor([&] { return first.connected(); }));

  const std::string launched = dir_ + "/launched";
  StartAgent({"--supervisor", (*server)->grpc_address(), "--node", "node-a", "--connect-timeout",
              "1s", "--reconnect-max", "200ms"},
             {"/bin/sh", "-c", "touch " + launched});
  const int status = AwaitAgent();

  ASSERT_TRUE(WIFEXITED(status)) << status << "\n" << log();
  EXPECT_EQ(WEXITSTATUS(status), kExitNodeTaken) << log();
  EXPECT_THAT(log(), HasSubstr("\nerror: node node-a is served by another agent"));
  EXPECT_FALSE(Exists(launched));
  EXPECT_TRUE(first.connected());
  first.Stop();
  (*server)->Shutdown(absl::ZeroDuration());
}

// The agent's first report that shows `rank` alive, if any.
const v1::RankProcess* FindAlive(const v1::NodeReport& report, uint32_t rank) {
  for (const v1::RankProcess& p : report.processes()) {
    if (p.rank() == rank && p.alive()) return &p;
  }
  return nullptr;
}

// A rank of generation TRAINSUP_GENERATION as the python helper makes one:
// its stack dump on a signal to its file in TRAINSUP_STACK_DIR, a START
// datagram saying so (rank 0), and a second rank in the same process that
// registered no signal (rank 1). Then it hangs.
constexpr char kHungRank[] = R"(
import faulthandler, json, os, signal, socket, time
sig = signal.SIGRTMIN + 6
stack_file = open(os.path.join(os.environ['TRAINSUP_STACK_DIR'], 'stack-0.txt'), 'w')
faulthandler.register(sig, file=stack_file, all_threads=True)
sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
def start(rank, stack_signal):
    sock.sendto(json.dumps({
        'kind': 'HEARTBEAT_KIND_START', 'job': os.environ['TRAINSUP_JOB'], 'rank': rank,
        'local_rank': rank, 'world_size': 2, 'pid': os.getpid(),
        'generation': int(os.environ['TRAINSUP_GENERATION']), 'stack_signal': int(stack_signal),
    }).encode(), os.environ['TRAINSUP_SOCKET'])
start(0, sig)
start(1, 0)
def hang_in_the_collective():
    while True:
        time.sleep(1000)
hang_in_the_collective()
)";

TEST_F(AgentBinaryTest, AStopForAHangCollectsTheRanksStacksBeforeTheSigterm) {
  FakeSupervisor supervisor;
  supervisor.SetWelcome(LaunchWelcome(3));
  StartAgent({"--supervisor", supervisor.address(), "--node", "n1", "--report-interval", "50ms",
              "--stop-grace", "5s"},
             {"/usr/bin/python3", "-c", kHungRank});
  // Both ranks are watched.
  ASSERT_TRUE(supervisor.AwaitReceived([](const std::vector<Received>& r) {
    const std::vector<v1::NodeReport> reports = Reports(r);
    return !reports.empty() && FindAlive(reports.back(), 0) && FindAlive(reports.back(), 1);
  })) << log();
  const uint32_t pid = FindAlive(Reports(supervisor.received()).back(), 0)->pid();

  v1::SupervisorMessage stop;
  stop.mutable_stop()->set_generation(3);
  stop.mutable_stop()->set_reason("hang");
  stop.mutable_stop()->set_grace_seconds(5);
  stop.mutable_stop()->set_collect_stacks(true);
  supervisor.Send(stop);

  // The stacks, then the stop: the rank ends by the SIGTERM.
  ASSERT_TRUE(supervisor.AwaitReceived([](const std::vector<Received>& r) {
    const std::vector<v1::NodeReport> reports = Reports(r);
    return !reports.empty() && reports.back().launcher().state() == v1::LauncherStatus::STATE_EXITED;
  })) << log();
  const std::vector<Received> received = supervisor.received();
  int stacks_at = -1;
  int stopping_at = -1;
  for (int i = 0; i < static_cast<int>(received.size()); ++i) {
    const v1::AgentMessage& m = received[i].message;
    if (m.has_stacks() && stacks_at < 0) stacks_at = i;
    if (m.has_report() && stopping_at < 0 &&
        m.report().launcher().state() != v1::LauncherStatus::STATE_RUNNING &&
        m.report().launcher().state() != v1::LauncherStatus::STATE_UNSPECIFIED &&
        m.report().launcher().state() != v1::LauncherStatus::STATE_WAITING) {
      stopping_at = i;
    }
  }
  ASSERT_GE(stacks_at, 0) << log();
  EXPECT_LT(stacks_at, stopping_at);
  const v1::StacksReport& stacks = received[stacks_at].message.stacks();
  EXPECT_EQ(stacks.generation(), 3u);
  EXPECT_GT(stacks.collect_seconds(), 0);
  EXPECT_LT(stacks.collect_seconds(), 2.5);
  ASSERT_EQ(stacks.stacks_size(), 2);
  const v1::RankStack& rank0 = stacks.stacks(0);
  EXPECT_EQ(rank0.rank(), 0u);
  EXPECT_EQ(rank0.pid(), pid);
  EXPECT_TRUE(rank0.answered());
  EXPECT_THAT(rank0.text(), HasSubstr("most recent call first"));
  EXPECT_THAT(rank0.text(), HasSubstr("hang_in_the_collective"));
  const v1::RankStack& rank1 = stacks.stacks(1);
  EXPECT_EQ(rank1.rank(), 1u);
  EXPECT_FALSE(rank1.answered());
  EXPECT_THAT(rank1.text(), IsEmpty());
  // The python rank died of the SIGTERM that followed.
  EXPECT_EQ(Reports(received).back().launcher().signal(), SIGTERM);

  kill(agent_, SIGTERM);  // waiting for a decision, no command: it exits at once
  const int status = AwaitAgent();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGTERM) << status;
}

TEST_F(AgentBinaryTest, EveryReportSaysWhichPlansTheRanksHold) {
  FakeSupervisor supervisor;
  const std::string plan_path = dir_ + "/plan-path";
  ASSERT_NO_FATAL_FAILURE(StartSleeperTellingItsPlanFile(supervisor, plan_path));
  v1::SupervisorMessage plan;
  plan.mutable_plan()->set_plan_id(3);
  plan.mutable_plan()->set_interval_steps(25);
  supervisor.Send(plan);

  ASSERT_TRUE(supervisor.AwaitReceived([](const std::vector<Received>& r) {
    const std::vector<v1::NodeReport> reports = Reports(r);
    return !reports.empty() && reports.back().plans_held_through() == 3;
  })) << log();
  v1::CheckpointPlans held;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(
                  ReadFile(std::string(absl::StripAsciiWhitespace(ReadFile(plan_path)))), &held)
                  .ok());
  ASSERT_EQ(held.plans_size(), 1);
  EXPECT_EQ(held.plans(0).interval_steps(), 25);
  EXPECT_DOUBLE_EQ(supervisor.received()[0].message.hello().report_interval_seconds(), 0.05);

  kill(agent_, SIGTERM);  // forwarded to the command; the agent ends with it
  const int status = AwaitAgent();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGTERM) << status;
}

// A plan the supervisor does not hear held in time is revoked: the agent
// says it holds one at once, not at its next report (here 60 s away), so
// that a partition in between rarely leaves its ranks with a revoked plan.
TEST_F(AgentBinaryTest, APlanHeldIsSaidAtOnceNotAtTheNextReport) {
  FakeSupervisor supervisor;
  const std::string plan_path = dir_ + "/plan-path";
  ASSERT_NO_FATAL_FAILURE(StartSleeperTellingItsPlanFile(supervisor, plan_path, "60s"));
  v1::SupervisorMessage plan;
  plan.mutable_plan()->set_plan_id(7);
  plan.mutable_plan()->set_interval_steps(25);
  supervisor.Send(plan);

  // Well inside the 60 s interval (a deadline, not a speed figure).
  ASSERT_TRUE(supervisor.AwaitReceived(
      [](const std::vector<Received>& r) {
        const std::vector<v1::NodeReport> reports = Reports(r);
        return !reports.empty() && reports.back().plans_held_through() == 7;
      },
      absl::Seconds(20)))
      << log();

  kill(agent_, SIGTERM);
  const int status = AwaitAgent();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGTERM) << status;
}

// A leader that was deposed while paused (SIGSTOP, a frozen VM) may send what
// it had decided once it resumes: an agent that has obeyed a newer leader's
// epoch drops it, so an old leader cannot stop a job.
TEST_F(AgentBinaryTest, AMessageOfALowerLeaderEpochIsDroppedAndTheJobRunsOn) {
  FakeSupervisor supervisor;
  const std::string plan_path = dir_ + "/plan-path";
  ASSERT_NO_FATAL_FAILURE(StartSleeperTellingItsPlanFile(supervisor, plan_path));
  auto plan = [](uint64_t id, uint64_t epoch) {
    v1::SupervisorMessage m;
    m.set_epoch(epoch);
    m.mutable_plan()->set_plan_id(id);
    m.mutable_plan()->set_interval_steps(25);
    return m;
  };
  auto stop = [](uint64_t epoch, const std::string& why) {
    v1::SupervisorMessage m;
    m.set_epoch(epoch);
    m.mutable_stop()->set_generation(1);
    m.mutable_stop()->set_reason(why);
    m.mutable_stop()->set_grace_seconds(1);
    return m;
  };
  supervisor.Send(plan(3, 7));             // the leader of epoch 7
  supervisor.Send(stop(5, "deposed"));     // a deposed one's stop
  supervisor.Send(plan(4, 7));             // epoch 7 again: after the stop, in order
  auto held_through = [](uint64_t id) {
    return [id](const std::vector<FakeSupervisor::Received>& r) {
      const std::vector<v1::NodeReport> reports = Reports(r);
      return !reports.empty() && reports.back().plans_held_through() == id;
    };
  };
  ASSERT_TRUE(supervisor.AwaitReceived(held_through(4))) << log();
  // The plan after the stale stop was obeyed, and the command still runs.
  EXPECT_EQ(Reports(supervisor.received()).back().launcher().state(),
            v1::LauncherStatus::STATE_RUNNING);
  EXPECT_THAT(log(), HasSubstr("dropped a stop of leader epoch 5: epoch 7 leads (1 dropped so far)"));

  // The leader's own stop is obeyed.
  supervisor.Send(stop(7, "the leader"));
  ASSERT_TRUE(supervisor.AwaitReceived([](const std::vector<FakeSupervisor::Received>& r) {
    const std::vector<v1::NodeReport> reports = Reports(r);
    return !reports.empty() && reports.back().launcher().state() == v1::LauncherStatus::STATE_EXITED;
  })) << log();
  kill(agent_, SIGTERM);
  AwaitAgent();
}

// Two ranks each send a burst of 400 STEPs at once, far more than the socket
// queues between two of the agent's timed drains (net.unix.max_dgram_qlen
// is 10 by default): rank 0 on a blocking socket (it waits for room), rank 1
// through the helper (never waits: a refused STEP is pending, and replaced
// by the next one is given up on). Every STEP reaches the supervisor or is
// counted as given up on.
constexpr char kBurstRanks[] = R"(
import json, os, socket, sys, time
sys.path.insert(0, os.environ['HELPER_DIR'])
import trainsup
def message(kind, **fields):
    fields.update(kind=kind, job=os.environ['TRAINSUP_JOB'], rank=0, local_rank=0, world_size=2,
                  pid=os.getpid(), generation=int(os.environ['TRAINSUP_GENERATION']))
    return json.dumps(fields).encode()
sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
sock.connect(os.environ['TRAINSUP_SOCKET'])
sock.send(message('HEARTBEAT_KIND_START'))
for step in range(1, 401):
    sock.send(message('HEARTBEAT_KIND_STEP', step=step))
hb = trainsup.Heartbeat(rank=1, local_rank=1, world_size=2)
for step in range(1, 401):
    hb.step(step)
while hb._outbox.waiting():
    time.sleep(0.01)
with open(os.environ['COUNTS'] + '.tmp', 'w') as f:
    f.write('%d %d' % (hb.sent, hb.dropped))
os.rename(os.environ['COUNTS'] + '.tmp', os.environ['COUNTS'])
time.sleep(1000)
)";

TEST_F(AgentBinaryTest, ABurstBeyondOneDrainIsDeliveredOrCountedAsGivenUpOn) {
  FakeSupervisor supervisor;
  supervisor.SetWelcome(LaunchWelcome(2));
  const std::string counts_path = dir_ + "/counts";
  setenv("HELPER_DIR", TRAINSUP_HELPER_DIR, 1);
  setenv("COUNTS", counts_path.c_str(), 1);
  StartAgent({"--supervisor", supervisor.address(), "--node", "n1", "--report-interval", "50ms",
              "--drain-interval", "10ms"},  // given: used whatever the queue's length
             {"/usr/bin/python3", "-c", kBurstRanks});
  unsetenv("HELPER_DIR");
  unsetenv("COUNTS");
  ASSERT_TRUE(WaitFor([&] { return Exists(counts_path); }, std::chrono::seconds(30))) << log();
  int sent = 0;
  int dropped = 0;
  ASSERT_EQ(std::sscanf(ReadFile(counts_path).c_str(), "%d %d", &sent, &dropped), 2);
  EXPECT_EQ(sent - 1 + dropped, 400);  // less its START
  EXPECT_GT(dropped, 0);  // the burst did not fit between two drains
  // What each rank's STEPs were, as the supervisor got them.
  auto steps_of = [](const std::vector<Received>& received, uint32_t rank) {
    std::vector<uint64_t> steps;
    for (const v1::NodeReport& report : Reports(received)) {
      for (const v1::RankHeartbeat& hb : report.heartbeats()) {
        if (hb.rank() == rank && hb.kind() == v1::HEARTBEAT_KIND_STEP) steps.push_back(hb.step());
      }
    }
    return steps;
  };
  ASSERT_TRUE(supervisor.AwaitReceived([&](const std::vector<Received>& r) {
    return steps_of(r, 0).size() >= 400 && static_cast<int>(steps_of(r, 1).size()) >= sent - 1;
  })) << log();
  const std::vector<Received> received = supervisor.received();
  std::vector<uint64_t> all(400);
  for (uint64_t i = 0; i < all.size(); ++i) all[i] = i + 1;
  EXPECT_EQ(steps_of(received, 0), all);  // every one, in order
  const std::vector<uint64_t> helper_steps = steps_of(received, 1);
  EXPECT_EQ(static_cast<int>(helper_steps.size()), sent - 1);
  EXPECT_TRUE(std::is_sorted(helper_steps.begin(), helper_steps.end()));
  ASSERT_FALSE(helper_steps.empty());
  EXPECT_EQ(helper_steps.back(), 400u);  // the latest state always arrives

  kill(agent_, SIGTERM);
  const int status = AwaitAgent();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGTERM) << status;
}

// A rank told TRAINSUP_HEARTBEAT_RECORDS sends a datagram of two records
// (a STEP that rode on the next COMPUTE_BEGIN, as the helper does), then an
// old single-record one: the supervisor gets the three heartbeats in their
// order, the one that rode dated by when it happened (its queued_seconds
// counts the ride).
constexpr char kRecordsRank[] = R"(
import json, os, socket, time
assert int(os.environ['TRAINSUP_HEARTBEAT_RECORDS']) >= 2
def record(kind, step, when):
    return json.dumps({'kind': kind, 'job': os.environ['TRAINSUP_JOB'], 'rank': 0,
                       'local_rank': 0, 'world_size': 1, 'pid': os.getpid(),
                       'generation': int(os.environ['TRAINSUP_GENERATION']),
                       'monotonic_seconds': when, 'step': step}, separators=(',', ':'))
sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
sock.connect(os.environ['TRAINSUP_SOCKET'])
now = time.monotonic()
sock.send((record('HEARTBEAT_KIND_STEP', 7, now - 2.0) + '\n' +
           record('HEARTBEAT_KIND_COMPUTE_BEGIN', 8, now)).encode())
sock.send(record('HEARTBEAT_KIND_COMPUTE_END', 8, now).encode())
time.sleep(1000)
)";

TEST_F(AgentBinaryTest, ADatagramOfSeveralRecordsGoesUpAsTheirHeartbeatsInOrder) {
  FakeSupervisor supervisor;
  supervisor.SetWelcome(LaunchWelcome(2));
  StartAgent({"--supervisor", supervisor.address(), "--node", "n1", "--report-interval", "50ms"},
             {"/usr/bin/python3", "-c", kRecordsRank});
  auto heartbeats_of = [](const std::vector<Received>& received) {
    std::vector<v1::RankHeartbeat> out;
    for (const v1::NodeReport& report : Reports(received)) {
      for (const v1::RankHeartbeat& hb : report.heartbeats()) out.push_back(hb);
    }
    return out;
  };
  ASSERT_TRUE(supervisor.AwaitReceived([&](const std::vector<Received>& r) {
    return heartbeats_of(r).size() >= 3;
  })) << log();
  const std::vector<v1::RankHeartbeat> got = heartbeats_of(supervisor.received());
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].kind(), v1::HEARTBEAT_KIND_STEP);
  EXPECT_EQ(got[0].step(), 7u);
  EXPECT_EQ(got[1].kind(), v1::HEARTBEAT_KIND_COMPUTE_BEGIN);
  EXPECT_EQ(got[1].step(), 8u);
  EXPECT_EQ(got[2].kind(), v1::HEARTBEAT_KIND_COMPUTE_END);
  EXPECT_GE(got[0].queued_seconds(), 2.0);  // it happened 2 s before its datagram
  EXPECT_LT(got[1].queued_seconds(), 2.0);
  EXPECT_DOUBLE_EQ(got[1].monotonic_seconds(), got[2].monotonic_seconds());

  kill(agent_, SIGTERM);
  const int status = AwaitAgent();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGTERM) << status;
}

// A script that cannot import what it needs fails before any rank reports:
// its agent sends the lines that say why with the command's failure, and
// passes them on to its own stderr.
TEST_F(AgentBinaryTest, ACommandThatFailsBeforeItsRanksReportSendsItsLastStderrLines) {
  FakeSupervisor supervisor;
  supervisor.SetWelcome(LaunchWelcome(1));
  StartAgent({"--supervisor", supervisor.address(), "--node", "n1", "--report-interval", "50ms",
              "--min-nodes", "3", "--verdict", "exit:42=stop"},
             {"/usr/bin/python3", "-c", "import trainsup_that_is_not_there"});

  ASSERT_TRUE(supervisor.AwaitReceived([](const std::vector<Received>& r) {
    const std::vector<v1::NodeReport> reports = Reports(r);
    return !reports.empty() &&
           reports.back().launcher().state() == v1::LauncherStatus::STATE_EXITED;
  })) << log();
  const v1::LauncherStatus launcher = Reports(supervisor.received()).back().launcher();
  EXPECT_EQ(launcher.exit_code(), 1);
  ASSERT_GE(launcher.stderr_lines_size(), 2) << log();
  EXPECT_EQ(launcher.stderr_lines(0), "Traceback (most recent call last):");
  EXPECT_EQ(launcher.stderr_lines(launcher.stderr_lines_size() - 1),
            "ModuleNotFoundError: No module named 'trainsup_that_is_not_there'");
  EXPECT_THAT(log(), HasSubstr("ModuleNotFoundError: No module named 'trainsup_that_is_not_there'"));
  const v1::AgentHello hello = supervisor.received()[0].message.hello();
  EXPECT_EQ(hello.min_nodes(), 3u);
  ASSERT_EQ(hello.verdict_rules_size(), 1);
  EXPECT_EQ(hello.verdict_rules(0), "exit:42=stop");

  kill(agent_, SIGTERM);  // waiting for a decision, no command: it exits at once
  AwaitAgent();
}

// A rank that writes a CUDA error and dies without a word (SIGKILL: no
// helper hook runs) is sent up with that line.
TEST_F(AgentBinaryTest, ARankThatDiedWithoutAWordGoesUpWithTheFaultItWroteToStderr) {
  FakeSupervisor supervisor;
  supervisor.SetWelcome(LaunchWelcome(1));
  constexpr char kRank[] = R"(
import json, os, signal, socket, sys, time
sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
sock.sendto(json.dumps({
    'kind': 'HEARTBEAT_KIND_START', 'job': os.environ['TRAINSUP_JOB'], 'rank': 0,
    'local_rank': 0, 'world_size': 1, 'pid': os.getpid(),
    'generation': int(os.environ['TRAINSUP_GENERATION']),
}).encode(), os.environ['TRAINSUP_SOCKET'])
time.sleep(0.3)
print('RuntimeError: CUDA error: unspecified launch failure', file=sys.stderr, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
)";
  StartAgent({"--supervisor", supervisor.address(), "--node", "n1", "--report-interval", "50ms"},
             {"/usr/bin/python3", "-c", kRank});

  ASSERT_TRUE(supervisor.AwaitReceived([](const std::vector<Received>& r) {
    const std::vector<v1::NodeReport> reports = Reports(r);
    if (reports.empty()) return false;
    for (const v1::RankProcess& p : reports.back().processes()) {
      if (p.rank() == 0 && !p.alive() && !p.stderr_line().empty()) return true;
    }
    return false;
  })) << log();
  const v1::RankProcess dead = Reports(supervisor.received()).back().processes(0);
  EXPECT_FALSE(dead.exception_seen());
  EXPECT_EQ(dead.stderr_line(), "RuntimeError: CUDA error: unspecified launch failure");

  kill(agent_, SIGTERM);
  AwaitAgent();
}

TEST_F(AgentBinaryTest, ABadVerdictRuleIsABadUsage) {
  StartAgent({"--supervisor", "127.0.0.1:1", "--node", "n1", "--verdict", "exit:16=elsewhere"},
             {"/bin/true"});
  const int status = AwaitAgent();
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), kExitUsage) << log();
  EXPECT_THAT(log(), HasSubstr("error: --verdict: verdict rule 'exit:16=elsewhere'"));
}

// A supervisor busy when the job ends (a sweep, a loaded host) has not
// read the agent's last report when the agent is done: the agent waits for
// the supervisor to read all it wrote before it exits, so that "the command
// exited 0" is never lost with the stream (its job would show running for
// good).
TEST_F(AgentBinaryTest, AnAgentExitsOnlyOnceTheSupervisorReadItsLastReport) {
  MonotonicClock clock;
  ServerOptions server_options;
  server_options.listen = "127.0.0.1:0";
  server_options.metrics_listen = "";
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(server_options, &clock);
  ASSERT_TRUE(server.ok()) << server.status();
  SupervisorHost& host = (*server)->host();
  auto launcher = [&] {
    return host.Read([](const Supervisor& core, absl::Time) {
      const NodeRecord* node = nullptr;
      for (const NodeRecord& n : core.nodes()) {
        if (n.name == "n1") node = &n;
      }
      return node == nullptr ? LauncherInfo() : node->launcher;
    });
  };
  const std::string go = dir_ + "/go";
  StartAgent({"--supervisor", (*server)->grpc_address(), "--node", "n1", "--report-interval",
              "50ms"},
             {"/bin/sh", "-c", absl::StrCat("while [ ! -e ", go, " ]; do sleep 0.02; done")});
  ASSERT_TRUE(WaitFor([&] { return launcher().state == LauncherState::kRunning; })) << log();

  // The supervisor is busy from before the command ends until a while after
  // the agent said it is done: long enough for an agent that does not wait
  // to be gone. This one waits.
  int status = -1;
  const bool exited_while_busy = host.Read([&](const Supervisor&, absl::Time) {
    std::ofstream(go).close();  // the command ends with exit code 0
    WaitFor([&] { return log().find("the command succeeded") != std::string::npos; });
    absl::SleepFor(absl::Milliseconds(500));
    return waitpid(agent_, &status, WNOHANG) == agent_;
  });
  EXPECT_FALSE(exited_while_busy) << log();

  if (!exited_while_busy) status = AwaitAgent();
  ASSERT_TRUE(WIFEXITED(status)) << status << "\n" << log();
  EXPECT_EQ(WEXITSTATUS(status), 0) << log();
  EXPECT_TRUE(launcher().succeeded()) << LauncherStateName(launcher().state) << "\n" << log();
  (*server)->Shutdown(absl::ZeroDuration());
}

}  // namespace
}  // namespace trainsup
