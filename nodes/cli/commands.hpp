// The subcommands of `tune` (nodes/tune.cpp dispatches to them; docs/cli.md describes
// them). Each takes the arguments after its name and returns the process's exit code:
// 0, 1 for a failure at run time, 2 for a bad command line.
#pragma once

#include <string>
#include <vector>

namespace tune::cli {

using args = std::vector<std::string>;

int cmd_start(const args& a);      // start.cpp: a head (--head) or a node (--address)
int cmd_status(const args& a);     // status.cpp
int cmd_dashboard(const args& a);  // status.cpp
int cmd_group(const args& a);      // group.cpp: create, get, remove
int cmd_stop(const args& a);       // stop.cpp
int cmd_resume(const args& a);     // resume.cpp
int cmd_rebalance(const args& a);  // move.cpp: trials moved between nodes
int cmd_drain(const args& a);      // move.cpp
int cmd_user(const args& a);       // user.cpp: add, set, list, remove, token
int cmd_tls(const args& a);        // tls.cpp: init
// cmd_run: nodes/run.hpp

}  // namespace tune::cli
