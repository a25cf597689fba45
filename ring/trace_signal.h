// SIGUSR1 dumps the flight recorders (collectives/flight_recorder.h) of every live
// communicator of this process to GYRE_TRACE_DIR: `kill -USR1 <pid>` on a job that looks
// stuck says where each rank is, without stopping it.
//
// Contract: watchForDumpSignal() registers a recorder with its directory; the first call
// installs the handler, unless SIGUSR1 already has one (the program's own: it is left
// alone, and a WARN says so). The handler only writes a byte to a pipe (async-signal-safe);
// one detached thread reads it and dumps every registered recorder (a WARN line per file).
// unwatch() before the recorder is destroyed: it waits for a dump in progress. Thread-safe.
#pragma once

#include <string>

namespace gyre {

class FlightRecorder;

void watchForDumpSignal(const FlightRecorder* recorder, const std::string& dir);
void unwatchForDumpSignal(const FlightRecorder* recorder);

}  // namespace gyre
