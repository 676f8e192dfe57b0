# fk_model: the whole-model tool (greedy generation, the HF parity dump, throughput); it needs
# the generated L4 tasks, so it links every generated task like fk_bench.
fk_add_runner(fk_model model_main.cu "${FK_GENERATED_OBJECTS}")

# fk_collectives: the nccl-tests-style sweep of the job's NCCL collectives (runtime/runner/collectives_main.cu), one
# process per GPU under fk_launch (docs/multi-gpu.md).
# The sweep itself is a library (runtime/runner/collectives_tool.cu) that fk_bench links too: `fk_bench collectives
# --op ...` runs the same sweep (cmake/generated.cmake, fk_add_runner).
add_executable(fk_collectives ${CMAKE_SOURCE_DIR}/runtime/runner/collectives_main.cu)
target_link_libraries(fk_collectives PRIVATE fk_collectives_tool)
