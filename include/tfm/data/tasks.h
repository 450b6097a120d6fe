// tfm/data/tasks.h — the built-in tasks, generated from a seed (no files needed).
//
//   reverse  the "reverse a sequence" notebook exactly: length uniform in 3..15, tokens uniform in
//            1..19, 0 is padding, target = the source reversed.
//   copy     same sources, target = source.
//   sort     same sources, target = source sorted ascending.
// Example i of a split is a pure function of (seed, split, i) (a splitmix64 stream seeded by their
// hash), so sets of any size are reproducible, the train/valid/test splits are independent draws
// and the i-th example does not depend on how many are generated.
//
// Task vocabulary (id = token value, as in the notebook): 0 "<pad>", 1..19 "1".."19", then
// 20 "<bos>", 21 "<eos>" (used by arch seq2seq only). Sources and targets are written as
// space-separated numbers ("3 17 5") for tfm translate.
//
// To add a task: a Task enumerator and its name, a case in make_task_example, a test in
// tests/data/tasks_test.cc.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tfm/data/vocab.h"
#include "tfm/enum_names.h"

namespace tfm::data {

enum class Split : uint64_t { TRAIN = 0, VALID = 1, TEST = 2 };

struct TaskExample {
  std::vector<int32_t> src;  // (S) token ids in 1..19
  std::vector<int32_t> tgt;  // (S) token ids, same length
};

constexpr int32_t kTaskMinLen = 3, kTaskMaxLen = 15, kTaskSymbols = 19;

enum class Task { REVERSE, COPY, SORT };
TaskExample make_task_example(Task task, uint64_t seed, Split split, int64_t index);
std::vector<TaskExample> make_task_set(Task task, uint64_t seed, Split split, int64_t count);
Vocab task_vocab();

// splitmix64 (Steele, Lea, Flood 2014): the data side's generator — tiny, full-period, and its whole
// state is one word. Used for task generation and batch shuffling.
struct SplitMix64 {
  uint64_t state;
  explicit SplitMix64(uint64_t seed) : state(seed) {}
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n), n > 0: the high word of next()·n (Lemire's multiply-shift; bias ≤ n/2^64).
  uint64_t below(uint64_t n) {
    __extension__ using u128 = unsigned __int128;  // GCC and Clang's 128-bit product (not ISO C++)
    return static_cast<uint64_t>((static_cast<u128>(next()) * n) >> 64);
  }
};
// A well-mixed seed for stream (a, b, c): three rounds of splitmix64 over the words.
uint64_t mix_seed(uint64_t a, uint64_t b, uint64_t c = 0);

}  // namespace tfm::data

namespace tfm {
template <>
struct EnumNames<data::Task> {
  static constexpr const char* noun = "task";
  static constexpr std::array<std::pair<data::Task, std::string_view>, 3> names{
      {{data::Task::REVERSE, "reverse"}, {data::Task::COPY, "copy"}, {data::Task::SORT, "sort"}}};
};
}  // namespace tfm
