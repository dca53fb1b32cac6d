// The SQLite state store on real files in a fresh temporary directory per
// test: round trips, upserts, limits, atomicity, refusal of bad files, the
// one-process lock beside live read-only readers, migration from every older
// schema version, and durability across a process that dies without closing
// the database.
#include "daemon/state_store.h"

#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "daemon/core/event_log.h"
#include "daemon/core/journal.h"

namespace trainsup {
namespace {

using ::testing::HasSubstr;

// Renders every field of every row, so that a mismatch shows as a readable
// diff (and NaN compares equal to NaN).
std::string Str(absl::Time t) {
  return absl::FormatTime(absl::RFC3339_full, t, absl::UTCTimeZone());
}
std::string Str(std::optional<uint32_t> rank) { return rank ? absl::StrCat(*rank) : "none"; }

std::string Dump(const Journal& j) {
  std::string out;
  for (const NodeRecordRow& r : j.nodes) {
    absl::StrAppend(&out, "node ", r.name, " q=", r.quarantined, " reason=", r.reason,
                    " changed=", Str(r.changed), " by=", r.changed_by, "\n");
  }
  for (const FailureRow& r : j.failures) {
    absl::StrAppend(&out, "failure ", Str(r.time), " job=", r.job, " gen=", r.generation,
                    " kind=", r.kind, " node=", r.node, " rank=", Str(r.rank), " msg=", r.message,
                    " charged=", r.charged, "\n");
  }
  for (const RestartRow& r : j.restarts) {
    absl::StrAppend(&out, "restart ", Str(r.time), " job=", r.job, " ", r.from_generation, "->",
                    r.to_generation, " reason=", r.reason, "\n");
  }
  for (const JobRow& r : j.jobs) {
    absl::StrAppend(&out, "job ", r.job, " gen=", r.generation, " state=", r.state,
                    " reason=", r.reason, " world=", r.world_size, " changed=", Str(r.changed),
                    " exposure=", r.exposure_seconds, " forgiven=", Str(r.restarts_forgiven_before),
                    " restarts=", r.restarts, " failures=", r.failures, "\n");
  }
  for (const JobMeasuresRow& m : j.measures) {
    absl::StrAppend(&out, "measures ", m.job, " start=", Str(m.ledger.start), " last=",
                    Str(m.ledger.last), " gen=", m.ledger.generation, " hw=",
                    m.ledger.high_water_step, " c=", absl::StrJoin(m.checkpoint_costs, ","),
                    " a=", absl::StrJoin(m.checkpoint_async, ","), " r=",
                    absl::StrJoin(m.restart_costs, ","));
    for (const auto& [gen, t] : m.ledger.by_generation) {
      absl::StrAppend(&out, " g", gen, ":", absl::StrJoin(t.seconds, "/"));
    }
    absl::StrAppend(&out, "\n");
  }
  for (const StackRow& st : j.stacks) {
    absl::StrAppend(&out, "stack ", st.job, " gen=", st.generation, " event=", st.event_id,
                    " time=", Str(st.time), " collect=", st.collect_seconds, " culprit=",
                    Str(st.culprit), " rank=", st.rank, " node=", st.node, " answered=",
                    st.answered, " text=", st.text, "\n");
  }
  for (const FenceRow& f : j.fences) {
    absl::StrAppend(&out, "fence ", f.node, " reason=", f.reason, " decided=", Str(f.decided),
                    " pending=", f.pending, " action=", FenceActionName(f.action), "\n");
  }
  for (const EndedJobRow& e : j.ended_jobs) {
    absl::StrAppend(&out, "ended ", e.job, " gen=", e.generation, " world=", e.world_size,
                    " heartbeats=", e.heartbeats_received, " plans=");
    for (const CheckpointPlanSpec& p : e.plans) {
      absl::StrAppend(&out, p.plan_id, "/", p.anchor_step, "/", p.interval_steps, "/",
                      p.effective_from_step, "/", absl::StrJoin(p.one_off_steps, ":"), ",");
    }
    if (e.plan_inputs) {
      const CheckpointPlanInputs& in = *e.plan_inputs;
      absl::StrAppend(&out, " inputs=", in.checkpoint_seconds, "/", in.mtbf_seconds, "/",
                      in.restart_seconds, "/", in.async_write_seconds, "/",
                      in.run_seconds ? absl::StrCat(*in.run_seconds) : "none");
    }
    for (const auto& [name, value] : e.signals) {
      absl::StrAppend(&out, " ", name, "=", absl::StrFormat("%.17g", value));
    }
    absl::StrAppend(&out, "\n");
  }
  for (const EndedNodeRow& n : j.ended_nodes) {
    absl::StrAppend(&out, "ended node ", n.job, "/", n.node, " gen=", n.generation, " inc=",
                    n.incarnation, " last=", Str(n.last_report), " heartbeats=",
                    n.heartbeats_received, " launcher=", n.launcher_state, "/", n.launcher_pid, "/",
                    n.exit_code, "/", n.signal, "\n");
  }
  for (const EndedRankRow& r : j.ended_ranks) {
    auto opt = [](const auto& v) { return v ? absl::StrFormat("%.17g", double(*v)) : "none"; };
    absl::StrAppend(&out, "ended rank ", r.job, "/", r.rank, " node=", r.node, " local=",
                    r.local_rank, " pid=", r.pid, " step=", r.step, " hb=", Str(r.last_heartbeat),
                    " progress=", Str(r.last_progress), " heartbeats=", r.heartbeats,
                    absl::StrFormat(" step=%.17g/%.17g compute=%.17g/%.17g", r.step_p50,
                                    r.step_p99, r.compute_p50, r.compute_p99),
                    " phase=", r.phase, " liveness=", r.liveness, " death=", Str(r.death_time), "/",
                    r.exit_known, "/", r.exit_code, "/", r.signal, " exception=", r.exception_type,
                    ":", r.exception_message, " loss=", opt(r.loss), " lr=", opt(r.learning_rate),
                    " samples=", opt(r.samples), " dropped=", r.datagrams_dropped, " straggler=",
                    r.straggler, "\n");
  }
  for (const Event& e : j.events) {
    absl::StrAppend(&out, "event ", e.id, " ", Str(e.time), " kind=", EventKindName(e.kind),
                    " job=", e.job, " gen=", e.generation, " rank=", Str(e.rank), " node=", e.node,
                    " msg=", e.message, " figures=");
    for (const auto& [name, value] : e.figures) {
      absl::StrAppend(&out, name, ":", absl::StrFormat("%.17g", value), ",");
    }
    absl::StrAppend(&out, "\n");
  }
  return out;
}

const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);

Event MakeEvent(uint64_t id, EventKind kind = EventKind::kStall) {
  Event e;
  e.id = id;
  e.time = kT0 + absl::Seconds(id);
  e.kind = kind;
  e.job = "llama";
  e.generation = 3;
  e.rank = 1;
  e.node = "node-a";
  e.message = absl::StrCat("event ", id);
  return e;
}

FailureRow MakeFailure(int i) {
  FailureRow f;
  f.time = kT0 + absl::Seconds(i);
  f.job = "llama";
  f.generation = i;
  f.kind = "crash";
  f.node = "node-a";
  f.message = absl::StrCat("failure ", i);
  return f;
}

RestartRow MakeRestart(int i) {
  RestartRow r;
  r.time = kT0 + absl::Seconds(i);
  r.job = "llama";
  r.from_generation = i;
  r.to_generation = i + 1;
  r.reason = absl::StrCat("restart ", i);
  return r;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Runs SQL on the file directly, behind the store's back.
void RawSql(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* error = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error);
  EXPECT_EQ(rc, SQLITE_OK) << (error ? error : "");
  sqlite3_free(error);
  sqlite3_close(db);
}

// The one number `sql` selects, read behind the store's back (read-only).
int64_t RawCount(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  int64_t count = -1;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_stmt* select = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &select, nullptr) == SQLITE_OK &&
        sqlite3_step(select) == SQLITE_ROW) {
      count = sqlite3_column_int64(select, 0);
    }
    sqlite3_finalize(select);
  }
  sqlite3_close(db);
  return count;
}

// A journal with every kind of row, every field set (and some left empty).
Journal EveryKindOfRow() {
  Journal journal;
  journal.nodes.push_back(
      {"node-a", true, "3 failures within 1h", kT0 + absl::Milliseconds(250), "policy"});
  journal.nodes.push_back({"node-b", false, "", absl::InfinitePast(), "operator"});
  journal.failures.push_back({kT0 + absl::Milliseconds(500), "llama",
                              std::numeric_limits<uint64_t>::max(), "crash", "node-a",
                              std::numeric_limits<uint32_t>::max(), "rank died: 'SIGKILL'; --"});
  journal.failures.push_back({absl::InfinitePast(), "", 0, "stall", "", std::nullopt, "", false});
  journal.restarts.push_back({kT0 + absl::Seconds(1), "llama", 4, 5, "crash on node-a"});
  journal.restarts.push_back(
      {absl::InfinitePast(), "tiny", 0, std::numeric_limits<uint64_t>::max(), ""});
  journal.jobs.push_back({"llama", 5, "running", "restarted after a crash", 512,
                          kT0 - absl::Hours(1), 3600.5, kT0 - absl::Minutes(30), 4,
                          std::numeric_limits<uint64_t>::max()});
  journal.jobs.push_back({"tiny", 0, "", "", 0, absl::InfinitePast()});

  JobMeasuresRow measures;
  measures.job = "llama";
  measures.ledger.start = kT0;
  measures.ledger.last = kT0 + absl::Seconds(90);
  measures.ledger.generation = 2;
  measures.ledger.high_water_step = 1200;
  measures.ledger.by_generation[1].seconds = {40.5, 3.25, 1.0, 0.0};
  measures.ledger.by_generation[2].seconds = {30.0, 2.0, 0.5, 12.75};
  measures.checkpoint_costs = {1.5, 0.1, 123.456789012345};
  measures.restart_costs = {20.5};
  journal.measures.push_back(measures);
  journal.measures.push_back({"tiny", {}, {}, {}, {}});
  journal.stacks.push_back({"llama", 2, 7, kT0, 0.31, 2u, 2, "node-b", true,
                            "Thread 0x1 (most recent call first):\n  File \"x.py\", line 3"});
  journal.stacks.push_back({"llama", 2, 7, kT0, 0.31, 2u, 3, "node-b", false, ""});

  EndedJobRow ended;
  ended.job = "llama";
  ended.generation = 5;
  ended.world_size = 512;
  ended.heartbeats_received = std::numeric_limits<uint64_t>::max();
  ended.plans = {{7, 0, 100, 10, {}},
                 {8, 100, 250, 130, {140, std::numeric_limits<int64_t>::max()}}};
  ended.plan_inputs = CheckpointPlanInputs{12.5, 86400, 40, 0, std::nullopt};
  // Read back to the last bit: a finished job shows after a restart what it
  // showed before.
  ended.signals = {{"loss_shifted", 1},
                   {"step_time_ratio", 1.0234567890123457},
                   {"device_memory_seconds_to_limit", 1e300}};
  journal.ended_jobs.push_back(ended);
  journal.ended_jobs.push_back({"tiny", 0, 0, 0, {}, CheckpointPlanInputs{1, 2, 3, 4, 5.5}});
  journal.ended_nodes.push_back({"llama", "node-a", 5, std::numeric_limits<uint64_t>::max(),
                                 kT0 + absl::Milliseconds(125), 851, "exited", 4242, 0, 0});
  journal.ended_nodes.push_back({"llama", "node-b", 5, 1, absl::InfinitePast(), 0, "", 0, -1, 9});
  EndedRankRow rank;
  rank.job = "llama";
  rank.rank = 511;
  rank.node = "node-a";
  rank.local_rank = 7;
  rank.pid = 4243;
  rank.step = std::numeric_limits<int64_t>::max();
  rank.last_heartbeat = kT0 + absl::Milliseconds(250);
  rank.last_progress = kT0 + absl::Milliseconds(125);
  rank.heartbeats = 99;
  rank.step_p50 = 0.0515437051653862;
  rank.step_p99 = 0.07;
  rank.compute_p50 = 0.04;
  rank.compute_p99 = 0.045;
  rank.phase = "compute_done";
  rank.liveness = "dead";
  rank.death_time = kT0 + absl::Seconds(2);
  rank.exit_known = true;
  rank.exit_code = 0;
  rank.signal = 9;
  rank.exception_type = "RuntimeError";
  rank.exception_message = "boom \xce\xbb";
  rank.loss = 3.476;
  rank.learning_rate = 1e-4;
  rank.samples = std::numeric_limits<uint64_t>::max();
  rank.datagrams_dropped = 3;
  rank.straggler = true;
  EndedRankRow bare_rank;  // no death, loss, rate or samples; empty strings
  bare_rank.job = "llama";
  bare_rank.rank = 0;
  journal.ended_ranks.push_back(bare_rank);
  journal.ended_ranks.push_back(rank);

  Event full = MakeEvent(1, EventKind::kStraggler);
  full.rank = 0;
  full.message = "rank 0 is slow \xce\xbb \"quoted\"";
  full.figures = {{"threshold_seconds", 20},
                  {"p99_seconds", 0.15},
                  {"nan", std::numeric_limits<double>::quiet_NaN()},
                  {"inf", std::numeric_limits<double>::infinity()},
                  {"tiny", -1e-300},
                  {"threshold_seconds", 21}};  // a repeated name keeps its place
  journal.events.push_back(full);
  Event bare;  // no rank, no node, no figures, empty strings
  bare.id = 2;
  bare.time = absl::InfinitePast();
  bare.kind = EventKind::kStragglerCleared;
  journal.events.push_back(bare);
  Event future = MakeEvent(3, EventKind::kCrash);
  future.time = absl::InfiniteFuture();
  journal.events.push_back(future);
  for (int k = 0; k < kEventKindCount; ++k) {
    journal.events.push_back(MakeEvent(10 + k, static_cast<EventKind>(k)));
  }

  return journal;
}

class StateStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "state_store_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/state.db";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<StateStore> OpenOrDie() {
    absl::StatusOr<std::unique_ptr<StateStore>> store = StateStore::Open(path_);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? std::move(*store) : nullptr;
  }

  PersistedState LoadAll(StateStore& store) {
    const size_t all = std::numeric_limits<size_t>::max();
    absl::StatusOr<PersistedState> state = store.Load(all, all, all);
    EXPECT_TRUE(state.ok()) << state.status();
    return state.ok() ? *state : PersistedState{};
  }

  std::string dir_;
  std::string path_;
};

TEST_F(StateStoreTest, EveryFieldOfEveryRowSurvivesCloseAndReopen) {
  const Journal journal = EveryKindOfRow();
  {
    std::unique_ptr<StateStore> store = OpenOrDie();
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->Apply(journal).ok());
  }
  std::unique_ptr<StateStore> store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(Dump(LoadAll(*store)), Dump(journal));
}

TEST_F(StateStoreTest, TimesKeepSubMicrosecondPrecision) {
  const absl::Time time = absl::FromUnixNanos(1'800'000'000'123'456'789);
  Journal journal;
  journal.nodes.push_back({"node-a", true, "", time, "policy"});
  std::unique_ptr<StateStore> store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Apply(journal).ok());
  PersistedState state = LoadAll(*store);
  ASSERT_EQ(state.nodes.size(), 1u);
  EXPECT_LE(absl::AbsDuration(state.nodes[0].changed - time), absl::Microseconds(1));
}

TEST_F(StateStoreTest, ProvenanceRecordsRoundTripOnePerNodeAndGenerationAndArePruned) {
  v1::GenerationProvenance a;
  a.set_generation(2);
  a.set_node("node-b");
  a.add_command("torchrun");
  a.add_command("train.py");
  a.mutable_code()->set_commit("0123abcd");
  a.mutable_code()->set_dirty(true);
  a.mutable_code()->add_modified("train.py");
  v1::EnvVar* var = a.add_env();
  var->set_name("NCCL_DEBUG");
  var->set_value("INFO");
  a.mutable_runtime()->set_torch("1.13.1");
  a.mutable_runtime()->set_world_size(4);
  v1::GenerationProvenance b = a;
  b.set_node("node-a");
  v1::GenerationProvenance other = a;
  other.set_generation(3);
  {
    std::unique_ptr<StateStore> store = OpenOrDie();
    ASSERT_NE(store, nullptr);
    v1::GenerationProvenance first = a;
    first.clear_runtime();  // the launch's record, before the helper's
    ASSERT_TRUE(store->PutProvenance("llama", first, kT0).ok());
    ASSERT_TRUE(store->PutProvenance("llama", a, kT0).ok());  // replaces it
    ASSERT_TRUE(store->PutProvenance("llama", b, kT0).ok());
    ASSERT_TRUE(store->PutProvenance("llama", other, kT0 + absl::Hours(2)).ok());
    ASSERT_TRUE(store->PutProvenance("gpt", a, kT0).ok());
  }
  std::unique_ptr<StateStore> store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  std::vector<v1::GenerationProvenance> records;
  ASSERT_TRUE(store->Provenance("llama", 2, &records).ok());
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].SerializeAsString(), b.SerializeAsString());  // by node
  EXPECT_EQ(records[1].SerializeAsString(), a.SerializeAsString());
  records.clear();
  ASSERT_TRUE(store->Provenance("llama", 4, &records).ok());
  EXPECT_TRUE(records.empty());
  ASSERT_TRUE(store->Prune(kT0 + absl::Hours(1)).ok());
  ASSERT_TRUE(store->Provenance("llama", 2, &records).ok());
  EXPECT_TRUE(records.empty());
  ASSERT_TRUE(store->Provenance("llama", 3, &records).ok());
  EXPECT_EQ(records.size(), 1u);
}

TEST_F(StateStoreTest, AGenerationsOwnRecordKeepsTheFirstStepFirstStored) {
  std::unique_ptr<StateStore> store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  v1::GenerationProvenance node;
  node.set_generation(2);
  node.set_node("node-a");
  v1::GenerationProvenance own;  // trainsupd's: no node
  own.set_generation(2);
  own.mutable_first_step()->set_step(41);
  own.mutable_first_step()->set_learning_rate(0.01);
  own.mutable_first_step()->set_samples(128);
  v1::GenerationProvenance later = own;  // a restarted trainsupd's first step seen
  later.mutable_first_step()->set_step(90);
  ASSERT_TRUE(store->PutProvenance("llama", node, kT0).ok());
  ASSERT_TRUE(store->PutProvenance("llama", own, kT0).ok());
  ASSERT_TRUE(store->PutProvenance("llama", later, kT0).ok());
  std::vector<v1::GenerationProvenance> records;
  ASSERT_TRUE(store->Provenance("llama", 2, &records).ok());
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].node(), "");  // first
  EXPECT_EQ(records[0].SerializeAsString(), own.SerializeAsString());
  EXPECT_EQ(records[1].node(), "node-a");
}

TEST_F(StateStoreTest, EmptyJournalIsANoOp) {
  std::unique_ptr<StateStore> store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(store->Apply(Journal{}).ok());
  EXPECT_TRUE(LoadAll(*store).empty());
}

TEST_F(StateStoreTest, LatestNodeRowWins) {
  std::unique_ptr<StateStore> store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  Journal first;
  first.nodes.push_back({"node-a", true, "policy said so", kT0, "policy"});
  first.nodes.push_back(
      {"node-a", true, "second row of one journal", kT0 + absl::Seconds(1), "policy"});
  first.nodes.push_back({"node-b", true, "b", kT0, "policy"});
  ASSERT_TRUE(store->Apply(first).ok());
  PersistedState state = LoadAll(*store);
  ASSERT_EQ(state.nodes.size(), 2u);
  EXPECT_EQ(state.nodes[0].reason, "second row of one journal");

  Journal second;
  second.nodes.push_back(
      {"node-a", false, "operator released it", kT0 + absl::Seconds(2), "operator"});
  ASSERT_TRUE(store->Apply(second).ok());
  state = LoadAll(*store);
  ASSERT_EQ(state.nodes.size(), 2u);
  EXPECT_EQ(state.nodes[0].name, "node-a");
  EXPECT_FALSE(state.nodes[0].quarantined);
  EXPECT_EQ(state.nodes[0].reason, "operator released it");
  EXPECT_EQ(state.nodes[0].changed, kT0 + absl::Seconds(2));
  EXPECT_EQ(state.nodes[0].changed_by, "operator");
  EXPECT_EQ(state.nodes[1].name, "node-b");
  EXPECT_TRUE(state.nodes[1].quarantined);
}

TEST_F(StateStoreTest, PendingFencesSurviveReopenUntilCleared) {
  {
    std::unique_ptr<StateStore> store = OpenOrDie();
    ASSERT_NE(store, nullptr);
    Journal decided;
    decided.nodes.push_back({"node-a", true, "bad GPU 3", kT0, "operator"});
    decided.fences.push_back({"node-a", "bad GPU 3", kT0, true});
    decided.fences.push_back({"node-b", "Xid 79", kT0 + absl::Seconds(1), true});
    ASSERT_TRUE(store->Apply(decided, JournalSink::Sync::kFull).ok());
  }
  std::unique_ptr<StateStore> store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  PersistedState state = LoadAll(*store);
  ASSERT_EQ(state.fences.size(), 2u);
  EXPECT_EQ(state.fences[0].node, "node-a");
  EXPECT_EQ(state.fences[0].reason, "bad GPU 3");
  EXPECT_EQ(state.fences[0].decided, kT0);
  EXPECT_TRUE(state.fences[0].pending);
  EXPECT_EQ(state.fences[0].action, FenceAction::kFence);
  EXPECT_EQ(state.fences[1].node, "node-b");

  Journal done;
  done.fences.push_back({"node-a", "", kT0 + absl::Seconds(2), false});
  ASSERT_TRUE(store->Apply(done).ok());
  state = LoadAll(*store);
  ASSERT_EQ(state.fences.size(), 1u);
  EXPECT_EQ(state.fences[0].node, "node-b");
}

TEST_F(StateStoreTest, ACheckpointFallbackSurvivesReopenAndTheLatestRowWins) {
  FallbackState first;
  first.generation = 3;
  first.first_step = 40;
  first.checkpoints = {9, 19, 29, 39};
  first.last_load_failure = LoadFailure{2, 39};
  {
    std::unique_ptr<StateStore> store = OpenOrDie();
    ASSERT_NE(store, nullptr);
    Journal journal;
    journal.fallbacks.push_back({"llama", first});
    FallbackState latest = first;
    latest.suspects = {39};
    latest.advice.limit = 38;
    latest.advice.skip_first = 30;
    latest.advice.skip_last = 45;
    latest.advice_generation = 3;
    latest.rollbacks = 1;
    latest.spike_rollbacks = 2;
    journal.fallbacks.push_back({"llama", latest});
    journal.fallbacks.push_back({"tiny", FallbackState()});
    ASSERT_TRUE(store->Apply(journal).ok());
  }
  std::unique_ptr<StateStore> store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  PersistedState state = LoadAll(*store);
  ASSERT_EQ(state.fallbacks.size(), 2u);
  const FallbackState& s = state.fallbacks[0].state;
  EXPECT_EQ(state.fallbacks[0].job, "llama");
  EXPECT_EQ(s.generation, 3u);
  EXPECT_EQ(s.first_step, 40);
  EXPECT_THAT(s.checkpoints, ::testing::ElementsAre(9, 19, 29, 39));
  EXPECT_THAT(s.suspects, ::testing::ElementsAre(39));
  ASSERT_TRUE(s.last_load_failure.has_value());
  EXPECT_EQ(s.last_load_failure->generation, 2u);
  EXPECT_EQ(s.last_load_failure->checkpoint, 39);
  EXPECT_EQ(s.advice.limit, 38);
  EXPECT_EQ(s.advice.skip_first, 30);
  EXPECT_EQ(s.advice.skip_last, 45);
  EXPECT_EQ(s.advice_generation, 3u);
  EXPECT_EQ(s.rollbacks, 1);
  EXPECT_EQ(s.spike_rollbacks, 2);
  const FallbackState& none = state.fallbacks[1].state;
  EXPECT_TRUE(none.advice.empty());
  EXPECT_FALSE(none.last_load_failure.has_value());
  EXPECT_EQ(none.first_step, -1);
}

TEST_F(StateStoreTest, KillCriteriaSurviveReopenByJobAndSourceUntilCleared) {
  KillCriteriaSpec op;
  op.loss_above = 4.25;
  op.at_step = 2000;
  op.curve = {{100, 3.1000000000000001}, {5000, 2.6}};
  op.band = 0.15;
  op.spikes = 3;
  op.total_steps = 20000;
  op.observe_only = true;
  KillCriteriaSpec script;
  script.curve = {{0, 0.5}};
  script.band = 0.2;
  script.band_absolute = true;
  {
    std::unique_ptr<StateStore> store = OpenOrDie();
    ASSERT_NE(store, nullptr);
    Journal set;
    set.jobs.push_back({"llama", 1, "running", "", 16, kT0});
    set.kill_criteria.push_back({"llama", "script", script, kT0});
    set.kill_criteria.push_back({"llama", "operator", op, kT0 + absl::Seconds(1)});
    ASSERT_TRUE(store->Apply(set, JournalSink::Sync::kFull).ok());
  }
  std::unique_ptr<StateStore> store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  PersistedState state = LoadAll(*store);
  ASSERT_EQ(state.kill_criteria.size(), 2u);
  EXPECT_EQ(state.kill_criteria[0].source, "operator");
  ASSERT_TRUE(state.kill_criteria[0].spec.has_value());
  EXPECT_TRUE(*state.kill_criteria[0].spec == op);
  EXPECT_EQ(state.kill_criteria[1].source, "script");
  EXPECT_TRUE(*state.kill_criteria[1].spec == script);

  Journal cleared;
  cleared.kill_criteria.push_back({"llama", "operator", std::nullopt, kT0 + absl::Seconds(2)});
  ASSERT_TRUE(store->Apply(cleared).ok());
  state = LoadAll(*store);
  ASSERT_EQ(state.kill_criteria.size(), 1u);
  EXPECT_EQ(state.kill_criteria[0].source, "script");
}

TEST_F(StateStoreTest, APendingUnfenceReplacesTheNodesFenceAndKeepsItsAction) {
  std::unique_ptr<StateStore> store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  Journal quarantined;
  quarantined.fences.push_back({"node-a", "bad GPU 3", kT0, true});
  ASSERT_TRUE(store->Apply(quarantined, JournalSink::Sync::kFull).ok());
  Journal lifted;
  lifted.fences.push_back({"node-a", "quarantine lifted by an operator", kT0 + absl::Seconds(5),
                           true, FenceAction::kUnfence});
  ASSERT_TRUE(store->Apply(lifted).ok());

  store.reset();
  store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  PersistedState state = LoadAll(*store);
  ASSERT_EQ(state.fences.size(), 1u);
  EXPECT_EQ(state.fences[0].node, "node-a");
  EXPECT_EQ(state.fences[0].action, FenceAction::kUnfence);
  EXPECT_EQ(state.fences[0].reason, "quarantine lifted by an operator");
  EXPECT_EQ(state.fences[0].decided, kT0 + absl::Seconds(5));
}

TEST_F(StateStoreTest, LatestJobRowWins) {
  std::unique_ptr<StateStore> store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  Journal first;
  first.jobs.push_back({"llama", 1, "running", "", 8, kT0});
  first.jobs.push_back({"tiny", 1, "running", "", 1, kT0});
  ASSERT_TRUE(store->Apply(first).ok());
  Journal second;
  second.jobs.push_back({"llama", 2, "restarting", "crash", 8, kT0 + absl::Seconds(5)});
  second.jobs.push_back({"llama", 3, "held", "restart cap", 16, kT0 + absl::Seconds(6)});
  ASSERT_TRUE(store->Apply(second).ok());

  PersistedState state = LoadAll(*store);
  ASSERT_EQ(state.jobs.size(), 2u);
  EXPECT_EQ(state.jobs[0].job, "llama");
  EXPECT_EQ(state.jobs[0].generation, 3u);
  EXPECT_EQ(state.jobs[0].state, "held");
  EXPECT_EQ(state.jobs[0].reason, "restart cap");
  EXPECT_EQ(state.jobs[0].world_size, 16u);
  EXPECT_EQ(state.jobs[0].changed, kT0 + absl::Seconds(6));
  EXPECT_EQ(state.jobs[1].job, "tiny");
  EXPECT_EQ(state.jobs[1].generation, 1u);
}

TEST_F(StateStoreTest, LoadKeepsTheMostRecentRowsOldestFirst) {
  std::unique_ptr<StateStore> store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  // Ten of each, over three transactions.
  int next = 0;
  for (int batch : {3, 3, 4}) {
    Journal journal;
    for (int i = 0; i < batch; ++i, ++next) {
      journal.failures.push_back(MakeFailure(next));
      journal.restarts.push_back(MakeRestart(next));
      journal.events.push_back(MakeEvent(next + 1));
    }
    journal.nodes.push_back({absl::StrCat("node-", next), false, "", kT0, "policy"});
    ASSERT_TRUE(store->Apply(journal).ok());
  }

  absl::StatusOr<PersistedState> state = store->Load(3, 4, 5);
  ASSERT_TRUE(state.ok()) << state.status();
  std::vector<uint64_t> event_ids;
  for (const Event& e : state->events) event_ids.push_back(e.id);
  EXPECT_THAT(event_ids, ::testing::ElementsAre(8, 9, 10));
  std::vector<std::string> failures;
  for (const FailureRow& f : state->failures) failures.push_back(f.message);
  EXPECT_THAT(failures, ::testing::ElementsAre("failure 6", "failure 7", "failure 8", "failure 9"));
  std::vector<uint64_t> restarts;
  for (const RestartRow& r : state->restarts) restarts.push_back(r.from_generation);
  EXPECT_THAT(restarts, ::testing::ElementsAre(5, 6, 7, 8, 9));
  EXPECT_EQ(state->nodes.size(), 3u);  // nodes and jobs are never limited

  state = store->Load(0, 0, 0);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_TRUE(state->events.empty());
  EXPECT_TRUE(state->failures.empty());
  EXPECT_TRUE(state->restarts.empty());
  EXPECT_EQ(state->nodes.size(), 3u);

  PersistedState all = LoadAll(*store);
  EXPECT_EQ(all.events.size(), 10u);
  EXPECT_EQ(all.failures.size(), 10u);
  EXPECT_EQ(all.restarts.size(), 10u);
  EXPECT_EQ(all.events.front().id, 1u);
  EXPECT_EQ(all.failures.front().message, "failure 0");
}

TEST_F(StateStoreTest, AnEndedJobRowReplacesItsPictureAndALaterNodeRowUpdatesIt) {
  std::unique_ptr<StateStore> store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  auto node = [](const std::string& job, const std::string& name, uint64_t heartbeats) {
    EndedNodeRow row;
    row.job = job;
    row.node = name;
    row.heartbeats_received = heartbeats;
    row.launcher_state = "exited";
    return row;
  };
  auto rank = [](const std::string& job, uint32_t r, int64_t step) {
    EndedRankRow row;
    row.job = job;
    row.rank = r;
    row.step = step;
    return row;
  };
  Journal ended;  // a 3-rank run on two nodes, and another job
  ended.ended_jobs.push_back({"llama", 1, 3, 30, {}, std::nullopt});
  ended.ended_nodes = {node("llama", "node-a", 20), node("llama", "node-b", 10)};
  ended.ended_ranks = {rank("llama", 0, 59), rank("llama", 1, 59), rank("llama", 2, 59)};
  ended.ended_jobs.push_back({"tiny", 1, 1, 5, {}, std::nullopt});
  ended.ended_nodes.push_back(node("tiny", "node-c", 5));
  ended.ended_ranks.push_back(rank("tiny", 0, 9));
  ASSERT_TRUE(store->Apply(ended).ok());

  // node-b's agent said a last word after the end.
  Journal left;
  left.ended_nodes.push_back(node("llama", "node-b", 11));
  left.ended_ranks.push_back(rank("llama", 2, 60));
  ASSERT_TRUE(store->Apply(left).ok());
  PersistedState state = LoadAll(*store);
  ASSERT_EQ(state.ended_nodes.size(), 3u);
  EXPECT_EQ(state.ended_nodes[1].node, "node-b");
  EXPECT_EQ(state.ended_nodes[1].heartbeats_received, 11u);
  ASSERT_EQ(state.ended_ranks.size(), 4u);
  EXPECT_EQ(state.ended_ranks[2].step, 60);

  // Run again on one node, ended again: its picture is that run's alone.
  Journal again;
  again.ended_jobs.push_back({"llama", 2, 1, 40, {}, std::nullopt});
  again.ended_nodes.push_back(node("llama", "node-b", 12));
  again.ended_ranks.push_back(rank("llama", 0, 9));
  ASSERT_TRUE(store->Apply(again).ok());
  state = LoadAll(*store);
  ASSERT_EQ(state.ended_jobs.size(), 2u);
  EXPECT_EQ(state.ended_jobs[0].generation, 2u);
  EXPECT_EQ(state.ended_jobs[0].heartbeats_received, 40u);
  std::vector<std::string> nodes;
  for (const EndedNodeRow& n : state.ended_nodes) nodes.push_back(n.job + "/" + n.node);
  EXPECT_THAT(nodes, ::testing::ElementsAre("llama/node-b", "tiny/node-c"));
  std::vector<std::string> ranks;
  for (const EndedRankRow& r : state.ended_ranks) {
    ranks.push_back(absl::StrCat(r.job, "/", r.rank, "@", r.step));
  }
  EXPECT_THAT(ranks, ::testing::ElementsAre("llama/0@9", "tiny/0@9"));
}

TEST_F(StateStoreTest, EventCountsCountEveryStoredEventNotOnlyTheLoadedOnes) {
  std::unique_ptr<StateStore> store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  Journal journal;
  for (uint64_t id = 1; id <= 5; ++id) journal.events.push_back(MakeEvent(id, EventKind::kCrash));
  journal.events.push_back(MakeEvent(6, EventKind::kRestart));
  Event other = MakeEvent(7, EventKind::kCrash);
  other.job = "tiny";
  journal.events.push_back(other);
  Event no_job = MakeEvent(8, EventKind::kFence);
  no_job.job = "";
  journal.events.push_back(no_job);
  ASSERT_TRUE(store->Apply(journal).ok());
  RawSql(path_,
         "INSERT INTO events (id, time, kind, job, generation, rank, node, message)"
         " VALUES (9, 1.0, 'meteor_strike', 'llama', 1, NULL, '', 'a kind of a newer build')");

  absl::StatusOr<PersistedState> state = store->Load(2, 0, 0);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->events.size(), 1u);  // 8 (9 is skipped)
  std::vector<std::string> counts;
  for (const EventCountRow& c : state->event_counts) {
    counts.push_back(absl::StrCat(c.job, " ", EventKindName(c.kind), " ", c.count));
  }
  EXPECT_THAT(counts, ::testing::ElementsAre("llama crash 5", "llama restart 1", "tiny crash 1"));
}

TEST_F(StateStoreTest, PruneDeletesOldHistoryAndJobsThatEndedBeforeWithAllThatHangsOffThem) {
  std::unique_ptr<StateStore> store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  const absl::Time cutoff = kT0 + absl::Seconds(100);
  const absl::Time old = kT0;
  const absl::Time recent = kT0 + absl::Seconds(200);
  Journal journal;
  journal.nodes.push_back({"node-a", true, "bad GPU", old, "operator"});
  journal.nodes.push_back({"node-b", false, "", old, "operator"});
  for (absl::Time t : {old, recent}) {
    FailureRow f = MakeFailure(0);
    f.time = t;
    journal.failures.push_back(f);
    RestartRow r = MakeRestart(0);
    r.time = t;
    journal.restarts.push_back(r);
    journal.stacks.push_back({"llama", 1, 1, t, 0.1, std::nullopt, 0, "node-a", true, "x"});
  }
  Event old_event = MakeEvent(1);
  old_event.time = old;
  old_event.figures = {{"x", 1}};
  journal.events.push_back(old_event);
  Event recent_event = MakeEvent(2);
  recent_event.time = recent;
  recent_event.figures = {{"x", 2}};
  journal.events.push_back(recent_event);
  // Ended before the cutoff (pruned), ended after it, and running since
  // long ago (both kept).
  journal.jobs.push_back({"gone", 1, "finished", "", 1, old});
  journal.jobs.push_back({"done", 1, "failed", "", 1, recent});
  journal.jobs.push_back({"long", 1, "running", "", 1, old});
  for (const char* job : {"gone", "done", "long"}) {
    JobMeasuresRow m;
    m.job = job;
    m.ledger.by_generation[1].seconds = {1, 0, 0, 0};
    journal.measures.push_back(m);
    journal.ended_jobs.push_back({job, 1, 1, 1, {}, std::nullopt});
    journal.ended_nodes.push_back({job, "node-a", 1, 1, old, 1, "exited", 0, 0, 0});
    EndedRankRow r;
    r.job = job;
    journal.ended_ranks.push_back(r);
  }
  journal.fences.push_back({"node-a", "bad GPU", old, true});
  ASSERT_TRUE(store->Apply(journal).ok());

  ASSERT_TRUE(store->Prune(cutoff).ok());
  PersistedState state = LoadAll(*store);
  EXPECT_EQ(state.nodes.size(), 2u);  // the quarantine list is kept
  EXPECT_EQ(state.fences.size(), 1u);
  for (const FailureRow& f : state.failures) EXPECT_EQ(f.time, recent);
  EXPECT_EQ(state.failures.size(), 1u);
  EXPECT_EQ(state.restarts.size(), 1u);
  EXPECT_EQ(state.stacks.size(), 1u);
  ASSERT_EQ(state.events.size(), 1u);
  EXPECT_EQ(state.events[0].id, 2u);
  EXPECT_EQ(state.events[0].figures.size(), 1u);
  std::vector<std::string> kept;
  for (const JobRow& j : state.jobs) kept.push_back(j.job);
  for (const JobMeasuresRow& m : state.measures) {
    kept.push_back(absl::StrCat("measures ", m.job, " ", m.ledger.by_generation.size()));
  }
  for (const EndedJobRow& e : state.ended_jobs) kept.push_back("ended " + e.job);
  for (const EndedNodeRow& n : state.ended_nodes) kept.push_back("node " + n.job);
  for (const EndedRankRow& r : state.ended_ranks) kept.push_back("rank " + r.job);
  EXPECT_THAT(kept, ::testing::ElementsAre("done", "long", "measures done 1", "measures long 1",
                                           "ended done", "ended long", "node done", "node long",
                                           "rank done", "rank long"));
  // Nothing is left of the pruned children either.
  EXPECT_EQ(RawCount(path_, "SELECT count(*) FROM event_figures"), 1);
  EXPECT_EQ(RawCount(path_, "SELECT count(*) FROM ledger_generations"), 2);
}

TEST_F(StateStoreTest, FailedApplyStoresNothingOfItsJournal) {
  std::unique_ptr<StateStore> store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  Journal good;
  good.nodes.push_back({"node-a", false, "", kT0, "policy"});
  good.jobs.push_back({"llama", 1, "running", "", 8, kT0});
  good.events.push_back(MakeEvent(1));
  ASSERT_TRUE(store->Apply(good).ok());
  const std::string before = Dump(LoadAll(*store));

  Journal bad;
  bad.nodes.push_back({"node-a", true, "would quarantine", kT0, "policy"});
  bad.nodes.push_back({"node-z", true, "new node", kT0, "policy"});
  bad.failures.push_back(MakeFailure(1));
  bad.restarts.push_back(MakeRestart(1));
  bad.jobs.push_back({"llama", 2, "restarting", "", 8, kT0});
  Event with_figures = MakeEvent(2);
  with_figures.figures = {{"x", 1}};
  bad.events.push_back(with_figures);
  bad.events.push_back(MakeEvent(2));  // the same id twice
  absl::Status status = store->Apply(bad);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr(path_));
  EXPECT_EQ(Dump(LoadAll(*store)), before);

  // An id already stored fails the same way.
  Journal again;
  again.nodes.push_back({"node-y", true, "", kT0, "policy"});
  again.events.push_back(MakeEvent(1));
  EXPECT_EQ(store->Apply(again).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Dump(LoadAll(*store)), before);

  // The store is still usable, and nothing of the failed journals appears
  // after a reopen either.
  Journal next;
  next.events.push_back(MakeEvent(2));
  ASSERT_TRUE(store->Apply(next).ok());
  store.reset();
  store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  PersistedState state = LoadAll(*store);
  ASSERT_EQ(state.nodes.size(), 1u);
  EXPECT_FALSE(state.nodes[0].quarantined);
  EXPECT_TRUE(state.failures.empty());
  EXPECT_TRUE(state.restarts.empty());
  ASSERT_EQ(state.jobs.size(), 1u);
  EXPECT_EQ(state.jobs[0].generation, 1u);
  ASSERT_EQ(state.events.size(), 2u);
  EXPECT_TRUE(state.events[1].figures.empty());
}

TEST_F(StateStoreTest, EventOfAnUnknownKindIsSkipped) {
  {
    std::unique_ptr<StateStore> store = OpenOrDie();
    ASSERT_NE(store, nullptr);
    Journal journal;
    journal.events.push_back(MakeEvent(1));
    ASSERT_TRUE(store->Apply(journal).ok());
  }
  // As if written by a newer trainsupd with a kind this build does not know.
  RawSql(path_,
         "INSERT INTO events (id, time, kind, job, generation, rank, node, message)"
         " VALUES (2, 1.0, 'meteor_strike', 'llama', 1, NULL, '', 'boom');"
         "INSERT INTO event_figures (event_id, position, name, value) VALUES (2, 0, 'x', 1.0);"
         "INSERT INTO events (id, time, kind, job, generation, rank, node, message)"
         " VALUES (3, 2.0, 'crash', 'llama', 1, NULL, '', 'real');");
  std::unique_ptr<StateStore> store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  PersistedState state = LoadAll(*store);
  ASSERT_EQ(state.events.size(), 2u);
  EXPECT_EQ(state.events[0].id, 1u);
  EXPECT_EQ(state.events[1].id, 3u);
  EXPECT_EQ(state.events[1].kind, EventKind::kCrash);
  EXPECT_TRUE(state.events[1].figures.empty());
}

TEST_F(StateStoreTest, FileOfGarbageIsDataLossAndLeftUnmodified) {
  std::string garbage;
  uint32_t x = 12345;
  for (int i = 0; i < 8192; ++i) {
    x = x * 1103515245 + 12345;
    garbage.push_back(static_cast<char>(x >> 24));
  }
  {
    std::ofstream out(path_, std::ios::binary);
    out << garbage;
  }
  absl::StatusOr<std::unique_ptr<StateStore>> store = StateStore::Open(path_);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kDataLoss) << store.status();
  EXPECT_THAT(store.status().message(), HasSubstr(path_));
  EXPECT_THAT(store.status().message(), HasSubstr("corrupt or not a trainsup database"));
  EXPECT_EQ(ReadBytes(path_), garbage);
  // No -wal, -shm or -journal file was left next to it either.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_),
                          std::filesystem::directory_iterator()),
            1);
}

TEST_F(StateStoreTest, CorruptDatabaseIsDataLoss) {
  {
    std::unique_ptr<StateStore> store = OpenOrDie();
    ASSERT_NE(store, nullptr);
    Journal journal;
    for (int i = 0; i < 200; ++i) journal.failures.push_back(MakeFailure(i));
    ASSERT_TRUE(store->Apply(journal).ok());
  }
  // Keep the header page, scribble over the b-tree pages after it.
  std::string bytes = ReadBytes(path_);
  ASSERT_GT(bytes.size(), 3 * 4096u);
  for (size_t i = 4096; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7);
  {
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out << bytes;
  }
  absl::StatusOr<std::unique_ptr<StateStore>> store = StateStore::Open(path_);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kDataLoss) << store.status();
  EXPECT_THAT(store.status().message(), HasSubstr(path_));
}

TEST_F(StateStoreTest, SecondOpenOfTheSameFileIsUnavailable) {
  std::unique_ptr<StateStore> first = OpenOrDie();  // creates the file
  ASSERT_NE(first, nullptr);
  absl::StatusOr<std::unique_ptr<StateStore>> second = StateStore::Open(path_);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable) << second.status();
  EXPECT_THAT(second.status().message(), HasSubstr("locked"));
  EXPECT_THAT(second.status().message(), HasSubstr(path_));

  // Same for a file that already existed before the first Open.
  first.reset();
  first = OpenOrDie();
  ASSERT_NE(first, nullptr);
  second = StateStore::Open(path_);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable) << second.status();

  // The holder is unaffected.
  Journal journal;
  journal.events.push_back(MakeEvent(1));
  EXPECT_TRUE(first->Apply(journal).ok());
}

TEST_F(StateStoreTest, SecondOpenFromAnotherProcessIsUnavailable) {
  { ASSERT_NE(OpenOrDie(), nullptr); }  // an existing database
  int opened[2], release[2];
  ASSERT_EQ(pipe(opened), 0);
  ASSERT_EQ(pipe(release), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // No gtest assertions here.
    absl::StatusOr<std::unique_ptr<StateStore>> store = StateStore::Open(path_);
    const char ok = store.ok() ? 'y' : 'n';
    if (write(opened[1], &ok, 1) != 1) _exit(2);
    char c;
    if (read(release[0], &c, 1) != 1) _exit(3);
    _exit(store.ok() ? 0 : 1);
  }
  char ok = 0;
  ASSERT_EQ(read(opened[0], &ok, 1), 1);
  ASSERT_EQ(ok, 'y');
  absl::StatusOr<std::unique_ptr<StateStore>> second = StateStore::Open(path_);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable) << second.status();
  EXPECT_THAT(second.status().message(), HasSubstr("locked by another process"));
  ASSERT_EQ(write(release[1], "x", 1), 1);
  int wstatus = 0;
  ASSERT_EQ(waitpid(child, &wstatus, 0), child);
  EXPECT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) << wstatus;
  for (int fd : {opened[0], opened[1], release[0], release[1]}) close(fd);
  // The lock died with its holder.
  EXPECT_NE(OpenOrDie(), nullptr);
}

TEST_F(StateStoreTest, ReadOnlyReadersReadWhileTheStoreIsOpenAndNeverBlockIt) {
  std::unique_ptr<StateStore> store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  Journal first;
  first.jobs.push_back({"llama", 1, "running", "", 8, kT0});
  ASSERT_TRUE(store->Apply(first).ok());

  // As `sqlite3 -readonly FILE` opens it.
  sqlite3* reader = nullptr;
  ASSERT_EQ(sqlite3_open_v2(path_.c_str(), &reader, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  auto jobs = [&]() {
    std::vector<std::string> names;
    sqlite3_stmt* select = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(reader, "SELECT job FROM jobs ORDER BY job", -1, &select, nullptr),
              SQLITE_OK)
        << sqlite3_errmsg(reader);
    int rc;
    while ((rc = sqlite3_step(select)) == SQLITE_ROW) {
      names.push_back(reinterpret_cast<const char*>(sqlite3_column_text(select, 0)));
    }
    EXPECT_EQ(rc, SQLITE_DONE) << sqlite3_errmsg(reader);
    sqlite3_finalize(select);
    return names;
  };
  EXPECT_THAT(jobs(), ::testing::ElementsAre("llama"));

  // A reader inside a read transaction keeps its snapshot, and the store
  // commits meanwhile.
  ASSERT_EQ(sqlite3_exec(reader, "BEGIN", nullptr, nullptr, nullptr), SQLITE_OK);
  EXPECT_THAT(jobs(), ::testing::ElementsAre("llama"));
  Journal second;
  second.jobs.push_back({"tiny", 1, "running", "", 1, kT0});
  EXPECT_TRUE(store->Apply(second, JournalSink::Sync::kFull).ok());
  EXPECT_THAT(jobs(), ::testing::ElementsAre("llama"));
  ASSERT_EQ(sqlite3_exec(reader, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
  EXPECT_THAT(jobs(), ::testing::ElementsAre("llama", "tiny"));

  // A second store is still refused, and readers do not keep the first from
  // closing (and unlocking) the file.
  absl::StatusOr<std::unique_ptr<StateStore>> second_store = StateStore::Open(path_);
  EXPECT_EQ(second_store.status().code(), absl::StatusCode::kUnavailable) << second_store.status();
  store.reset();
  EXPECT_NE(OpenOrDie(), nullptr);
  sqlite3_close(reader);
}

TEST_F(StateStoreTest, PathInAMissingDirectoryIsAnErrorNamingThePath) {
  const std::string path = dir_ + "/no/such/dir/state.db";
  absl::StatusOr<std::unique_ptr<StateStore>> store = StateStore::Open(path);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kNotFound) << store.status();
  EXPECT_THAT(store.status().message(), HasSubstr(path));
}

TEST_F(StateStoreTest, EmptyPathIsInvalid) {
  EXPECT_EQ(StateStore::Open("").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(StateStoreTest, NewerSchemaVersionIsFailedPreconditionAndLeftUnmodified) {
  { ASSERT_NE(OpenOrDie(), nullptr); }
  const int newer = StateStore::kSchemaVersion + 1;
  RawSql(path_, absl::StrCat("UPDATE meta SET value = ", newer, " WHERE key = 'schema_version'"));
  const std::string bytes = ReadBytes(path_);
  absl::StatusOr<std::unique_ptr<StateStore>> store = StateStore::Open(path_);
  EXPECT_EQ(ReadBytes(path_), bytes);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition) << store.status();
  EXPECT_THAT(store.status().message(), HasSubstr(path_));
  EXPECT_THAT(store.status().message(), HasSubstr(absl::StrCat("schema version ", newer)));
  EXPECT_THAT(store.status().message(),
              HasSubstr(absl::StrCat("versions 1 to ", StateStore::kSchemaVersion)));
}

TEST_F(StateStoreTest, SchemaVersionOneIsMigratedKeepingItsRows) {
  // (Its failures were all charged to their node: they still are.)
  // A store as the first trainsupd wrote it: no restarts_forgiven_before.
  RawSql(path_,
         "CREATE TABLE meta (key TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL);"
         "INSERT INTO meta VALUES ('schema_version', 1);"
         "CREATE TABLE nodes (name TEXT PRIMARY KEY NOT NULL, quarantined INTEGER NOT NULL,"
         "  reason TEXT NOT NULL, changed REAL, changed_by TEXT NOT NULL);"
         "CREATE TABLE failures (seq INTEGER PRIMARY KEY AUTOINCREMENT, time REAL,"
         "  job TEXT NOT NULL, generation INTEGER NOT NULL, kind TEXT NOT NULL,"
         "  node TEXT NOT NULL, rank INTEGER, message TEXT NOT NULL);"
         "CREATE TABLE restarts (seq INTEGER PRIMARY KEY AUTOINCREMENT, time REAL,"
         "  job TEXT NOT NULL, from_generation INTEGER NOT NULL,"
         "  to_generation INTEGER NOT NULL, reason TEXT NOT NULL);"
         "CREATE TABLE jobs (job TEXT PRIMARY KEY NOT NULL, generation INTEGER NOT NULL,"
         "  state TEXT NOT NULL, reason TEXT NOT NULL, world_size INTEGER NOT NULL,"
         "  changed REAL, exposure_seconds REAL NOT NULL DEFAULT 0);"
         "CREATE TABLE events (id INTEGER PRIMARY KEY, time REAL, kind TEXT NOT NULL,"
         "  job TEXT NOT NULL, generation INTEGER NOT NULL, rank INTEGER, node TEXT NOT NULL,"
         "  message TEXT NOT NULL);"
         "CREATE TABLE event_figures (event_id INTEGER NOT NULL REFERENCES events (id)"
         "  ON DELETE CASCADE, position INTEGER NOT NULL, name TEXT NOT NULL, value REAL,"
         "  PRIMARY KEY (event_id, position)) WITHOUT ROWID;"
         "INSERT INTO jobs VALUES ('llama', 3, 'held', 'restart limit reached', 8, 1800000000,"
         "  42.5);"
         "INSERT INTO failures (time, job, generation, kind, node, rank, message) VALUES"
         "  (1800000000, 'llama', 2, 'crash', 'node-a', 0, 'crash of rank 0');");
  {
    std::unique_ptr<StateStore> store = OpenOrDie();
    ASSERT_NE(store, nullptr);
    PersistedState state = LoadAll(*store);
    ASSERT_EQ(state.jobs.size(), 1u);
    EXPECT_EQ(state.jobs[0].state, "held");
    EXPECT_EQ(state.jobs[0].exposure_seconds, 42.5);
    EXPECT_EQ(state.jobs[0].restarts_forgiven_before, absl::InfinitePast());
    ASSERT_EQ(state.failures.size(), 1u);
    EXPECT_TRUE(state.failures[0].charged);
    // The migrated store takes the new column.
    JobRow resumed = state.jobs[0];
    resumed.restarts_forgiven_before = kT0;
    Journal journal;
    journal.jobs.push_back(resumed);
    ASSERT_TRUE(store->Apply(journal).ok());
  }
  std::unique_ptr<StateStore> store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(LoadAll(*store).jobs[0].restarts_forgiven_before, kT0);
}

// The schema as the trainsupd of each older version created it, and a row in
// every table that version had.
std::string OlderSchemaWithRows(int version) {
  std::string sql =
      "CREATE TABLE meta (key TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL);"
      "CREATE TABLE nodes (name TEXT PRIMARY KEY NOT NULL, quarantined INTEGER NOT NULL,"
      "  reason TEXT NOT NULL, changed REAL, changed_by TEXT NOT NULL);"
      "CREATE TABLE restarts (seq INTEGER PRIMARY KEY AUTOINCREMENT, time REAL,"
      "  job TEXT NOT NULL, from_generation INTEGER NOT NULL,"
      "  to_generation INTEGER NOT NULL, reason TEXT NOT NULL);"
      "CREATE TABLE events (id INTEGER PRIMARY KEY, time REAL, kind TEXT NOT NULL,"
      "  job TEXT NOT NULL, generation INTEGER NOT NULL, rank INTEGER, node TEXT NOT NULL,"
      "  message TEXT NOT NULL);"
      "CREATE TABLE event_figures (event_id INTEGER NOT NULL REFERENCES events (id)"
      "  ON DELETE CASCADE, position INTEGER NOT NULL, name TEXT NOT NULL, value REAL,"
      "  PRIMARY KEY (event_id, position)) WITHOUT ROWID;";
  // Version 2: an operator's resume kept with its job.
  absl::StrAppend(&sql,
                  "CREATE TABLE jobs (job TEXT PRIMARY KEY NOT NULL, generation INTEGER NOT NULL,"
                  "  state TEXT NOT NULL, reason TEXT NOT NULL, world_size INTEGER NOT NULL,"
                  "  changed REAL, exposure_seconds REAL NOT NULL DEFAULT 0",
                  version >= 2 ? ", restarts_forgiven_before REAL" : "",
                  // Version 6: its restarts and failures over its life (as
                  // the migration counts them from this history: 1 and 1).
                  version >= 6 ? ", restarts INTEGER NOT NULL DEFAULT 0,"
                                 "  failures INTEGER NOT NULL DEFAULT 0"
                               : "",
                  ");");
  // Version 3: whether a failure is charged; measures and stacks.
  absl::StrAppend(&sql,
                  "CREATE TABLE failures (seq INTEGER PRIMARY KEY AUTOINCREMENT, time REAL,"
                  "  job TEXT NOT NULL, generation INTEGER NOT NULL, kind TEXT NOT NULL,"
                  "  node TEXT NOT NULL, rank INTEGER, message TEXT NOT NULL",
                  version >= 3 ? ", charged INTEGER NOT NULL DEFAULT 1" : "", ");");
  if (version >= 3) {
    absl::StrAppend(
        &sql,
        "CREATE TABLE job_measures (job TEXT PRIMARY KEY NOT NULL, ledger_start REAL,"
        "  ledger_last REAL, ledger_generation INTEGER NOT NULL,"
        "  ledger_high_water INTEGER NOT NULL, checkpoint_costs TEXT NOT NULL,"
        "  checkpoint_async TEXT NOT NULL, restart_costs TEXT NOT NULL);"
        "CREATE TABLE ledger_generations (job TEXT NOT NULL, generation INTEGER NOT NULL,"
        "  useful REAL NOT NULL, starved REAL NOT NULL, checkpoint_blocked REAL NOT NULL,"
        "  lost REAL NOT NULL, PRIMARY KEY (job, generation)) WITHOUT ROWID;"
        "CREATE TABLE stacks (seq INTEGER PRIMARY KEY AUTOINCREMENT, job TEXT NOT NULL,"
        "  generation INTEGER NOT NULL, event_id INTEGER NOT NULL, time REAL,"
        "  collect_seconds REAL NOT NULL, culprit INTEGER, rank INTEGER NOT NULL,"
        "  node TEXT NOT NULL, answered INTEGER NOT NULL, text TEXT NOT NULL);"
        "INSERT INTO job_measures VALUES ('llama', 1800000000, 1800000090, 2, 1200, '1.5 0.25',"
        "  '', '20.5');"
        "INSERT INTO ledger_generations VALUES ('llama', 2, 30, 2, 0.5, 12.75);"
        "INSERT INTO stacks (job, generation, event_id, time, collect_seconds, culprit, rank,"
        "  node, answered, text) VALUES ('llama', 2, 1, 1800000000, 0.25, 1, 1, 'node-a', 1,"
        "  'File \"x.py\", line 3');");
  }
  // Version 4: pending fences.
  if (version >= 4) {
    absl::StrAppend(&sql,
                    "CREATE TABLE pending_fences (node TEXT PRIMARY KEY NOT NULL,"
                    "  reason TEXT NOT NULL, decided REAL);",
                    // Version 5: a pending row may be an unfence.
                    version >= 5 ? "ALTER TABLE pending_fences ADD COLUMN action TEXT NOT NULL"
                                   "  DEFAULT 'fence';"
                                 : "",
                    "INSERT INTO pending_fences (node, reason, decided) VALUES ('node-a',"
                    "  'bad GPU 3', 1800000000);");
  }
  // Version 6: what ended jobs showed.
  if (version >= 6) {
    absl::StrAppend(
        &sql,
        "CREATE TABLE ended_jobs (job TEXT PRIMARY KEY NOT NULL, generation INTEGER NOT NULL,"
        "  world_size INTEGER NOT NULL, heartbeats INTEGER NOT NULL, plans TEXT NOT NULL,"
        "  plan_checkpoint_seconds REAL, plan_mtbf_seconds REAL, plan_restart_seconds REAL,"
        "  plan_async_write_seconds REAL, plan_run_seconds REAL);"
        "CREATE TABLE ended_job_nodes (job TEXT NOT NULL, node TEXT NOT NULL,"
        "  generation INTEGER NOT NULL, incarnation INTEGER NOT NULL, last_report REAL,"
        "  heartbeats INTEGER NOT NULL, launcher_state TEXT NOT NULL,"
        "  launcher_pid INTEGER NOT NULL, exit_code INTEGER NOT NULL, signal INTEGER NOT NULL,"
        "  PRIMARY KEY (job, node)) WITHOUT ROWID;"
        "CREATE TABLE ended_job_ranks (job TEXT NOT NULL, rank INTEGER NOT NULL,"
        "  node TEXT NOT NULL, local_rank INTEGER NOT NULL, pid INTEGER NOT NULL,"
        "  step INTEGER NOT NULL, last_heartbeat REAL, last_progress REAL,"
        "  heartbeats INTEGER NOT NULL, step_p50 REAL NOT NULL, step_p99 REAL NOT NULL,"
        "  compute_p50 REAL NOT NULL, compute_p99 REAL NOT NULL, phase TEXT NOT NULL,"
        "  liveness TEXT NOT NULL, death_time REAL, exit_known INTEGER NOT NULL,"
        "  exit_code INTEGER NOT NULL, signal INTEGER NOT NULL, exception_type TEXT NOT NULL,"
        "  exception_message TEXT NOT NULL, loss REAL, learning_rate REAL, samples INTEGER,"
        "  datagrams_dropped INTEGER NOT NULL, straggler INTEGER NOT NULL,"
        "  PRIMARY KEY (job, rank)) WITHOUT ROWID;"
        "INSERT INTO ended_jobs VALUES ('bert', 4, 2, 90, '', NULL, NULL, NULL, NULL, NULL);");
  }
  // Version 7: jobs' kill criteria and checkpoint fallbacks.
  if (version >= 7) {
    absl::StrAppend(
        &sql,
        "CREATE TABLE checkpoint_fallbacks (job TEXT PRIMARY KEY NOT NULL,"
        "  generation INTEGER NOT NULL, first_step INTEGER NOT NULL, checkpoints TEXT NOT NULL,"
        "  suspects TEXT NOT NULL, failure_generation INTEGER, failure_checkpoint INTEGER,"
        "  resume_limit INTEGER, skip_first INTEGER, skip_last INTEGER,"
        "  advice_generation INTEGER NOT NULL, rollbacks INTEGER NOT NULL,"
        "  spike_rollbacks INTEGER NOT NULL);",
        "CREATE TABLE kill_criteria (job TEXT NOT NULL, source TEXT NOT NULL, loss_above REAL,"
        "  at_step INTEGER NOT NULL, curve TEXT NOT NULL, band REAL NOT NULL,"
        "  band_absolute INTEGER NOT NULL, spikes INTEGER NOT NULL, total_steps INTEGER,"
        "  observe_only INTEGER NOT NULL, changed REAL, PRIMARY KEY (job, source));");
  }
  // Version 8: what each node said of a generation's provenance.
  if (version >= 8) {
    absl::StrAppend(&sql,
                    "CREATE TABLE provenance (job TEXT NOT NULL, generation INTEGER NOT NULL,"
                    "  node TEXT NOT NULL, time REAL, record TEXT NOT NULL,"
                    "  PRIMARY KEY (job, generation, node));");
  }
  absl::StrAppend(
      &sql, "INSERT INTO meta VALUES ('schema_version', ", version, ");",
      "INSERT INTO nodes VALUES ('node-a', 1, 'bad GPU 3', 1800000000, 'operator');"
      "INSERT INTO restarts (time, job, from_generation, to_generation, reason) VALUES"
      "  (1800000001, 'llama', 2, 3, 'crash on node-a');"
      "INSERT INTO events VALUES (1, 1800000000, 'crash', 'llama', 2, 0, 'node-a', 'boom');"
      "INSERT INTO event_figures VALUES (1, 0, 'lost_seconds', 12.5);"
      "INSERT INTO jobs (job, generation, state, reason, world_size, changed,"
      "  exposure_seconds) VALUES ('llama', 3, 'held', 'restart limit reached', 8, 1800000002,"
      "  42.5);"
      "INSERT INTO failures (time, job, generation, kind, node, rank, message) VALUES"
      "  (1800000000, 'llama', 2, 'crash', 'node-a', 0, 'crash of rank 0');"
      "INSERT INTO failures (time, job, generation, kind, node, rank, message) VALUES"
      "  (1800000001, 'llama', 3, 'straggler', 'node-b', 5, 'straggling rank 5 (1.9x)');",
      version >= 6 ? "UPDATE jobs SET restarts = 1, failures = 1;" : "");
  return sql;
}

// Every table's columns (name, type, not null, default, key), by table.
std::string Columns(const std::string& path) {
  std::string out;
  sqlite3* db = nullptr;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) return "cannot open";
  sqlite3_stmt* tables = nullptr;
  sqlite3_prepare_v2(db,
                     "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE"
                     " 'sqlite\\_%' ESCAPE '\\' ORDER BY name",
                     -1, &tables, nullptr);
  while (sqlite3_step(tables) == SQLITE_ROW) {
    const std::string table = reinterpret_cast<const char*>(sqlite3_column_text(tables, 0));
    absl::StrAppend(&out, table, ":");
    sqlite3_stmt* info = nullptr;
    sqlite3_prepare_v2(db, absl::StrCat("PRAGMA table_info(", table, ")").c_str(), -1, &info,
                       nullptr);
    while (sqlite3_step(info) == SQLITE_ROW) {
      for (int c = 1; c <= 5; ++c) {
        const unsigned char* text = sqlite3_column_text(info, c);
        absl::StrAppend(&out, " ", text ? reinterpret_cast<const char*>(text) : "NULL");
      }
      absl::StrAppend(&out, ";");
    }
    sqlite3_finalize(info);
    absl::StrAppend(&out, "\n");
  }
  sqlite3_finalize(tables);
  sqlite3_close(db);
  return out;
}

class OlderSchemaTest : public StateStoreTest, public ::testing::WithParamInterface<int> {};

TEST_P(OlderSchemaTest, IsMigratedToTheNewestColumnsKeepingItsRows) {
  const int version = GetParam();
  RawSql(path_, OlderSchemaWithRows(version));
  {
    std::unique_ptr<StateStore> store = OpenOrDie();
    ASSERT_NE(store, nullptr);
    PersistedState state = LoadAll(*store);
    ASSERT_EQ(state.nodes.size(), 1u);
    EXPECT_TRUE(state.nodes[0].quarantined);
    EXPECT_EQ(state.nodes[0].reason, "bad GPU 3");
    ASSERT_EQ(state.jobs.size(), 1u);
    EXPECT_EQ(state.jobs[0].state, "held");
    EXPECT_EQ(state.jobs[0].generation, 3u);
    EXPECT_EQ(state.jobs[0].exposure_seconds, 42.5);
    EXPECT_EQ(state.jobs[0].restarts_forgiven_before, absl::InfinitePast());
    // Its restarts and job-killing failures, counted from its history.
    EXPECT_EQ(state.jobs[0].restarts, 1u);
    EXPECT_EQ(state.jobs[0].failures, 1u);
    ASSERT_EQ(state.failures.size(), 2u);
    EXPECT_TRUE(state.failures[0].charged);  // all were, before version 3
    ASSERT_EQ(state.restarts.size(), 1u);
    EXPECT_EQ(state.restarts[0].to_generation, 3u);
    ASSERT_EQ(state.events.size(), 1u);
    ASSERT_EQ(state.events[0].figures.size(), 1u);
    EXPECT_EQ(state.events[0].figures[0].second, 12.5);
    if (version >= 3) {
      ASSERT_EQ(state.measures.size(), 1u);
      EXPECT_THAT(state.measures[0].checkpoint_costs, ::testing::ElementsAre(1.5, 0.25));
      EXPECT_EQ(state.measures[0].ledger.by_generation[2].seconds[3], 12.75);
      ASSERT_EQ(state.stacks.size(), 1u);
      EXPECT_EQ(state.stacks[0].culprit, 1u);
    } else {
      EXPECT_TRUE(state.measures.empty());
      EXPECT_TRUE(state.stacks.empty());
    }
    if (version >= 6) {
      ASSERT_EQ(state.ended_jobs.size(), 1u);
      EXPECT_EQ(state.ended_jobs[0].generation, 4u);
      EXPECT_TRUE(state.ended_jobs[0].signals.empty());  // none were kept before version 9
    } else {
      EXPECT_TRUE(state.ended_jobs.empty());
    }
    if (version >= 4) {
      ASSERT_EQ(state.fences.size(), 1u);
      EXPECT_EQ(state.fences[0].action, FenceAction::kFence);  // all were, before version 5
    } else {
      EXPECT_TRUE(state.fences.empty());
    }
  }
  // The same columns as a store created new, and it takes every kind of row.
  const std::string migrated = Columns(path_);
  const std::string fresh_path = dir_ + "/fresh.db";
  {
    absl::StatusOr<std::unique_ptr<StateStore>> fresh = StateStore::Open(fresh_path);
    ASSERT_TRUE(fresh.ok()) << fresh.status();
  }
  EXPECT_EQ(migrated, Columns(fresh_path));
  Journal journal;
  journal.nodes.push_back({"node-b", false, "", kT0, "operator"});
  journal.failures.push_back(MakeFailure(7));
  journal.restarts.push_back(MakeRestart(7));
  journal.jobs.push_back({"tiny", 1, "running", "", 1, kT0, 1.5, kT0});
  JobMeasuresRow measures;
  measures.job = "tiny";
  measures.checkpoint_costs = {2.5};
  journal.measures.push_back(measures);
  journal.stacks.push_back({"tiny", 1, 2, kT0, 0.5, std::nullopt, 0, "node-b", false, ""});
  journal.fences.push_back({"node-b", "lifted", kT0, true, FenceAction::kUnfence});
  journal.events.push_back(MakeEvent(2));
  journal.ended_jobs.push_back({"tiny", 1, 1, 10, {}, std::nullopt});
  journal.ended_nodes.push_back({"tiny", "node-b", 1, 1, kT0, 10, "exited", 0, 0, 0});
  EndedRankRow rank;
  rank.job = "tiny";
  journal.ended_ranks.push_back(rank);
  std::unique_ptr<StateStore> store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Apply(journal).ok());
  PersistedState state = LoadAll(*store);
  EXPECT_EQ(state.ended_jobs.size(), version >= 6 ? 2u : 1u);
  EXPECT_EQ(state.ended_nodes.size(), 1u);
  EXPECT_EQ(state.ended_ranks.size(), 1u);
  EXPECT_EQ(state.jobs.size(), 2u);
  EXPECT_EQ(state.failures.size(), 3u);
  EXPECT_EQ(state.measures.size(), version >= 3 ? 2u : 1u);
  EXPECT_EQ(state.stacks.size(), version >= 3 ? 2u : 1u);
  EXPECT_EQ(state.fences.size(), version >= 4 ? 2u : 1u);
  EXPECT_EQ(state.events.size(), 2u);
}

INSTANTIATE_TEST_SUITE_P(EveryOlderVersion, OlderSchemaTest,
                         ::testing::Range(1, StateStore::kSchemaVersion),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return absl::StrCat("Version", info.param);
                         });

TEST_F(StateStoreTest, SqliteDatabaseOfAnotherProgramIsRefused) {
  RawSql(path_, "CREATE TABLE photos (id INTEGER PRIMARY KEY, blob BLOB)");
  const std::string bytes = ReadBytes(path_);
  absl::StatusOr<std::unique_ptr<StateStore>> store = StateStore::Open(path_);
  EXPECT_EQ(ReadBytes(path_), bytes);  // still in its own journal mode, too
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition) << store.status();
  EXPECT_THAT(store.status().message(), HasSubstr("not a trainsup database"));
  EXPECT_THAT(store.status().message(), HasSubstr(path_));
}

TEST_F(StateStoreTest, AppliedJournalSurvivesAProcessThatDiesWithoutClosing) {
  Journal journal;
  journal.nodes.push_back({"node-a", true, "crashy", kT0, "policy"});
  journal.failures.push_back(MakeFailure(1));
  journal.restarts.push_back(MakeRestart(1));
  journal.jobs.push_back({"llama", 2, "running", "", 8, kT0});
  Event event = MakeEvent(1, EventKind::kCrash);
  event.figures = {{"lost_seconds", 12.5}};
  journal.events.push_back(event);

  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // No gtest assertions here.
    absl::StatusOr<std::unique_ptr<StateStore>> store = StateStore::Open(path_);
    if (!store.ok()) _exit(1);
    if (!(*store)->Apply(journal).ok()) _exit(2);
    _exit(0);  // no destructor, no close, no checkpoint: as after kill -9
  }
  int wstatus = 0;
  ASSERT_EQ(waitpid(child, &wstatus, 0), child);
  ASSERT_TRUE(WIFEXITED(wstatus)) << wstatus;
  ASSERT_EQ(WEXITSTATUS(wstatus), 0);
  // The rows are in the write-ahead log, not yet in the database file.
  EXPECT_TRUE(std::filesystem::exists(path_ + "-wal"));

  std::unique_ptr<StateStore> store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(Dump(LoadAll(*store)), Dump(journal));
}

// What the tables shared through etcd hold (store/changeset.h): the state
// without the per-instance history (stacks; the events are shared).
std::string DumpShared(PersistedState state) {
  state.stacks.clear();
  return Dump(state);
}

TEST_F(StateStoreTest, ChangesetsReplayedInOrderGiveAnotherStoreTheSameSharedState) {
  std::unique_ptr<StateStore> leader = OpenOrDie();
  ASSERT_NE(leader, nullptr);
  std::vector<std::string> changesets(3);
  Journal first = EveryKindOfRow();
  first.fences.push_back({"node-a", "3 failures", kT0, true, FenceAction::kFence});
  ASSERT_TRUE(leader->Apply(first, JournalSink::Sync::kNormal, &changesets[0]).ok());
  // The decisions after it: node-a lifted and its fence done, a failure more.
  Journal second;
  second.nodes.push_back({"node-a", false, "operator", kT0 + absl::Seconds(5), "operator"});
  second.fences.push_back({"node-a", "", kT0, false, FenceAction::kFence});
  second.failures.push_back(MakeFailure(9));
  ASSERT_TRUE(leader->Apply(second, JournalSink::Sync::kFull, &changesets[1]).ok());
  // An event alone (history): shared too, with its figures.
  Journal history;
  Event alone = MakeEvent(100);
  alone.figures = {{"threshold_seconds", 20}, {"p99_seconds", 0.5}};
  history.events.push_back(alone);
  ASSERT_TRUE(leader->Apply(history, JournalSink::Sync::kNormal, &changesets[2]).ok());
  EXPECT_FALSE(changesets[0].empty());
  EXPECT_FALSE(changesets[1].empty());
  EXPECT_FALSE(changesets[2].empty());

  // A standby whose own copy is stale: a quarantine the leader never made,
  // events of its own (one with an id the leader used for another) and its
  // stacks, which it keeps.
  absl::StatusOr<std::unique_ptr<StateStore>> standby = StateStore::OpenInMemory();
  ASSERT_TRUE(standby.ok()) << standby.status();
  Journal stale;
  stale.nodes.push_back({"node-z", true, "stale", kT0, "policy"});
  Event own = MakeEvent(1, EventKind::kLeadership);
  own.figures = {{"epoch", 7}};
  stale.events.push_back(own);
  stale.events.push_back(MakeEvent(500));
  stale.stacks.push_back({"llama", 1, 500, kT0, 0.1, std::nullopt, 0, "node-z", true, "x"});
  ASSERT_TRUE((*standby)->Apply(stale).ok());
  ASSERT_TRUE((*standby)->ReplaceShared(changesets).ok());
  const PersistedState got = LoadAll(**standby);
  const PersistedState want = LoadAll(*leader);
  EXPECT_EQ(DumpShared(got), DumpShared(want));  // the events the leader's, with their figures
  ASSERT_FALSE(got.events.empty());
  EXPECT_EQ(got.events.back().id, 100u);
  EXPECT_EQ(got.events.back().figures, alone.figures);
  EXPECT_EQ(got.stacks.size(), 1u);  // its own stays
  EXPECT_TRUE(got.fences.empty());  // the fence was done
}

TEST_F(StateStoreTest, SharedSnapshotCarriesEverySharedRowAndNothingElse) {
  std::unique_ptr<StateStore> leader = OpenOrDie();
  ASSERT_NE(leader, nullptr);
  Journal journal = EveryKindOfRow();
  journal.fences.push_back({"node-b", "stall", kT0, true, FenceAction::kFence});
  ASSERT_TRUE(leader->Apply(journal).ok());
  std::string snapshot;
  ASSERT_TRUE(leader->SnapshotShared(&snapshot).ok());
  ASSERT_FALSE(snapshot.empty());
  // Taking it changed nothing.
  EXPECT_EQ(Dump(LoadAll(*leader)), Dump(journal));

  absl::StatusOr<std::unique_ptr<StateStore>> copy = StateStore::OpenInMemory();
  ASSERT_TRUE(copy.ok());
  ASSERT_TRUE((*copy)->ReplaceShared({snapshot}).ok());
  const PersistedState got = LoadAll(**copy);
  EXPECT_EQ(DumpShared(got), DumpShared(LoadAll(*leader)));
  EXPECT_EQ(got.events.size(), journal.events.size());
  EXPECT_TRUE(got.stacks.empty());

  // A snapshot of empty tables is empty.
  absl::StatusOr<std::unique_ptr<StateStore>> empty = StateStore::OpenInMemory();
  ASSERT_TRUE(empty.ok());
  ASSERT_TRUE((*empty)->SnapshotShared(&snapshot).ok());
  EXPECT_TRUE(snapshot.empty());
}

TEST_F(StateStoreTest, ASnapshotCarriesOnlyTheNewestEventsWithTheirFigures) {
  std::unique_ptr<StateStore> leader = OpenOrDie();
  ASSERT_NE(leader, nullptr);
  Journal journal;
  journal.nodes.push_back({"node-a", true, "bad GPU", kT0, "operator"});
  for (uint64_t id = 1; id <= 5; ++id) {
    Event e = MakeEvent(id);
    e.figures = {{"x", static_cast<double>(id)}, {"y", 0}};
    journal.events.push_back(e);
  }
  ASSERT_TRUE(leader->Apply(journal).ok());
  std::string snapshot;
  ASSERT_TRUE(leader->SnapshotShared(&snapshot, /*max_events=*/2).ok());
  EXPECT_EQ(LoadAll(*leader).events.size(), 5u);  // taking it changed nothing

  absl::StatusOr<std::unique_ptr<StateStore>> copy = StateStore::OpenInMemory();
  ASSERT_TRUE(copy.ok());
  ASSERT_TRUE((*copy)->ReplaceShared({snapshot}).ok());
  const PersistedState got = LoadAll(**copy);
  EXPECT_EQ(got.nodes.size(), 1u);
  ASSERT_EQ(got.events.size(), 2u);
  EXPECT_EQ(got.events[0].id, 4u);
  EXPECT_EQ(got.events[1].id, 5u);
  for (const Event& e : got.events) {
    EXPECT_EQ(e.figures, (std::vector<std::pair<std::string, double>>{
                             {"x", static_cast<double>(e.id)}, {"y", 0}}));
  }
}

TEST_F(StateStoreTest, PruneKeepsTheNewestEventWhateverItsAgeSoThatIdsGoOn) {
  for (bool in_memory : {false, true}) {
    std::unique_ptr<StateStore> store;
    if (in_memory) {
      store = std::move(*StateStore::OpenInMemory());
    } else {
      store = OpenOrDie();
    }
    ASSERT_NE(store, nullptr);
    Journal journal;
    for (uint64_t id = 1; id <= 3; ++id) {
      Event e = MakeEvent(id);  // at kT0 + id seconds
      e.figures = {{"x", 1}};
      journal.events.push_back(e);
    }
    ASSERT_TRUE(store->Apply(journal).ok());
    ASSERT_TRUE(store->Prune(kT0 + absl::Hours(1)).ok());
    const PersistedState state = LoadAll(*store);
    ASSERT_EQ(state.events.size(), 1u) << in_memory;
    EXPECT_EQ(state.events[0].id, 3u);
    EXPECT_EQ(state.events[0].figures.size(), 1u);
  }
  EXPECT_EQ(RawCount(path_, "SELECT count(*) FROM event_figures"), 1);  // the others' went
}

TEST_F(StateStoreTest, AnUnreadableChangesetChangesNothing) {
  absl::StatusOr<std::unique_ptr<StateStore>> store = StateStore::OpenInMemory();
  ASSERT_TRUE(store.ok());
  Journal journal;
  journal.nodes.push_back({"node-a", true, "kept", kT0, "policy"});
  ASSERT_TRUE((*store)->Apply(journal).ok());
  const absl::Status s = (*store)->ReplaceShared({"not a changeset at all"});
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_EQ(Dump(LoadAll(**store)), Dump(journal));
}

}  // namespace
}  // namespace trainsup
