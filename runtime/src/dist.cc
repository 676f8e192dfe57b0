// Multi-GPU bootstrap: the launchers' environment and the TCP store (fk/runtime/dist.h, Note
// [Rendezvous]). Host-only (fk_dist, cmake/dist.cmake).
//
// Wire format (both directions, little-endian as the hosts are): a request is op (u8), key length
// (u32), key, value length (u64), value; a reply is status (u8: 0 ok, 1 absent) and a value (u64
// length + bytes). Ops: set, get (absent when the key is not there yet: the client polls until its
// deadline), add (the value is a decimal delta, the reply the decimal sum). The server is one thread
// on rank 0 polling its listening socket and every client; a client sends whole requests and waits
// for the reply, so the server reads a request to its end once its first byte arrives.
#include "fk/runtime/dist.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <stdexcept>
#include <thread>
#include <vector>

namespace fk::dist {
namespace {

enum Op : uint8_t { kSet = 1, kGet = 2, kAdd = 3 };

/// A non-negative integer of the environment; absent: `fallback` (nullopt-like: -1 means required).
int env_int(const std::function<const char*(const char*)>& get, const char* name, int fallback, int min_value) {
  const char* v = get(name);
  if (v == nullptr || *v == '\0') {
    if (fallback < 0) throw std::runtime_error(std::string("rendezvous: ") + name + " is not set (expected an integer >= " + std::to_string(min_value) + ")");
    return fallback;
  }
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || x < min_value || x > 1000000)
    throw std::runtime_error(std::string("rendezvous: ") + name + "=\"" + v + "\": expected an integer >= " + std::to_string(min_value));
  return static_cast<int>(x);
}

bool send_all(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t k = ::send(fd, c, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    c += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}
bool recv_all(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t k = ::recv(fd, c, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    c += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}
bool send_blob(int fd, const std::string& s) {
  const uint64_t n = s.size();
  return send_all(fd, &n, sizeof n) && send_all(fd, s.data(), s.size());
}
bool recv_blob(int fd, std::string& s, uint64_t limit) {
  uint64_t n = 0;
  if (!recv_all(fd, &n, sizeof n) || n > limit) return false;
  s.resize(static_cast<size_t>(n));
  return recv_all(fd, s.data(), s.size());
}
constexpr uint64_t kMaxValue = uint64_t(1) << 30;

/// The IPv4 address of `host` (a dotted quad or a resolvable name).
in_addr resolve(const std::string& host) {
  in_addr a{};
  if (::inet_pton(AF_INET, host.c_str(), &a) == 1) return a;
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || res == nullptr)
    throw std::runtime_error("rendezvous: MASTER_ADDR=\"" + host + "\" does not resolve to an IPv4 address");
  a = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
  ::freeaddrinfo(res);
  return a;
}

}  // namespace

DistEnv dist_env_from(const std::function<const char*(const char*)>& get) {
  DistEnv e;
  auto has = [&](const char* n) { return get(n) != nullptr && *get(n) != '\0'; };
  const char *rank = nullptr, *size = nullptr, *local = nullptr, *local_size = nullptr;
  if (has("RANK") || has("WORLD_SIZE")) {
    e.launcher = "torchrun";
    rank = "RANK", size = "WORLD_SIZE", local = "LOCAL_RANK", local_size = "LOCAL_WORLD_SIZE";
  } else if (has("OMPI_COMM_WORLD_RANK") || has("OMPI_COMM_WORLD_SIZE")) {
    e.launcher = "mpirun";
    rank = "OMPI_COMM_WORLD_RANK", size = "OMPI_COMM_WORLD_SIZE", local = "OMPI_COMM_WORLD_LOCAL_RANK",
    local_size = "OMPI_COMM_WORLD_LOCAL_SIZE";
  } else if (has("SLURM_PROCID") && has("SLURM_NTASKS")) {
    e.launcher = "slurm";
    rank = "SLURM_PROCID", size = "SLURM_NTASKS", local = "SLURM_LOCALID", local_size = "SLURM_NTASKS_PER_NODE";
  }
  if (rank != nullptr) {
    e.rank = env_int(get, rank, -1, 0);
    e.world_size = env_int(get, size, -1, 1);
    if (e.rank >= e.world_size)
      throw std::runtime_error(std::string("rendezvous: ") + rank + "=" + std::to_string(e.rank) + " is not below " + size + "=" +
                               std::to_string(e.world_size));
    // Without a local rank, one host holds every rank (a single-node launch).
    e.local_rank = env_int(get, local, e.rank, 0);
    e.local_world_size = env_int(get, local_size, e.world_size, 1);
    if (e.local_rank >= e.local_world_size || e.local_world_size > e.world_size)
      throw std::runtime_error(std::string("rendezvous: ") + local + "=" + std::to_string(e.local_rank) + " / " + local_size + "=" +
                               std::to_string(e.local_world_size) + ": expected a local rank below the ranks on this host, and at most " +
                               std::to_string(e.world_size) + " of them");
  }
  if (has("MASTER_ADDR")) e.master_addr = get("MASTER_ADDR");
  e.master_port = env_int(get, "MASTER_PORT", e.master_port, 0);
  if (e.master_port > 65535) throw std::runtime_error("rendezvous: MASTER_PORT=" + std::to_string(e.master_port) + ": expected a TCP port (0-65535)");
  if (e.world_size > 1 && e.master_port == 0)
    throw std::runtime_error("rendezvous: MASTER_PORT=0 with " + std::to_string(e.world_size) + " ranks: the other ranks cannot find the port");
  return e;
}

DistEnv dist_env() { return dist_env_from([](const char* n) { return static_cast<const char*>(std::getenv(n)); }); }

// ---------------------------------------------------------------------------------------------
// The server (rank 0).

struct TcpStore::Server {
  int listen_fd = -1;
  int wake[2] = {-1, -1};  ///< a pipe: the destructor writes to it to end the loop
  std::thread thread;
  std::map<std::string, std::string> data;

  /// One request of client `fd`; false when the client is gone or spoke nonsense.
  bool serve(int fd) {
    uint8_t op = 0;
    uint32_t klen = 0;
    if (!recv_all(fd, &op, 1) || !recv_all(fd, &klen, sizeof klen) || klen > (1u << 20)) return false;
    std::string key(klen, '\0'), value;
    if (!recv_all(fd, key.data(), klen) || !recv_blob(fd, value, kMaxValue)) return false;
    uint8_t status = 0;
    std::string reply;
    switch (op) {
      case kSet: data[key] = value; break;
      case kGet: {
        auto it = data.find(key);
        if (it == data.end()) status = 1;
        else reply = it->second;
        break;
      }
      case kAdd: {
        auto it = data.find(key);
        char* end = nullptr;
        const long long base = it == data.end() ? 0 : std::strtoll(it->second.c_str(), &end, 10);
        const long long delta = std::strtoll(value.c_str(), &end, 10);
        data[key] = reply = std::to_string(base + delta);
        break;
      }
      default: return false;
    }
    return send_all(fd, &status, 1) && send_blob(fd, reply);
  }
  void loop() {
    std::vector<int> clients;
    for (;;) {
      std::vector<pollfd> fds{{wake[0], POLLIN, 0}, {listen_fd, POLLIN, 0}};
      for (int c : clients) fds.push_back({c, POLLIN, 0});
      if (::poll(fds.data(), fds.size(), -1) < 0) {
        if (errno == EINTR) continue;
        break;
      }
      if (fds[0].revents) break;
      std::vector<int> keep;
      for (size_t i = 2; i < fds.size(); ++i) {
        const int c = fds[i].fd;
        if (fds[i].revents == 0 || ((fds[i].revents & POLLIN) && serve(c))) keep.push_back(c);
        else ::close(c);
      }
      if (fds[1].revents & POLLIN) {  // a new client joins the next poll
        const int c = ::accept(listen_fd, nullptr, nullptr);
        if (c >= 0) {
          const int one = 1;
          ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          keep.push_back(c);
        }
      }
      clients = std::move(keep);
    }
    for (int c : clients) ::close(c);
  }
};

TcpStore::TcpStore(const DistEnv& env, std::chrono::milliseconds timeout) : env_(env), timeout_(timeout), port_(env.master_port) {
  const in_addr addr = resolve(env.master_addr);
  if (env.rank == 0) {
    server_ = std::make_unique<Server>();
    Server& s = *server_;
    s.listen_fd = ::socket(AF_INET, SOCK_STREAM, 0);
    const int one = 1;
    ::setsockopt(s.listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr = addr;
    sa.sin_port = htons(static_cast<uint16_t>(env.master_port));
    if (s.listen_fd < 0 || ::bind(s.listen_fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || ::listen(s.listen_fd, 256) != 0) {
      const std::string why = std::strerror(errno);
      if (s.listen_fd >= 0) ::close(s.listen_fd);
      server_.reset();
      fail("rank 0 cannot serve on " + env.master_addr + ":" + std::to_string(env.master_port) + " (" + why + ")");
    }
    socklen_t len = sizeof sa;
    ::getsockname(s.listen_fd, reinterpret_cast<sockaddr*>(&sa), &len);
    port_ = ntohs(sa.sin_port);
    if (::pipe(s.wake) != 0) fail("rank 0: pipe() failed");
    s.thread = std::thread([&s] { s.loop(); });
  }
  // Connect (rank 0 too), retrying until the deadline: rank 0 may not be listening yet.
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  for (;;) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr = addr;
    sa.sin_port = htons(static_cast<uint16_t>(port_));
    if (fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0) break;
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    if (std::chrono::steady_clock::now() >= deadline)
      fail("could not reach the store at " + env.master_addr + ":" + std::to_string(port_) + " within " + std::to_string(timeout_.count()) +
           " ms (is rank 0 running, and MASTER_ADDR / MASTER_PORT the same on every rank?)");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

TcpStore::~TcpStore() {
  if (fd_ >= 0) ::close(fd_);
  if (server_) {
    const char x = 1;
    if (::write(server_->wake[1], &x, 1) != 1) { /* the loop ends when the pipe closes anyway */ }
    if (server_->thread.joinable()) server_->thread.join();
    ::close(server_->wake[0]);
    ::close(server_->wake[1]);
    ::close(server_->listen_fd);
  }
}

void TcpStore::fail(const std::string& what) const {
  throw std::runtime_error("rendezvous (rank " + std::to_string(env_.rank) + " of " + std::to_string(env_.world_size) + "): " + what);
}

std::string TcpStore::request(uint8_t op, const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint32_t klen = static_cast<uint32_t>(key.size());
  uint8_t status = 0;
  std::string reply;
  if (!send_all(fd_, &op, 1) || !send_all(fd_, &klen, sizeof klen) || !send_all(fd_, key.data(), key.size()) || !send_blob(fd_, value) ||
      !recv_all(fd_, &status, 1) || !recv_blob(fd_, reply, kMaxValue))
    fail("the store at " + env_.master_addr + ":" + std::to_string(port_) + " closed the connection (rank 0 ended?) during \"" + key + "\"");
  if (status == 1) throw std::out_of_range(key);
  return reply;
}

void TcpStore::set(const std::string& key, const std::string& value) { request(kSet, key, value); }

bool TcpStore::check(const std::string& key) {
  try {
    request(kGet, key, "");
    return true;
  } catch (const std::out_of_range&) {
    return false;
  }
}

std::string TcpStore::get(const std::string& key) {
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  for (;;) {
    try {
      return request(kGet, key, "");
    } catch (const std::out_of_range&) {
      if (std::chrono::steady_clock::now() >= deadline)
        fail("\"" + key + "\" was not set within " + std::to_string(timeout_.count()) + " ms (a rank missing or ended?)");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
}

int64_t TcpStore::add(const std::string& key, int64_t delta) { return std::stoll(request(kAdd, key, std::to_string(delta))); }

std::vector<std::string> TcpStore::all_gather(const std::string& name, const std::string& value) {
  set(name + "/" + std::to_string(env_.rank), value);
  std::vector<std::string> out;
  out.reserve(static_cast<size_t>(env_.world_size));
  for (int r = 0; r < env_.world_size; ++r) out.push_back(r == env_.rank ? value : get(name + "/" + std::to_string(r)));
  return out;
}

void TcpStore::barrier(const std::string& name) {
  add("barrier/" + name, 1);
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  while (add("barrier/" + name, 0) < env_.world_size) {
    if (std::chrono::steady_clock::now() >= deadline)
      fail("barrier \"" + name + "\": " + std::to_string(add("barrier/" + name, 0)) + " of " + std::to_string(env_.world_size) +
           " ranks arrived within " + std::to_string(timeout_.count()) + " ms");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace fk::dist
