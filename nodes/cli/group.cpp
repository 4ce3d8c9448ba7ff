// tune group create|get|remove: placement groups (bundles reserved across nodes), kept by
// the head until removed.
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "connect.hpp"
#include "tune/core/json_text.hpp"
#include "tune/core/quantity.hpp"

namespace tune::cli {
namespace {

const char* group_usage =
    "usage: tune group <create|get|remove> [options]\n"
    "\n"
    "  create --bundles JSON [--strategy S] [--id ID] [--wait SECONDS]\n"
    "         reserve bundles across nodes, all at once or not at all. JSON is a list of\n"
    "         resource sets, e.g. '[{\"gpu\": 1, \"cpu\": 4}, {\"gpu\": 1}]'; S is PACK (default),\n"
    "         SPREAD, STRICT_PACK or STRICT_SPREAD. The group outlives this command: remove it\n"
    "         with `tune group remove ID`.\n"
    "  get ID      where each bundle sits: node, GPU indices, UUIDs, PCI bus ids, memory\n"
    "  remove ID   release everything the group holds\n"
    "\n"
    "Every subcommand takes --address HOST:PORT, --token-file F, --timeout S and --json.\n";

// Where each bundle of a group sits, one line each.
void print_group(const group_info& g) {
  std::cout << "placement group " << g.id << ": " << g.state << " (" << g.strategy
            << (g.detached ? ", detached" : "") << ")\n";
  if (!g.reason.empty()) std::cout << "  " << g.reason << "\n";
  for (auto& b : g.bundles) {
    std::cout << "  bundle " << b.index << "  " << b.request << "  ";
    if (b.node.empty()) {
      std::cout << "not placed\n";
      continue;
    }
    std::cout << b.state << " on " << b.node << (b.hostname.empty() ? "" : " (" + b.hostname + ")");
    for (auto& gpu : b.gpus)
      std::cout << "\n    gpu " << gpu.index << " " << gpu.uuid << (gpu.pci_bus_id.empty() ? "" : " " + gpu.pci_bus_id)
                << " share " << gpu.share << ", " << format_bytes(gpu.memory) << (gpu.logical ? " (logical)" : "");
    std::cout << "\n";
  }
}

po::options_description group_options(const std::string& command, const std::string& sub) {
  po::options_description desc("tune " + command + " options");
  desc.add_options()("help,h", "show this help")("json", "print JSON instead of text");
  if (sub == "create")
    desc.add_options()
        ("bundles", po::value<std::string>(), "the bundles, a JSON list of resource sets")
        ("strategy", po::value<std::string>()->default_value("PACK"), "PACK, SPREAD, STRICT_PACK or STRICT_SPREAD")
        ("id", po::value<std::string>()->default_value(""), "the group's id (default: the head names it)")
        ("wait", po::value<double>()->default_value(0), "seconds to wait until it is placed (0: do not wait)");
  else
    desc.add_options()("group", po::value<std::string>(), "the group's id");
  add_client_options(desc);
  return desc;
}

// The options after `group SUB`; on --help prints them and returns 0, on a bad option
// returns 2 with a message; -1 means: go on.
int parse_group(const std::string& command, const std::string& sub, const args& rest, po::variables_map& vm) {
  auto desc = group_options(command, sub);
  po::positional_options_description pos;
  if (sub != "create") pos.add("group", 1);
  try {
    po::store(po::command_line_parser(rest).options(desc).positional(pos).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    return fail(command, std::string{e.what()} + " (see tune " + command + " --help)", 2);
  }
  if (vm.count("help")) {
    std::cout << "usage: tune " << command << (sub == "create" ? " --bundles JSON" : " ID") << " --address HOST:PORT\n\n"
              << desc;
    return 0;
  }
  return -1;
}

// The group `create` asks for, or the exit code after a message.
std::variant<group_request, int> group_request_from(const std::string& command, const po::variables_map& vm) {
  if (!vm.count("bundles")) return fail(command, "give --bundles, e.g. '[{\"gpu\": 1}]'", 2);
  group_request req;
  auto strat = parse_strategy(vm["strategy"].as<std::string>());
  if (!strat) return fail(command, strat.error().message(), 2);
  req.strat = *strat;
  req.id = vm["id"].as<std::string>();
  req.detached = true;
  auto list = nlohmann::json::parse(vm["bundles"].as<std::string>(), nullptr, false);
  if (list.is_discarded() || !list.is_array() || list.empty())
    return fail(command, "--bundles must be a non-empty JSON list of resource sets, e.g. '[{\"gpu\": 1}]'", 2);
  for (size_t i = 0; i < list.size(); ++i) {
    auto r = resource_set::from_json(list[i].dump());
    if (!r) return fail(command, "bundle " + std::to_string(i) + ": " + r.error().message(), 2);
    req.bundles.push_back(*r);
  }
  return req;
}

void print_group_json(cluster_client& client, const std::string& command, const std::string& id) {
  auto j = client.get_group_json(id);
  if (!j) finish(fail(command, j.error().message()));
  std::cout << *j << "\n";
}

int create_group(const std::string& command, const po::variables_map& vm, bool json_out) {
  auto req = group_request_from(command, vm);
  if (auto* rc = std::get_if<int>(&req)) return *rc;
  double wait_s = vm["wait"].as<double>();
  if (!(wait_s >= 0 && wait_s <= 86400)) return fail(command, "--wait must be between 0 and 86400 seconds", 2);
  auto wait = std::chrono::milliseconds(static_cast<int64_t>(wait_s * 1000));
  auto c = connect_head(command, vm, wait);
  if (auto* rc = std::get_if<int>(&c)) return *rc;
  auto& client = *std::get<connected>(c).client;
  auto made = client.create_group(std::get<group_request>(req));
  if (!made) finish(fail(command, made.error().message()));
  if (made->state == "infeasible") finish(fail(command, "placement group " + made->id + " can never be placed: " + made->reason));
  if (wait.count() == 0) {
    if (json_out) std::cout << json_text(nlohmann::json{{"id", made->id}, {"state", made->state}, {"reason", made->reason}}) << "\n";
    else std::cout << made->id << " " << made->state << (made->reason.empty() ? "" : ": " + made->reason) << "\n";
    finish(0);
  }
  auto ready = client.wait_ready(made->id, wait);
  if (!ready) finish(fail(command, ready.error().message() + " (the group stays; remove it with `tune group remove " + made->id + "`)"));
  if (json_out) print_group_json(client, command, made->id);
  else print_group(*ready);
  finish(0);
}

int get_or_remove_group(const std::string& command, const std::string& sub, const po::variables_map& vm, bool json_out) {
  if (!vm.count("group")) return fail(command, "give the group's id (see tune group get --help)", 2);
  auto id = vm["group"].as<std::string>();
  auto c = connect_head(command, vm);
  if (auto* rc = std::get_if<int>(&c)) return *rc;
  auto& client = *std::get<connected>(c).client;
  if (sub == "remove") {
    auto st = client.remove_group(id);
    if (!st) finish(fail(command, st.message()));
    if (json_out) std::cout << json_text(nlohmann::json{{"id", id}, {"state", "removed"}}) << "\n";
    else std::cout << "removed placement group " << id << "\n";
    finish(0);
  }
  if (json_out) {
    print_group_json(client, command, id);
    finish(0);
  }
  auto g = client.get_group(id);
  if (!g) finish(fail(command, g.error().message()));
  print_group(*g);
  finish(0);
}

}  // namespace

int cmd_group(const args& a) {
  if (a.empty() || a[0] == "--help" || a[0] == "-h") {
    (a.empty() ? std::cerr : std::cout) << group_usage;
    return a.empty() ? 2 : 0;
  }
  std::string sub = a[0];
  if (sub != "create" && sub != "get" && sub != "remove") {
    std::cerr << "tune group: unknown subcommand '" << sub << "'\n\n" << group_usage;
    return 2;
  }
  std::string command = "group " + sub;
  po::variables_map vm;
  if (int rc = parse_group(command, sub, args(a.begin() + 1, a.end()), vm); rc >= 0) return rc;
  bool json_out = vm.count("json") > 0;
  if (sub == "create") return create_group(command, vm, json_out);
  return get_or_remove_group(command, sub, vm, json_out);
}

}  // namespace tune::cli
