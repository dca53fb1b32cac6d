#include "daemon/store/sqlite.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace trainsup {
namespace store {

absl::Status SqliteStatus(const std::string& path, sqlite3* handle, int rc,
                          absl::string_view doing) {
  const std::string message = handle != nullptr ? sqlite3_errmsg(handle) : sqlite3_errstr(rc);
  switch (rc & 0xff) {
    case SQLITE_BUSY:
      return absl::UnavailableError(
          absl::StrCat("state database ", path,
                       " is locked by another process (is another trainsupd running on it?)"));
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT:
      return absl::DataLossError(absl::StrCat("state database ", path,
                                              " is corrupt or not a trainsup database: ", message));
    case SQLITE_CONSTRAINT:
      return absl::InvalidArgumentError(
          absl::StrCat("state database ", path, ": ", doing, " failed: ", message));
    case SQLITE_FULL:
      return absl::ResourceExhaustedError(
          absl::StrCat("state database ", path, ": ", doing, " failed: ", message));
    case SQLITE_CANTOPEN:
    case SQLITE_IOERR:
    case SQLITE_PERM:
    case SQLITE_READONLY: {
      const int error_number = handle != nullptr ? sqlite3_system_errno(handle) : 0;
      const std::string text =
          absl::StrCat("state database ", path, ": ", doing, " failed: ", message);
      if (error_number != 0) return absl::ErrnoToStatus(error_number, text);
      return absl::UnavailableError(text);
    }
    default:
      return absl::InternalError(
          absl::StrCat("state database ", path, ": ", doing, " failed: ", message));
  }
}

// Whole and fractional seconds are converted apart, as
// absl::ToDoubleSeconds(t - absl::UnixEpoch()) rounds the count of
// quarter-nanoseconds (to 256ns) before dividing.
double TimeToUnixSeconds(absl::Time time) {
  if (time == absl::InfiniteFuture()) return std::numeric_limits<double>::infinity();
  const int64_t whole = absl::ToUnixSeconds(time);  // rounds down
  return static_cast<double>(whole) + absl::ToDoubleSeconds(time - absl::FromUnixSeconds(whole));
}

absl::Time UnixSecondsToTime(double seconds) {
  if (!(std::fabs(seconds) < 1e15)) {
    return seconds > 0 ? absl::InfiniteFuture() : absl::InfinitePast();
  }
  const double whole = std::floor(seconds);
  return absl::FromUnixSeconds(static_cast<int64_t>(whole)) + absl::Seconds(seconds - whole);
}

std::string JoinSeconds(const std::vector<double>& values) {
  std::string out;
  for (double v : values) absl::StrAppend(&out, out.empty() ? "" : " ", absl::StrFormat("%.17g", v));
  return out;
}

std::vector<double> SplitSeconds(absl::string_view text) {
  std::vector<double> out;
  for (absl::string_view item : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    double v = 0;
    if (absl::SimpleAtod(item, &v) && std::isfinite(v)) out.push_back(v);
  }
  return out;
}

int64_t Limit(size_t max) {
  return static_cast<int64_t>(std::min<uint64_t>(max, std::numeric_limits<int64_t>::max()));
}

Statement::Statement(const Db& db, absl::string_view sql) : db_(db) {
  rc_ = sqlite3_prepare_v2(db.handle, sql.data(), static_cast<int>(sql.size()), &stmt_, nullptr);
}

void Statement::BindText(int i, absl::string_view text) {
  if (rc_ != SQLITE_OK) return;
  if (text.size() > static_cast<size_t>(INT_MAX)) {
    rc_ = SQLITE_TOOBIG;
    return;
  }
  // A null data pointer would bind NULL, not "".
  rc_ = sqlite3_bind_text(stmt_, i, text.empty() ? "" : text.data(), static_cast<int>(text.size()),
                          SQLITE_TRANSIENT);
}

void Statement::BindDouble(int i, double value) {
  if (std::isnan(value)) return BindNull(i);  // what SQLite would store anyway
  if (rc_ == SQLITE_OK) rc_ = sqlite3_bind_double(stmt_, i, value);
}

void Statement::BindTime(int i, absl::Time time) {
  if (time == absl::InfinitePast()) return BindNull(i);
  BindDouble(i, TimeToUnixSeconds(time));
}

absl::Status Statement::Run(absl::string_view doing) {
  int rc = Step();
  if (rc == SQLITE_DONE) {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
    return absl::OkStatus();
  }
  if (rc == SQLITE_ROW) rc = SQLITE_MISUSE;  // not a statement that returns no rows
  return SqliteStatus(db_, rc, doing);
}

double Statement::Double(int c) {
  return IsNull(c) ? std::numeric_limits<double>::quiet_NaN() : sqlite3_column_double(stmt_, c);
}

std::string Statement::Text(int c) {
  const unsigned char* text = sqlite3_column_text(stmt_, c);
  if (text == nullptr) return "";
  return std::string(reinterpret_cast<const char*>(text), sqlite3_column_bytes(stmt_, c));
}

absl::Time Statement::Time(int c) {
  if (IsNull(c)) return absl::InfinitePast();
  return UnixSecondsToTime(sqlite3_column_double(stmt_, c));
}

std::optional<uint32_t> Statement::Rank(int c) {
  if (IsNull(c)) return std::nullopt;
  return static_cast<uint32_t>(Int(c));
}

absl::Status Exec(const Db& db, const char* sql, absl::string_view doing) {
  const int rc = sqlite3_exec(db.handle, sql, nullptr, nullptr, nullptr);
  return rc == SQLITE_OK ? absl::OkStatus() : SqliteStatus(db, rc, doing);
}

}  // namespace store
}  // namespace trainsup
