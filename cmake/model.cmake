# fk_model: the whole-model tool (greedy generation, the HF parity dump, throughput); it needs
# the generated L4 tasks, so it links every generated task like fk_bench.
add_executable(fk_model ${CMAKE_SOURCE_DIR}/runtime/runner/model_main.cu ${FK_GENERATED_OBJECTS})
target_link_libraries(fk_model PRIVATE fk_runtime CLI11::CLI11)
