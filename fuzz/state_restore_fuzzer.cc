// Fuzz target: a supervisor restarting on a state store with hostile rows.
// The input (fuzz_input.proto's StoreRows) is written with raw SQL into the
// tables of a new store, any value in any column, constraints permitting.
// Then the daemon's way: StateStore::Open and SupervisorHost::Restore, a
// sweep (which writes its journal back), the agents of the restored jobs say
// hello, another sweep, and the core is read as the operator CLI and
// /metrics read it. Every input must end in a clear error or a supervisor
// that works: no crash, leak or undefined behaviour.

#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "daemon/agent_intake.h"
#include "daemon/state_store.h"
#include "daemon/supervisor_host.h"
#include "fuzz/fuzz_support.h"
#include "fuzz_input.pb.h"

namespace trainsup {
namespace {

// Rows written from one input; the rest are ignored (keeps each run short).
constexpr int kMaxRows = 512;
// Restored jobs whose agent says hello after the restore.
constexpr size_t kHellos = 4;

// Table names in the order of fuzz::Row::Table.
constexpr const char* kTables[] = {"nodes",           "failures",        "restarts",
                                   "jobs",            "events",          "event_figures",
                                   "job_measures",    "ledger_generations", "stacks",
                                   "meta",            "pending_fences",  "ended_jobs",
                                   "ended_job_nodes", "ended_job_ranks"};
static_assert(sizeof(kTables) / sizeof(kTables[0]) == fuzz::Row::Table_ARRAYSIZE);

// The files of one fuzzing process: an empty store made once by
// StateStore::Open (the schema this build writes), copied over the working
// store before each input.
struct Files {
  std::filesystem::path empty_store;
  std::filesystem::path store;
  // "INSERT OR REPLACE INTO <table> VALUES (?1, ..., ?N)" by table.
  std::vector<std::string> inserts;
  // Columns of each table.
  std::vector<int> columns;
};

void RemoveStore(const std::filesystem::path& path) {
  std::error_code ignored;
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
    std::filesystem::remove(path.string() + suffix, ignored);
  }
}

void Die(const std::string& what) {
  std::fprintf(stderr, "state_restore_fuzzer: %s\n", what.c_str());
  std::abort();
}

const Files& TheFiles() {
  static const Files* const files = [] {
    auto* f = new Files;
    const std::filesystem::path dir = std::filesystem::temp_directory_path();
    const std::string stem = absl::StrCat("trainsup-state-fuzzer-", getpid());
    f->empty_store = dir / (stem + "-empty.db");
    f->store = dir / (stem + ".db");
    RemoveStore(f->empty_store);
    absl::StatusOr<std::unique_ptr<StateStore>> store = StateStore::Open(f->empty_store.string());
    if (!store.ok()) Die(std::string(store.status().message()));
    store->reset();  // closed: the file holds the whole schema, no WAL left
    sqlite3* db = nullptr;
    if (sqlite3_open_v2(f->empty_store.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
      Die(sqlite3_errmsg(db));
    }
    for (const char* table : kTables) {
      sqlite3_stmt* info = nullptr;
      const std::string sql = absl::StrCat("PRAGMA table_info(", table, ")");
      sqlite3_prepare_v2(db, sql.c_str(), -1, &info, nullptr);
      int columns = 0;
      while (sqlite3_step(info) == SQLITE_ROW) ++columns;
      sqlite3_finalize(info);
      if (columns == 0) Die(absl::StrCat("no table ", table, " in a new store"));
      std::string insert = absl::StrCat("INSERT OR REPLACE INTO ", table, " VALUES (");
      for (int c = 1; c <= columns; ++c) absl::StrAppend(&insert, c > 1 ? ", ?" : "?", c);
      f->inserts.push_back(insert + ")");
      f->columns.push_back(columns);
    }
    sqlite3_close(db);
    std::atexit([] {
      RemoveStore(TheFiles().empty_store);
      RemoveStore(TheFiles().store);
    });
    return f;
  }();
  return *files;
}

void Bind(sqlite3_stmt* insert, int index, const fuzz::Value& value) {
  switch (value.value_case()) {
    case fuzz::Value::kInteger:
      sqlite3_bind_int64(insert, index, value.integer());
      return;
    case fuzz::Value::kReal:
      sqlite3_bind_double(insert, index, value.real());
      return;
    case fuzz::Value::kText:
      sqlite3_bind_text(insert, index, value.text().data(), static_cast<int>(value.text().size()),
                        SQLITE_TRANSIENT);
      return;
    case fuzz::Value::kBlob:
      sqlite3_bind_blob(insert, index, value.blob().data(), static_cast<int>(value.blob().size()),
                        SQLITE_TRANSIENT);
      return;
    case fuzz::Value::kNull:
    case fuzz::Value::VALUE_NOT_SET:
      sqlite3_bind_null(insert, index);
      return;
  }
}

// Writes the input's rows into the store at `files.store`, as raw SQL: a row
// the schema's constraints refuse is skipped.
void WriteRows(const Files& files, const fuzz::StoreRows& input) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(files.store.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) != SQLITE_OK) {
    Die(sqlite3_errmsg(db));
  }
  sqlite3_exec(db, "PRAGMA locking_mode = EXCLUSIVE; PRAGMA synchronous = OFF; BEGIN", nullptr,
               nullptr, nullptr);
  const int rows = std::min(input.rows_size(), kMaxRows);
  for (int i = 0; i < rows; ++i) {
    const fuzz::Row& row = input.rows(i);
    // Proto3 keeps enum values it does not know.
    if (!fuzz::Row::Table_IsValid(row.table())) continue;
    sqlite3_stmt* insert = nullptr;
    sqlite3_prepare_v2(db, files.inserts[row.table()].c_str(), -1, &insert, nullptr);
    const int columns = std::min(files.columns[row.table()], row.values_size());
    for (int c = 0; c < columns; ++c) Bind(insert, c + 1, row.values(c));
    sqlite3_step(insert);
    sqlite3_finalize(insert);
  }
  sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr);
  if (sqlite3_close(db) != SQLITE_OK) Die("closing the store after writing rows");
}

void Run(const fuzz::StoreRows& input) {
  const Files& files = TheFiles();
  RemoveStore(files.store);
  std::filesystem::copy_file(files.empty_store, files.store);
  WriteRows(files, input);

  absl::StatusOr<std::unique_ptr<StateStore>> store = StateStore::Open(files.store.string());
  if (!store.ok()) return;  // refused with a clear error: what the daemon reports
  FakeClock clock;
  SupervisorHost host(SupervisorOptions(), &clock, store->get());
  if (!host.Restore().ok()) return;
  clock.Advance(absl::Seconds(1));
  host.Sweep();
  // The restored jobs' agents come back.
  std::vector<std::pair<std::string, uint64_t>> jobs = host.Read([](const Supervisor& core, absl::Time now) {
    std::vector<std::pair<std::string, uint64_t>> out;
    for (const JobView& job : core.JobViews(now)) {
      if (out.size() == kHellos) break;
      out.emplace_back(job.id, job.generation);
    }
    return out;
  });
  auto channel = std::make_shared<fuzz::DiscardingChannel>();
  for (size_t i = 0; i < jobs.size(); ++i) {
    v1::AgentMessage hello;
    hello.mutable_hello()->set_node(absl::StrCat("node-", i));
    hello.mutable_hello()->set_job(jobs[i].first);
    hello.mutable_hello()->set_generation(jobs[i].second);
    hello.mutable_hello()->set_incarnation(i + 1);
    SessionId session = 0;
    NodeReportInfo unused;
    ApplyAgentMessage(host, hello, channel, "fuzz", &session, &unused);
  }
  clock.Advance(absl::Seconds(1));
  host.Sweep();
  fuzz::ReadAsOperator(host);
}

}  // namespace
}  // namespace trainsup

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  trainsup::fuzz::StoreRows input;
  if (!input.ParseFromArray(data, static_cast<int>(size))) return -1;  // not worth keeping
  trainsup::Run(input);
  return 0;
}
