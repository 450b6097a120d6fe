// src/train/plot.cc — metrics.csv and the hand-written curves.svg (no plotting library).
//
// The SVG has two panels side by side sharing the x axis (training step): left, training and
// validation loss (y from 0 to a rounded-up maximum; the training curve's legend names its label
// smoothing, a term the validation loss does not have); right, validation token and sequence accuracy
// (y from 0 to 100%; a language model's has no sequence accuracy, as its progress line). Ticks are "nice"
// numbers (1, 2 or 5 × 10^k), every panel has labelled axes, grid lines and a legend. To add a curve: a
// Series entry in plot_curves_svg.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "quote.h"
#include "tfm/train/trainer.h"

namespace tfm::train {
namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += ch;
    }
  }
  return out;
}

// Tick spacing: the 1, 2 or 5 × 10^k closest above range / target.
double nice_step(double range, int target) {
  if (!(range > 0)) return 1;
  const double raw = range / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) return m * mag;
  return 10 * mag;
}

// Shortest label for a tick value: integers without decimals, else up to 3 significant digits.
std::string tick_label(double v, double step) {
  if (step >= 1 && std::fabs(v - std::round(v)) < 1e-9) return fmt("%.0f", v);
  return fmt("%.3g", v);
}

struct Series {
  std::string name, color;
  bool dashed;
  std::function<double(const EvalRow&)> y;
};

struct Panel {
  double x0, y0, w, h;  // plot area in SVG pixels (y0 = top)
  double xmin, xmax, ymin, ymax;
  double px(double x) const { return x0 + (xmax > xmin ? (x - xmin) / (xmax - xmin) : 0.5) * w; }
  double py(double y) const { return y0 + h - (ymax > ymin ? (y - ymin) / (ymax - ymin) : 0.5) * h; }
};

void draw_panel(std::string& svg, const Panel& p, const std::vector<EvalRow>& rows, const std::vector<Series>& series,
                const std::string& title, const std::string& ylabel, bool percent) {
  // Grid and ticks.
  const double xs = nice_step(p.xmax - p.xmin, 6), ys = nice_step(p.ymax - p.ymin, 5);
  for (double x = std::ceil(p.xmin / xs) * xs; x <= p.xmax + 1e-9 * xs; x += xs) {
    svg += "<line x1=\"" + fmt("%.1f", p.px(x)) + "\" y1=\"" + fmt("%.1f", p.y0) + "\" x2=\"" + fmt("%.1f", p.px(x)) +
           "\" y2=\"" + fmt("%.1f", p.y0 + p.h) + "\" stroke=\"#e5e5e5\"/>\n";
    svg += "<text x=\"" + fmt("%.1f", p.px(x)) + "\" y=\"" + fmt("%.1f", p.y0 + p.h + 16) +
           "\" text-anchor=\"middle\">" + tick_label(x, xs) + "</text>\n";
  }
  for (double y = std::ceil(p.ymin / ys) * ys; y <= p.ymax + 1e-9 * ys; y += ys) {
    svg += "<line x1=\"" + fmt("%.1f", p.x0) + "\" y1=\"" + fmt("%.1f", p.py(y)) + "\" x2=\"" + fmt("%.1f", p.x0 + p.w) +
           "\" y2=\"" + fmt("%.1f", p.py(y)) + "\" stroke=\"#e5e5e5\"/>\n";
    const std::string label = percent ? tick_label(y * 100, ys * 100) + "%" : tick_label(y, ys);
    svg += "<text x=\"" + fmt("%.1f", p.x0 - 6) + "\" y=\"" + fmt("%.1f", p.py(y) + 4) + "\" text-anchor=\"end\">" +
           label + "</text>\n";
  }
  // Axes, titles.
  svg += "<rect x=\"" + fmt("%.1f", p.x0) + "\" y=\"" + fmt("%.1f", p.y0) + "\" width=\"" + fmt("%.1f", p.w) +
         "\" height=\"" + fmt("%.1f", p.h) + "\" fill=\"none\" stroke=\"#444\"/>\n";
  svg += "<text x=\"" + fmt("%.1f", p.x0 + p.w / 2) + "\" y=\"" + fmt("%.1f", p.y0 - 10) +
         "\" text-anchor=\"middle\" font-weight=\"bold\">" + xml_escape(title) + "</text>\n";
  svg += "<text x=\"" + fmt("%.1f", p.x0 + p.w / 2) + "\" y=\"" + fmt("%.1f", p.y0 + p.h + 36) +
         "\" text-anchor=\"middle\">training step</text>\n";
  svg += "<text transform=\"translate(" + fmt("%.1f", p.x0 - 48) + "," + fmt("%.1f", p.y0 + p.h / 2) +
         ") rotate(-90)\" text-anchor=\"middle\">" + xml_escape(ylabel) + "</text>\n";
  // Curves (points too, so a single evaluation is visible) and the legend, at the panel's top right: moved left
  // by as much as its longest name is wider than 110 px (some 6.5 px a character at font-size 12).
  double name_width = 0;
  for (const Series& se : series) {
    const auto chars = std::count_if(se.name.begin(), se.name.end(), [](char ch) { return (ch & 0xC0) != 0x80; });
    name_width = std::max(name_width, 6.5 * static_cast<double>(chars));
  }
  const double lx = p.x0 + p.w - 150 - std::max(0.0, name_width - 110);
  for (size_t s = 0; s < series.size(); ++s) {
    const Series& se = series[s];
    std::string pts;
    // A value that is not finite has no point (the training loss of a step-0 row: no step taken yet).
    for (const auto& r : rows)
      if (std::isfinite(se.y(r))) pts += fmt("%.1f", p.px(static_cast<double>(r.step))) + "," + fmt("%.1f", p.py(se.y(r))) + " ";
    svg += "<polyline fill=\"none\" stroke=\"" + se.color + "\" stroke-width=\"2\"" +
           (se.dashed ? " stroke-dasharray=\"6,4\"" : "") + " points=\"" + pts + "\"/>\n";
    for (const auto& r : rows)
      if (std::isfinite(se.y(r)))
        svg += "<circle cx=\"" + fmt("%.1f", p.px(static_cast<double>(r.step))) + "\" cy=\"" + fmt("%.1f", p.py(se.y(r))) +
               "\" r=\"2.5\" fill=\"" + se.color + "\"/>\n";
    const double ly = p.y0 + 14 + 18 * static_cast<double>(s);
    svg += "<line x1=\"" + fmt("%.1f", lx) + "\" y1=\"" + fmt("%.1f", ly - 4) + "\" x2=\"" + fmt("%.1f", lx + 24) +
           "\" y2=\"" + fmt("%.1f", ly - 4) + "\" stroke=\"" + se.color + "\" stroke-width=\"2\"" +
           (se.dashed ? " stroke-dasharray=\"6,4\"" : "") + "/>\n";
    svg +=
        "<text x=\"" + fmt("%.1f", lx + 30) + "\" y=\"" + fmt("%.1f", ly) + "\">" + xml_escape(se.name) + "</text>\n";
  }
}

}  // namespace

int64_t best_row(const std::vector<EvalRow>& rows) {
  int64_t best = -1;
  for (size_t i = 0; i < rows.size(); ++i)
    if (rows[i].valid_loss == rows[i].valid_loss &&  // not NaN
        (best < 0 || rows[i].valid_loss < rows[static_cast<size_t>(best)].valid_loss))
      best = static_cast<int64_t>(i);
  return best;
}

std::string metrics_csv(const std::vector<EvalRow>& rows) {
  std::string s =
      "step,epoch,lr,train_loss,valid_loss,valid_token_accuracy,valid_sequence_accuracy,tokens_per_sec,elapsed_seconds\n";
  for (const auto& r : rows) {
    // Step 0 (--init-from's evaluation before training) has no training loss: nan, as the plot leaves it out.
    s += std::to_string(r.step) + "," + std::to_string(r.epoch) + "," + fmt("%.6g", r.lr) + "," +
         (r.step == 0 ? std::string("nan") : fmt("%.6f", r.train_loss)) + "," + fmt("%.6f", r.valid_loss) + "," +
         fmt("%.6f", r.valid_token_accuracy) + "," + fmt("%.6f", r.valid_sequence_accuracy) + "," +
         fmt("%.1f", r.tokens_per_sec) + "," + fmt("%.2f", r.elapsed_seconds) + "\n";
  }
  return s;
}

std::string plot_curves_svg(const std::vector<EvalRow>& rows, const std::string& title, double label_smoothing,
                            bool language_model) {
  const double W = 960, H = 420;
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + fmt("%.0f", W) + "\" height=\"" +
                    fmt("%.0f", H) + "\" viewBox=\"0 0 " + fmt("%.0f", W) + " " + fmt("%.0f", H) +
                    "\" font-family=\"sans-serif\" font-size=\"12\">\n"
                    "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
                    "<text x=\"" + fmt("%.0f", W / 2) + "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">" +
                    xml_escape("tfm train: " + title) + "</text>\n";
  if (rows.empty()) return svg + "<text x=\"480\" y=\"210\" text-anchor=\"middle\">no evaluations yet</text>\n</svg>\n";
  double xmax = 1, lmax = 0;
  for (const auto& r : rows) {
    xmax = std::max(xmax, static_cast<double>(r.step));
    for (double v : {r.train_loss, r.valid_loss})
      if (std::isfinite(v)) lmax = std::max(lmax, v);
  }
  const double lstep = nice_step(lmax > 0 ? lmax : 1, 5);
  const double ltop = std::max(lstep, std::ceil(lmax / lstep) * lstep);
  const Panel loss{70, 60, 360, 290, 0, xmax, 0, ltop};
  const Panel acc{560, 60, 360, 290, 0, xmax, 0, 1};
  const std::string train_name =
      label_smoothing > 0 ? "training loss (label smoothing " + number_text(label_smoothing) + ")" : "training loss";
  draw_panel(svg, loss, rows,
             {{train_name, "#1f77b4", false,
               [](const EvalRow& r) { return r.step > 0 ? r.train_loss : std::numeric_limits<double>::quiet_NaN(); }},
              {"validation loss", "#d62728", true, [](const EvalRow& r) { return r.valid_loss; }}},
             "Loss (cross-entropy)", "loss", false);
  std::vector<Series> accuracies = {
      {"token accuracy", "#2ca02c", false, [](const EvalRow& r) { return r.valid_token_accuracy; }}};
  // A language model's windows are not sequences to get right (its progress line leaves the figure out too).
  if (!language_model)
    accuracies.push_back(
        {"sequence accuracy", "#9467bd", true, [](const EvalRow& r) { return r.valid_sequence_accuracy; }});
  draw_panel(svg, acc, rows, accuracies, "Validation accuracy (teacher-forced)", "accuracy", true);
  return svg + "</svg>\n";
}

}  // namespace tfm::train
