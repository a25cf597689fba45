// Where this process runs: a host identity (ranks with equal identities share memory)
// and the local address other ranks can reach it at.
//
// Contract: pure queries of the OS, no state, thread-safe.
#pragma once

#include <string>

namespace gyre {

// "hostname/boot-id/netns-inode", or GYRE_HOST_ID's value when set (Options::hostId).
// The network namespace is part of it: ranks in different namespaces of one machine
// (the multi-host tests) must not be taken for one host.
std::string hostIdentity(const std::string& overrideId);

// The numeric address of the local interface that routes to `host` (a UDP connect()
// sends nothing; it only asks the kernel for the route). Loopback stays loopback.
std::string localAddressToward(const std::string& host);

}  // namespace gyre
