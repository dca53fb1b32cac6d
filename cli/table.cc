#include "cli/table.h"

#include <algorithm>

namespace trainsup {

std::vector<size_t> Table::Widths() const {
  std::vector<size_t> widths(headers_.size(), 0);
  auto widen = [&](const std::vector<std::string>& row) {
    for (size_t i = 0; i < row.size() && i < widths.size(); ++i) {
      widths[i] = std::max(widths[i], row[i].size());
    }
  };
  widen(headers_);
  for (const auto& row : rows_) widen(row);
  return widths;
}

std::string Table::RenderWithin(size_t max_width, const std::vector<size_t>& drop_first) const {
  const std::vector<size_t> widths = Widths();
  std::vector<bool> kept(headers_.size(), true);
  auto width = [&] {
    size_t total = 0;
    size_t shown = 0;
    for (size_t i = 0; i < widths.size(); ++i) {
      if (!kept[i]) continue;
      total += widths[i];
      ++shown;
    }
    return total + (shown > 0 ? 2 * (shown - 1) : 0);
  };
  for (size_t i : drop_first) {
    if (width() <= max_width) break;
    if (i < kept.size()) kept[i] = false;
  }
  auto keep = [&](const std::vector<std::string>& row) {
    std::vector<std::string> out;
    for (size_t i = 0; i < kept.size(); ++i) {
      if (kept[i]) out.push_back(i < row.size() ? row[i] : "");
    }
    return out;
  };
  Table narrow(keep(headers_));
  for (const auto& row : rows_) narrow.AddRow(keep(row));
  return narrow.Render();
}

std::string Table::Render() const {
  const std::vector<size_t> widths = Widths();
  std::string out;
  auto emit = [&](const std::vector<std::string>& row) {
    std::string line;
    for (size_t i = 0; i < widths.size(); ++i) {
      const std::string cell = i < row.size() ? row[i] : "";
      line += cell;
      if (i + 1 < widths.size()) line += std::string(widths[i] - cell.size() + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  };
  emit(headers_);
  for (const auto& row : rows_) emit(row);
  return out;
}

}  // namespace trainsup
