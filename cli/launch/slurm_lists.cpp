#include "launch/slurm_lists.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "launch/environment_variables.h"
#include "strata/error.h"

namespace strata::cli::detail {

std::vector<int> taskCounts(const char* name, const std::string& value) {
  std::vector<int> counts;
  std::size_t at = 0;
  while (at <= value.size()) {
    const std::size_t comma = std::min(value.find(',', at), value.size());
    const std::string item = value.substr(at, comma - at);
    const std::size_t paren = item.find("(x");
    const int tasks = positiveVariable(name, paren == std::string::npos ? item : item.substr(0, paren));
    int repeat = 1;
    if (paren != std::string::npos) {
      if (item.back() != ')') {
        fail("environment variable {}='{}' is not a Slurm task count list like 2(x3),1", name, value);
      }
      repeat = positiveVariable(name, item.substr(paren + 2, item.size() - paren - 3));
    }
    if (counts.size() + static_cast<std::size_t>(repeat) > kMaxSlurmList) {
      fail("environment variable {}='{}' lists more than {} nodes", name, value, kMaxSlurmList);
    }
    counts.insert(counts.end(), static_cast<std::size_t>(repeat), tasks);
    at = comma + 1;
  }
  return counts;
}

int tasksOnNode(const char* name, const std::string& value, int nodeId) {
  const std::vector<int> counts = taskCounts(name, value);
  if (nodeId >= static_cast<int>(counts.size())) {
    fail("environment variable {}='{}' lists no tasks for node {}", name, value, nodeId);
  }
  return counts[static_cast<std::size_t>(nodeId)];
}

std::vector<int> taskIds(const char* name, const std::string& value) {
  std::vector<int> ids;
  std::size_t at = 0;
  while (at <= value.size()) {
    const std::size_t comma = std::min(value.find(',', at), value.size());
    ids.push_back(nonNegativeVariable(name, value.substr(at, comma - at)));
    at = comma + 1;
  }
  return ids;
}

std::string firstHost(const std::string& nodeList) {
  // The whole first name expanded: "n[1-2]-ib[01]" starts with n1-ib01, not n1.
  const std::vector<std::string> hosts = expandHostList(nodeList);
  if (hosts.empty()) {
    fail("Slurm node list '{}' names no host", nodeList);
  }
  return hosts.front();
}

// One name of a host list with its bracket groups expanded: "n[1-2]-ib[01,03]" -> n1-ib01, n1-ib03, n2-ib01, ...
void expandHostName(const std::string& list, const std::string& name, std::vector<std::string>& out) {
  const std::size_t open = name.find('[');
  if (open == std::string::npos) {
    out.push_back(name);
    return;
  }
  const std::size_t close = name.find(']', open);
  if (close == std::string::npos) {
    fail("Slurm node list '{}': '[' without ']' in '{}'", list, name);
  }
  std::vector<std::string> rests;
  expandHostName(list, name.substr(close + 1), rests);
  const std::string ranges = name.substr(open + 1, close - open - 1);
  std::size_t at = 0;
  while (at <= ranges.size()) {
    const std::size_t comma = std::min(ranges.find(',', at), ranges.size());
    const std::string range = ranges.substr(at, comma - at);
    const std::size_t dash = range.find('-');
    const std::string low = range.substr(0, dash);
    const std::string high = dash == std::string::npos ? low : range.substr(dash + 1);
    const auto number = [&](const std::string& text) {
      int value = 0;
      const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
      if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || value < 0) {
        fail("Slurm node list '{}': '{}' is not a range of host numbers like 03-06", list, range);
      }
      return value;
    };
    const int first = number(low);
    const int last = number(high);
    if (last < first || out.size() + static_cast<std::size_t>(last - first + 1) * rests.size() > kMaxSlurmList) {
      fail("Slurm node list '{}': the range '{}' is empty or too large", list, range);
    }
    for (int n = first; n <= last; ++n) {
      // Slurm pads every number to the width of the range's lower bound: [08-10] -> 08, 09, 10.
      const std::string digits = fmt::format("{:0{}}", n, low.size());
      for (const std::string& rest : rests) {
        out.push_back(name.substr(0, open) + digits + rest);
      }
    }
    at = comma + 1;
  }
}

std::vector<std::string> expandHostList(const std::string& list) {
  std::vector<std::string> hosts;
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= list.size(); ++i) {
    if (i < list.size() && list[i] == '[') {
      ++depth;
    } else if (i < list.size() && list[i] == ']') {
      --depth;
    } else if (i == list.size() || (list[i] == ',' && depth == 0)) {
      if (i > start) {
        expandHostName(list, list.substr(start, i - start), hosts);
      }
      start = i + 1;
    }
  }
  return hosts;
}

std::optional<std::vector<int>> taskNodes(const std::vector<int>& counts, const std::string& distribution) {
  const std::string across = distribution.substr(0, distribution.find(':'));
  std::vector<int> nodes;
  if (across.empty() || across == "block" || across == "*") {
    for (std::size_t n = 0; n < counts.size(); ++n) {
      nodes.insert(nodes.end(), static_cast<std::size_t>(counts[n]), static_cast<int>(n));
    }
    return nodes;
  }
  if (across == "cyclic" || across == "fcyclic") {
    std::vector<int> left = counts;
    for (bool any = true; any;) {
      any = false;
      for (std::size_t n = 0; n < left.size(); ++n) {
        if (left[n] > 0) {
          --left[n];
          nodes.push_back(static_cast<int>(n));
          any = true;
        }
      }
    }
    return nodes;
  }
  return std::nullopt;
}

}  // namespace strata::cli::detail
