# Builds the dashboard's files into C++ (raw string literals): cmake -DDIR=<this folder>
# -DOUT=<file.cpp> -P embed.cmake. Run by the build whenever one of them changes.
set(assets
  "/|index.html|text/html\; charset=utf-8"
  "/app.js|app.js|text/javascript\; charset=utf-8"
  "/style.css|style.css|text/css\; charset=utf-8"
  "/login|login.html|text/html\; charset=utf-8")
set(out "// Generated from actors/dashboard/ by embed.cmake: edit those files, not this one.\n")
string(APPEND out "#include \"dashboard/dashboard.hpp\"\n\nnamespace tune {\nnamespace {\nconst dashboard_asset assets[] = {\n")
foreach(a IN LISTS assets)
  string(REPLACE "|" ";" parts "${a}")
  list(GET parts 0 path)
  list(GET parts 1 file)
  list(GET parts 2 type)
  file(READ "${DIR}/${file}" body)
  string(FIND "${body}" ")libtune_asset\"" clash)
  if(NOT clash EQUAL -1)
    message(FATAL_ERROR "${file} contains the raw string's end marker")
  endif()
  string(APPEND out "    {\"${path}\", \"${type}\", R\"libtune_asset(${body})libtune_asset\"},\n")
endforeach()
string(APPEND out "};\n}  // namespace\n\nconst dashboard_asset* find_dashboard_asset(const std::string& path) {\n")
string(APPEND out "  for (auto& a : assets)\n    if (path == a.path) return &a;\n  return nullptr;\n}\n\n}  // namespace tune\n")
file(WRITE "${OUT}.tmp" "${out}")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
