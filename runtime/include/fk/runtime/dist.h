// Multi-GPU bootstrap (issue 23; DESIGN.md "Multi-GPU"): one process per GPU, the rank, world size
// and rendezvous address taken from the environment the production launchers set, and a small TCP
// key-value store through which the ranks meet (NCCL's unique id, barriers, an abort flag). Host
// code only: it builds and is tested without CUDA (fk_dist).
//
// Note [Rendezvous]
// The launchers' conventions, in this order of precedence:
//   torchrun / torch.distributed env://   RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
//                                         MASTER_ADDR, MASTER_PORT
//   mpirun (Open MPI)                     OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE,
//                                         OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE,
//                                         with MASTER_ADDR / MASTER_PORT from the job (mpirun -x)
//   Slurm (srun)                          SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID,
//                                         SLURM_NTASKS_PER_NODE, MASTER_ADDR / MASTER_PORT
//   none of them                          a single process: rank 0 of 1
// Rank 0 serves the store on MASTER_ADDR:MASTER_PORT (default 127.0.0.1:29500, torch's default
// port); every rank, rank 0 included, is a client of it. The same binary runs across hosts when
// MASTER_ADDR names rank 0's host and the port is reachable: nothing here assumes one host (the
// local rank picks the GPU; the global rank and world size shape the communicator). A client
// retries the connection until its timeout (rank 0 may start last) and every wait on the store
// ends at the timeout with an error naming the key, the rank and the address, so that a missing
// or dead rank ends the others with a message instead of a hang.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace fk::dist {

/// Where this process sits in a multi-process run (Note [Rendezvous]).
struct DistEnv {
  int rank = 0, world_size = 1, local_rank = 0, local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string launcher = "single";  ///< "torchrun", "mpirun", "slurm" or "single"
};

/// The environment of a launcher, read through `get` (getenv, or a map in tests). Malformed or
/// inconsistent values throw std::runtime_error naming the variable, its value and what was expected.
DistEnv dist_env_from(const std::function<const char*(const char*)>& get);
/// dist_env_from(getenv).
DistEnv dist_env();

/// A TCP key-value store (the role of torch.distributed's TCPStore): rank 0 serves it, every rank
/// talks to it. Values are byte strings; get waits for a key another rank sets.
class TcpStore {
 public:
  /// Rank 0 listens on env.master_addr:env.master_port (port 0: any free port, see port()); every
  /// rank then connects, retrying until `timeout`. The timeout also bounds every later wait.
  TcpStore(const DistEnv& env, std::chrono::milliseconds timeout);
  ~TcpStore();
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  void set(const std::string& key, const std::string& value);
  /// The key's value once some rank has set it; throws after the timeout.
  std::string get(const std::string& key);
  /// Whether the key is set now (no wait).
  bool check(const std::string& key);
  /// Adds delta to the integer under key (0 when absent) and returns the sum.
  int64_t add(const std::string& key, int64_t delta);
  /// Returns when every rank of the world has called barrier(name) (names must be fresh per use).
  void barrier(const std::string& name);
  /// Every rank's `value` under `name`, in rank order: this rank's is set at name/<rank>, the others'
  /// awaited (bounded by the timeout). Every rank calls it; names must be fresh per use.
  std::vector<std::string> all_gather(const std::string& name, const std::string& value);
  /// The port rank 0 serves on (the bound one when master_port was 0).
  int port() const { return port_; }
  const DistEnv& env() const { return env_; }

 private:
  struct Server;
  std::string request(uint8_t op, const std::string& key, const std::string& value);
  [[noreturn]] void fail(const std::string& what) const;
  DistEnv env_;
  std::chrono::milliseconds timeout_;
  int port_ = 0;
  int fd_ = -1;
  std::mutex mu_;  ///< one request at a time on the connection
  std::unique_ptr<Server> server_;
};

}  // namespace fk::dist
