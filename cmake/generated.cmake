# The build sees generated sources only through generated/manifest.json, which the generator
# writes (`fastkernels generate`). Reconfigures when the manifest changes.
set(FK_MANIFEST "${CMAKE_SOURCE_DIR}/generated/manifest.json")
set_property(DIRECTORY "${CMAKE_SOURCE_DIR}" APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${FK_MANIFEST}")
set(FK_GENERATED_SOURCES "")
if(EXISTS "${FK_MANIFEST}")
  file(READ "${FK_MANIFEST}" _fk_manifest)
  string(JSON _fk_n ERROR_VARIABLE _fk_err LENGTH "${_fk_manifest}" tasks)
  if(_fk_err)
    message(FATAL_ERROR "${FK_MANIFEST}: $.tasks: ${_fk_err}; regenerate with `fastkernels generate`")
  endif()
  if(_fk_n GREATER 0)
    math(EXPR _fk_last "${_fk_n} - 1")
    foreach(_i RANGE ${_fk_last})
      string(JSON _src GET "${_fk_manifest}" tasks ${_i} source)
      if(NOT EXISTS "${CMAKE_SOURCE_DIR}/${_src}")
        message(FATAL_ERROR "${FK_MANIFEST}: $.tasks[${_i}].source: ${_src} does not exist; run `fastkernels generate`")
      endif()
      list(APPEND FK_GENERATED_SOURCES "${CMAKE_SOURCE_DIR}/${_src}")
    endforeach()
  endif()
else()
  message(WARNING "${FK_MANIFEST} not found: no generated tasks are built (run `fastkernels generate`)")
endif()
list(LENGTH FK_GENERATED_SOURCES _fk_count)
message(STATUS "FastKernels: ${_fk_count} generated task sources from generated/manifest.json")

# Object library: every task registers itself at static-initialisation time, so its object file
# must be linked whole into the runner and the GPU tests.
add_library(fk_generated OBJECT ${FK_GENERATED_SOURCES})
target_link_libraries(fk_generated PUBLIC fk_runtime)

add_executable(fk_bench ${CMAKE_SOURCE_DIR}/runtime/runner/main.cc $<TARGET_OBJECTS:fk_generated>)
target_link_libraries(fk_bench PRIVATE fk_runtime CLI11::CLI11)
