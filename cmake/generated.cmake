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
  if(_fk_n GREATER 0)
    math(EXPR _fk_last "${_fk_n} - 1")
    foreach(_i RANGE ${_fk_last})
      foreach(_key header source)
        string(JSON _file ERROR_VARIABLE _fk_err GET "${_fk_manifest}" tasks ${_i} ${_key})
        if(_fk_err)
          message(FATAL_ERROR "${FK_MANIFEST}: $.tasks[${_i}].${_key}: ${_fk_err}; regenerate with `fastkernels generate`")
        endif()
        if(NOT EXISTS "${CMAKE_SOURCE_DIR}/${_file}")
          message(FATAL_ERROR "${FK_MANIFEST}: $.tasks[${_i}].${_key}: ${_file} does not exist; run `fastkernels generate`")
        endif()
      endforeach()
      string(JSON _src GET "${_fk_manifest}" tasks ${_i} source)
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
# FK_GENERATED_OBJECTS is what executables add to their sources (empty when nothing is generated).
if(FK_GENERATED_SOURCES)
  add_library(fk_generated OBJECT ${FK_GENERATED_SOURCES})
  target_include_directories(fk_generated PUBLIC "${CMAKE_SOURCE_DIR}/generated")
  target_link_libraries(fk_generated PUBLIC fk_runtime)
  set(FK_GENERATED_OBJECTS $<TARGET_OBJECTS:fk_generated>)
else()
  set(FK_GENERATED_OBJECTS "")
endif()

# A runner (fk_bench: main.cc, fk_model: model_main.cu) over a set of task objects; candidate
# builds (cmake/candidates.cmake) make more of them over other task sets.
function(fk_add_runner target main objects)
  add_executable(${target} ${CMAKE_SOURCE_DIR}/runtime/runner/${main} ${objects})
  target_link_libraries(${target} PRIVATE fk_runtime CLI11::CLI11)
endfunction()

fk_add_runner(fk_bench main.cc "${FK_GENERATED_OBJECTS}")
