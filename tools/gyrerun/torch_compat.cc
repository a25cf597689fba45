#include "tools/gyrerun/torch_compat.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace gyre::tools {
namespace {

constexpr int kTorchRdzvPort = 29400;

bool parsePositive(const std::string& text, long max, long& out) {
  if (text.empty() || text.size() > 9) return false;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  out = std::strtol(text.c_str(), nullptr, 10);
  return out >= 1 && out <= max;
}

bool endsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

int countGpus() {
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) {
    std::string v = visible;
    if (v.empty() || v.rfind("-1", 0) == 0) return 0;
    int n = 1;
    for (char c : v) n += c == ',';
    return n;
  }
  int n = 0;
  if (DIR* dir = ::opendir("/dev")) {
    while (dirent* e = ::readdir(dir)) {
      const char* name = e->d_name;
      if (std::strncmp(name, "nvidia", 6) != 0 || name[6] == '\0') continue;
      bool digits = true;
      for (const char* p = name + 6; *p; ++p) digits &= std::isdigit(static_cast<unsigned char>(*p)) != 0;
      n += digits;
    }
    ::closedir(dir);
  }
  return n;
}

int countCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

std::string parseNprocPerNode(const std::string& value, int& count) {
  long n = 0;
  if (parsePositive(value, 4096, n)) {
    count = static_cast<int>(n);
    return "";
  }
  if (value == "cpu") {
    count = countCpus();
    return "";
  }
  if (value == "gpu" || value == "auto") {
    count = countGpus();
    if (count > 0) return "";
    if (value == "gpu") return "--nproc-per-node=gpu, but no GPU is visible here";
    count = countCpus();
    return "";
  }
  return "--nproc-per-node wants a number in [1, 4096], auto, cpu or gpu, got '" + value + "'";
}

std::string parseNnodes(const std::string& value, int& nnodes) {
  const size_t colon = value.find(':');
  long lo = 0, hi = 0;
  if (colon == std::string::npos) {
    if (!parsePositive(value, 1 << 16, lo)) {
      return "--nnodes wants an integer in [1, 65536] or MIN:MAX, got '" + value + "'";
    }
    nnodes = static_cast<int>(lo);
    return "";
  }
  if (!parsePositive(value.substr(0, colon), 1 << 16, lo) ||
      !parsePositive(value.substr(colon + 1), 1 << 16, hi) || lo > hi) {
    return "--nnodes wants N or MIN:MAX with 1 <= MIN <= MAX, got '" + value + "'";
  }
  if (lo != hi) {
    return "--nnodes=" + value +
           ": elastic jobs (a node count that may change between MIN and MAX) are not "
           "supported; gyre's communicators have a fixed size. Give --nnodes=N (or N:N)";
  }
  nnodes = static_cast<int>(lo);
  return "";
}

std::string parseRdzvEndpoint(const std::string& value, std::string& host, int& port) {
  std::string h = value, p;
  if (!h.empty() && h.front() == '[') {
    const size_t close = h.find(']');
    if (close == std::string::npos) return "--rdzv-endpoint '" + value + "': ']' is missing";
    if (close + 1 < h.size()) {
      if (h[close + 1] != ':') return "--rdzv-endpoint '" + value + "' is not [ADDRESS]:PORT";
      p = h.substr(close + 2);
    }
    h = h.substr(1, close - 1);
  } else if (const size_t colon = h.rfind(':'); colon != std::string::npos) {
    p = h.substr(colon + 1);
    h.resize(colon);
  }
  if (h.empty()) return "--rdzv-endpoint '" + value + "' names no host";
  long n = kTorchRdzvPort;
  if (!p.empty() && !parsePositive(p, 65535, n)) {
    return "--rdzv-endpoint '" + value + "': the port must be in [1, 65535]";
  }
  host = h;
  port = static_cast<int>(n);
  return "";
}

std::vector<std::string> rankCommand(const LaunchOptions& o, int localRank) {
  std::vector<std::string> argv;
  if (o.module) {
    argv = {"python3", "-u", "-m"};
  } else if (!o.noPython && endsWith(o.command.front(), ".py")) {
    argv = {"python3", "-u"};
  }
  argv.insert(argv.end(), o.command.begin(), o.command.end());
  if (o.torchLaunch && !o.useEnv) argv.push_back("--local_rank=" + std::to_string(localRank));
  return argv;
}

void applyOmpDefault(const LaunchOptions& o) {
  if (o.nprocPerNode <= 1 || std::getenv("OMP_NUM_THREADS") != nullptr) return;
  ::setenv("OMP_NUM_THREADS", "1", 1);
  std::fputs(
      "*****************************************\n"
      "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to "
      "avoid your system being overloaded, please further tune the variable for optimal "
      "performance in your application as needed. \n"
      "*****************************************\n",
      stderr);
  std::fflush(stderr);
}

std::string randomRunId() {
  unsigned char bytes[16] = {0};
  int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ssize_t got = ::read(fd, bytes, sizeof(bytes));
    (void)got;
    ::close(fd);
  }
  bytes[6] = static_cast<unsigned char>((bytes[6] & 0x0f) | 0x40);  // uuid4's version
  bytes[8] = static_cast<unsigned char>((bytes[8] & 0x3f) | 0x80);  // and variant
  char text[37];
  std::snprintf(text, sizeof(text),
                "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", bytes[0],
                bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7], bytes[8],
                bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]);
  return text;
}

}  // namespace gyre::tools
