# bench_train: libtune's trainer against PyTorch eager (bench/torch_baseline.py) on the
# same models and data; included from bench/CMakeLists.txt.
add_executable(bench_train ${CMAKE_CURRENT_LIST_DIR}/bench_train.cpp)
target_link_libraries(bench_train PRIVATE tune_train_lib nlohmann_json::nlohmann_json)
target_compile_definitions(bench_train PRIVATE TORCH_BASELINE="${CMAKE_CURRENT_LIST_DIR}/torch_baseline.py")
target_compile_features(bench_train PRIVATE cxx_std_20)
