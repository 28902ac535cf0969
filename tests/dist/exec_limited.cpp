// Runs a command on every MPI rank, and makes one rank (OMPI_COMM_WORLD_RANK == RANK) unable to
// write a file, for the ZeRO-1 checkpoint tests (tests/dist/zero_cli.cmake):
//   mixtrain_dist_exec_limited fail BYTES RANK command args...
//     on RANK, a write past BYTES bytes of a file fails with EFBIG, as on a full disk;
//   mixtrain_dist_exec_limited kill DIR PREFIX RANK command args...
//     on RANK, the command runs as a child; when a file whose name starts with PREFIX appears in DIR
//     (the temporary of an atomic write: it exists only while the file is being written), the child
//     is killed with SIGKILL and this process dies of SIGKILL too, so the launcher sees a rank
//     killed in the middle of writing that file.
// Other ranks exec the command unchanged.
#include <sys/inotify.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

bool is_rank(const char* rank) {
  const char* mine = std::getenv("OMPI_COMM_WORLD_RANK");
  return mine != nullptr && std::string(mine) == rank;
}

int run(char** command) {
  execvp(command[0], command);
  std::perror("execvp");
  return 127;
}

int kill_when_created(const char* dir, const char* prefix, char** command) {
  const int fd = inotify_init1(IN_CLOEXEC);
  if (fd < 0 || inotify_add_watch(fd, dir, IN_CREATE) < 0) {
    std::perror("inotify");
    return 2;
  }
  const pid_t child = fork();
  if (child < 0) {
    std::perror("fork");
    return 2;
  }
  if (child == 0) return run(command);
  alignas(inotify_event) char buffer[4096];
  for (;;) {
    const ssize_t n = read(fd, buffer, sizeof buffer);
    if (n <= 0) break;
    for (ssize_t at = 0; at < n;) {
      const auto* e = reinterpret_cast<const inotify_event*>(buffer + at);
      if (e->len > 0 && std::strncmp(e->name, prefix, std::strlen(prefix)) == 0) {
        kill(child, SIGKILL);
        std::fprintf(stderr, "exec_limited: killed the command as it wrote %s/%s\n", dir, e->name);
        waitpid(child, nullptr, 0);
        std::signal(SIGKILL, SIG_DFL);
        raise(SIGKILL);
      }
      at += static_cast<ssize_t>(sizeof(inotify_event) + e->len);
    }
    int status = 0;
    if (waitpid(child, &status, WNOHANG) == child) return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  }
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 5 && std::strcmp(argv[1], "fail") == 0) {
    if (is_rank(argv[3])) {
      std::signal(SIGXFSZ, SIG_IGN);  // a failed write, not a signal
      const rlim_t bytes = std::strtoull(argv[2], nullptr, 10);
      const rlimit limit{bytes, bytes};
      if (setrlimit(RLIMIT_FSIZE, &limit) != 0) {
        std::perror("setrlimit");
        return 2;
      }
    }
    return run(argv + 4);
  }
  if (argc >= 6 && std::strcmp(argv[1], "kill") == 0)
    return is_rank(argv[4]) ? kill_when_created(argv[2], argv[3], argv + 5) : run(argv + 5);
  std::fprintf(stderr, "usage: %s fail BYTES RANK command... | kill DIR PREFIX RANK command...\n", argv[0]);
  return 2;
}
