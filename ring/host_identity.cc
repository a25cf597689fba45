#include "ring/host_identity.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include <fmt/format.h>

#include "base/error.h"
#include "transport/socket.h"

namespace gyre {

std::string hostIdentity(const std::string& overrideId) {
  if (!overrideId.empty()) return overrideId;
  char name[256] = {0};
  ::gethostname(name, sizeof(name) - 1);
  std::string bootId;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> bootId;
  struct stat st {};
  ::stat("/proc/self/ns/net", &st);
  return fmt::format("{}/{}/{}", name, bootId, static_cast<unsigned long long>(st.st_ino));
}

std::string localAddressToward(const std::string& host) {
  SocketAddress target = SocketAddress::resolve(host, 9);
  Fd fd(::socket(target.storage.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd) failSystem(errno, "socket");
  if (::connect(fd.get(), target.sa(), target.length) != 0) {
    failSystem(errno, fmt::format("no route to {} to pick a local address", host));
  }
  return SocketAddress::ofSocket(fd.get()).host();
}

}  // namespace gyre
