#include "compare/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include <fmt/format.h>

namespace strata::cli {
namespace {

// Colour-blind-safe palette (Okabe and Ito).
constexpr const char* kColours[] = {"#0072B2", "#E69F00", "#009E73", "#D55E00",
                                    "#CC79A7", "#56B4E9", "#F0E442", "#000000"};

constexpr int kLeft = 70;
constexpr int kRight = 260;  // the legend
constexpr int kTop = 30;
constexpr int kBottom = 45;

struct Range {
  double low = std::numeric_limits<double>::infinity();
  double high = -std::numeric_limits<double>::infinity();
  void add(double v) {
    if (std::isfinite(v)) {
      low = std::min(low, v);
      high = std::max(high, v);
    }
  }
  void settle() {
    if (!std::isfinite(low)) {
      low = 0;
      high = 1;
    }
    if (high - low < 1e-12) {
      high = low + (low == 0 ? 1.0 : std::abs(low) * 0.1);
    }
  }
};

std::string tickLabel(double v) {
  const double a = std::abs(v);
  if (a >= 1e9)
    return fmt::format("{:.3g}G", v / 1e9);
  if (a >= 1e6)
    return fmt::format("{:.3g}M", v / 1e6);
  if (a >= 1e4)
    return fmt::format("{:.3g}k", v / 1e3);
  return fmt::format("{:.3g}", v);
}

// The frame, ticks and labels; returns the SVG text so far.
std::string frame(const ChartOptions& o, const Range& x, const Range& y) {
  const int plotW = o.width - kLeft - kRight;
  const int plotH = o.height - kTop - kBottom;
  std::string svg =
      fmt::format(R"svg(<svg xmlns="http://www.w3.org/2000/svg" width="{0}" height="{1}" viewBox="0 0 {0} {1}" )svg"
                  R"svg(font-family="sans-serif" font-size="11"><rect width="{0}" height="{1}" fill="white"/>)svg"
                  R"svg(<text x="{2}" y="18" font-size="13" font-weight="bold">{3}</text>)svg",
                  o.width, o.height, kLeft, escapeXml(o.title));
  svg += fmt::format(R"svg(<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#888"/>)svg", kLeft, kTop,
                     plotW, plotH);
  for (int i = 0; i <= 4; ++i) {
    const double fx = x.low + (x.high - x.low) * i / 4;
    const double fy = y.low + (y.high - y.low) * i / 4;
    const double px = kLeft + plotW * i / 4.0;
    const double py = kTop + plotH - plotH * i / 4.0;
    svg += fmt::format(R"svg(<text x="{:.1f}" y="{}" text-anchor="middle">{}</text>)svg", px, kTop + plotH + 15,
                       tickLabel(fx));
    svg +=
        fmt::format(R"svg(<text x="{}" y="{:.1f}" text-anchor="end">{}</text>)svg", kLeft - 5, py + 4, tickLabel(fy));
    svg += fmt::format(R"svg(<line x1="{}" x2="{}" y1="{:.1f}" y2="{:.1f}" stroke="#eee"/>)svg", kLeft + 1,
                       kLeft + plotW - 1, py, py);
  }
  svg += fmt::format(R"svg(<text x="{}" y="{}" text-anchor="middle">{}</text>)svg", kLeft + plotW / 2, o.height - 8,
                     escapeXml(o.xLabel));
  svg += fmt::format(R"svg(<text x="14" y="{}" text-anchor="middle" transform="rotate(-90 14 {})">{}</text>)svg",
                     kTop + plotH / 2, kTop + plotH / 2, escapeXml(o.yLabel));
  return svg;
}

struct Scale {
  Scale(const ChartOptions& o) : plotW(o.width - kLeft - kRight), plotH(o.height - kTop - kBottom) {}
  Range x, y;
  int plotW, plotH;
  double px(double v) const { return kLeft + plotW * (v - x.low) / (x.high - x.low); }
  double py(double v) const { return kTop + plotH - plotH * (v - y.low) / (y.high - y.low); }
};

std::string legend(const ChartOptions& o, std::size_t i, const std::string& name) {
  const int lx = o.width - kRight + 12;
  const int ly = kTop + 14 * static_cast<int>(i) + 8;
  return fmt::format(R"svg(<rect x="{}" y="{}" width="10" height="10" fill="{}"/><text x="{}" y="{}">{}</text>)svg", lx,
                     ly - 9, kColours[i % std::size(kColours)], lx + 14, ly, escapeXml(name.substr(0, 42)));
}

}  // namespace

std::string escapeXml(const std::string& text) {
  std::string out;
  for (const char c : text) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string svgLineChart(const ChartOptions& o, const std::vector<ChartSeries>& series) {
  Scale s(o);
  s.y.add(o.yMinimum);
  for (const ChartSeries& line : series) {
    for (const auto& [x, y] : line.points) {
      s.x.add(x);
      s.y.add(y);
    }
  }
  s.x.settle();
  s.y.settle();
  std::string svg = frame(o, s.x, s.y);
  for (std::size_t i = 0; i < series.size(); ++i) {
    std::string points;
    for (const auto& [x, y] : series[i].points) {
      if (std::isfinite(x) && std::isfinite(y)) {
        points += fmt::format("{:.1f},{:.1f} ", s.px(x), s.py(y));
      }
    }
    const char* colour = kColours[i % std::size(kColours)];
    if (series[i].points.size() == 1) {
      svg += fmt::format(R"svg(<circle cx="{:.1f}" cy="{:.1f}" r="3" fill="{}"/>)svg", s.px(series[i].points[0].first),
                         s.py(series[i].points[0].second), colour);
    } else {
      svg += fmt::format(R"svg(<polyline fill="none" stroke="{}" stroke-width="1.5" points="{}"/>)svg", colour, points);
    }
    svg += legend(o, i, series[i].name);
  }
  return svg + "</svg>\n";
}

std::string svgScatter(const ChartOptions& o,
                       const std::vector<std::pair<std::string, std::pair<double, double>>>& points,
                       const std::vector<std::size_t>& front) {
  Scale s(o);
  s.y.add(o.yMinimum);
  s.x.add(0.0);
  for (const auto& [name, p] : points) {
    s.x.add(p.first * 1.05);
    s.y.add(p.second * 1.05);
  }
  s.x.settle();
  s.y.settle();
  std::string svg = frame(o, s.x, s.y);
  std::string line;
  for (const std::size_t i : front) {
    line += fmt::format("{:.1f},{:.1f} ", s.px(points[i].second.first), s.py(points[i].second.second));
  }
  svg += fmt::format(R"svg(<polyline fill="none" stroke="#444" stroke-dasharray="4 3" points="{}"/>)svg", line);
  for (std::size_t i = 0; i < points.size(); ++i) {
    const bool onFront = std::find(front.begin(), front.end(), i) != front.end();
    svg += fmt::format(R"svg(<circle cx="{:.1f}" cy="{:.1f}" r="{}" fill="{}" stroke="black" stroke-width="{}"/>)svg",
                       s.px(points[i].second.first), s.py(points[i].second.second), onFront ? 6 : 4,
                       kColours[i % std::size(kColours)], onFront ? 2 : 0);
    svg += legend(o, i, (onFront ? "* " : "") + points[i].first);
  }
  return svg + "</svg>\n";
}

std::vector<std::size_t> paretoFront(const std::vector<std::pair<double, double>>& points) {
  std::vector<std::size_t> front;
  for (std::size_t i = 0; i < points.size(); ++i) {
    const bool beaten = std::any_of(points.begin(), points.end(), [&](const std::pair<double, double>& q) {
      return q.first <= points[i].first && q.second <= points[i].second && q != points[i];
    });
    if (!beaten) {
      front.push_back(i);
    }
  }
  std::sort(front.begin(), front.end(), [&](std::size_t a, std::size_t b) { return points[a] < points[b]; });
  return front;
}

}  // namespace strata::cli
