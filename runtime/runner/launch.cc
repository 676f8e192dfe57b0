// fk_launch: starts N processes of one command as the ranks of a multi-GPU job, with the environment
// torchrun gives its workers (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT; Note [Rendezvous] in fk/runtime/dist.h), and ends them together (Note [Rank failure]).
// Host-only (no CUDA). Across hosts, start one fk_launch per host with --nnodes, --node-rank and the
// same --master-addr / --master-port (or use torchrun / mpirun / srun, whose environments the ranks
// read as well).
//
// Note [Rank failure]
// A rank that fails (exits non-zero or dies of a signal) would leave the others blocked in a
// collective or a rendezvous forever. The launcher watches every rank; on the first failure it says
// which rank failed and how, sends SIGTERM to every other rank's process group (a rank and its
// children), waits --grace seconds, then SIGKILLs what is left, and exits with the failed rank's
// code (128 + the signal for a signal). The ranks themselves bound their waits too (the store's and
// NCCL's timeouts), so a hung launcher-less job also ends. SIGINT / SIGTERM to the launcher end every
// rank the same way.
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

volatile sig_atomic_t g_signal = 0;
void on_signal(int s) { g_signal = s; }

/// A TCP port free on this host a moment ago (the rendezvous port when none is given).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  sa.sin_port = 0;
  socklen_t len = sizeof sa;
  int port = 29500;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0 && ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0)
    port = ntohs(sa.sin_port);
  if (fd >= 0) ::close(fd);
  return port;
}

std::string describe(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const char* name = ::strsignal(WTERMSIG(status));
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + (name ? std::string(" (") + name + ")" : std::string());
  }
  return "ended (status " + std::to_string(status) + ")";
}
int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status) != 0 ? WEXITSTATUS(status) : 1;
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fk_launch: run one command as the N ranks of a multi-GPU job (torchrun's environment: RANK, WORLD_SIZE, "
               "LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT); the first rank to fail ends the others"};
  app.footer("Example: fk_launch --nproc 2 -- build/gpu/fk_bench --world-size 2 ...\n"
             "Exit codes: 0 every rank succeeded; otherwise the first failed rank's code (128 + signal when killed); "
             "2 usage error.");
  int nproc = 0, nnodes = 1, node_rank = 0, port = 0;
  double grace = 5.0;
  std::string addr = "127.0.0.1";
  std::vector<std::string> cmd;
  app.add_option("--nproc", nproc, "ranks on this host, one per GPU")->required()->check(CLI::Range(1, 4096));
  app.add_option("--nnodes", nnodes, "hosts of the job (one fk_launch each)")->check(CLI::Range(1, 4096));
  app.add_option("--node-rank", node_rank, "this host's index among them")->check(CLI::NonNegativeNumber);
  app.add_option("--master-addr", addr, "the host of rank 0 (the store's address)");
  app.add_option("--master-port", port, "the store's port (0: a free one; give one with --nnodes > 1)")->check(CLI::Range(0, 65535));
  app.add_option("--grace", grace, "seconds between SIGTERM and SIGKILL for the other ranks once one failed")->check(CLI::Range(0.0, 3600.0));
  app.add_option("command", cmd, "the command to run as every rank, and its arguments (after --)")->required();
  CLI11_PARSE(app, argc, argv);
  if (node_rank >= nnodes) {
    std::fprintf(stderr, "fk_launch: --node-rank %d: expected below --nnodes %d\n", node_rank, nnodes);
    return 2;
  }
  if (nnodes > 1 && port == 0) {
    std::fprintf(stderr, "fk_launch: --nnodes %d needs --master-port (every host must name the same port)\n", nnodes);
    return 2;
  }
  if (port == 0) port = free_port();
  const int world = nproc * nnodes;

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  std::vector<pid_t> pids(static_cast<size_t>(nproc), -1);
  std::vector<bool> alive(static_cast<size_t>(nproc), false);
  for (int local = 0; local < nproc; ++local) {
    const int rank = node_rank * nproc + local;
    const pid_t pid = ::fork();
    if (pid < 0) {
      std::perror("fk_launch: fork");
      for (int j = 0; j < local; ++j) ::kill(-pids[j], SIGKILL);
      return 1;
    }
    if (pid == 0) {
      ::setpgid(0, 0);
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      auto put = [](const char* k, const std::string& v) { ::setenv(k, v.c_str(), 1); };
      put("RANK", std::to_string(rank));
      put("WORLD_SIZE", std::to_string(world));
      put("LOCAL_RANK", std::to_string(local));
      put("LOCAL_WORLD_SIZE", std::to_string(nproc));
      put("GROUP_RANK", std::to_string(node_rank));
      put("MASTER_ADDR", addr);
      put("MASTER_PORT", std::to_string(port));
      put("FK_LAUNCHER", "fk_launch");
      std::vector<char*> args;
      for (std::string& a : cmd) args.push_back(a.data());
      args.push_back(nullptr);
      ::execvp(args[0], args.data());
      std::fprintf(stderr, "fk_launch: rank %d: cannot run \"%s\": %s\n", rank, cmd[0].c_str(), std::strerror(errno));
      _exit(127);
    }
    ::setpgid(pid, pid);  // also in the parent: no race with the first kill
    pids[static_cast<size_t>(local)] = pid;
    alive[static_cast<size_t>(local)] = true;
  }

  int remaining = nproc, failed_rank = -1, failed_status = 0;
  auto end_others = [&](const char* why) {
    std::fprintf(stderr, "fk_launch: %s; ending the other ranks (SIGTERM, SIGKILL after %.1f s)\n", why, grace);
    for (int j = 0; j < nproc; ++j)
      if (alive[static_cast<size_t>(j)]) ::kill(-pids[static_cast<size_t>(j)], SIGTERM);
    const auto t0 = std::chrono::steady_clock::now();
    bool killed = false;
    while (remaining > 0) {
      int st = 0;
      const pid_t p = ::waitpid(-1, &st, WNOHANG);
      if (p > 0) {
        for (int j = 0; j < nproc; ++j)
          if (pids[static_cast<size_t>(j)] == p && alive[static_cast<size_t>(j)]) {
            alive[static_cast<size_t>(j)] = false;
            --remaining;
            ::kill(-p, SIGKILL);  // its children, if any outlived it
          }
        continue;
      }
      if (!killed && std::chrono::steady_clock::now() - t0 >= std::chrono::duration<double>(grace)) {
        for (int j = 0; j < nproc; ++j)
          if (alive[static_cast<size_t>(j)]) ::kill(-pids[static_cast<size_t>(j)], SIGKILL);
        killed = true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "fk_launch: every rank ended %.2f s after that\n", s);
  };

  while (remaining > 0) {
    if (g_signal != 0) {
      end_others(("fk_launch received signal " + std::to_string(int(g_signal))).c_str());
      return 128 + g_signal;
    }
    int st = 0;
    const pid_t p = ::waitpid(-1, &st, 0);
    if (p < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int j = 0; j < nproc; ++j) {
      if (pids[static_cast<size_t>(j)] != p || !alive[static_cast<size_t>(j)]) continue;
      alive[static_cast<size_t>(j)] = false;
      --remaining;
      if (WIFEXITED(st) && WEXITSTATUS(st) == 0) continue;
      failed_rank = node_rank * nproc + j;
      failed_status = st;
      ::kill(-p, SIGKILL);  // what the failed rank left behind
      const std::string why = "rank " + std::to_string(failed_rank) + " of " + std::to_string(world) + " (pid " + std::to_string(p) +
                              ") " + describe(st);
      end_others(why.c_str());
    }
  }
  if (failed_rank >= 0) return exit_code_of(failed_status);
  return 0;
}
