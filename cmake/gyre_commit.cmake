# Writes GYRE_OUTPUT from GYRE_TEMPLATE with GYRE_COMMIT set to the commit GYRE_SOURCE_DIR
# is checked out at (`git describe --always --dirty`: a short hash, "-dirty" where tracked
# files changed), or "unknown" where it is no git checkout of its own (a tarball, or a
# copy inside another repository). A script (cmake -P), run at configure time and by the
# target gyre_commit at every build: configure_file rewrites the output only when the
# commit changed, so only that one file is recompiled after a commit.
set(GYRE_COMMIT unknown)
find_program(GYRE_GIT git)
if(GYRE_GIT)
  execute_process(COMMAND ${GYRE_GIT} -C ${GYRE_SOURCE_DIR} rev-parse --show-toplevel
                  OUTPUT_VARIABLE top RESULT_VARIABLE rc
                  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(rc EQUAL 0 AND top)
    file(REAL_PATH "${top}" top)
    file(REAL_PATH "${GYRE_SOURCE_DIR}" source)
    if(top STREQUAL source)
      # --exclude=*: always the hash, never a tag's name.
      execute_process(COMMAND ${GYRE_GIT} -C ${GYRE_SOURCE_DIR} describe --always --dirty
                              --abbrev=7 --exclude=*
                      OUTPUT_VARIABLE described RESULT_VARIABLE rc
                      OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
      if(rc EQUAL 0 AND described MATCHES "^[0-9a-f]+(-dirty)?$")
        set(GYRE_COMMIT ${described})
      endif()
    endif()
  endif()
endif()
configure_file(${GYRE_TEMPLATE} ${GYRE_OUTPUT} @ONLY)
