// src/train/comm.cc — Comm (tfm/train/comm.h): MPI_COMM_WORLD's non-blocking collectives waited for
// by polling, or the single process.
#include "tfm/train/comm.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#ifdef TFM_HAVE_MPI
#include <mpi.h>
#endif

namespace tfm::train {

bool Comm::available() {
#ifdef TFM_HAVE_MPI
  return true;
#else
  return false;
#endif
}

int Comm::launched_size() {
  // Open MPI's mpirun, then the PMI / PMIx variables of MPICH's hydra and of Slurm's srun.
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS"}) {
    if (std::strcmp(var, "SLURM_NTASKS") == 0 && !std::getenv("PMI_RANK") && !std::getenv("PMIX_RANK")) continue;
    if (const char* v = std::getenv(var)) {
      const int n = std::atoi(v);
      if (n > 0) return n;
    }
  }
  return 1;
}

#ifdef TFM_HAVE_MPI

namespace {

// Polls `req` until it completes; with `timed`, throws CommTimeout after `timeout` seconds. The
// first polls spin (a step's collective usually completes within microseconds of the last rank's
// arrival), later ones sleep a little so that a waiting rank leaves the cores to ranks still
// computing on the same node.
void wait(MPI_Request& req, const Comm& c, const char* what, bool timed) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  int done = 0;
  for (int polls = 0;; ++polls) {
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (done) return;
    if (polls > 2000) {
      std::this_thread::sleep_for(std::chrono::microseconds(polls > 20000 ? 1000 : 50));
      if (timed && std::chrono::duration<double>(Clock::now() - start).count() > c.timeout())
        throw CommTimeout(std::string("no answer from the other processes in ") + what + " within --comm-timeout " +
                          std::to_string(static_cast<long long>(c.timeout())) +
                          " s (a process is stopped, stuck or gone)");
    }
  }
}

void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) throw std::runtime_error(std::string("MPI: ") + what + " failed (error " + std::to_string(rc) + ")");
}

}  // namespace

Comm Comm::world() {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (!initialised) throw std::logic_error("Comm::world: MPI_Init has not been called");
  Comm c;
  MPI_Comm_rank(MPI_COMM_WORLD, &c.rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &c.size_);
  MPI_Comm node;
  check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c.rank_, MPI_INFO_NULL, &node), "MPI_Comm_split_type");
  MPI_Comm_size(node, &c.local_size_);
  MPI_Comm_free(&node);
  return c;
}

void Comm::alltoallv(const float* send, const int* send_counts, const int* send_displs, float* recv,
                     const int* recv_counts, const int* recv_displs, bool timed) {
  if (size_ == 1) {
    std::memcpy(recv + recv_displs[0], send + send_displs[0], sizeof(float) * static_cast<size_t>(send_counts[0]));
    return;
  }
  MPI_Request req;
  check(MPI_Ialltoallv(send, send_counts, send_displs, MPI_FLOAT, recv, recv_counts, recv_displs, MPI_FLOAT,
                       MPI_COMM_WORLD, &req),
        "MPI_Ialltoallv");
  wait(req, *this, "the gradient exchange (alltoallv)", timed);
}

void Comm::allgatherv(const float* send, int count, float* recv, const int* counts, const int* displs, bool timed) {
  if (size_ == 1) {
    if (recv + displs[0] != send) std::memmove(recv + displs[0], send, sizeof(float) * static_cast<size_t>(count));
    return;
  }
  // This rank's part already in place in recv: MPI_IN_PLACE (MPI forbids aliased buffers).
  const void* from = send == recv + displs[rank_] ? MPI_IN_PLACE : send;
  MPI_Request req;
  check(MPI_Iallgatherv(from, count, MPI_FLOAT, recv, counts, displs, MPI_FLOAT, MPI_COMM_WORLD, &req),
        "MPI_Iallgatherv");
  wait(req, *this, "the gradient gather (allgatherv)", timed);
}

void Comm::allgather(const double* send, int n, double* recv, bool timed) {
  if (size_ == 1) {
    std::memmove(recv, send, sizeof(double) * static_cast<size_t>(n));
    return;
  }
  MPI_Request req;
  check(MPI_Iallgather(send, n, MPI_DOUBLE, recv, n, MPI_DOUBLE, MPI_COMM_WORLD, &req), "MPI_Iallgather");
  wait(req, *this, "the step's agreement (allgather)", timed);
}

void Comm::abort_all(int code) const {
  if (size_ > 1) MPI_Abort(MPI_COMM_WORLD, code);
}

#else  // without MPI: the single process only

Comm Comm::world() {
  throw std::logic_error("Comm::world: this tfm library was built without MPI (TFM_MPI=OFF or MPI not found)");
}

void Comm::alltoallv(const float* send, const int* send_counts, const int* send_displs, float* recv,
                     const int* /*recv_counts*/, const int* recv_displs, bool /*timed*/) {
  std::memcpy(recv + recv_displs[0], send + send_displs[0], sizeof(float) * static_cast<size_t>(send_counts[0]));
}

void Comm::allgatherv(const float* send, int count, float* recv, const int* /*counts*/, const int* displs, bool /*timed*/) {
  if (recv + displs[0] != send) std::memmove(recv + displs[0], send, sizeof(float) * static_cast<size_t>(count));
}

void Comm::allgather(const double* send, int n, double* recv, bool /*timed*/) {
  std::memmove(recv, send, sizeof(double) * static_cast<size_t>(n));
}

void Comm::abort_all(int /*code*/) const {}

#endif

}  // namespace tfm::train
