// Connecting to the head a command's options name (--address or $TUNE_ADDRESS,
// --token-file, --timeout, TLS), for the commands that talk to a head.
#pragma once

#include <caf/all.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <variant>

#include "client/client.hpp"
#include "options.hpp"
#include "wire.hpp"

namespace tune::cli {

struct connected {
  std::unique_ptr<wire::config> cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::unique_ptr<cluster_client> client;
  std::string where;  // the head's HOST:PORT, for messages
};

// A client connected to the head, or the exit code after a message. A head that never
// answers ends the process after --timeout plus `extra_wait` (and 2 s), with an error.
std::variant<connected, int> connect_head(const std::string& command, const po::variables_map& vm,
                                           std::chrono::milliseconds extra_wait = {});

// Ends the process at once, after flushing its output: nothing to clean up, and CAF's
// shutdown would wait.
[[noreturn]] void finish(int rc);

}  // namespace tune::cli
