// tfm/train/comm.h — the processes of a data-parallel training run (tfm/train/trainer.h) and the few
// collectives the trainer needs, over MPI when the library is built with it (TFM_HAVE_MPI).
//
// A Comm is either the single process (Comm{}: rank 0 of 1, every collective a copy) or MPI's
// world communicator (Comm::world(), after the program called MPI_Init: the library never
// initialises or finalises MPI). Every collective is started non-blocking and waited for by polling
// MPI_Test: a timed wait gives up after timeout() seconds with CommTimeout (a peer stopped, stuck or
// dead), an untimed one waits as long as it takes (the ranks other than 0 after a checkpoint, which
// rank 0 alone writes, however long that takes). A timed wait counts the time this process ran, not
// the time it was stopped (WaitedTime): when the whole job is suspended (Ctrl-Z, SIGSTOP of every
// rank) and continued, no wait times out for the suspension. On CommTimeout the program should print
// the message and call abort_all(): the other ranks may be blocked forever otherwise.
//
// The gradient exchange may also run in the background of the backward: start_alltoallv and
// start_allgatherv start a collective and return a Request at once, progress() drives every started
// one without blocking, wait() blocks for one as the blocking collectives do. Several may be
// outstanding at a time.
//
// Counts and displacements are in elements; every rank must call (or start) the same collectives in
// the same order (the trainer's loop guarantees it: its decisions are taken together, see trainer.cc).
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace tfm::train {

// A timed wait ran out: what() names the collective and the timeout.
class CommTimeout : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The seconds a timed wait has waited, from readings of a monotonic clock taken at each of its polls.
// The intervals between readings add up, but one of kNotRunning seconds or more is left out: polls are
// at most a millisecond apart (src/train/comm.cc), so such a gap is time this process did not run — it
// was stopped (SIGSTOP, Ctrl-Z's SIGTSTP, a scheduler's suspend) — and the peers it waits for were
// most likely stopped with it. A peer stopped alone, stuck or gone is still waited for the full time,
// since this process then keeps running and polling. Gaps, because neither clock would do alone: a
// monotonic clock (CLOCK_MONOTONIC) advances while the process is stopped, and the process's CPU time
// does not advance while it sleeps between polls. Exposed for tests/train/comm_test.cc; every timed
// wait of a Comm uses it.
class WaitedTime {
 public:
  static constexpr double kNotRunning = 1.0;  // seconds: far above a poll's interval and a busy machine's delays
  explicit WaitedTime(double now) : last_(now) {}
  // The seconds waited when the clock reads `now` (readings in order; one earlier than the last adds 0).
  double at(double now) {
    const double gap = now - last_;
    last_ = now;
    if (gap > 0 && gap < kNotRunning) waited_ += gap;
    return waited_;
  }

 private:
  double last_;
  double waited_ = 0;
};

class Comm {
 public:
  Comm() = default;  // the single process
  // MPI_COMM_WORLD (MPI must be initialised by the caller); throws when built without MPI.
  static Comm world();
  // True when the library was built with MPI.
  static bool available();
  // The number of processes the launcher (mpirun, srun) started, from its environment
  // (OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_SIZE... ), 1 when none: a program built without MPI uses
  // it to refuse to run as one of P > 1 copies that would each train alone.
  static int launched_size();
  // This process's rank among them, from the same environment (OMPI_COMM_WORLD_RANK, PMI_RANK,
  // PMIX_RANK), 0 when none: who reports an error found before MPI starts, which every copy finds alike.
  static int launched_rank();

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_size() const { return local_size_; }  // processes on this node
  bool single() const { return size_ == 1; }

  double timeout() const { return timeout_; }
  void set_timeout(double seconds) { timeout_ = seconds; }
  // The data-parallel step cuts its gradient exchange into buckets of about this many bytes, each
  // sent as soon as the backward has finished it (src/train/buckets.h). A speed setting only: any
  // size gives the same bits. Default 4 MiB.
  int64_t bucket_bytes() const { return bucket_bytes_; }
  void set_bucket_bytes(int64_t bytes) { bucket_bytes_ = bytes; }

  // recv[k] for k over ranks ← each rank's send[...]: MPI_Alltoallv on floats.
  void alltoallv(const float* send, const int* send_counts, const int* send_displs, float* recv,
                 const int* recv_counts, const int* recv_displs, bool timed);
  // recv ← every rank's `count` floats at displs[rank] (counts[rank] = count): MPI_Allgatherv. `send`
  // may be recv + displs[rank] (in place).
  void allgatherv(const float* send, int count, float* recv, const int* counts, const int* displs, bool timed);
  // The same on doubles (the split evaluation's records, tfm/train/evaluate.h).
  void allgatherv(const double* send, int count, double* recv, const int* counts, const int* displs, bool timed);
  // recv (n · size doubles) ← every rank's n doubles, in rank order: MPI_Allgather. A timeout's message
  // names it `what`; a timed wait gives the others timeout() plus `grace` seconds (>= 0): for ranks that
  // arrive apart by an amount of work they can estimate (the split evaluation's gather, src/train/evaluate.cc).
  void allgather(const double* send, int n, double* recv, bool timed,
                 const char* what = "the step's agreement (allgather)", double grace = 0);
  // bytes ← rank 0's bytes, on every rank (MPI_Bcast of the length, then of the bytes); the single
  // process keeps its own.
  void broadcast(std::string& bytes, bool timed);
  // Stops every process of the run (MPI_Abort); the single process returns.
  void abort_all(int code) const;

  // ---- non-blocking ----
  // A started collective. Its buffers belong to MPI until wait() on it returned: the send buffer
  // must not be written, nor the receive buffer read. Every started request must be waited for.
  struct Request {
    int id = -1;  // the slot in this Comm's table of started requests; -1: complete
  };
  // The collectives alltoallv and allgatherv (float) describe, started. The single process does its
  // copy here and returns a complete request.
  Request start_alltoallv(const float* send, const int* send_counts, const int* send_displs, float* recv,
                          const int* recv_counts, const int* recv_displs);
  Request start_allgatherv(const float* send, int count, float* recv, const int* counts, const int* displs);
  // Drives every started request once, without blocking (MPI_Test on each): Open MPI advances a
  // non-blocking collective over TCP only inside MPI calls, so a rank that computes while its
  // requests are outstanding calls this between pieces of work. Cheap when nothing is outstanding.
  void progress();
  // True when `r` is complete (after driving every started request once, as progress()).
  bool test(const Request& r);
  // Blocks until `r` is complete, as the blocking collectives wait (timed: CommTimeout after
  // timeout() seconds), then releases it: r becomes complete (id -1).
  void wait(Request& r, bool timed);

 private:
  struct Outstanding;  // the started requests (src/train/comm.cc)
  int rank_ = 0, size_ = 1, local_size_ = 1;
  double timeout_ = 600;
  int64_t bucket_bytes_ = int64_t{4} << 20;
  std::shared_ptr<Outstanding> outstanding_;  // null until the first request is started
};

}  // namespace tfm::train
