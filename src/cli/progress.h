// src/cli/progress.h — `tfm train`'s progress on stderr: one line rewritten in place (\r) on a
// terminal; on a pipe or file, a plain line at every evaluation and at most every 10 s otherwise.
#pragma once

#include "tfm/train/trainer.h"

namespace tfm::cli {

class ProgressPrinter {
 public:
  // text: a language model's run (text data): its line shows the validation loss instead of the token
  // accuracy, and its evaluation line no sequence accuracy.
  explicit ProgressPrinter(bool text = false);
  void operator()(const train::ProgressEvent& e);
  void clear();  // ends the line being rewritten, if any

 private:
  bool tty_;
  bool text_;
  bool open_ = false;
  double last_plain_ = -1e9;
};

}  // namespace tfm::cli
