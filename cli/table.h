#ifndef TRAINSUP_CLI_TABLE_H_
#define TRAINSUP_CLI_TABLE_H_

#include <cstddef>
#include <string>
#include <vector>

namespace trainsup {

// A plain-text table, columns padded to their widest cell, kubectl style:
// upper-case headers, two spaces between columns, no borders.
class Table {
 public:
  explicit Table(std::vector<std::string> headers) : headers_(std::move(headers)) {}
  void AddRow(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  std::string Render() const;
  // Like Render, but lines no wider than `max_width`: columns are left out,
  // in the order `drop_first` names them (indexes, least important first),
  // until the rest fit; the last line may still be cut by the caller.
  std::string RenderWithin(size_t max_width, const std::vector<size_t>& drop_first) const;

 private:
  std::vector<size_t> Widths() const;  // of each column, header included

  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace trainsup

#endif  // TRAINSUP_CLI_TABLE_H_
