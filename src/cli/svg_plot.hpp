// A plain SVG line chart (no dependency): the CLI's memory-over-time plot.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace infokv {
namespace cli {

struct PlotSeries {
  std::string name;
  std::string color;                               // an SVG colour, e.g. "#d62728"
  std::vector<std::pair<double, double>> points;  // (x, y), x ascending
};

// Writes one panel with the series as polylines, axes from 0 to the largest value, and a legend. Throws
// Error(io) when the file cannot be written.
void write_line_plot(const std::string &path, const std::string &title, const std::string &x_label,
                     const std::string &y_label, const std::vector<PlotSeries> &series);

// One named point of a series, for write_named_plot.
struct NamedPoint {
  std::string series;
  double x = 0, y = 0;
};
// write_line_plot of points grouped into series by name (in name order, a colour each, x ascending): what the eval
// commands plot, a policy (or policy / mode) per line.
void write_named_plot(const std::string &path, const std::string &title, const std::string &x_label,
                      const std::string &y_label, const std::vector<NamedPoint> &points);

}  // namespace cli
}  // namespace infokv
