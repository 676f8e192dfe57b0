# fk_model: the whole-model tool (greedy generation, the HF parity dump, throughput); it needs
# the generated L4 tasks, so it links every generated task like fk_bench.
fk_add_runner(fk_model model_main.cu "${FK_GENERATED_OBJECTS}")
