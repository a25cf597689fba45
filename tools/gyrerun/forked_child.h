// What every child gyrerun forks (a rank, the job's gyre-store) does between fork and
// exec, in one place.
//
// Contract: called in the child right after fork(), with every signal blocked (gyrerun
// blocks them across fork). dieWithParent(): SIGKILL when gyrerun dies
// (PR_SET_PDEATHSIG), and _exit(127) at once if it already has (it died before prctl
// took effect), so a killed launcher leaves nothing behind. resetSignalsForExec():
// gyrerun's handlers write into its self-pipe, which the child shares until exec, so they
// go before the mask is lifted; exec keeps ignored signals and the mask, so the program
// gets the defaults a shell would give (gyrerun ignores SIGPIPE). Async-signal-safe, as
// is writeString(); pointers() allocates, so it is called before fork.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace gyre::tools {

void dieWithParent(pid_t parent);
void resetSignalsForExec();
// write() of a C string, its result ignored (a child's last words before _exit).
void writeString(int fd, const char* s);
// execve's argv/envp: pointers into `strings`, then nullptr.
std::vector<char*> pointers(std::vector<std::string>& strings);

}  // namespace gyre::tools
