// Where this process runs: a host identity (ranks with equal identities share memory)
// and the local address other ranks can reach it at.
//
// Contract: pure queries of the OS, no state, thread-safe.
#pragma once

#include <string>
#include <vector>

namespace gyre {

// "hostname/boot-id/netns-inode", or GYRE_HOST_ID's value when set (Options::hostId).
// The network namespace is part of it: ranks in different namespaces of one machine
// (the multi-host tests) must not be taken for one host.
std::string hostIdentity(const std::string& overrideId);

// The numeric address of the local interface that routes to `host` (a UDP connect()
// sends nothing; it only asks the kernel for the route). Loopback stays loopback.
std::string localAddressToward(const std::string& host);

// GYRE_SOCKET_IFNAME, with NCCL_SOCKET_IFNAME's syntax: a comma-separated list of name
// prefixes ("eth,ib"); a leading '^' excludes the listed names instead ("^docker,lo");
// a '=' (after the '^', if any) makes them exact names ("=eth0", "^=docker0").
struct InterfaceFilter {
  bool exclude = false;
  bool exact = false;
  std::vector<std::string> names;

  static InterfaceFilter parse(const std::string& spec);
  bool matches(const std::string& interfaceName) const;
};

// The numeric address to listen on. With an empty `ifnameSpec`: the address that routes
// to `masterHost`. Otherwise an address of an interface the spec matches (up, with an
// address; IPv4 first, and the one that routes to masterHost when it matches). A spec
// that matches no such interface throws kInvalidArgument listing what exists: picking
// some other interface silently is how jobs end up on the wrong network.
std::string listenAddress(const std::string& ifnameSpec, const std::string& masterHost);

}  // namespace gyre
