#ifndef TRAINSUP_CLI_TABLE_H_
#define TRAINSUP_CLI_TABLE_H_

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

 private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace trainsup

#endif  // TRAINSUP_CLI_TABLE_H_
