// src/train/comm.cc — Comm (tfm/train/comm.h): MPI_COMM_WORLD's non-blocking collectives waited for
// by polling, or the single process.
#include "tfm/train/comm.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <thread>

#include "quote.h"

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

int Comm::launched_rank() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"})
    if (const char* v = std::getenv(var)) return std::atoi(v);
  return 0;
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

namespace {

// The single process's share of a collective: its own part, moved to its place in `recv` (nothing
// to do when it is already there).
template <typename T>
void own_part(const T* send, int count, T* recv, int displ) {
  if (recv + displ != send) std::memmove(recv + displ, send, sizeof(T) * static_cast<size_t>(count));
}

#ifdef TFM_HAVE_MPI

void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS)
    throw std::runtime_error(std::string("MPI: ") + what + " failed (error " + std::to_string(rc) + ")");
}

// MPI_Test of a started collective. MPI_COMM_WORLD keeps MPI's default handler (MPI_ERRORS_ARE_FATAL), which
// aborts the job on an error before MPI_Test returns; should a handler return errors instead, a collective that
// completed in error (its buffers then hold anything) throws, naming it, rather than being taken as done.
void test_request(MPI_Request& req, int& done, const char* what) {
  const int rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
  if (rc != MPI_SUCCESS) {
    char text[MPI_MAX_ERROR_STRING];
    int n = 0;
    MPI_Error_string(rc, text, &n);
    throw std::runtime_error(std::string("MPI: ") + what + " failed: " + std::string(text, static_cast<size_t>(n)));
  }
}

// Polls `req` until it completes; with `timed`, throws CommTimeout once it has waited timeout() plus
// `grace` seconds, counted by WaitedTime (tfm/train/comm.h: time this process was stopped is left out).
// The first polls spin (a step's collective usually completes within microseconds of the last rank's
// arrival), later ones sleep a little so that a waiting rank leaves the cores to ranks still
// computing on the same node.
void poll_until_done(MPI_Request& req, const Comm& c, const char* what, bool timed, double grace = 0) {
  using Clock = std::chrono::steady_clock;  // CLOCK_MONOTONIC
  const auto now = [start = Clock::now()] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  WaitedTime waited(now());
  int done = 0;
  for (int polls = 0;; ++polls) {
    test_request(req, done, what);
    if (done) return;
    if (polls > 2000) std::this_thread::sleep_for(std::chrono::microseconds(polls > 20000 ? 1000 : 50));
    if (timed && waited.at(now()) > c.timeout() + grace)
      throw CommTimeout(std::string("no answer from the other processes in ") + what + " within --comm-timeout " +
                        number_text(c.timeout()) + " s" +
                        (grace > 0 ? " plus " + number_text(std::ceil(grace * 10) / 10) + " s of grace" : "") +
                        " (a process is stopped, stuck or gone)");
  }
}

template <typename T>
MPI_Datatype mpi_type();
template <>
MPI_Datatype mpi_type<float>() {
  return MPI_FLOAT;
}
template <>
MPI_Datatype mpi_type<double>() {
  return MPI_DOUBLE;
}

// MPI_Iallgatherv started; this rank's part already in place in recv is passed as MPI_IN_PLACE (MPI
// forbids aliased buffers).
template <typename T>
MPI_Request mpi_start_allgatherv(const Comm& c, const T* send, int count, T* recv, const int* counts,
                                 const int* displs) {
  const void* from = send == recv + displs[c.rank()] ? MPI_IN_PLACE : send;
  MPI_Request req;
  check(MPI_Iallgatherv(from, count, mpi_type<T>(), recv, counts, displs, mpi_type<T>(), MPI_COMM_WORLD, &req),
        "MPI_Iallgatherv");
  return req;
}

const char* const kExchange = "the gradient exchange (alltoallv)";
const char* const kGather = "the gradient gather (allgatherv)";

#endif

}  // namespace

// The started requests of a Comm (and of its copies, which are the same communicator): slot id of a
// Request is requests[id], MPI_REQUEST_NULL once MPI_Test found it complete; released slots are
// reused.
struct Comm::Outstanding {
#ifdef TFM_HAVE_MPI
  std::vector<MPI_Request> requests;
  int add(MPI_Request req, const char* name) {
    if (released.empty()) {
      requests.push_back(req);
      what.push_back(name);
      return static_cast<int>(requests.size() - 1);
    }
    const int id = released.back();
    released.pop_back();
    requests[static_cast<size_t>(id)] = req;
    what[static_cast<size_t>(id)] = name;
    return id;
  }
#endif
  std::vector<const char*> what;  // the collective, for a timeout's message
  std::vector<int> released;
};

// Built without MPI, a Comm is always the single process (world() throws), so each collective below
// is its single-process branch alone.

#ifdef TFM_HAVE_MPI

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

#else

Comm Comm::world() {
  throw std::logic_error("Comm::world: this tfm library was built without MPI (TFM_MPI=OFF or MPI not found)");
}

#endif

void Comm::alltoallv(const float* send, const int* send_counts, const int* send_displs, float* recv,
                     const int* recv_counts, const int* recv_displs, bool timed) {
  Request r = start_alltoallv(send, send_counts, send_displs, recv, recv_counts, recv_displs);
  wait(r, timed);
}

void Comm::allgatherv(const float* send, int count, float* recv, const int* counts, const int* displs, bool timed) {
  Request r = start_allgatherv(send, count, recv, counts, displs);
  wait(r, timed);
}

void Comm::allgatherv(const double* send, int count, double* recv, [[maybe_unused]] const int* counts,
                      const int* displs, [[maybe_unused]] bool timed) {
  if (size_ == 1) return own_part(send, count, recv, displs[0]);
#ifdef TFM_HAVE_MPI
  MPI_Request req = mpi_start_allgatherv(*this, send, count, recv, counts, displs);
  poll_until_done(req, *this, "the evaluation's gather (allgatherv)", timed);
#endif
}

void Comm::allgather(const double* send, int n, double* recv, [[maybe_unused]] bool timed,
                     [[maybe_unused]] const char* what, [[maybe_unused]] double grace) {
  if (size_ == 1) return own_part(send, n, recv, 0);
#ifdef TFM_HAVE_MPI
  MPI_Request req;
  check(MPI_Iallgather(send, n, MPI_DOUBLE, recv, n, MPI_DOUBLE, MPI_COMM_WORLD, &req), "MPI_Iallgather");
  poll_until_done(req, *this, what, timed, grace);
#endif
}

Comm::Request Comm::start_alltoallv(const float* send, const int* send_counts, const int* send_displs, float* recv,
                                   [[maybe_unused]] const int* recv_counts, const int* recv_displs) {
  if (size_ == 1) {
    own_part(send + send_displs[0], send_counts[0], recv, recv_displs[0]);
    return Request{};
  }
#ifdef TFM_HAVE_MPI
  MPI_Request req;
  check(MPI_Ialltoallv(send, send_counts, send_displs, MPI_FLOAT, recv, recv_counts, recv_displs, MPI_FLOAT,
                       MPI_COMM_WORLD, &req),
        "MPI_Ialltoallv");
  if (!outstanding_) outstanding_ = std::make_shared<Outstanding>();
  return Request{outstanding_->add(req, kExchange)};
#else
  return Request{};
#endif
}

Comm::Request Comm::start_allgatherv(const float* send, int count, float* recv, [[maybe_unused]] const int* counts,
                                    const int* displs) {
  if (size_ == 1) {
    own_part(send, count, recv, displs[0]);
    return Request{};
  }
#ifdef TFM_HAVE_MPI
  if (!outstanding_) outstanding_ = std::make_shared<Outstanding>();
  return Request{outstanding_->add(mpi_start_allgatherv(*this, send, count, recv, counts, displs), kGather)};
#else
  return Request{};
#endif
}

void Comm::progress() {
#ifdef TFM_HAVE_MPI
  if (!outstanding_) return;
  int done = 0;
  for (size_t i = 0; i < outstanding_->requests.size(); ++i)
    if (outstanding_->requests[i] != MPI_REQUEST_NULL)
      test_request(outstanding_->requests[i], done, outstanding_->what[i]);
#endif
}

bool Comm::test([[maybe_unused]] const Request& r) {
  progress();
#ifdef TFM_HAVE_MPI
  return r.id < 0 || outstanding_->requests[static_cast<size_t>(r.id)] == MPI_REQUEST_NULL;
#else
  return true;
#endif
}

void Comm::wait(Request& r, [[maybe_unused]] bool timed) {
  if (r.id < 0) return;
#ifdef TFM_HAVE_MPI
  const size_t id = static_cast<size_t>(r.id);
  poll_until_done(outstanding_->requests[id], *this, outstanding_->what[id], timed);
#endif
  outstanding_->released.push_back(r.id);
  r.id = -1;
}

void Comm::broadcast([[maybe_unused]] std::string& bytes, [[maybe_unused]] bool timed) {
  if (size_ == 1) return;
#ifdef TFM_HAVE_MPI
  long long n = static_cast<long long>(bytes.size());
  MPI_Request req;
  check(MPI_Ibcast(&n, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD, &req), "MPI_Ibcast");
  poll_until_done(req, *this, "the broadcast from rank 0 (its length)", timed);
  if (n > std::numeric_limits<int>::max())
    throw std::runtime_error("Comm::broadcast: " + std::to_string(n) + " bytes exceed what one MPI message counts");
  bytes.resize(static_cast<size_t>(n));
  check(MPI_Ibcast(bytes.data(), static_cast<int>(n), MPI_CHAR, 0, MPI_COMM_WORLD, &req), "MPI_Ibcast");
  poll_until_done(req, *this, "the broadcast from rank 0", timed);
#endif
}

void Comm::abort_all([[maybe_unused]] int code) const {
#ifdef TFM_HAVE_MPI
  if (size_ > 1) MPI_Abort(MPI_COMM_WORLD, code);
#endif
}

}  // namespace tfm::train
