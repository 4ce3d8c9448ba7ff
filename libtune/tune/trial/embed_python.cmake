# Builds python/libtune/__init__.py into C++ (a raw string literal):
# cmake -DSRC=<__init__.py> -DOUT=<file.cpp> -P embed_python.cmake. Run by the build
# whenever the module changes.
file(READ "${SRC}" body)
string(FIND "${body}" ")libtune_py\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${SRC} contains the raw string's end marker")
endif()
set(out "// Generated from python/libtune/__init__.py by embed_python.cmake: edit that file, not this one.\n")
string(APPEND out "#include \"tune/trial/python_module.hpp\"\n\nnamespace tune {\n\n")
string(APPEND out "const char* python_module_source() {\n  return R\"libtune_py(${body})libtune_py\";\n}\n\n}  // namespace tune\n")
file(WRITE "${OUT}.tmp" "${out}")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
