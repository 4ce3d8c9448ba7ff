// tune start: a head (start_head.cpp) or a node that joins one (start_node.cpp), each
// run by run_service (daemon.hpp): as a daemon, or in the foreground with --block.
#pragma once

#include <string>

#include "options.hpp"
#include "tune/cluster/address.hpp"

namespace tune::cli {

// `vm`: tune start's options, checked by cmd_start (start.cpp) for the head or the node;
// `dir`: the runtime directory; `head`: the node's --address. The process's exit code.
int start_head(const po::variables_map& vm, const std::string& dir);
int start_node(const po::variables_map& vm, const host_port& head, const std::string& dir);

}  // namespace tune::cli
