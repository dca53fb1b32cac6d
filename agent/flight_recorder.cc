#include "agent/flight_recorder.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/format.h"

namespace trainsup {
// Helpers in a namespace of their own: the agent is a unity build, where
// anonymous namespaces of neighbouring files share one translation unit.
namespace flight_recorder_internal {
namespace {

// The opcodes read (Python's Lib/pickletools.py documents each). For a
// dump, torch's pickler writes PROTO 2 and then only those marked (T); the
// others are what either writes for other plain data, or Python's own
// pickler for the same (protocols 2-5), should a tool have loaded and saved
// a dump again.
enum Op : uint8_t {
  kProto = 0x80,            // (T) protocol version
  kFrame = 0x95,            // protocol 4 framing: a length, nothing to build
  kStop = '.',              // (T)
  kMark = '(',              // (T)
  kEmptyDict = '}',         // (T)
  kEmptyList = ']',         // (T)
  kEmptyTuple = ')',
  kSetItem = 's',
  kSetItems = 'u',          // (T)
  kAppend = 'a',
  kAppends = 'e',           // (T)
  kBinUnicode = 'X',        // (T) every string
  kShortBinUnicode = 0x8c,
  kBinUnicode8 = 0x8d,
  kBinInt = 'J',            // (T)
  kBinInt1 = 'K',           // (T)
  kBinInt2 = 'M',           // (T)
  kLong1 = 0x8a,            // (T) beyond 32 bits: 8 bytes
  kNewTrue = 0x88,          // (T)
  kNewFalse = 0x89,         // (T)
  kNone = 'N',              // (T)
  kBinFloat = 'G',          // (T)
  kTuple1 = 0x85,
  kTuple2 = 0x86,           // (T) an entry's process_group
  kTuple3 = 0x87,
  kTuple = 't',
  kMemoize = 0x94,
  kBinPut = 'q',            // (T) after every string, and every shared value
  kLongBinPut = 'r',        // (T)
  kBinGet = 'h',            // (T)
  kLongBinGet = 'j',        // (T)
};

// Opcodes that import or call something: named in the refusal.
const char* CodeOpcodeName(uint8_t op) {
  switch (op) {
    case 'c': return "GLOBAL";
    case 0x93: return "STACK_GLOBAL";
    case 'R': return "REDUCE";
    case 'i': return "INST";
    case 'o': return "OBJ";
    case 0x81: return "NEWOBJ";
    case 0x92: return "NEWOBJ_EX";
    case 'b': return "BUILD";
    case 'P': return "PERSID";
    case 'Q': return "BINPERSID";
    case 0x82: return "EXT1";
    case 0x83: return "EXT2";
    case 0x84: return "EXT4";
    default: return nullptr;
  }
}

enum class Kind : uint8_t { kNone, kBool, kInt, kFloat, kString, kTuple, kList, kDict };

struct Value {
  Kind kind = Kind::kNone;
  uint8_t depth = 0;       // 0 for a scalar, 1 + the deepest item for a container
  int64_t number = 0;      // kBool (0 or 1), kInt
  double real = 0;         // kFloat
  absl::string_view text;  // kString: a view of the dump's bytes
  std::vector<uint32_t> items;  // containers; a dict's: key, value, key, value, ...
};

// A pickle of plain data decoded into a tree of Values, one vector of them:
// the memo may share a value between containers (torch shares stack frames),
// so containers hold indices, and nothing walks the tree recursively (a
// crafted pickle can make a list hold itself).
class PickleDecoder {
 public:
  explicit PickleDecoder(absl::string_view bytes) : in_(bytes) {}
  PickleDecoder(const PickleDecoder&) = delete;
  PickleDecoder& operator=(const PickleDecoder&) = delete;

  // Runs to STOP; the index of the value it returns.
  absl::StatusOr<uint32_t> Decode();

  const Value& at(uint32_t index) const { return values_[index]; }

 private:
  absl::Status Step(uint8_t op);
  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("at byte ", op_pos_, ": ", what));
  }
  absl::Status Truncated() const { return Error("truncated"); }

  bool Take(size_t n, absl::string_view* out);
  template <typename T>
  bool TakeLittleEndian(size_t n, T* out);

  absl::StatusOr<uint32_t> NewValue(Kind kind);
  absl::Status Push(uint32_t index);
  absl::Status PushScalar(Kind kind, int64_t number);
  absl::Status Adopt(uint32_t parent, uint32_t child);
  // Values above the innermost MARK: all an opcode other than a MARK's own
  // may touch (Python's unpickler keeps them on a stack of their own).
  size_t Available() const { return stack_.size() - (marks_.empty() ? 0 : marks_.back()); }
  absl::StatusOr<size_t> PopMark();
  absl::Status Memo(uint64_t slot);
  absl::Status Recall(uint64_t slot);

  const absl::string_view in_;
  size_t pos_ = 0;
  size_t op_pos_ = 0;
  bool stopped_ = false;
  size_t items_ = 0;
  std::vector<Value> values_;
  std::vector<uint32_t> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, uint32_t> memo_;
};

bool PickleDecoder::Take(size_t n, absl::string_view* out) {
  if (in_.size() - pos_ < n) return false;
  *out = in_.substr(pos_, n);
  pos_ += n;
  return true;
}

template <typename T>
bool PickleDecoder::TakeLittleEndian(size_t n, T* out) {
  absl::string_view bytes;
  if (!Take(n, &bytes)) return false;
  uint64_t value = 0;
  for (size_t i = 0; i < n; ++i) value |= uint64_t{static_cast<uint8_t>(bytes[i])} << (8 * i);
  *out = static_cast<T>(value);
  return true;
}

absl::StatusOr<uint32_t> PickleDecoder::NewValue(Kind kind) {
  if (values_.size() >= kMaxPickleValues) {
    return Error(absl::StrCat("more than ", kMaxPickleValues, " values"));
  }
  values_.emplace_back();
  values_.back().kind = kind;
  if (kind == Kind::kTuple || kind == Kind::kList || kind == Kind::kDict) values_.back().depth = 1;
  return static_cast<uint32_t>(values_.size() - 1);
}

absl::Status PickleDecoder::Push(uint32_t index) {
  if (stack_.size() >= kMaxPickleItems) {
    return Error(absl::StrCat("more than ", kMaxPickleItems, " values on the stack"));
  }
  stack_.push_back(index);
  return absl::OkStatus();
}

absl::Status PickleDecoder::PushScalar(Kind kind, int64_t number) {
  absl::StatusOr<uint32_t> index = NewValue(kind);
  if (!index.ok()) return index.status();
  values_[*index].number = number;
  return Push(*index);
}

absl::Status PickleDecoder::Adopt(uint32_t parent, uint32_t child) {
  if (++items_ > kMaxPickleItems) {
    return Error(absl::StrCat("more than ", kMaxPickleItems, " items in containers"));
  }
  const int depth = values_[child].depth + 1;
  if (depth > kMaxPickleDepth) {
    return Error(absl::StrCat("nested deeper than ", kMaxPickleDepth));
  }
  Value& p = values_[parent];
  p.depth = static_cast<uint8_t>(std::max<int>(p.depth, depth));
  p.items.push_back(child);
  return absl::OkStatus();
}

absl::StatusOr<size_t> PickleDecoder::PopMark() {
  if (marks_.empty()) return Error("no MARK to end");
  const size_t start = marks_.back();
  marks_.pop_back();
  return start;
}

absl::Status PickleDecoder::Memo(uint64_t slot) {
  if (Available() == 0) return Error("nothing to memoize");
  if (memo_.size() >= kMaxPickleValues && memo_.find(slot) == memo_.end()) {
    return Error("memo too large");
  }
  memo_[slot] = stack_.back();
  return absl::OkStatus();
}

absl::Status PickleDecoder::Recall(uint64_t slot) {
  const auto it = memo_.find(slot);
  if (it == memo_.end()) return Error(absl::StrCat("memo slot ", slot, " was never set"));
  return Push(it->second);
}

absl::StatusOr<uint32_t> PickleDecoder::Decode() {
  if (in_.size() > kMaxFlightRecordBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("larger than ", kMaxFlightRecordBytes, " bytes: not read"));
  }
  while (!stopped_) {
    op_pos_ = pos_;
    absl::string_view op;
    if (!Take(1, &op)) return Error("truncated: no STOP");
    if (absl::Status s = Step(static_cast<uint8_t>(op[0])); !s.ok()) return s;
  }
  return stack_.back();
}

absl::Status PickleDecoder::Step(uint8_t op) {
  switch (op) {
    case kProto: {
      uint8_t version = 0;
      if (!TakeLittleEndian(1, &version)) return Truncated();
      if (op_pos_ != 0) return Error("PROTO after the start");
      if (version < 2 || version > 5) return Error(absl::StrCat("pickle protocol ", version));
      return absl::OkStatus();
    }
    case kFrame: {
      uint64_t length = 0;
      if (!TakeLittleEndian(8, &length)) return Truncated();
      if (length > in_.size() - pos_) return Truncated();
      return absl::OkStatus();
    }
    case kStop:
      if (!marks_.empty()) return Error("STOP inside a MARK");
      if (Available() == 0) return Error("STOP with nothing to return");
      stopped_ = true;
      return absl::OkStatus();
    case kMark:
      if (marks_.size() >= static_cast<size_t>(kMaxPickleDepth)) {
        return Error(absl::StrCat("more than ", kMaxPickleDepth, " MARKs open"));
      }
      marks_.push_back(stack_.size());
      return absl::OkStatus();
    case kEmptyDict:
    case kEmptyList:
    case kEmptyTuple: {
      const Kind kind =
          op == kEmptyDict ? Kind::kDict : op == kEmptyList ? Kind::kList : Kind::kTuple;
      absl::StatusOr<uint32_t> index = NewValue(kind);
      if (!index.ok()) return index.status();
      return Push(*index);
    }
    case kSetItem:
    case kAppend: {
      const size_t need = op == kSetItem ? 3 : 2;
      if (Available() < need) return Error("too few values for SETITEM or APPEND");
      const uint32_t target = stack_[stack_.size() - need];
      if (values_[target].kind != (op == kSetItem ? Kind::kDict : Kind::kList)) {
        return Error("SETITEM into a non-dict or APPEND to a non-list");
      }
      for (size_t i = stack_.size() - need + 1; i < stack_.size(); ++i) {
        if (absl::Status s = Adopt(target, stack_[i]); !s.ok()) return s;
      }
      stack_.resize(stack_.size() - need + 1);
      return absl::OkStatus();
    }
    case kSetItems:
    case kAppends: {
      absl::StatusOr<size_t> start = PopMark();
      if (!start.ok()) return start.status();
      // The container is below the MARK, and above the one before.
      if (*start <= (marks_.empty() ? 0 : marks_.back())) {
        return Error("SETITEMS or APPENDS with no container");
      }
      const uint32_t target = stack_[*start - 1];
      if (values_[target].kind != (op == kSetItems ? Kind::kDict : Kind::kList)) {
        return Error("SETITEMS into a non-dict or APPENDS to a non-list");
      }
      if (op == kSetItems && (stack_.size() - *start) % 2 != 0) {
        return Error("SETITEMS with a key and no value");
      }
      for (size_t i = *start; i < stack_.size(); ++i) {
        if (absl::Status s = Adopt(target, stack_[i]); !s.ok()) return s;
      }
      stack_.resize(*start);
      return absl::OkStatus();
    }
    case kBinUnicode:
    case kShortBinUnicode:
    case kBinUnicode8: {
      uint64_t length = 0;
      const size_t width = op == kShortBinUnicode ? 1 : op == kBinUnicode ? 4 : 8;
      if (!TakeLittleEndian(width, &length)) return Truncated();
      absl::string_view text;
      if (length > in_.size() - pos_ || !Take(length, &text)) return Truncated();
      absl::StatusOr<uint32_t> index = NewValue(Kind::kString);
      if (!index.ok()) return index.status();
      values_[*index].text = text;
      return Push(*index);
    }
    case kBinInt1:
    case kBinInt2: {
      uint16_t value = 0;
      if (!TakeLittleEndian(op == kBinInt1 ? 1 : 2, &value)) return Truncated();
      return PushScalar(Kind::kInt, value);
    }
    case kBinInt: {
      uint32_t value = 0;
      if (!TakeLittleEndian(4, &value)) return Truncated();
      return PushScalar(Kind::kInt, static_cast<int32_t>(value));
    }
    case kLong1: {
      uint8_t width = 0;
      if (!TakeLittleEndian(1, &width)) return Truncated();
      if (width > 8) return Error(absl::StrCat("an integer of ", width, " bytes"));
      uint64_t value = 0;
      if (!TakeLittleEndian(width, &value)) return Truncated();
      if (width > 0 && width < 8 && (value >> (8 * width - 1)) != 0) {
        value |= ~uint64_t{0} << (8 * width);  // two's complement: extend the sign
      }
      return PushScalar(Kind::kInt, static_cast<int64_t>(value));
    }
    case kNewTrue:
    case kNewFalse:
      return PushScalar(Kind::kBool, op == kNewTrue ? 1 : 0);
    case kNone:
      return PushScalar(Kind::kNone, 0);
    case kBinFloat: {
      absl::string_view bytes;
      if (!Take(8, &bytes)) return Truncated();
      uint64_t bits = 0;
      for (char c : bytes) bits = (bits << 8) | static_cast<uint8_t>(c);  // big-endian
      double real = 0;
      std::memcpy(&real, &bits, sizeof(real));
      absl::StatusOr<uint32_t> index = NewValue(Kind::kFloat);
      if (!index.ok()) return index.status();
      values_[*index].real = real;
      return Push(*index);
    }
    case kTuple1:
    case kTuple2:
    case kTuple3:
    case kTuple: {
      size_t start = 0;
      if (op == kTuple) {
        absl::StatusOr<size_t> mark = PopMark();
        if (!mark.ok()) return mark.status();
        start = *mark;
      } else {
        const size_t n = op - kTuple1 + 1;
        if (Available() < n) return Error("too few values for a tuple");
        start = stack_.size() - n;
      }
      absl::StatusOr<uint32_t> tuple = NewValue(Kind::kTuple);
      if (!tuple.ok()) return tuple.status();
      for (size_t i = start; i < stack_.size(); ++i) {
        if (absl::Status s = Adopt(*tuple, stack_[i]); !s.ok()) return s;
      }
      stack_.resize(start);
      return Push(*tuple);
    }
    case kMemoize:
      return Memo(memo_.size());
    case kBinPut:
    case kLongBinPut: {
      uint32_t slot = 0;
      if (!TakeLittleEndian(op == kBinPut ? 1 : 4, &slot)) return Truncated();
      return Memo(slot);
    }
    case kBinGet:
    case kLongBinGet: {
      uint32_t slot = 0;
      if (!TakeLittleEndian(op == kBinGet ? 1 : 4, &slot)) return Truncated();
      return Recall(slot);
    }
    default:
      if (const char* name = CodeOpcodeName(op)) {
        return Error(absl::StrCat(name, ": a dump that imports or calls code is not read"));
      }
      return Error(absl::StrFormat("opcode 0x%02x is not plain data", op));
  }
}

// --- The dump's meaning -----------------------------------------------------

constexpr size_t kMaxTextBytes = 128;       // a version, a group's name, an op's name
constexpr size_t kMaxEntryKeys = 256;       // torch writes 22
constexpr size_t kMaxShapes = 16;           // tensors kept per input or output list
constexpr size_t kMaxShapeDims = 16;
constexpr size_t kMaxRanksKept = 4 << 20;   // pg_config's ranks, all groups together
// The most bytes of pg_config's rank strings looked at, all groups together:
// the memo may give every group the same long string.
constexpr size_t kMaxRankBytesScanned = 2 * kMaxFlightRecordBytes;

// Valid UTF-8 of at most kMaxTextBytes; only the bytes that can be kept are
// looked at (a memo may hand the same long string to every entry).
std::string Clipped(absl::string_view text) {
  return ClipText(text.substr(0, kMaxTextBytes + 1), kMaxTextBytes);
}

// What one dump's groups add up to while the entries are read.
struct GroupState {
  GroupRecord record;
  bool has_p2p_entries = false;
  CollectiveProgress entry_collectives;
  CollectiveProgress entry_p2p;
  bool has_status = false;
  CollectiveProgress status;
};

class DumpReader {
 public:
  explicit DumpReader(const PickleDecoder& pickle) : pickle_(pickle) {}

  absl::StatusOr<FlightRecord> Read(uint32_t root);

 private:
  const Value* Find(const Value& dict, absl::string_view key) const;
  std::optional<absl::string_view> Text(const Value* v) const {
    if (v == nullptr || v->kind != Kind::kString) return std::nullopt;
    return v->text;
  }
  // An integer, or a decimal string of one (the JSON dump's pg_status).
  std::optional<int64_t> Number(const Value* v) const;
  const Value& At(uint32_t index) const { return pickle_.at(index); }

  absl::Status ReadConfig(const Value& config);
  absl::Status ReadEntry(size_t n, const Value& entry);
  absl::Status ReadStatus(const Value& status);
  std::vector<std::vector<int64_t>> Shapes(const Value& list) const;
  absl::StatusOr<std::vector<uint32_t>> Ranks(const Value& v);
  absl::StatusOr<GroupState*> Group(absl::string_view name);

  const PickleDecoder& pickle_;
  std::map<std::string, GroupState> groups_;  // by name
  std::map<int64_t, std::string> names_;      // pg_id -> name, from the entries
  size_t ranks_kept_ = 0;
  size_t rank_bytes_scanned_ = 0;
};

const Value* DumpReader::Find(const Value& dict, absl::string_view key) const {
  if (dict.kind != Kind::kDict) return nullptr;
  for (size_t i = 0; i + 1 < dict.items.size(); i += 2) {
    const Value& k = At(dict.items[i]);
    if (k.kind == Kind::kString && k.text == key) return &At(dict.items[i + 1]);
  }
  return nullptr;
}

std::optional<int64_t> DumpReader::Number(const Value* v) const {
  if (v == nullptr) return std::nullopt;
  if (v->kind == Kind::kInt) return v->number;
  int64_t n = 0;
  if (v->kind == Kind::kString && absl::SimpleAtoi(v->text, &n)) return n;
  return std::nullopt;
}

// Groups go by their names as kept (clipped): a long name costs its first
// bytes only, however many entries repeat it.
absl::StatusOr<GroupState*> DumpReader::Group(absl::string_view name) {
  std::string key = Clipped(name);
  auto it = groups_.find(key);
  if (it != groups_.end()) return &it->second;
  if (groups_.size() >= kMaxFlightRecordGroups) {
    return absl::InvalidArgumentError(
        absl::StrCat("more than ", kMaxFlightRecordGroups, " process groups"));
  }
  GroupState& g = groups_[key];
  g.record.name = std::move(key);
  return &g;
}

// "[0, 1, 2]" (torch writes the ranks as a string), or a list of numbers.
absl::StatusOr<std::vector<uint32_t>> DumpReader::Ranks(const Value& v) {
  std::vector<uint32_t> ranks;
  auto keep = [&](int64_t rank) -> absl::Status {
    if (rank < 0 || rank > INT32_MAX) return absl::InvalidArgumentError("a rank out of range");
    if (++ranks_kept_ > kMaxRanksKept) {
      return absl::InvalidArgumentError(absl::StrCat("more than ", kMaxRanksKept, " ranks"));
    }
    ranks.push_back(static_cast<uint32_t>(rank));
    return absl::OkStatus();
  };
  if (v.kind == Kind::kList || v.kind == Kind::kTuple) {
    for (uint32_t item : v.items) {
      const std::optional<int64_t> rank = Number(&At(item));
      if (!rank) return absl::InvalidArgumentError("a group's ranks: not numbers");
      if (absl::Status s = keep(*rank); !s.ok()) return s;
    }
    return ranks;
  }
  if (v.kind != Kind::kString) return absl::InvalidArgumentError("a group's ranks: not a list");
  rank_bytes_scanned_ += v.text.size();
  if (rank_bytes_scanned_ > kMaxRankBytesScanned) {
    return absl::InvalidArgumentError("a group's ranks: too long");
  }
  absl::string_view text = absl::StripAsciiWhitespace(v.text);
  if (!absl::ConsumePrefix(&text, "[") || !absl::ConsumeSuffix(&text, "]")) {
    return absl::InvalidArgumentError("a group's ranks: not \"[...]\"");
  }
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] == ',' || text[i] == ' ') {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < text.size() && absl::ascii_isdigit(static_cast<unsigned char>(text[j]))) ++j;
    int64_t rank = 0;
    if (j == i || j - i > 10 || !absl::SimpleAtoi(text.substr(i, j - i), &rank)) {
      return absl::InvalidArgumentError("a group's ranks: not numbers");
    }
    if (absl::Status s = keep(rank); !s.ok()) return s;
    i = j;
  }
  return ranks;
}

// pg_config: {name: {"name", "desc", "ranks"}}.
absl::Status DumpReader::ReadConfig(const Value& config) {
  if (config.kind != Kind::kDict) return absl::InvalidArgumentError("pg_config: not a dict");
  if (config.items.size() > 2 * kMaxFlightRecordGroups) {
    return absl::InvalidArgumentError(
        absl::StrCat("pg_config: more than ", kMaxFlightRecordGroups, " groups"));
  }
  for (size_t i = 0; i + 1 < config.items.size(); i += 2) {
    const std::optional<absl::string_view> name = Text(&At(config.items[i]));
    const Value& info = At(config.items[i + 1]);
    if (!name || info.kind != Kind::kDict || info.items.size() > 2 * kMaxEntryKeys) {
      return absl::InvalidArgumentError("pg_config: not {name: {...}}");
    }
    absl::StatusOr<GroupState*> group = Group(*name);
    if (!group.ok()) return group.status();
    if (const std::optional<absl::string_view> desc = Text(Find(info, "desc"))) {
      (*group)->record.desc = Clipped(*desc);
    }
    if (const Value* ranks = Find(info, "ranks")) {
      absl::StatusOr<std::vector<uint32_t>> parsed = Ranks(*ranks);
      if (!parsed.ok()) return parsed.status();
      (*group)->record.ranks = std::move(*parsed);
    }
  }
  return absl::OkStatus();
}

std::vector<std::vector<int64_t>> DumpReader::Shapes(const Value& list) const {
  std::vector<std::vector<int64_t>> shapes;
  if (list.kind != Kind::kList && list.kind != Kind::kTuple) return shapes;
  for (size_t i = 0; i < list.items.size() && i < kMaxShapes; ++i) {
    const Value& shape = At(list.items[i]);
    if (shape.kind != Kind::kList && shape.kind != Kind::kTuple) continue;
    std::vector<int64_t> dims;
    for (size_t d = 0; d < shape.items.size() && d < kMaxShapeDims; ++d) {
      if (const std::optional<int64_t> n = Number(&At(shape.items[d]))) dims.push_back(*n);
    }
    shapes.push_back(std::move(dims));
  }
  return shapes;
}

CollectiveState StateOf(std::optional<absl::string_view> state) {
  if (state == "scheduled") return CollectiveState::kScheduled;
  if (state == "started") return CollectiveState::kStarted;
  if (state == "completed") return CollectiveState::kCompleted;
  return CollectiveState::kUnknown;
}

// The peer of "send 1->2" (2) or "recv 3<-0" (0): the number after the arrow.
int32_t PeerOf(absl::string_view op) {
  size_t arrow = op.find("->");
  if (arrow == absl::string_view::npos) arrow = op.find("<-");
  if (arrow == absl::string_view::npos) return -1;
  int32_t peer = -1;
  if (!absl::SimpleAtoi(op.substr(arrow + 2), &peer) || peer < 0) return -1;
  return peer;
}

void Advance(const CollectiveOp& op, CollectiveProgress* progress) {
  progress->last_enqueued = std::max(progress->last_enqueued, op.seq);
  if (op.state == CollectiveState::kStarted || op.state == CollectiveState::kCompleted) {
    progress->last_started = std::max(progress->last_started, op.seq);
  }
  if (op.state == CollectiveState::kCompleted) {
    progress->last_completed = std::max(progress->last_completed, op.seq);
  }
}

void Keep(CollectiveOp op, std::vector<CollectiveOp>* ops) {
  if (ops->size() == kFlightRecordOpsKept) ops->erase(ops->begin());
  ops->push_back(std::move(op));
}

absl::Status DumpReader::ReadEntry(size_t n, const Value& entry) {
  auto refuse = [n](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("entry ", n, ": ", what));
  };
  if (entry.kind != Kind::kDict) return refuse("not a dict");
  if (entry.items.size() > 2 * kMaxEntryKeys) return refuse("too many keys");
  // One pass over the keys: an entry may be shared by the memo many times.
  const Value* pg_id = nullptr;
  const Value* process_group = nullptr;
  const Value* profiling_name = nullptr;
  const Value* collective_seq_id = nullptr;
  const Value* p2p_seq_id = nullptr;
  const Value* is_p2p = nullptr;
  const Value* state = nullptr;
  const Value* retired = nullptr;
  const Value* input_sizes = nullptr;
  const Value* output_sizes = nullptr;
  for (size_t i = 0; i + 1 < entry.items.size(); i += 2) {
    const Value& key = At(entry.items[i]);
    if (key.kind != Kind::kString) continue;
    const Value* value = &At(entry.items[i + 1]);
    const absl::string_view k = key.text;
    if (k == "pg_id") pg_id = value;
    else if (k == "process_group") process_group = value;
    else if (k == "profiling_name") profiling_name = value;
    else if (k == "collective_seq_id") collective_seq_id = value;
    else if (k == "p2p_seq_id") p2p_seq_id = value;
    else if (k == "is_p2p") is_p2p = value;
    else if (k == "state") state = value;
    else if (k == "retired") retired = value;
    else if (k == "input_sizes") input_sizes = value;
    else if (k == "output_sizes") output_sizes = value;
  }
  const std::optional<int64_t> id = Number(pg_id);
  if (!id) return refuse("no pg_id");
  if (process_group == nullptr ||
      (process_group->kind != Kind::kTuple && process_group->kind != Kind::kList) ||
      process_group->items.size() != 2) {
    return refuse("no process_group (name, desc)");
  }
  const std::optional<absl::string_view> name = Text(&At(process_group->items[0]));
  const std::optional<absl::string_view> desc = Text(&At(process_group->items[1]));
  if (!name || !desc) return refuse("process_group is not (name, desc)");
  const std::optional<absl::string_view> profiling = Text(profiling_name);
  if (!profiling) return refuse("no profiling_name");

  CollectiveOp op;
  const size_t colon = profiling->find(':');
  op.op = Clipped(colon == absl::string_view::npos ? *profiling : profiling->substr(colon + 1));
  if (is_p2p != nullptr && is_p2p->kind == Kind::kBool) {
    op.p2p = is_p2p->number != 0;
  } else {  // before is_p2p: a send or a receive by its name
    op.p2p = absl::StartsWith(op.op, "send ") || absl::StartsWith(op.op, "recv ");
  }
  const std::optional<int64_t> seq = Number(op.p2p ? p2p_seq_id : collective_seq_id);
  if (!Number(collective_seq_id)) return refuse("no collective_seq_id");
  if (!seq) return refuse("a send or receive without p2p_seq_id");
  op.seq = *seq;
  if (op.p2p) op.peer = PeerOf(op.op);
  op.state = StateOf(Text(state));
  op.retired = retired != nullptr && retired->kind == Kind::kBool && retired->number != 0;
  if (input_sizes != nullptr) op.input_sizes = Shapes(*input_sizes);
  if (output_sizes != nullptr) op.output_sizes = Shapes(*output_sizes);

  absl::StatusOr<GroupState*> group = Group(*name);
  if (!group.ok()) return group.status();
  GroupState& g = **group;
  if (g.record.pg_id < 0) g.record.pg_id = *id;
  if (g.record.desc.empty()) g.record.desc = Clipped(*desc);
  names_.emplace(*id, g.record.name);
  if (op.p2p) {
    g.has_p2p_entries = true;
    Advance(op, &g.entry_p2p);
    Keep(std::move(op), &g.record.last_p2p);
  } else {
    Advance(op, &g.entry_collectives);
    Keep(std::move(op), &g.record.last_collectives);
  }
  return absl::OkStatus();
}

// pg_status: {"<pg_id>": {"last_enqueued_collective", "last_started_collective",
// "last_completed_collective"}}. Keyed by the rank's own number of the group:
// the entries say which name it has; without entries, the number is taken
// as the name (the default group is 0 and "0").
absl::Status DumpReader::ReadStatus(const Value& status) {
  if (status.kind != Kind::kDict) return absl::InvalidArgumentError("pg_status: not a dict");
  if (status.items.size() > 2 * kMaxFlightRecordGroups) {
    return absl::InvalidArgumentError(
        absl::StrCat("pg_status: more than ", kMaxFlightRecordGroups, " groups"));
  }
  for (size_t i = 0; i + 1 < status.items.size(); i += 2) {
    const std::optional<int64_t> id = Number(&At(status.items[i]));
    const Value& s = At(status.items[i + 1]);
    if (!id || s.kind != Kind::kDict || s.items.size() > 2 * kMaxEntryKeys) {
      return absl::InvalidArgumentError("pg_status: not {pg_id: {...}}");
    }
    const auto named = names_.find(*id);
    absl::StatusOr<GroupState*> group =
        Group(named != names_.end() ? named->second : absl::StrCat(*id));
    if (!group.ok()) return group.status();
    GroupState& g = **group;
    if (g.record.pg_id < 0) g.record.pg_id = *id;
    g.has_status = true;
    g.status.last_enqueued = Number(Find(s, "last_enqueued_collective")).value_or(-1);
    g.status.last_started = Number(Find(s, "last_started_collective")).value_or(-1);
    g.status.last_completed = Number(Find(s, "last_completed_collective")).value_or(-1);
  }
  return absl::OkStatus();
}

absl::StatusOr<FlightRecord> DumpReader::Read(uint32_t root_index) {
  const Value& root = At(root_index);
  if (root.kind != Kind::kDict) return absl::InvalidArgumentError("not a dict");
  FlightRecord record;
  const std::optional<absl::string_view> version = Text(Find(root, "version"));
  if (!version) return absl::InvalidArgumentError("no \"version\": not a flight recorder dump");
  record.version = Clipped(*version);
  // A new major version changes fields that exist (torch's rule): refused
  // rather than misread.
  if (!absl::StartsWith(*version, "2.")) {
    return absl::InvalidArgumentError(
        absl::StrCat("version ", record.version, ": this reader knows 2.x"));
  }
  if (const Value* rank = Find(root, "rank")) {
    const std::optional<int64_t> r = Number(rank);
    if (r && *r >= 0 && *r <= INT32_MAX) record.rank = static_cast<uint32_t>(*r);
  }
  if (const Value* config = Find(root, "pg_config")) {
    if (absl::Status s = ReadConfig(*config); !s.ok()) return s;
  }
  if (const Value* entries = Find(root, "entries")) {
    if (entries->kind != Kind::kList) return absl::InvalidArgumentError("entries: not a list");
    const size_t n = entries->items.size();
    const size_t first = n > kMaxFlightRecordEntries ? n - kMaxFlightRecordEntries : 0;
    for (size_t i = first; i < n; ++i) {
      if (absl::Status s = ReadEntry(i, At(entries->items[i])); !s.ok()) return s;
    }
    record.entries = n - first;
  }
  if (const Value* status = Find(root, "pg_status")) {
    if (absl::Status s = ReadStatus(*status); !s.ok()) return s;
  }
  for (auto& [name, g] : groups_) {
    GroupRecord& out = g.record;
    out.collectives = g.entry_collectives;
    out.p2p = g.entry_p2p;
    // pg_status numbers the last work with its own numbering, a send's p2p
    // count as well as a collective's: it counts only without sends.
    if (g.has_status && !g.has_p2p_entries) {
      out.from_pg_status = true;
      out.collectives.last_enqueued =
          std::max(out.collectives.last_enqueued, g.status.last_enqueued);
      out.collectives.last_started = std::max(out.collectives.last_started, g.status.last_started);
      out.collectives.last_completed =
          std::max(out.collectives.last_completed, g.status.last_completed);
    }
    record.groups.push_back(std::move(out));
  }
  return record;
}

}  // namespace
}  // namespace flight_recorder_internal

absl::StatusOr<FlightRecord> ReadFlightRecord(absl::string_view bytes) {
  using flight_recorder_internal::DumpReader;
  using flight_recorder_internal::PickleDecoder;
  PickleDecoder pickle(bytes);
  absl::StatusOr<uint32_t> root = pickle.Decode();
  if (!root.ok()) return root.status();
  return DumpReader(pickle).Read(*root);
}

std::optional<uint32_t> FlightRecordRankFromFileName(absl::string_view file_name) {
  size_t start = file_name.size();
  while (start > 0 && absl::ascii_isdigit(static_cast<unsigned char>(file_name[start - 1]))) {
    --start;
  }
  const absl::string_view digits = file_name.substr(start);
  uint32_t rank = 0;
  if (digits.empty() || digits.size() > 9 || !absl::SimpleAtoi(digits, &rank)) return std::nullopt;
  return rank;
}

}  // namespace trainsup
