# gyre_layer(): one layer of the library as its own static library, compiled against a
# view of the source tree that holds only this layer and the layers below it.
#
# The view is a folder of symbolic links in the build tree (layers/<name>/<folder> ->
# <source>/<folder>), and it is the layer's only include directory: an `#include` of a
# higher layer's header does not resolve, so a wrong arrow fails the build with "No such
# file or directory" instead of waiting for a reviewer. The order (docs/DESIGN.md):
#
#   base <- transport <- store
#   base <- host_kernels;  base <- cuda_kernels (the device reduction, nvcc)
#   transport, host_kernels <- collectives
#   collectives, store <- ring (the communicator; what gyre::gyre is)
#   collectives <- sim (the simulator, beside ring; with Boost.Context)
#   ring <- ddp
#   ring, cuda_kernels <- cuda (folder cuda/: the collectives on device buffers)
#   ring, cuda <- c (the C API: folder capi/, target gyre_c; cuda only with a CUDA
#                    toolkit; test builds add c_fake over the fake runtime: capi/CMakeLists.txt)
#
# Usage: gyre_layer(NAME FOLDERS f1 [f2...] BELOW l1 [l2...] SOURCES s1 [s2...])
#   FOLDERS: the source folders this layer owns; BELOW: the layers it may use (their
#   folders join the view, their targets are linked PUBLIC).
function(gyre_layer name)
  cmake_parse_arguments(L "" "" "FOLDERS;BELOW;SOURCES" ${ARGN})
  set(view ${CMAKE_BINARY_DIR}/layers/${name})
  set(folders ${L_FOLDERS})
  foreach(below ${L_BELOW})
    get_property(below_folders GLOBAL PROPERTY GYRE_LAYER_FOLDERS_${below})
    list(APPEND folders ${below_folders})
  endforeach()
  list(REMOVE_DUPLICATES folders)
  set_property(GLOBAL PROPERTY GYRE_LAYER_FOLDERS_${name} ${folders})
  file(REMOVE_RECURSE ${view})
  foreach(folder ${folders})
    get_filename_component(parent ${view}/${folder} DIRECTORY)
    file(MAKE_DIRECTORY ${parent})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${folder} ${view}/${folder} SYMBOLIC)
  endforeach()

  add_library(gyre_${name} STATIC ${L_SOURCES})
  target_include_directories(gyre_${name} PRIVATE ${view})
  foreach(below ${L_BELOW})
    target_link_libraries(gyre_${name} PUBLIC gyre_${below})
  endforeach()
  set_property(GLOBAL APPEND PROPERTY GYRE_LAYERS gyre_${name})
endfunction()
