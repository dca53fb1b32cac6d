// The events table and each event's figures (event_figures, in order).
#include "absl/container/flat_hash_map.h"
#include "absl/strings/escaping.h"
#include "common/log.h"
#include "daemon/core/event_log.h"
#include "daemon/store/table_codec.h"

namespace trainsup {
namespace store {
namespace {

absl::Status Write(const Db& db, const Journal& journal) {
  if (journal.events.empty()) return absl::OkStatus();
  Statement insert(db,
                   "INSERT INTO events (id, time, kind, job, generation, rank, node, message)"
                   " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
  Statement insert_figure(db,
                          "INSERT INTO event_figures (event_id, position, name, value)"
                          " VALUES (?1, ?2, ?3, ?4)");
  for (const Event& event : journal.events) {
    insert.BindUint(1, event.id);
    insert.BindTime(2, event.time);
    insert.BindText(3, EventKindName(event.kind));
    insert.BindText(4, event.job);
    insert.BindUint(5, event.generation);
    insert.BindRank(6, event.rank);
    insert.BindText(7, event.node);
    insert.BindText(8, event.message);
    if (absl::Status s = insert.Run("writing the journal"); !s.ok()) return s;
    for (size_t i = 0; i < event.figures.size(); ++i) {
      insert_figure.BindUint(1, event.id);
      insert_figure.BindUint(2, i);
      insert_figure.BindText(3, event.figures[i].first);
      insert_figure.BindDouble(4, event.figures[i].second);
      if (absl::Status s = insert_figure.Run("writing the journal"); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

// The most recent `limits.events` events by id, oldest first (an event of a
// kind this build does not know is skipped with a warning), and how many of
// each kind every job has.
absl::Status Read(const Db& db, const LoadLimits& limits, PersistedState* state) {
  Statement events(db,
                   "SELECT id, time, kind, job, generation, rank, node, message FROM ("
                   "  SELECT * FROM events ORDER BY id DESC LIMIT ?1) ORDER BY id");
  events.BindInt(1, Limit(limits.events));
  absl::flat_hash_map<uint64_t, size_t> event_index;  // id -> index in state->events
  absl::Status status = ForEachRow(db, events, [&](Statement& row) {
    const std::string kind_name = row.Text(2);
    const std::optional<EventKind> kind = EventKindFromName(kind_name);
    if (!kind.has_value()) {
      TRAINSUP_LOG_WARN("state database %s: skipping event %d of unknown kind \"%s\"", db.path,
                        row.Uint(0), absl::CHexEscape(kind_name));
      return;
    }
    Event& event = state->events.emplace_back();
    event.id = row.Uint(0);
    event.time = row.Time(1);
    event.kind = *kind;
    event.job = row.Text(3);
    event.generation = row.Uint(4);
    event.rank = row.Rank(5);
    event.node = row.Text(6);
    event.message = row.Text(7);
    event_index[event.id] = state->events.size() - 1;
  });
  if (!status.ok()) return status;

  // Every event stored counts, not only the recent ones loaded.
  Statement counts(db,
                   "SELECT job, kind, count(*) FROM events WHERE job != '' GROUP BY job, kind"
                   " ORDER BY job, kind");
  status = ForEachRow(db, counts, [&](Statement& row) {
    const std::optional<EventKind> kind = EventKindFromName(row.Text(1));
    if (kind.has_value()) state->event_counts.push_back({row.Text(0), *kind, row.Uint(2)});
  });
  if (!status.ok() || event_index.empty()) return status;

  Statement figures(db,
                    "SELECT event_id, name, value FROM event_figures WHERE event_id IN ("
                    "  SELECT id FROM events ORDER BY id DESC LIMIT ?1)"
                    " ORDER BY event_id, position");
  figures.BindInt(1, Limit(limits.events));
  return ForEachRow(db, figures, [&](Statement& row) {
    auto it = event_index.find(row.Uint(0));
    if (it == event_index.end()) return;  // its event was skipped
    state->events[it->second].figures.emplace_back(row.Text(1), row.Double(2));
  });
}

}  // namespace

const TableCodec& EventsTable() {
  static const TableCodec* const kCodec = new TableCodec{
      {"CREATE TABLE events ("
       "  id INTEGER PRIMARY KEY, time REAL, kind TEXT NOT NULL, job TEXT NOT NULL,"
       "  generation INTEGER NOT NULL, rank INTEGER, node TEXT NOT NULL,"
       "  message TEXT NOT NULL)",
       "CREATE TABLE event_figures ("
       "  event_id INTEGER NOT NULL REFERENCES events (id) ON DELETE CASCADE,"
       "  position INTEGER NOT NULL, name TEXT NOT NULL, value REAL,"
       "  PRIMARY KEY (event_id, position)) WITHOUT ROWID"},
      {},
      Write,
      Read,
      // And their figures (ON DELETE CASCADE). The newest stays whatever its
      // age: the ids go on from it (a follower resumes by id), in this
      // store and in the shared state a new leader numbers on from.
      {"DELETE FROM events WHERE time < ?1 AND id < (SELECT max(id) FROM events)"},
  };
  return *kCodec;
}

}  // namespace store
}  // namespace trainsup
