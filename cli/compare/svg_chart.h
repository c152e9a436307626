#pragma once

#include <string>
#include <utility>
#include <vector>

namespace strata::cli {

// One line of a chart (or one point set of a scatter plot).
struct ChartSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;
};

struct ChartOptions {
  std::string title;
  std::string xLabel;
  std::string yLabel;
  int width = 900;
  int height = 320;
  double yMinimum = 0.0;  // the y axis starts here unless the data go lower
};

// Note [Report figures]: the report's figures are plain SVG written here (a few axes, polylines and circles), so
// report.html stays self-contained (no scripts, no fonts or libraries fetched) and opens offline; report.md links
// the same files.
std::string svgLineChart(const ChartOptions& options, const std::vector<ChartSeries>& series);

// A scatter of named points; `front` (indices into points) are joined by a line and drawn bold: the Pareto front.
std::string svgScatter(const ChartOptions& options,
                       const std::vector<std::pair<std::string, std::pair<double, double>>>& points,
                       const std::vector<std::size_t>& front);

// The indices of the points no other point beats in both coordinates (lower is better in both), by x.
std::vector<std::size_t> paretoFront(const std::vector<std::pair<double, double>>& points);

std::string escapeXml(const std::string& text);

}  // namespace strata::cli
