// tests/train/comm_test.cc — Comm (tfm/train/comm.h) in the single process: each collective, blocking
// or started, is the copy of this rank's own part, and a started request is complete at once. The
// collectives across processes are checked through the trainer under mpirun (tests/mpi/).
#include <gtest/gtest.h>

#include <vector>

#include "tfm/train/comm.h"

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

}  // namespace
}  // namespace tfm::train
