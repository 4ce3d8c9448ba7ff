// The trials' Python module (python/libtune/__init__.py, standard library only), built
// into the program: a node writes it under its work folder and puts that folder first on
// every trial's PYTHONPATH, so `import libtune` works in a trial with nothing installed
// on the node (docs/programs.md).
#pragma once

#include <string>

#include "tune/core/status.hpp"

namespace tune {

const char* python_module_source();
// The warm interpreter's script (tune/trial/python_spawner.py, python_spawners.hpp).
const char* python_spawner_source();

// Writes the module as <dir>/libtune/__init__.py and the warm interpreter's script as
// <dir>/_libtune_spawner.py (each atomically, replacing an older one); the folder to put
// on PYTHONPATH (`dir`), or why not.
expected<std::string> install_python_module(const std::string& dir);

}  // namespace tune
