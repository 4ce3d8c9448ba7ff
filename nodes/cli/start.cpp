// tune start --head | --address HOST:PORT: its options, and which of them are the
// head's and which the node's.
#include "start.hpp"

#include "commands.hpp"
#include "daemon.hpp"
#include "tune/cluster/token.hpp"

namespace tune::cli {
namespace {

constexpr int default_port = 6380;

void add_head_options(po::options_description& desc) {
  desc.add_options()
      ("port", po::value<int>()->default_value(default_port), "head: the port to listen on (0: any free port)")
      ("host", po::value<std::string>(), "head: the address to listen on (default: all)")
      ("dashboard-port", po::value<int>()->default_value(8265),
       "head: the web dashboard's port (0: any free port; the default, if taken, becomes any free port)")
      ("dashboard-host", po::value<std::string>(), "head: the address the dashboard listens on (default: --host, else all)")
      ("no-dashboard", "head: serve no dashboard (nor /metrics)")
      ("orphan-grace", po::value<double>()->default_value(60),
       "head: seconds to keep bundles that nodes hold for placement groups this head does not know "
       "(after a head restart), for their owners to claim by creating the group again");
}

void add_node_options(po::options_description& desc) {
  desc.add_options()
      ("num-gpus", po::value<int>(), "node: use the first N GPUs; on a machine without GPUs, declare N logical ones (16 GiB each)")
      ("gpus", po::value<std::string>(), "node: use these GPUs only, by index (e.g. 0,2)")
      ("num-cpus", po::value<double>(), "node: the CPUs to offer (default: those this process may use)")
      ("resources", po::value<std::string>(), "node: custom resources as JSON, e.g. '{\"tpu\": 2}'")
      ("mps", "node: run trials sharing a card under CUDA MPS (a daemon of this node's own): their kernels run "
              "side by side instead of time-sliced, and each trial's memory quota is enforced when it allocates")
      ("containment", po::value<std::string>()->default_value("auto"),
       "node: how trials are contained: auto (each in a cgroup of its own where the node can make them: as root, "
       "or under systemd with Delegate=yes; else a subreaper), cgroup (cgroups or refuse to start), subreaper")
      ("require-limits", po::value<std::string>(),
       "node: host limits it must enforce, or refuse to start: a list of memory, cpu, pids (e.g. memory,cpu)")
      ("trial-max-pids", po::value<int64_t>()->default_value(16384),
       "node: each trial's limit of processes and threads (pids.max; 0: none), against fork bombs")
      ("trial-user", po::value<std::string>(),
       "node: the Unix account trials run as when the node runs as root (default: nobody; never root); a user's "
       "own account (tune user set NAME --account A) takes its place for that user's trials")
      ("gpu-audit-ms", po::value<int>()->default_value(200),
       "node: how often the GPU audit (NVML) looks at what runs on the cards, in ms; 0 turns it off")
      ("foreign-threshold", po::value<std::string>(),
       "node: a card where programs that are not this cluster's hold more GPU memory than this is never given "
       "whole (default 256MiB: less than a CUDA context)")
      ("foreign-margin", po::value<std::string>(),
       "node: GPU memory kept free beside what other programs hold on a card, for them to grow (default 1GiB)");
}

po::options_description start_options() {
  po::options_description desc("tune start options");
  desc.add_options()
      ("help,h", "show this help")
      ("head", "start the head of a new cluster")
      ("address", po::value<std::string>(), "HOST:PORT of the head to join (start a node)");
  add_head_options(desc);
  add_node_options(desc);
  desc.add_options()
      ("token-file", po::value<std::string>()->default_value(default_token_file()),
       "the cluster token (the head creates it if missing; copy it to every node)")
      ("runtime-dir", po::value<std::string>()->default_value(""),
       "where pid and log files go (default: $TUNE_RUNTIME_DIR, $XDG_RUNTIME_DIR/libtune or /tmp/libtune-UID)")
      ("block", "stay in the foreground (for systemd, Slurm) instead of running as a daemon");
  add_tls_options(desc);
  return desc;
}

// A node's options given to a head: the exit code after a message, or -1.
int refuse_node_options(const po::variables_map& vm) {
  if (!vm["gpu-audit-ms"].defaulted()) return fail("start", "--gpu-audit-ms is for a node (--address)", 2);
  for (auto opt : {"containment", "trial-max-pids"})
    if (!vm[opt].defaulted()) return fail("start", std::string{"--"} + opt + " is for a node (--address)", 2);
  for (auto opt : {"require-limits", "trial-user", "mps", "foreign-threshold", "foreign-margin"})
    if (vm.count(opt)) return fail("start", std::string{"--"} + opt + " is for a node (--address)", 2);
  for (auto opt : {"num-gpus", "gpus", "num-cpus", "resources"})
    if (vm.count(opt)) return fail("start", std::string{"--"} + opt + " is for a node (--address); the head runs no trials", 2);
  return -1;
}

// A head's options given to a node: the exit code after a message, or -1.
int refuse_head_options(const po::variables_map& vm) {
  if (vm.count("host")) return fail("start", "--host is for the head (--head)", 2);
  if (!vm["port"].defaulted()) return fail("start", "--port is for the head; a node connects to --address", 2);
  if (!vm["orphan-grace"].defaulted()) return fail("start", "--orphan-grace is for the head (--head)", 2);
  for (auto opt : {"dashboard-host", "no-dashboard"})
    if (vm.count(opt)) return fail("start", std::string{"--"} + opt + " is for the head (--head)", 2);
  if (!vm["dashboard-port"].defaulted()) return fail("start", "--dashboard-port is for the head (--head)", 2);
  return -1;
}

}  // namespace

int cmd_start(const args& a) {
  auto desc = start_options();
  po::variables_map vm;
  if (int rc = parse("start", a, desc, "tune start --head | --address HOST:PORT [options]", vm); rc >= 0) return rc;
  bool head = vm.count("head") > 0, node = vm.count("address") > 0;
  if (head == node) return fail("start", "give --head (start a head) or --address HOST:PORT (start a node that joins it)", 2);
  auto dir = runtime_dir(vm["runtime-dir"].as<std::string>());
  if (!dir) return fail("start", dir.error().message());
  if (head) {
    if (int rc = refuse_node_options(vm); rc >= 0) return rc;
    return start_head(vm, *dir);
  }
  auto address = parse_host_port(vm["address"].as<std::string>(), "--address");
  if (!address) return fail("start", address.error().message(), 2);
  if (int rc = refuse_head_options(vm); rc >= 0) return rc;
  return start_node(vm, *address, *dir);
}

}  // namespace tune::cli
