// tests/train/dataset_memory_test.cc — what a TSV file's lines cost load_dataset (src/train/dataset.cc) at its
// peak: the training file's char sides are kept as text until encoded (a char token is a 32-byte string), the
// vocabulary is counted from them without holding their tokens, and the validation file is read once the training
// file is encoded; so a corpus of short lines costs about 200 bytes a line (its ids, its text, the pair), not the
// kilobyte it took when both files' tokens, their copies for the vocabulary and the validation set's were live at
// once.
//
// Method: the heap counted (tests/data/heap_counter.h: the peak a call adds, exact on every machine), over a
// training file of 20,000 lines of 5 + 5 characters and a validation file of 200.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "data/heap_counter.h"
#include "test_util.h"
#include "train/dataset.h"

namespace tfm::train {
namespace {

TEST(DatasetMemory, ShortLinesCostAFewHundredBytesEachAtThePeak) {
  const std::string dir = testing::temp_dir("dataset_memory");
  const auto write = [&](const std::string& name, int lines) {
    const std::string path = dir + "/" + name;
    std::ofstream f(path);
    uint32_t x = 1;
    for (int i = 0; i < lines; ++i) {
      std::string s;
      for (int k = 0; k < 5; ++k) s += static_cast<char>('a' + (x = x * 1664525u + 1013904223u) % 10);
      f << s << '\t' << std::string(s.rbegin(), s.rend()) << '\n';
    }
    return path;
  };
  const int kLines = 20000;
  TrainConfig c;
  c.train_path = write("train.tsv", kLines);
  c.valid_path = write("valid.tsv", 200);
  Dataset ds;
  const int64_t added = testing::heap::peak_added([&] { ds = load_dataset(c); });
  ASSERT_EQ(ds.train.size(), static_cast<size_t>(kLines));
  ASSERT_EQ(ds.valid.size(), 200u);
  EXPECT_LT(added / kLines, 300) << added << " bytes at the peak";
}

}  // namespace
}  // namespace tfm::train
