#include "daemon/ha/etcd_state_log.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"

namespace trainsup {
namespace {

// How many keys a range asks for at a time: each value is at most a part
// (1 MiB), and the channel takes answers of up to 64 MiB.
constexpr int64_t kRangePage = 16;

absl::Status FromGrpc(const grpc::Status& s, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat("etcd ", what, ": ", s.error_message()));
}

etcdserverpb::RequestOp PutOp(std::string key, absl::string_view value) {
  etcdserverpb::RequestOp op;
  op.mutable_request_put()->set_key(std::move(key));
  op.mutable_request_put()->set_value(std::string(value));
  return op;
}

etcdserverpb::RequestOp DeleteOp(std::string from, std::string to) {
  etcdserverpb::RequestOp op;
  op.mutable_request_delete_range()->set_key(std::move(from));
  op.mutable_request_delete_range()->set_range_end(std::move(to));
  return op;
}

}  // namespace

EtcdStateLog::EtcdStateLog(std::shared_ptr<grpc::Channel> channel, Options options,
                           std::function<FencingToken()> token)
    : options_(std::move(options)),
      keys_(options_.key_prefix),
      kv_(etcdserverpb::KV::NewStub(std::move(channel))),
      token_(std::move(token)) {}

std::chrono::system_clock::time_point EtcdStateLog::Deadline() const {
  return std::chrono::system_clock::now() + absl::ToChronoMilliseconds(options_.call_timeout);
}

absl::StatusOr<FencingToken> EtcdStateLog::Token() {
  FencingToken token = token_();
  if (token.epoch == 0 || token.key.empty()) {
    ++refused_;
    return absl::FailedPreconditionError("fenced: this instance is not the elected leader");
  }
  return token;
}

absl::Status EtcdStateLog::FencedTxn(const FencingToken& token,
                                     std::vector<etcdserverpb::RequestOp> ops) {
  etcdserverpb::TxnRequest txn;
  etcdserverpb::Compare* held = txn.add_compare();
  held->set_key(token.key);
  held->set_target(etcdserverpb::Compare::CREATE);
  held->set_result(etcdserverpb::Compare::EQUAL);
  held->set_create_revision(token.epoch);
  for (etcdserverpb::RequestOp& op : ops) *txn.add_success() = std::move(op);
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  etcdserverpb::TxnResponse response;
  grpc::Status s = kv_->Txn(&context, txn, &response);
  if (!s.ok()) {
    ++unavailable_;
    absl::Status status = FromGrpc(s, "txn");
    // A request etcd refuses as such is not etcd being away.
    if (absl::IsInvalidArgument(status) || absl::IsResourceExhausted(status)) {
      return absl::InternalError(status.message());
    }
    return status;
  }
  if (!response.succeeded()) {
    ++refused_;
    return absl::FailedPreconditionError(absl::StrCat(
        "fenced: etcd refused the write: election key ", token.key, " of epoch ", token.epoch,
        " is no longer held (another instance leads)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> EtcdStateLog::WriteParts(const FencingToken& token, absl::string_view kind,
                                                uint64_t seq, absl::string_view blob) {
  const std::vector<absl::string_view> parts = SplitParts(blob, options_.max_part_bytes);
  for (size_t i = 0; i < parts.size(); ++i) {
    std::vector<etcdserverpb::RequestOp> ops;
    ops.push_back(PutOp(keys_.Part(kind, seq, i), parts[i]));
    if (absl::Status s = FencedTxn(token, std::move(ops)); !s.ok()) return s;
  }
  return parts.size();
}

absl::Status EtcdStateLog::Append(const std::string& changes) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<FencingToken> token = Token();
  if (!token.ok()) return token.status();
  std::vector<etcdserverpb::RequestOp> ops;
  if (!changes.empty()) {
    const uint64_t seq = next_seq_;
    if (changes.size() + 1 <= options_.max_part_bytes) {
      ops.push_back(PutOp(keys_.Log(seq), InlineEntry(changes)));
    } else {
      // Too big for one request: the parts first, then the entry that
      // names them (the commit: a crash between leaves unnamed parts,
      // overwritten by the next entry of that seq or deleted with the log).
      absl::StatusOr<size_t> parts = WriteParts(*token, "part", seq, changes);
      if (!parts.ok()) return parts.status();
      ops.push_back(PutOp(keys_.Log(seq), PartsEntry(*parts)));
    }
  }
  if (absl::Status s = FencedTxn(*token, std::move(ops)); !s.ok()) return s;
  if (!changes.empty()) {
    ++next_seq_;
    ++since_snapshot_entries_;
    since_snapshot_bytes_ += changes.size();
    ++appended_;
  }
  return absl::OkStatus();
}

bool EtcdStateLog::CompactionDue() const {
  absl::MutexLock lock(&mu_);
  return ShouldCompact(options_.compaction, since_snapshot_entries_, since_snapshot_bytes_);
}

absl::Status EtcdStateLog::Compact(const std::string& snapshot) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<FencingToken> token = Token();
  if (!token.ok()) return token.status();
  const uint64_t covers = next_seq_ - 1;
  absl::StatusOr<size_t> parts = WriteParts(*token, "snap", covers, snapshot);
  if (!parts.ok()) return parts.status();
  // One transaction: the new head, and everything it covers gone (the log
  // up to it, its parts, older snapshots). Four operations.
  std::vector<etcdserverpb::RequestOp> ops;
  ops.push_back(PutOp(keys_.Head(), HeadValue({covers, *parts})));
  ops.push_back(DeleteOp(keys_.LogPrefix(), keys_.Log(covers + 1)));
  ops.push_back(DeleteOp(keys_.KindPrefix("part"), keys_.PartsPrefix("part", covers + 1)));
  ops.push_back(DeleteOp(keys_.KindPrefix("snap"), keys_.PartsPrefix("snap", covers)));
  if (absl::Status s = FencedTxn(*token, std::move(ops)); !s.ok()) return s;
  since_snapshot_entries_ = 0;
  since_snapshot_bytes_ = 0;
  ++compactions_;
  return absl::OkStatus();
}

absl::Status EtcdStateLog::RangePrefix(const std::string& prefix, int64_t* revision,
                                       std::vector<std::pair<std::string, std::string>>* kvs) {
  const std::string end = PrefixEnd(prefix);
  std::string from = prefix;
  for (;;) {
    etcdserverpb::RangeRequest request;
    request.set_key(from);
    request.set_range_end(end);
    request.set_limit(kRangePage);
    request.set_revision(*revision);
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    etcdserverpb::RangeResponse response;
    grpc::Status s = kv_->Range(&context, request, &response);
    if (!s.ok()) return FromGrpc(s, "range");
    // Every page at the first one's revision: one consistent view.
    if (*revision == 0) *revision = response.header().revision();
    for (const mvccpb::KeyValue& kv : response.kvs()) kvs->emplace_back(kv.key(), kv.value());
    if (!response.more() || response.kvs_size() == 0) return absl::OkStatus();
    from = response.kvs(response.kvs_size() - 1).key() + std::string(1, '\0');
  }
}

absl::StatusOr<std::string> EtcdStateLog::ReadParts(absl::string_view kind, uint64_t seq,
                                                    size_t parts, int64_t* revision) {
  std::vector<std::pair<std::string, std::string>> kvs;
  if (absl::Status s = RangePrefix(keys_.PartsPrefix(kind, seq), revision, &kvs); !s.ok()) {
    return s;
  }
  if (kvs.size() < parts) {
    return absl::DataLossError(absl::StrCat("shared state: ", kind, " ", seq, " has ", kvs.size(),
                                            " of its ", parts, " parts in etcd"));
  }
  std::string blob;
  for (size_t i = 0; i < parts; ++i) blob += kvs[i].second;
  return blob;
}

absl::StatusOr<SharedLog::Loaded> EtcdStateLog::Load() {
  absl::MutexLock lock(&mu_);
  int64_t revision = 0;
  Loaded loaded;
  std::vector<std::pair<std::string, std::string>> head;
  // The head's own key only: "snapshot" is a prefix of no other key.
  if (absl::Status s = RangePrefix(keys_.Head(), &revision, &head); !s.ok()) return s;
  uint64_t covers = 0;
  for (const auto& [key, value] : head) {
    if (key != keys_.Head()) continue;
    absl::StatusOr<SnapshotHead> parsed = ParseHead(value);
    if (!parsed.ok()) return parsed.status();
    covers = parsed->seq;
    absl::StatusOr<std::string> snapshot = ReadParts("snap", covers, parsed->parts, &revision);
    if (!snapshot.ok()) return snapshot.status();
    loaded.snapshot = *std::move(snapshot);
  }
  std::vector<std::pair<std::string, std::string>> log;
  if (absl::Status s = RangePrefix(keys_.LogPrefix(), &revision, &log); !s.ok()) return s;
  uint64_t expect = covers + 1;
  for (const auto& [key, value] : log) {
    const std::optional<uint64_t> seq = keys_.LogSeq(key);
    if (!seq.has_value() || *seq < expect) continue;  // covered by the snapshot
    if (*seq != expect) {
      return absl::DataLossError(absl::StrCat("shared state: log entry ", expect,
                                              " is missing in etcd (the next is ", *seq, ")"));
    }
    absl::StatusOr<LogEntry> entry = ParseLogEntry(value);
    if (!entry.ok()) return entry.status();
    if (entry->changes.has_value()) {
      loaded.entries.push_back(*std::move(entry->changes));
    } else {
      absl::StatusOr<std::string> changes = ReadParts("part", *seq, entry->parts, &revision);
      if (!changes.ok()) return changes.status();
      loaded.entries.push_back(*std::move(changes));
    }
    ++expect;
  }
  next_seq_ = expect;
  since_snapshot_entries_ = loaded.entries.size();
  since_snapshot_bytes_ = 0;
  for (const std::string& e : loaded.entries) since_snapshot_bytes_ += e.size();
  return loaded;
}

}  // namespace trainsup
