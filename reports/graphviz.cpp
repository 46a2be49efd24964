#include "reports/graphviz.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

extern char** environ;

namespace lnv::report {
namespace {

// Closes the descriptors it holds on every path out.
struct Pipe {
  int fd[2] = {-1, -1};
  Pipe() {
    if (pipe2(fd, O_CLOEXEC) != 0) throw InternalError(std::string("pipe: ") + std::strerror(errno));
  }
  ~Pipe() {
    close_end(0);
    close_end(1);
  }
  void close_end(int k) {
    if (fd[k] >= 0) ::close(fd[k]);
    fd[k] = -1;
  }
};

// SIGPIPE ignored while writing to a child that may exit early (a write then fails with
// EPIPE instead of ending lnverify).
struct IgnoreSigpipe {
  struct sigaction old {};
  IgnoreSigpipe() {
    struct sigaction ign {};
    ign.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &ign, &old);
  }
  ~IgnoreSigpipe() { sigaction(SIGPIPE, &old, nullptr); }
};

}  // namespace

std::string find_dot() {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    const std::string dir = end > start ? dirs.substr(start, end - start) : ".";
    const std::string candidate = dir + "/dot";
    struct stat st {};
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        access(candidate.c_str(), X_OK) == 0)
      return candidate;
    start = end + 1;
  }
  return "";
}

std::string render_svg(const std::string& dot_text, const std::string& option) {
  const std::string dot = find_dot();
  if (dot.empty())
    throw ModelError(option, "Graphviz's `dot` program is not on PATH; the HTML report draws "
                             "the graph with it (Debian: apt-get install graphviz)");
  Pipe in, out, err;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in.fd[0], 0);
  posix_spawn_file_actions_adddup2(&actions, out.fd[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err.fd[1], 2);
  std::array<char*, 3> argv{const_cast<char*>("dot"), const_cast<char*>("-Tsvg"), nullptr};
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, dot.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0)
    throw ModelError(option, "cannot run " + dot + ": " + std::strerror(spawned));
  in.close_end(0);
  out.close_end(1);
  err.close_end(1);

  // Write stdin while reading stdout and stderr, so that neither side blocks on a full pipe.
  IgnoreSigpipe guard;
  std::string svg, errors;
  size_t written = 0;
  if (dot_text.empty()) in.close_end(1);
  while (out.fd[0] >= 0 || err.fd[0] >= 0) {
    std::array<pollfd, 3> fds{pollfd{in.fd[1], POLLOUT, 0}, pollfd{out.fd[0], POLLIN, 0},
                              pollfd{err.fd[0], POLLIN, 0}};
    if (poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (in.fd[1] >= 0 && (fds[0].revents & (POLLOUT | POLLERR | POLLHUP))) {
      const ssize_t n = ::write(in.fd[1], dot_text.data() + written, dot_text.size() - written);
      if (n > 0) written += size_t(n);
      if (n < 0 || written == dot_text.size()) in.close_end(1);
    }
    std::array<char, 65536> buf;
    for (int k : {1, 2}) {
      Pipe& p = k == 1 ? out : err;
      if (p.fd[0] < 0 || !(fds[size_t(k)].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t n = ::read(p.fd[0], buf.data(), buf.size());
      if (n > 0)
        (k == 1 ? svg : errors).append(buf.data(), size_t(n));
      else if (n == 0 || errno != EINTR)
        p.close_end(0);
    }
  }
  in.close_end(1);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw InternalError("`dot -Tsvg` failed on the graph lnverify wrote: " + errors);
  const size_t begin = svg.find("<svg");
  if (begin == std::string::npos) throw InternalError("`dot -Tsvg` wrote no <svg> element");
  return svg.substr(begin);
}

}  // namespace lnv::report
