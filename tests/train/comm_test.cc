// tests/train/comm_test.cc — Comm (tfm/train/comm.h) in the single process: each collective, blocking
// or started, is the copy of this rank's own part, and a started request is complete at once. The
// collectives across processes are checked through the trainer under mpirun (tests/mpi/). And the
// arithmetic of the timed waits, on clock readings and work sizes given by hand: WaitedTime (a suspended
// process's gap left out) and evaluation_grace (src/train/evaluate_split.h: how long the split
// evaluation's gather waits).
#include "tfm/train/comm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <initializer_list>
#include <optional>
#include <vector>

#include "train/evaluate_split.h"

namespace tfm::train {
namespace {

// alltoallv of one rank: send[displ .. displ + count) lands at recv[rdispl ..).
TEST(CommSingle, StartedAlltoallvIsTheCopyAndCompleteAtOnce) {
  Comm c;
  const std::vector<float> send = {9, 1, 2, 3, 9};
  std::vector<float> recv(4, -1.0f);
  const int count = 3, displ = 1, rdispl = 1;
  Comm::Request r = c.start_alltoallv(send.data(), &count, &displ, recv.data(), &count, &rdispl);
  EXPECT_EQ(recv, (std::vector<float>{-1, 1, 2, 3}));
  EXPECT_TRUE(c.test(r));
  c.progress();
  c.wait(r, /*timed=*/true);
  EXPECT_EQ(r.id, -1);
  std::vector<float> again(4, -1.0f);
  c.alltoallv(send.data(), &count, &displ, again.data(), &count, &rdispl, /*timed=*/true);
  EXPECT_EQ(again, recv);
}

// allgatherv of one rank: its part moves to displs[0], or stays when already there (in place).
TEST(CommSingle, StartedAllgathervMovesOrKeepsTheOwnPart) {
  Comm c;
  std::vector<float> recv = {0, 0, 5, 6};
  const std::vector<float> part = {7, 8};
  const int count = 2, displ = 1;
  Comm::Request r = c.start_allgatherv(part.data(), count, recv.data(), &count, &displ);
  EXPECT_TRUE(c.test(r));
  c.wait(r, /*timed=*/false);
  EXPECT_EQ(recv, (std::vector<float>{0, 7, 8, 6}));
  Comm::Request in_place = c.start_allgatherv(recv.data() + displ, count, recv.data(), &count, &displ);
  c.wait(in_place, /*timed=*/true);
  EXPECT_EQ(recv, (std::vector<float>{0, 7, 8, 6}));
}

// Polls 1 ms apart add up; a gap of 30 s (the process stopped, then continued) adds nothing; a gap just
// under WaitedTime::kNotRunning (a busy machine's delay) counts. Readings in seconds of a made-up clock.
TEST(WaitedTime, CountsThePollsIntervalsButNotAStop) {
  WaitedTime w(100.0);
  double t = 100.0;
  for (int i = 0; i < 500; ++i) w.at(t += 0.001);
  EXPECT_NEAR(w.at(t), 0.5, 1e-9);
  EXPECT_NEAR(w.at(t += 30.0), 0.5, 1e-9) << "the 30 s this process was stopped";
  EXPECT_NEAR(w.at(t += 0.001), 0.501, 1e-9);
  const double delay = WaitedTime::kNotRunning * 0.9;
  EXPECT_NEAR(w.at(t += delay), 0.501 + delay, 1e-9);
  EXPECT_NEAR(w.at(t - 1.0), 0.501 + delay, 1e-9) << "a reading before the last adds nothing";
}

// A peer stopped alone: this process keeps polling, so a wait of 1 ms polls reaches any timeout (here
// 600 s, --comm-timeout's default, after 600 000 polls) however long it lasts.
TEST(WaitedTime, AWaitThatKeepsPollingReachesTheTimeout) {
  WaitedTime w(0.0);
  double waited = 0;
  for (int i = 1; i <= 600001; ++i) waited = w.at(i * 0.001);
  EXPECT_GT(waited, 600.0);
}

ShareWork batches(std::initializer_list<std::array<int64_t, 3>> shapes) {  // {B, S, T} each
  ShareWork w;
  for (const auto& s : shapes) w.add(s[0], s[1], s[2]);
  return w;
}

// Equal shares: twice this rank's own time. A share of one batch more (3 of 5 batches over 2 ranks):
// the rank with 2 scales its time by 3/2 (the per-batch term).
TEST(EvaluationGrace, EqualSharesOrOneBatchMore) {
  const ShareWork two = batches({{256, 20, 21}, {256, 20, 21}});
  const ShareWork three = batches({{256, 20, 21}, {256, 20, 21}, {256, 20, 21}});
  EXPECT_DOUBLE_EQ(evaluation_grace({two, two}, 1, 4.0).value(), 8.0);
  EXPECT_DOUBLE_EQ(evaluation_grace({three, two}, 1, 4.0).value(), 2 * 4.0 * 3 / 2);
  EXPECT_DOUBLE_EQ(evaluation_grace({three, two}, 0, 6.0).value(), 12.0) << "its own share is the longest";
}

// The reviewer's cases: a validation set of one batch leaves rank 1 nothing to time, so it waits without a
// deadline (rank 0, which has the work, still waits timed); 256 long rows and one short one: the rank with
// the short row scales its time by the largest ratio, the quadratic term's 256·200² / (1·5²) for the source.
TEST(EvaluationGrace, ARankWithoutWorkOrWithLittleWaitsForTheLongestShare) {
  const ShareWork long_batch = batches({{256, 200, 201}});
  EXPECT_EQ(evaluation_grace({long_batch, ShareWork{}}, 1, 0.001), std::nullopt);
  EXPECT_DOUBLE_EQ(evaluation_grace({long_batch, ShareWork{}}, 0, 3.5).value(), 7.0);
  const ShareWork short_row = batches({{1, 5, 6}});
  const double ratio = 256.0 * 200 * 200 / (1.0 * 5 * 5);  // B·S²: the largest of the six ratios
  EXPECT_DOUBLE_EQ(evaluation_grace({long_batch, short_row}, 1, 0.002).value(), 2 * 0.002 * ratio);
}

// A language model's windows have no source (S = 0): those terms are left out, not divided by.
TEST(EvaluationGrace, TermsNoShareHasAreLeftOut) {
  const ShareWork full = batches({{256, 0, 64}}), partial = batches({{31, 0, 64}});
  EXPECT_DOUBLE_EQ(evaluation_grace({full, partial}, 1, 0.5).value(), 2 * 0.5 * std::max(1.0, 256.0 / 31));
  EXPECT_THROW(evaluation_grace({full, partial}, 2, 0.5), std::invalid_argument);
}

}  // namespace
}  // namespace tfm::train
