# gyre's version: project(gyre VERSION ...) in the top-level CMakeLists.txt is the one
# definition, and everything else is derived from it here:
#   <build>/generated/base/version.h   GYRE_VERSION_MAJOR/MINOR/PATCH, GYRE_VERSION_STRING,
#                                      GYRE_VERSION_CODE, gyre::version() (base/version.h.in;
#                                      installed as include/gyre/base/version.h)
#   <build>/generated/base/version_commit.cc   gyre::versionCommit(), the git commit, kept
#                                      current at every build by the target gyre_commit
#                                      (cmake/gyre_commit.cmake)
# The top level compiles the .cc into gyre_base and puts GYRE_GENERATED_DIR on its include
# path; the rest of the package metadata (gyre.pc, gyreConfig.cmake, python/setup.py)
# reads PROJECT_VERSION too.
set(GYRE_GENERATED_DIR ${PROJECT_BINARY_DIR}/generated)
set(GYRE_LICENSE "BSD-3-Clause")
configure_file(${PROJECT_SOURCE_DIR}/base/version.h.in ${GYRE_GENERATED_DIR}/base/version.h
               @ONLY)

set(GYRE_COMMIT_SOURCE ${GYRE_GENERATED_DIR}/base/version_commit.cc)
set(GYRE_COMMIT_ARGS -DGYRE_SOURCE_DIR=${PROJECT_SOURCE_DIR}
                     -DGYRE_TEMPLATE=${PROJECT_SOURCE_DIR}/base/version_commit.cc.in
                     -DGYRE_OUTPUT=${GYRE_COMMIT_SOURCE}
                     -P ${PROJECT_SOURCE_DIR}/cmake/gyre_commit.cmake)
execute_process(COMMAND ${CMAKE_COMMAND} ${GYRE_COMMIT_ARGS})
add_custom_target(gyre_commit
                  COMMAND ${CMAKE_COMMAND} ${GYRE_COMMIT_ARGS}
                  BYPRODUCTS ${GYRE_COMMIT_SOURCE}
                  VERBATIM)
