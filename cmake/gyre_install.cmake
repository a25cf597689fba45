# Packaging: the shared libraries, the install tree and the CMake / pkg-config packages.
#
# Included by the top level after every layer exists (it reads their targets). Makes:
#   gyre_shared   libgyre.so.<soversion>: the objects of every core layer (base ..
#                 ring), exporting only the public C++ API (GYRE_API: base/export.h).
#   gyre_c_shared libgyre_c.so.<soversion>: the C API plus the same core objects, self-
#                 contained (ctypes/cffi open it without libgyre.so), exporting only the
#                 gyre* C functions.
# (cmake/libgyre.map and libgyre_c.map list what each exports), and, with GYRE_INSTALL
# (default: when gyre is the top-level project, not when a parent add_subdirectory()s
# it), `cmake --install` rules for
#   include/gyre/<layer>/*.h       so users keep writing #include "ring/communicator.h"
#                                  (and the generated base/version.h)
#   lib/libgyre_<layer>.a, libgyre_ddp.a, libgyre_c.a, libgyre.so*, libgyre_c.so*
#   bin/gyrerun, gyre-store, gyre-bench, gyre-train (those that are built)
#   lib/cmake/gyre/                find_package(gyre): gyre::gyre (static),
#                                  gyre::gyre_shared, gyre::ddp, gyre::gyre_c,
#                                  gyre::gyre_c_shared
#   lib/pkgconfig/gyre.pc          for non-CMake builds (links libgyre.so)
#   share/doc/gyre/LICENSE         the licence (BSD-3-Clause), which both packages name
#
# Why every layer is compiled with -fvisibility=hidden: the static libraries and the shared
# ones are linked from the same objects (compiled once), and hidden-by-default is what
# keeps the transports, schedules and the communicator's Impl out of libgyre.so's ABI.
# For static linking the attribute changes nothing.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

option(GYRE_INSTALL "Generate gyre's install rules" ${PROJECT_IS_TOP_LEVEL})
option(GYRE_BUILD_SHARED "Build libgyre.so and libgyre_c.so besides the static libraries" ON)

# The core layers: gyre_ring and every gyre_* layer it links, directly or not (found
# from the targets, so a layer added below ring joins libgyre.so without an edit here).
function(gyre_layers_below target out)
  set(found ${target})
  set(queue ${target})
  while(queue)
    list(POP_FRONT queue current)
    get_target_property(deps ${current} LINK_LIBRARIES)
    foreach(dep ${deps})
      if(dep MATCHES "^gyre_" AND TARGET ${dep} AND NOT dep IN_LIST found)
        list(APPEND found ${dep})
        list(APPEND queue ${dep})
      endif()
    endforeach()
  endwhile()
  set(${out} ${found} PARENT_SCOPE)
endfunction()
gyre_layers_below(gyre_ring GYRE_CORE_LAYERS)
# What the C API adds to them: the cuda layers its device entry points run on (capi/
# CMakeLists.txt; none without CUDA), linked into gyre_c's static and shared libraries.
gyre_layers_below(gyre_c GYRE_C_LAYERS)
list(REMOVE_ITEM GYRE_C_LAYERS ${GYRE_CORE_LAYERS} gyre_c)
set(GYRE_C_DEPENDENCIES "")
foreach(layer ${GYRE_C_LAYERS})
  get_target_property(deps ${layer} LINK_LIBRARIES)
  foreach(dep ${deps})
    if(dep AND NOT dep MATCHES "^gyre" AND NOT dep IN_LIST GYRE_C_DEPENDENCIES)
      list(APPEND GYRE_C_DEPENDENCIES ${dep})
    endif()
  endforeach()
endforeach()
# gyre::gyre_c's static libraries then need the toolkit's CUDA::cudart_static
# (gyreConfig.cmake finds it).
if("CUDA::cudart_static" IN_LIST GYRE_C_DEPENDENCIES)
  set(GYRE_CONFIG_NEEDS_CUDA ON)
  find_package(CUDAToolkit REQUIRED)  # its targets, here too (cuda_kernels/ found them)
else()
  set(GYRE_CONFIG_NEEDS_CUDA OFF)
endif()
# 0.x releases promise nothing between minor versions, so the SONAME carries the minor
# version until 1.0 (libgyre.so.0.2), then only the major one.
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(GYRE_SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
else()
  set(GYRE_SOVERSION ${PROJECT_VERSION_MAJOR})
endif()
set(GYRE_INSTALL_INCLUDEDIR ${CMAKE_INSTALL_INCLUDEDIR}/gyre)

foreach(layer ${GYRE_CORE_LAYERS} ${GYRE_C_LAYERS} gyre_ddp gyre_c)
  set_target_properties(${layer} PROPERTIES CXX_VISIBILITY_PRESET hidden
                                            VISIBILITY_INLINES_HIDDEN ON)
endforeach()
# The installed include root, beside the build tree's (set by the top level and capi/).
target_include_directories(gyre INTERFACE $<INSTALL_INTERFACE:${GYRE_INSTALL_INCLUDEDIR}>)
target_include_directories(gyre_c INTERFACE $<INSTALL_INTERFACE:${GYRE_INSTALL_INCLUDEDIR}>)
target_compile_features(gyre INTERFACE cxx_std_20)
set_target_properties(gyre_ddp PROPERTIES EXPORT_NAME ddp)

# What the layers link besides each other (fmt, Threads, later ibverbs, ...): the shared
# libraries link the same, read from the layers so that a dependency added to a layer
# reaches them without an edit here.
set(GYRE_CORE_DEPENDENCIES "")
foreach(layer ${GYRE_CORE_LAYERS})
  get_target_property(deps ${layer} LINK_LIBRARIES)
  foreach(dep ${deps})
    if(dep AND NOT dep MATCHES "^gyre_")
      list(APPEND GYRE_CORE_DEPENDENCIES ${dep})
    endif()
  endforeach()
endforeach()
list(REMOVE_DUPLICATES GYRE_CORE_DEPENDENCIES)

# gyre_shared_library(NAME OUTPUT LAYERS l1 [l2...] [VERSION_SCRIPT file])
function(gyre_shared_library name output)
  cmake_parse_arguments(S "" "VERSION_SCRIPT" "LAYERS" ${ARGN})
  add_library(${name} SHARED)
  foreach(layer ${S_LAYERS})
    target_sources(${name} PRIVATE $<TARGET_OBJECTS:${layer}>)
    add_dependencies(${name} ${layer})
  endforeach()
  target_link_libraries(${name} PUBLIC ${GYRE_CORE_DEPENDENCIES})
  target_include_directories(${name} INTERFACE $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
                                               $<BUILD_INTERFACE:${GYRE_GENERATED_DIR}>
                                               $<INSTALL_INTERFACE:${GYRE_INSTALL_INCLUDEDIR}>)
  target_compile_features(${name} INTERFACE cxx_std_20)
  set_target_properties(${name} PROPERTIES OUTPUT_NAME ${output} VERSION ${PROJECT_VERSION}
                                           SOVERSION ${GYRE_SOVERSION} LINKER_LANGUAGE CXX)
  # Every symbol resolved at link time, so a missing dependency fails the build, not a
  # user's dlopen (the sanitizer runtimes come from the executable, hence the exception).
  if(GYRE_SANITIZE STREQUAL "")
    target_link_options(${name} PRIVATE -Wl,--no-undefined)
  endif()
  if(S_VERSION_SCRIPT)
    target_link_options(${name} PRIVATE -Wl,--version-script=${S_VERSION_SCRIPT})
    set_property(TARGET ${name} APPEND PROPERTY LINK_DEPENDS ${S_VERSION_SCRIPT})
  endif()
  add_library(gyre::${name} ALIAS ${name})
endfunction()

set(GYRE_INSTALL_TARGETS ${GYRE_CORE_LAYERS} ${GYRE_C_LAYERS} gyre gyre_ddp gyre_c)
if(GYRE_BUILD_SHARED)
  gyre_shared_library(gyre_shared gyre LAYERS ${GYRE_CORE_LAYERS}
                      VERSION_SCRIPT ${PROJECT_SOURCE_DIR}/cmake/libgyre.map)
  # The C++ API's GYRE_API symbols are in these objects too; the version script keeps
  # libgyre_c.so's table to the C functions (C++ names are mangled: _Z...).
  gyre_shared_library(gyre_c_shared gyre_c LAYERS ${GYRE_CORE_LAYERS} ${GYRE_C_LAYERS} gyre_c
                      VERSION_SCRIPT ${PROJECT_SOURCE_DIR}/cmake/libgyre_c.map)
  # The CUDA runtime inside it, never in its table: a process that loads it beside a real
  # libcudart.so (torch's) must not have that one's cuda* functions resolved to ours. With a toolkit the runtime is CUDA::cudart_static
  # (cuda_kernels/CMakeLists.txt), so the library needs no libcudart.so to load.
  target_link_libraries(gyre_c_shared PRIVATE ${GYRE_C_DEPENDENCIES})
  target_link_options(gyre_c_shared PRIVATE -Wl,--exclude-libs,ALL)
  list(APPEND GYRE_INSTALL_TARGETS gyre_shared gyre_c_shared)
endif()

if(GYRE_INSTALL)
  install(DIRECTORY base transport store host_kernels collectives ring ddp capi
          DESTINATION ${GYRE_INSTALL_INCLUDEDIR}
          FILES_MATCHING PATTERN "*.h")
  install(FILES ${GYRE_GENERATED_DIR}/base/version.h DESTINATION ${GYRE_INSTALL_INCLUDEDIR}/base)
  install(FILES ${PROJECT_SOURCE_DIR}/LICENSE DESTINATION ${CMAKE_INSTALL_DOCDIR})
  install(TARGETS ${GYRE_INSTALL_TARGETS} EXPORT gyreTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
          INCLUDES DESTINATION ${GYRE_INSTALL_INCLUDEDIR})
  foreach(tool gyrerun gyre-store gyre-bench gyre-train)
    if(TARGET ${tool})
      install(TARGETS ${tool} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
    endif()
  endforeach()

  set(GYRE_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/gyre)
  install(EXPORT gyreTargets NAMESPACE gyre:: DESTINATION ${GYRE_CMAKE_DIR})
  set(GYRE_LICENSE_FILE ${CMAKE_INSTALL_DOCDIR}/LICENSE)
  configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/gyreConfig.cmake.in
                                ${PROJECT_BINARY_DIR}/gyreConfig.cmake
                                INSTALL_DESTINATION ${GYRE_CMAKE_DIR}
                                PATH_VARS GYRE_LICENSE_FILE)
  # 0.x: only the same minor version is compatible (see GYRE_SOVERSION).
  write_basic_package_version_file(${PROJECT_BINARY_DIR}/gyreConfigVersion.cmake
                                   COMPATIBILITY SameMinorVersion)
  install(FILES ${PROJECT_BINARY_DIR}/gyreConfig.cmake
                ${PROJECT_BINARY_DIR}/gyreConfigVersion.cmake
          DESTINATION ${GYRE_CMAKE_DIR})

  # gyre.pc finds its prefix from its own location (${pcfiledir}), so an install tree
  # moved or installed with --prefix still works.
  set(GYRE_PC_DIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
  file(RELATIVE_PATH GYRE_PC_TO_PREFIX /root/${GYRE_PC_DIR} /root)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/gyre.pc.in ${PROJECT_BINARY_DIR}/gyre.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/gyre.pc DESTINATION ${GYRE_PC_DIR})
endif()

# The consumer test: install into a scratch prefix, build tests/install_consumer against
# it with find_package and with pkg-config, run both, open libgyre_c.so from ctypes.
if(GYRE_BUILD_TESTS AND GYRE_INSTALL AND GYRE_BUILD_SHARED)
  add_test(NAME install_consumer_test
           COMMAND ${PROJECT_SOURCE_DIR}/tests/install_consumer/run_test.sh
                   ${CMAKE_BINARY_DIR} ${CMAKE_BINARY_DIR}/install_consumer_test
                   ${CMAKE_CXX_COMPILER} "${CMAKE_CXX_COMPILER_LAUNCHER}" "${GYRE_SANITIZE}"
                   ${PROJECT_VERSION})
  set_tests_properties(install_consumer_test PROPERTIES TIMEOUT 240)
endif()
