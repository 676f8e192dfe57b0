# fk_dist: the multi-GPU bootstrap's host code (runtime/src/dist.cc: the launchers' environment and the
# TCP store, fk/runtime/dist.h). Outside runtime/ for the same reason as fk_safetensors: it builds and
# is tested without CUDA; fk_runtime links it PUBLIC.
find_package(Threads REQUIRED)
add_library(fk_dist STATIC "${PROJECT_SOURCE_DIR}/runtime/src/dist.cc")
target_include_directories(fk_dist PUBLIC "${PROJECT_SOURCE_DIR}/runtime/include")
target_link_libraries(fk_dist PUBLIC Threads::Threads)
set_target_properties(fk_dist PROPERTIES POSITION_INDEPENDENT_CODE ON)

# fk_launch: starts the ranks of a multi-GPU job on this host (runtime/runner/launch.cc, Note [Rank failure]).
add_executable(fk_launch "${PROJECT_SOURCE_DIR}/runtime/runner/launch.cc")
target_link_libraries(fk_launch PRIVATE CLI11::CLI11)
