// tune run (nodes/run.cpp): an experiment whose trials are any program.
#pragma once

#include <string>
#include <vector>

namespace tune::cli {

// The command's arguments after `run`; the process's exit code.
int cmd_run(const std::vector<std::string>& args);

}  // namespace tune::cli
