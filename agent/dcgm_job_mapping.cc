#include "agent/dcgm_job_mapping.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace trainsup {
namespace {

std::string FileOf(const std::string& directory, int index) {
  return absl::StrCat(directory, "/", index);
}

}  // namespace

std::vector<int> JobGpuIndices(const std::optional<std::string>& visible,
                               const std::vector<GpuInfo>& gpus) {
  std::vector<int> indices;
  if (!visible) {
    for (const GpuInfo& gpu : gpus) {
      if (gpu.index >= 0) indices.push_back(gpu.index);
    }
    return indices;
  }
  for (absl::string_view entry : absl::StrSplit(*visible, ',', absl::SkipWhitespace())) {
    entry = absl::StripAsciiWhitespace(entry);
    int index = -1;
    if (absl::SimpleAtoi(entry, &index) && index >= 0) {
      indices.push_back(index);
      continue;
    }
    for (const GpuInfo& gpu : gpus) {  // a UUID (or its prefix, as CUDA allows)
      if (gpu.index >= 0 && !gpu.uuid.empty() && absl::StartsWith(gpu.uuid, entry)) {
        indices.push_back(gpu.index);
        break;
      }
    }
  }
  return indices;
}

absl::Status WriteJobMapping(const std::string& directory, const std::vector<int>& indices,
                             const std::string& job) {
  for (int index : indices) {
    const std::string path = FileOf(directory, index);
    const std::string temporary = path + ".trainsup-tmp";
    {
      std::ofstream out(temporary, std::ios::trunc);
      out << job << "\n";
      if (!out.flush()) {
        return absl::UnavailableError(absl::StrCat("cannot write ", temporary, ": ",
                                                   std::strerror(errno)));
      }
    }
    if (std::rename(temporary.c_str(), path.c_str()) != 0) {
      const int error = errno;
      std::remove(temporary.c_str());
      return absl::UnavailableError(absl::StrCat("cannot write ", path, ": ", std::strerror(error)));
    }
  }
  return absl::OkStatus();
}

void RemoveJobMapping(const std::string& directory, const std::vector<int>& indices,
                      const std::string& job) {
  for (int index : indices) {
    const std::string path = FileOf(directory, index);
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    if (absl::StripAsciiWhitespace(text.str()) == job) std::remove(path.c_str());
  }
}

}  // namespace trainsup
