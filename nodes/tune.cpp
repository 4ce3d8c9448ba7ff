// tune: start and stop libtune's head and nodes, show the cluster, and tune programs
// (docs/cli.md has every command). Each command is a file of nodes/cli/ (run: run.cpp);
// this file dispatches to them.
//
//   tune start --head [--port 6380] [--host ADDR] [--token-file F] [--block]
//   tune start --address HOST:PORT [--num-gpus N | --gpus 0,2] [--num-cpus N]
//              [--resources '{"tpu":2}'] [--mps] [--gpu-audit-ms N] [--token-file F] [--block]
//   tune status --address HOST:PORT [--json] [--token-file F]
//   tune group create --bundles JSON [--strategy S] [--wait S] | get ID | remove ID
//   tune run [FILE] [flags] [-- COMMAND...]
//   tune resume DIR | rebalance | drain NODE | dashboard | user ... | tls init DIR
//   tune stop
#include <iostream>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "run.hpp"
#include "tune/cluster/version.hpp"

namespace {

using namespace tune::cli;

struct command {
  const char* name;
  int (*run)(const args&);
  const char* help;  // one line in `tune --help`
};

const command commands[] = {
    {"start", cmd_start, "start a head (--head) or a node that joins one (--address HOST:PORT)"},
    {"status", cmd_status, "show the nodes, resources, GPUs and placement groups of a cluster"},
    {"group", cmd_group, "create, show or remove a placement group (bundles reserved across nodes)"},
    {"stop", cmd_stop, "stop the heads and nodes this machine started"},
    {"run", cmd_run, "tune any program (a Python script, ...): tune run experiment.yaml, or -- COMMAND"},
    {"resume", cmd_resume, "continue an experiment whose tuning program died (runs that program again)"},
    {"rebalance", cmd_rebalance, "even the GPU load across nodes (trials move, from their checkpoints)"},
    {"drain", cmd_drain, "move every trial off a node and place nothing new there (maintenance)"},
    {"dashboard", cmd_dashboard, "print the head's web dashboard address (with a link that signs in)"},
    {"user", cmd_user, "add, change, list or remove the cluster's users (their tokens, quotas, priorities)"},
    {"tls", cmd_tls, "make a CA and a certificate for a cluster's TLS (tune tls init DIR)"},
};

std::string usage() {
  std::string text = "usage: tune <command> [options]\n\ncommands:\n";
  for (auto& c : commands) {
    std::string name = c.name;
    text += "  " + name + (name.size() < 9 ? std::string(9 - name.size(), ' ') : "  ") + c.help + "\n";
  }
  return text + "\n`tune <command> --help` describes a command's options; `tune --version` prints the version.\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << usage();
    return 2;
  }
  std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    std::cout << usage();
    return 0;
  }
  if (name == "--version" || name == "version") {
    std::cout << "libtune " << tune::version() << "\n";
    return 0;
  }
  for (auto& c : commands)
    if (name == c.name) return c.run(args(argv + 2, argv + argc));
  std::cerr << "tune: unknown command '" << name << "'\n\n" << usage();
  return 2;
}
