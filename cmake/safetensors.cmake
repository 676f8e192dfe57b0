# fk_safetensors: the host-only safetensors reader/writer (runtime/src/safetensors.cc).
# Defined outside runtime/ because runtime/ is only added with FK_ENABLE_CUDA, and this code must
# build and be tested without CUDA; fk_runtime links it PUBLIC.
add_library(fk_safetensors STATIC "${PROJECT_SOURCE_DIR}/runtime/src/safetensors.cc")
target_include_directories(fk_safetensors PUBLIC "${PROJECT_SOURCE_DIR}/runtime/include")
target_link_libraries(fk_safetensors PUBLIC nlohmann_json::nlohmann_json)
set_target_properties(fk_safetensors PROPERTIES POSITION_INDEPENDENT_CODE ON)
