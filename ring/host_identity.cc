#include "ring/host_identity.h"

#include <ifaddrs.h>
#include <net/if.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

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

InterfaceFilter InterfaceFilter::parse(const std::string& spec) {
  InterfaceFilter f;
  size_t at = 0;
  if (at < spec.size() && spec[at] == '^') {
    f.exclude = true;
    ++at;
  }
  if (at < spec.size() && spec[at] == '=') {
    f.exact = true;
    ++at;
  }
  std::string rest = spec.substr(at);
  for (size_t begin = 0; begin <= rest.size();) {
    size_t comma = rest.find(',', begin);
    if (comma == std::string::npos) comma = rest.size();
    if (comma > begin) f.names.push_back(rest.substr(begin, comma - begin));
    begin = comma + 1;
  }
  return f;
}

bool InterfaceFilter::matches(const std::string& name) const {
  bool listed = false;
  for (const std::string& n : names) {
    listed |= exact ? name == n : name.compare(0, n.size(), n) == 0;
  }
  return exclude ? !listed : listed;
}

std::string listenAddress(const std::string& spec, const std::string& masterHost) {
  if (spec.empty()) return localAddressToward(masterHost);
  InterfaceFilter filter = InterfaceFilter::parse(spec);
  if (filter.names.empty()) {
    fail(ErrorCode::kInvalidArgument, "GYRE_SOCKET_IFNAME='{}' names no interface", spec);
  }
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) failSystem(errno, "getifaddrs");
  std::vector<std::pair<std::string, std::string>> seen, v4, v6;  // (interface, address)
  for (ifaddrs* a = list; a; a = a->ifa_next) {
    if (!a->ifa_addr || !(a->ifa_flags & IFF_UP)) continue;
    int family = a->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    SocketAddress addr;
    addr.length = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    std::memcpy(&addr.storage, a->ifa_addr, addr.length);
    std::string host = addr.host();
    if (family == AF_INET6 && host.rfind("fe80", 0) == 0) continue;  // link-local: needs a scope
    seen.emplace_back(a->ifa_name, host);
    if (filter.matches(a->ifa_name)) (family == AF_INET ? v4 : v6).emplace_back(a->ifa_name, host);
  }
  ::freeifaddrs(list);
  std::vector<std::pair<std::string, std::string>> matching = v4;
  matching.insert(matching.end(), v6.begin(), v6.end());
  if (matching.empty()) {
    std::vector<std::string> have;
    for (const auto& [name, host] : seen) have.push_back(name + " " + host);
    fail(ErrorCode::kInvalidArgument,
         "GYRE_SOCKET_IFNAME='{}' matches no interface that is up with an address (there are: {})",
         spec, have.empty() ? std::string("none") : fmt::format("{}", fmt::join(have, ", ")));
  }
  // Among the matches, the one that routes to the master, if it is one of them.
  try {
    std::string routed = localAddressToward(masterHost);
    for (const auto& [name, host] : matching) {
      if (host == routed) return host;
    }
  } catch (const Error&) {
    // No route to the master from here: the filter's first match is all we have.
  }
  return matching.front().second;
}

}  // namespace gyre
