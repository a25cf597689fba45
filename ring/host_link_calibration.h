// The inter-host half of the two-level cost model, measured at communicator creation:
// when the ranks span >= 2 hosts and GYRE_ALGO is auto (GYRE_LINK_PROBE not 0), the
// leaders of hosts 0 and 1 run collectives/link_probe.h over their pipe and publish what
// each measured in the communicator's store; every rank reads the same two strings, so
// every rank builds the same TwoLevelCost and makes the same choices. Where the probe
// does not run, or fails (it logs why), the fixed constants of collectives/tuning.h.
// At GYRE_DEBUG=INFO rank 0 logs the numbers and what auto picks per size band.
//
// Contract: collective over the communicator (every rank calls it once, after the
// pipes are connected, before the first collective); bounded by the store's timeout.
// While it waits for the leaders' results it calls `checkOthers` (the join's alarms:
// ring/join.h), which throws when another rank failed or died meanwhile.
#pragma once

#include <functional>

#include "collectives/host_topology.h"
#include "collectives/primitives.h"
#include "collectives/topology_choice.h"
#include "ring/options.h"
#include "store/store.h"

namespace gyre {

TwoLevelCost calibrateHostLinks(Store& store, const PrimitiveContext& base, const PeerPipes& pipes,
                                const HostTopology& topology, int rank, const Options& options,
                                bool allShm, bool intraShm,
                                const std::function<void()>& checkOthers);

}  // namespace gyre
