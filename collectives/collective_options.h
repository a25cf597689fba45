// CollectiveOptions: the settings the schedules and the algorithm choice read
// (collectives/, and the simulator beside ring), from GYRE_* variables that
// Options::fromEnvironment() (ring/options.cc) parses. They include the pipes' settings
// (TransportOptions): the choice depends on the slot a call is cut into.
#pragma once

#include <string>

#include "collectives/allreduce_algo.h"
#include "transport/transport_options.h"

namespace gyre {

struct CollectiveOptions : TransportOptions {
  AllReduceAlgo algo = AllReduceAlgo::kAuto;           // GYRE_ALGO=auto|ring|tree|rd|hier
  // GYRE_NICS_PER_HOST: how many NICs a host's ranks spread their inter-host traffic over
  // (1..1024; local rank i uses NIC i mod N). The cost model charges each NIC the bytes of
  // the ranks on it: 1 (the default) is one shared NIC per host; a GPU server with a NIC
  // per GPU sets it to its ranks per host, where rd and hier cross hosts 8 times wider
  // (docs/simulator.md, "Auto's choice at scale"). gyre cannot see this itself: the link probe
  // measures one pair of leaders. Equal on every rank.
  int nicsPerHost = 1;
  // GYRE_REDUCE_ISA=auto|portable|avx2|avx512: forces the host reduction's ISA (tests and
  // debugging). The spelling is checked when parsed; whether this CPU runs it, by
  // host_kernels/reduce.cc, which reads the variable itself (reduceIsaFromEnvironment(),
  // base/options.h) and which the communicator asks at creation.
  std::string reduceIsa;
};

}  // namespace gyre
