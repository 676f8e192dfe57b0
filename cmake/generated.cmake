# The build sees generated sources only through generated/manifest.json, which the generator
# writes (`fastkernels generate`). Reconfigures when the manifest changes. Every task is a header
# (Config + module class) and a source (registration); sources and the headers of composite
# tasks include task headers as "L<level>/<name>.h", relative to generated/.
set(FK_MANIFEST "${CMAKE_SOURCE_DIR}/generated/manifest.json")
set_property(DIRECTORY "${CMAKE_SOURCE_DIR}" APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${FK_MANIFEST}")
set(FK_GENERATED_SOURCES "")
if(EXISTS "${FK_MANIFEST}")
  file(READ "${FK_MANIFEST}" _fk_manifest)
  string(JSON _fk_n ERROR_VARIABLE _fk_err LENGTH "${_fk_manifest}" tasks)
  if(_fk_err)
    message(FATAL_ERROR "${FK_MANIFEST}: $.tasks: ${_fk_err}; regenerate with `fastkernels generate`")
  endif()
  # Note [Manifest index]
  # string(JSON) parses its whole input on every call, and the manifest is megabytes: each task's
  # object is taken out once (one parse of the manifest per task) and read from there. The index
  # (FK_TASK_NAMES, FK_TASK_LEVELS, FK_TASK_SOURCES in manifest order, the children object of task i
  # in _fk_kids_<i>) serves cmake/candidates.cmake, whose closures used to reparse the manifest for
  # every field of every task (minutes per configure).
  set(FK_TASK_NAMES "")
  set(FK_TASK_LEVELS "")
  set(FK_TASK_SOURCES "")
  if(_fk_n GREATER 0)
    math(EXPR _fk_last "${_fk_n} - 1")
    foreach(_i RANGE ${_fk_last})
      string(JSON _fk_task ERROR_VARIABLE _fk_err GET "${_fk_manifest}" tasks ${_i})
      if(_fk_err)
        message(FATAL_ERROR "${FK_MANIFEST}: $.tasks[${_i}]: ${_fk_err}; regenerate with `fastkernels generate`")
      endif()
      foreach(_key header source)
        string(JSON _file ERROR_VARIABLE _fk_err GET "${_fk_task}" ${_key})
        if(_fk_err)
          message(FATAL_ERROR "${FK_MANIFEST}: $.tasks[${_i}].${_key}: ${_fk_err}; regenerate with `fastkernels generate`")
        endif()
        if(NOT EXISTS "${CMAKE_SOURCE_DIR}/${_file}")
          message(FATAL_ERROR "${FK_MANIFEST}: $.tasks[${_i}].${_key}: ${_file} does not exist; run `fastkernels generate`")
        endif()
      endforeach()
      string(JSON _src GET "${_fk_task}" source)
      string(JSON _name GET "${_fk_task}" name)
      string(JSON _lv GET "${_fk_task}" level)
      string(JSON _fk_kids_${_i} ERROR_VARIABLE _fk_err GET "${_fk_task}" children)
      if(_fk_err)
        set(_fk_kids_${_i} "{}")
      endif()
      list(APPEND FK_GENERATED_SOURCES "${CMAKE_SOURCE_DIR}/${_src}")
      list(APPEND FK_TASK_NAMES "${_name}")
      list(APPEND FK_TASK_LEVELS "${_lv}")
      list(APPEND FK_TASK_SOURCES "${_src}")
    endforeach()
  endif()
else()
  message(WARNING "${FK_MANIFEST} not found: no generated tasks are built (run `fastkernels generate`)")
endif()
list(LENGTH FK_GENERATED_SOURCES _fk_count)
message(STATUS "FastKernels: ${_fk_count} generated task sources from generated/manifest.json")

# Note [Unity task sources]
# nvcc spends most of a generated source's compile time on what every source shares (the runtime
# and task headers, host and device passes): six L1 sources took 24.9 s one by one and 8.5 s as one
# translation unit (2-core machine, 2026-11-26). So the generated sources of each level are
# compiled as unity units of FK_UNITY_BATCH sources each at L1, half as many at each level up (a
# unit #includes them in manifest order; every task lives in its own namespace and registers
# under it, so units cannot clash). Every
# generated source is still compiled; an error names the source and line. FK_UNITY_BATCH=1 compiles
# each source alone. Units are rewritten only when their list changes. Builds with candidates
# (FK_CANDIDATES_DIR, and each set of FK_CANDIDATE_SETS) keep one unit per source: a candidate's
# macros or declarations must not reach another task's source. A compile-check build (Note [Compile-check builds]) takes
# 32 per unit at L1: two cores gain nothing from many units, and each saves its ~3.7 s of shared headers (32 L1
# sources took 12.0 s as one unit against 14.7 s as two, 2-core machine, 2026-12-07).
set(FK_UNITY_BATCH "" CACHE STRING "Generated task sources per unity translation unit at L1 (1: none; empty: 16, 32 in compile-check builds)")
if(NOT FK_UNITY_BATCH STREQUAL "")
  set(_fk_unity_batch ${FK_UNITY_BATCH})
elseif(FK_COMPILE_CHECK)
  set(_fk_unity_batch 32)
else()
  set(_fk_unity_batch 16)
endif()

# fk_unity_sources(<out var> <name> <sources...>): the unity units over `sources` (grouped by their
# level folder, in order), written under <build>/unity/<name>/.
function(fk_unity_sources out name)
  if(_fk_unity_batch LESS_EQUAL 1 OR FK_CANDIDATES_DIR)
    set(${out} ${ARGN} PARENT_SCOPE)
    return()
  endif()
  set(_units "")
  set(_dir "${CMAKE_BINARY_DIR}/unity/${name}")
  file(MAKE_DIRECTORY "${_dir}")
  set(_size ${_fk_unity_batch})
  foreach(_level L1 L2 L3 L4)
    set(_batch "")
    set(_n 0)
    set(_k 0)
    set(_srcs ${ARGN})
    list(FILTER _srcs INCLUDE REGEX "/${_level}/[^/]+$")
    list(LENGTH _srcs _count)
    foreach(_src ${_srcs})
      string(APPEND _batch "#include \"${_src}\"\n")
      math(EXPR _n "${_n} + 1")
      math(EXPR _count "${_count} - 1")
      if(_n EQUAL _size OR _count EQUAL 0)
        set(_unit "${_dir}/${_level}_${_k}.cu")
        set(_text "// Unity unit of generated task sources (Note [Unity task sources] in cmake/generated.cmake).\n${_batch}")
        set(_old "")
        if(EXISTS "${_unit}")
          file(READ "${_unit}" _old)
        endif()
        if(NOT _old STREQUAL _text)
          file(WRITE "${_unit}" "${_text}")
        endif()
        list(APPEND _units "${_unit}")
        set(_batch "")
        set(_n 0)
        math(EXPR _k "${_k} + 1")
      endif()
    endforeach()
    # Composite tasks instantiate more per source (a whole model at L4): half as many per unit at
    # each level up, so the heaviest units stay short and a many-core build stays parallel.
    math(EXPR _size "(${_size} + 1) / 2")
  endforeach()
  set(${out} ${_units} PARENT_SCOPE)
endfunction()

# Object library: every task registers itself at static-initialisation time, so its object file
# must be linked whole into the runner and the GPU tests.
# FK_GENERATED_OBJECTS is what executables add to their sources (empty when nothing is generated).
if(FK_GENERATED_SOURCES)
  fk_unity_sources(_fk_units fk_generated ${FK_GENERATED_SOURCES})
  add_library(fk_generated OBJECT ${_fk_units})
  target_include_directories(fk_generated PUBLIC "${CMAKE_SOURCE_DIR}/generated")
  target_link_libraries(fk_generated PUBLIC fk_runtime)
  set(FK_GENERATED_OBJECTS $<TARGET_OBJECTS:fk_generated>)
else()
  set(FK_GENERATED_OBJECTS "")
endif()

# A runner (fk_bench: main.cc, fk_model: model_main.cu) over a set of task objects; candidate
# builds (cmake/candidates.cmake) make more of them over other task sets.
# The collectives sweep (`fk_collectives`, `fk_bench collectives`): runtime/runner/collectives_tool.cu.
add_library(fk_collectives_tool STATIC ${CMAKE_SOURCE_DIR}/runtime/runner/collectives_tool.cu)
target_link_libraries(fk_collectives_tool PUBLIC fk_runtime CLI11::CLI11)

function(fk_add_runner target main objects)
  add_executable(${target} ${CMAKE_SOURCE_DIR}/runtime/runner/${main} ${objects})
  target_link_libraries(${target} PRIVATE fk_runtime CLI11::CLI11 fk_collectives_tool)
endfunction()

fk_add_runner(fk_bench main.cc "${FK_GENERATED_OBJECTS}")
