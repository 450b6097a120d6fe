// src/data/tasks.cc — built-in tasks (see tfm/data/tasks.h).
#include "tfm/data/tasks.h"

#include <algorithm>
#include <stdexcept>

namespace tfm::data {

uint64_t mix_seed(uint64_t a, uint64_t b, uint64_t c) {
  SplitMix64 g(a);
  uint64_t h = g.next();
  g.state = h ^ b;
  h = g.next();
  g.state = h ^ c;
  return g.next();
}

TaskExample make_task_example(Task task, uint64_t seed, Split split, int64_t index) {
  SplitMix64 g(mix_seed(seed, static_cast<uint64_t>(split), static_cast<uint64_t>(index)));
  // The notebook: length = randint(3, 15) inclusive, tokens = randint(1, 19) inclusive.
  const int32_t len = kTaskMinLen + static_cast<int32_t>(g.below(kTaskMaxLen - kTaskMinLen + 1));
  TaskExample ex;
  ex.src.resize(static_cast<size_t>(len));
  for (auto& t : ex.src) t = 1 + static_cast<int32_t>(g.below(kTaskSymbols));
  ex.tgt = ex.src;
  switch (task) {
    case Task::REVERSE: std::reverse(ex.tgt.begin(), ex.tgt.end()); break;
    case Task::SORT: std::sort(ex.tgt.begin(), ex.tgt.end()); break;
    case Task::COPY: break;
  }
  return ex;
}

std::vector<TaskExample> make_task_set(Task task, uint64_t seed, Split split, int64_t count) {
  std::vector<TaskExample> out;
  out.reserve(static_cast<size_t>(std::max<int64_t>(count, 0)));
  for (int64_t i = 0; i < count; ++i) out.push_back(make_task_example(task, seed, split, i));
  return out;
}

Vocab task_vocab() {
  std::vector<std::string> tokens = {Vocab::PAD};
  for (int32_t v = 1; v <= kTaskSymbols; ++v) tokens.push_back(std::to_string(v));
  tokens.push_back(Vocab::BOS);
  tokens.push_back(Vocab::EOS);
  return Vocab::from_tokens(std::move(tokens));
}

}  // namespace tfm::data
