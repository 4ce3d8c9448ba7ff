// The trials' Python package (python/libtune/, every .py file of it; standard library
// only), built into the program: a node writes it under its work folder and puts that
// folder first on every trial's PYTHONPATH, so `import libtune` works in a trial with
// nothing installed on the node, and is the node's own version (docs/programs.md).
#pragma once

#include <string>
#include <vector>

#include "tune/core/status.hpp"

namespace tune {

struct python_file {
  const char* path;  // relative to the package's folder: "__init__.py", "tune/__init__.py", ...
  const char* text;
};
// The package's files, sorted by path; "__init__.py" is one of them.
const std::vector<python_file>& python_module_files();
// The warm interpreter's script (tune/trial/python_spawner.py, python_spawners.hpp).
const char* python_spawner_source();

// Writes the package as <dir>/libtune/ and the warm interpreter's script as
// <dir>/_libtune_spawner.py (each file atomically, replacing an older one; a .py file an
// older version left in <dir>/libtune/ that this one does not have is removed); the
// folder to put on PYTHONPATH (`dir`), or why not.
expected<std::string> install_python_module(const std::string& dir);

}  // namespace tune
