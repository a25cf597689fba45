// gyre::version(). versionCommit() is in the generated version_commit.cc
// (cmake/gyre_version.cmake), so that a new commit recompiles that file alone.
#include "base/version.h"

namespace gyre {

const char* version() { return GYRE_VERSION_STRING; }

}  // namespace gyre
