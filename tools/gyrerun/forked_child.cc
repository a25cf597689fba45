#include "tools/gyrerun/forked_child.h"

#include <signal.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <cstring>
#include <initializer_list>

namespace gyre::tools {

void dieWithParent(pid_t parent) {
#ifdef __linux__
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);  // gyrerun died before prctl took effect
#else
  (void)parent;
#endif
}

void resetSignalsForExec() {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int signo : {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGPIPE}) ::sigaction(signo, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
}

void writeString(int fd, const char* s) {
  ssize_t ignored = ::write(fd, s, std::strlen(s));
  (void)ignored;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> p;
  for (std::string& s : strings) p.push_back(s.data());
  p.push_back(nullptr);
  return p;
}

}  // namespace gyre::tools
