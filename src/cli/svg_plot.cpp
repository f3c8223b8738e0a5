#include "cli/svg_plot.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>

#include "util/error.hpp"

namespace infokv {
namespace cli {

void write_line_plot(const std::string &path, const std::string &title, const std::string &x_label,
                     const std::string &y_label, const std::vector<PlotSeries> &series) {
  double x_max = 1e-9, y_max = 1e-9;
  for (const PlotSeries &s : series)
    for (const auto &p : s.points) {
      x_max = std::max(x_max, p.first);
      y_max = std::max(y_max, p.second);
    }
  y_max *= 1.05;
  std::ofstream f(path);
  if (!f) fail(Status::io, "cannot write '" + path + "'");
  const int W = 760, H = 420, x0 = 80, top = 50, pw = 520, ph = 300;
  auto X = [&](double x) { return x0 + x / x_max * pw; };
  auto Y = [&](double y) { return top + ph - y / y_max * ph; };
  auto esc = [](const std::string &t) {
    std::string o;
    for (char c : t) o += c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '&' ? "&amp;" : std::string(1, c);
    return o;
  };
  f << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  f << "<text x=\"" << x0 + pw / 2 << "\" y=\"28\" text-anchor=\"middle\" font-size=\"14\">" << esc(title) << "</text>\n";
  f << "<rect x=\"" << x0 << "\" y=\"" << top << "\" width=\"" << pw << "\" height=\"" << ph << "\" fill=\"none\" stroke=\"#999\"/>\n";
  char b[48];
  for (int k = 0; k <= 4; ++k) {
    std::snprintf(b, sizeof b, "%.4g", y_max * k / 4);
    f << "<text x=\"" << x0 - 6 << "\" y=\"" << Y(y_max * k / 4) + 4 << "\" text-anchor=\"end\">" << b << "</text>\n";
    std::snprintf(b, sizeof b, "%.4g", x_max * k / 4);
    f << "<text x=\"" << X(x_max * k / 4) << "\" y=\"" << top + ph + 16 << "\" text-anchor=\"middle\">" << b << "</text>\n";
  }
  f << "<text x=\"" << x0 + pw / 2 << "\" y=\"" << top + ph + 36 << "\" text-anchor=\"middle\">" << esc(x_label) << "</text>\n";
  f << "<text transform=\"translate(20," << top + ph / 2 << ") rotate(-90)\" text-anchor=\"middle\">" << esc(y_label) << "</text>\n";
  for (size_t i = 0; i < series.size(); ++i) {
    const PlotSeries &s = series[i];
    f << "<polyline fill=\"none\" stroke-width=\"2\" stroke=\"" << s.color << "\" points=\"";
    for (const auto &p : s.points) f << X(p.first) << "," << Y(p.second) << " ";
    f << "\"/>\n<text x=\"" << x0 + pw + 12 << "\" y=\"" << top + 14 + 18 * static_cast<int>(i) << "\" fill=\"" << s.color
      << "\">" << esc(s.name) << "</text>\n";
  }
  f << "</svg>\n";
  if (!f) fail(Status::io, "cannot write '" + path + "'");
}

void write_named_plot(const std::string &path, const std::string &title, const std::string &x_label,
                      const std::string &y_label, const std::vector<NamedPoint> &points) {
  const char *colors[] = {"#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#444444"};
  std::map<std::string, PlotSeries> series;
  for (const NamedPoint &p : points) {
    PlotSeries &s = series[p.series];
    if (s.name.empty()) {
      s.name = p.series;
      s.color = colors[series.size() % 8];
    }
    s.points.push_back({p.x, p.y});
  }
  std::vector<PlotSeries> list;
  for (auto &kv : series) {
    std::sort(kv.second.points.begin(), kv.second.points.end());
    list.push_back(kv.second);
  }
  write_line_plot(path, title, x_label, y_label, list);
}

}  // namespace cli
}  // namespace infokv
