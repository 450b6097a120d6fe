// tests/train/plot_test.cc — metrics.csv and curves.svg are well-formed.
#include <gtest/gtest.h>

#include <algorithm>

#include "tfm/train/trainer.h"

namespace tfm::train {
namespace {

TEST(Plot, CsvAndSvgAreWellFormed) {
  std::vector<EvalRow> rows;
  for (int i = 1; i <= 5; ++i) {
    EvalRow r;
    r.step = 100 * i;
    r.epoch = i;
    r.train_loss = 3.0 / i;
    r.valid_loss = 3.2 / i;
    r.valid_token_accuracy = 0.2 * i;
    r.valid_sequence_accuracy = 0.15 * i;
    rows.push_back(r);
  }
  const std::string csv = metrics_csv(rows);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 6);  // header + 5 rows
  EXPECT_EQ(csv.rfind("step,epoch,lr,train_loss,valid_loss,valid_token_accuracy,valid_sequence_accuracy", 0), 0u);
  const std::string svg = plot_curves_svg(rows, "a<b");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("a&lt;b"), std::string::npos);  // escaped title
  EXPECT_EQ(std::count(svg.begin(), svg.end(), '<') - std::count(svg.begin(), svg.end(), '>'), 0);
  for (const char* label : {"training step", "training loss", "validation loss", "token accuracy", "sequence accuracy",
                            "100%", ">500<"})
    EXPECT_NE(svg.find(label), std::string::npos) << label;
  EXPECT_EQ(svg.find("nan"), std::string::npos);  // no NaN coordinates
  EXPECT_NE(plot_curves_svg({}, "x").find("no evaluations yet"), std::string::npos);
}

// A run started from a model directory has a step-0 row without a training loss: the validation
// curves get its point, the training-loss curve does not.
TEST(Plot, StepZeroRowHasNoTrainingLossPoint) {
  std::vector<EvalRow> rows(2);
  rows[0].valid_loss = 2.0;
  rows[1].step = 10;
  rows[1].train_loss = 1.5;
  rows[1].valid_loss = 1.4;
  const std::string svg = plot_curves_svg(rows, "t");
  const auto circles = [&](const std::string& color) {
    int64_t n = 0;
    for (size_t at = svg.find("fill=\"" + color + "\""); at != std::string::npos; at = svg.find("fill=\"" + color + "\"", at + 1))
      ++n;
    return n;
  };
  EXPECT_EQ(circles("#1f77b4"), 1);  // training loss: step 10 only
  EXPECT_EQ(circles("#d62728"), 2);  // validation loss: steps 0 and 10
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  // metrics.csv says it has none (nan, not a measured 0)
  const std::string csv = metrics_csv(rows);
  EXPECT_NE(csv.find("\n0,0,0,nan,2.000000,"), std::string::npos) << csv;
  EXPECT_NE(csv.find("\n10,0,0,1.500000,1.400000,"), std::string::npos) << csv;
}

// With label smoothing the training loss has a term the validation loss lacks: its curve's name says so, and the
// legend moves left to keep the longer name inside its panel (the loss panel ends at x 430). Without it, the names
// are the plain ones.
TEST(Plot, LabelSmoothingNamesTheTrainingCurve) {
  std::vector<EvalRow> rows(2);
  rows[0].step = 10, rows[1].step = 20;
  for (EvalRow& r : rows) r.train_loss = 1.7, r.valid_loss = 1.2;
  const std::string smoothed = plot_curves_svg(rows, "t", 0.1);
  EXPECT_NE(smoothed.find(">training loss (label smoothing 0.1)</text>"), std::string::npos) << smoothed;
  const size_t name = smoothed.find(">training loss (label smoothing 0.1)</text>");
  const size_t x = smoothed.rfind("<text x=\"", name) + 9;
  const double left = std::stod(smoothed.substr(x));
  EXPECT_LE(left + 6.5 * 35, 430.0) << smoothed.substr(x - 9, name - x + 40);
  const std::string plain = plot_curves_svg(rows, "t");
  EXPECT_NE(plain.find(">training loss</text>"), std::string::npos);
  EXPECT_EQ(plain.find("label smoothing"), std::string::npos);
}

// A language model's windows are not sequences to get right: its plot has no sequence accuracy (nor does its
// progress line), a pair model's has.
TEST(Plot, LanguageModelHasNoSequenceAccuracy) {
  std::vector<EvalRow> rows(2);
  rows[0].step = 10, rows[1].step = 20;
  for (EvalRow& r : rows) r.valid_token_accuracy = 0.3, r.valid_sequence_accuracy = 0.05;
  const std::string lm = plot_curves_svg(rows, "t", 0, /*language_model=*/true);
  EXPECT_EQ(lm.find("sequence accuracy"), std::string::npos);
  EXPECT_EQ(lm.find("#9467bd"), std::string::npos);  // no curve, no points in its colour
  EXPECT_NE(lm.find(">token accuracy</text>"), std::string::npos);
  EXPECT_NE(plot_curves_svg(rows, "t").find(">sequence accuracy</text>"), std::string::npos);
}

}  // namespace
}  // namespace tfm::train
