# Candidate builds (docs/candidates.md, "Swapping a candidate in"): with
#   -DFK_CANDIDATES_DIR=<dir>
# every <dir>/L<n>/<task>.cu (as `fastkernels scaffold` writes them) replaces the generated
# header generated/L<n>/<task>.h in every translation unit of the task set: a shadow header
# build/.../candidate_shadow/L<n>/<task>.h includes the candidate and comes first on the include
# path, so the task's own registration and every L2-L4 task built on it use the candidate (levels
# compose). Baseline and candidate define the same classes, so they live in separate builds; use a
# separate build folder for a candidate set.
set(FK_CANDIDATES_DIR "" CACHE PATH "Folder of candidate sources (L<n>/<task>.cu) that replace their generated tasks in this build")
set(FK_CANDIDATE_TASKS "")
if(FK_CANDIDATES_DIR)
  if(NOT IS_DIRECTORY "${FK_CANDIDATES_DIR}")
    message(FATAL_ERROR "FK_CANDIDATES_DIR: ${FK_CANDIDATES_DIR} is not a folder")
  endif()
  if(NOT TARGET fk_generated)
    message(FATAL_ERROR "FK_CANDIDATES_DIR: no generated tasks in this build (generated/manifest.json)")
  endif()
  get_filename_component(_fk_cand_root "${FK_CANDIDATES_DIR}" ABSOLUTE)
  file(GLOB _fk_cands CONFIGURE_DEPENDS "${_fk_cand_root}/L*/*.cu")
  if(NOT _fk_cands)
    message(FATAL_ERROR "FK_CANDIDATES_DIR: ${_fk_cand_root} holds no candidate (expected L<level>/<task>.cu, see `fastkernels scaffold`)")
  endif()
  set(_fk_shadow "${CMAKE_BINARY_DIR}/candidate_shadow")
  file(REMOVE_RECURSE "${_fk_shadow}")
  foreach(_c ${_fk_cands})
    get_filename_component(_task "${_c}" NAME_WE)
    get_filename_component(_dir "${_c}" DIRECTORY)
    get_filename_component(_level "${_dir}" NAME)
    set(_header "generated/${_level}/${_task}.h")
    string(FIND "${_fk_manifest}" "\"${_header}\"" _at)
    if(_at EQUAL -1)
      message(FATAL_ERROR "${_c}: no generated task ${_level}/${_task} in generated/manifest.json "
                          "(a candidate is named after the task it replaces: L<level>/<task>.cu)")
    endif()
    file(WRITE "${_fk_shadow}/${_level}/${_task}.h"
         "// Candidate build: ${_level}/${_task} is replaced by ${_c}\n#pragma once\n#include \"${_c}\"\n")
    list(APPEND FK_CANDIDATE_TASKS "${_task}")
  endforeach()
  target_include_directories(fk_generated BEFORE PUBLIC "${_fk_shadow}")
  list(LENGTH FK_CANDIDATE_TASKS _n)
  string(REPLACE ";" "," _list "${FK_CANDIDATE_TASKS}")
  target_compile_definitions(fk_generated PRIVATE FK_CANDIDATE_TASKS="${_list}")
  message(STATUS "FastKernels: candidate build, ${_n} task(s) replaced: ${_list}")
endif()
