// tune user add|set|list|remove|token: the admin manages the cluster's users on the
// head (docs/users.md); each user's token goes to a file of its own, mode 0600.
#include <iostream>
#include <set>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "connect.hpp"
#include "tune/cluster/token.hpp"
#include "tune/cluster/users.hpp"
#include "tune/core/json_text.hpp"
#include "tune/core/quantity.hpp"

namespace tune::cli {
namespace {

const char* user_about =
    "  add NAME [settings] [--out FILE]   a new user; their token goes to FILE (default: users/NAME.token\n"
    "                                     beside the admin token), mode 0600: give it to them\n"
    "  set NAME [settings]                change a user's settings\n"
    "  list [--json]                      every user and their settings\n"
    "  remove NAME                        the user's token stops working at once\n"
    "  token NAME [--out FILE] [--new]    write the user's token to FILE again (--new: a new token;\n"
    "                                     the old one stops working)\n"
    "settings: --gpus N (whole cards and shares, exactly; none: no quota), --cpus N, --max-trials N,\n"
    "--priority P (higher preempts lower), --weight W (fair share), --account UNIX_USER (what the\n"
    "user's trials run as). Only the admin (the head's own token) manages users.\n";

po::options_description user_options() {
  po::options_description desc("tune user options");
  desc.add_options()("help,h", "show this help")("op", po::value<std::string>(), "add, set, list, remove or token")(
      "name", po::value<std::string>(), "the user")("gpus", po::value<std::string>(), "GPU quota (none: no quota)")(
      "cpus", po::value<std::string>(), "CPU quota (none: no quota)")("max-trials", po::value<int64_t>(), "trials at once")(
      "priority", po::value<int64_t>(), "priority (default 0)")("weight", po::value<double>(), "fair-share weight (default 1)")(
      "account", po::value<std::string>(), "Unix account of the user's trials")("out", po::value<std::string>(),
                                                                                  "where the user's token goes")(
      "new", "token: make a new token")("json", "print JSON");
  add_client_options(desc);
  return desc;
}

// The settings options of `tune user add/set` as the head's JSON (only those given).
expected<nlohmann::json> user_settings(const po::variables_map& vm) {
  nlohmann::json j = nlohmann::json::object();
  for (const char* q : {"gpus", "cpus"})
    if (vm.count(q)) {
      auto v = vm[q].as<std::string>();
      auto amount = quantity::parse(v, std::string{"--"} + q);
      if (v == "none") j[q] = nullptr;
      else if (!amount)
        return status{errc::invalid_argument, "--" + std::string{q} + " " + v + ": give a number of " + q +
                                                  " (2, 0.5, ...) or none (no quota)"};
      else j[q] = amount->to_double();
    }
  if (vm.count("max-trials")) j["max_trials"] = vm["max-trials"].as<int64_t>();
  if (vm.count("priority")) j["priority"] = vm["priority"].as<int64_t>();
  if (vm.count("weight")) j["weight"] = vm["weight"].as<double>();
  if (vm.count("account")) j["account"] = vm["account"].as<std::string>();
  return j;
}

// What to send the head for `op`, or the exit code after a message.
std::variant<nlohmann::json, int> user_request(const std::string& op, const po::variables_map& vm) {
  const std::set<std::string> ops{"add", "set", "list", "remove", "token"};
  if (!ops.count(op))
    return fail("user", "\"" + op + "\" is not add, set, list, remove or token (tune user --help)", 2);
  if (op != "list" && !vm.count("name")) return fail("user", "say which user: tune user " + op + " NAME", 2);
  auto settings = user_settings(vm);
  if (!settings) return fail("user", settings.error().message(), 2);
  if (op != "add" && op != "set" && !settings->empty())
    return fail("user", "--gpus, --cpus, --max-trials, --priority, --weight and --account are for add and set", 2);
  auto body = op == "add" || op == "set" ? *settings : nlohmann::json::object();
  if (op == "set" && body.empty()) return fail("user", "say what to change: --gpus, --cpus, --max-trials, --priority, --weight or --account", 2);
  if (vm.count("name")) body["name"] = vm["name"].as<std::string>();
  if (op == "token" && vm.count("new")) body["new"] = true;
  return body;
}

std::string quota_text(const nlohmann::json& v) { return v.is_null() ? "no limit" : json_text(v); }

void print_user(const nlohmann::json& u) {
  std::cout << u["name"].get<std::string>() << ": gpus " << quota_text(u["gpus"]) << ", cpus " << quota_text(u["cpus"])
            << ", trials at once " << quota_text(u["max_trials"]) << ", priority " << u["priority"] << ", weight "
            << u["weight"] << ", trials run as "
            << (u["account"].get<std::string>().empty() ? std::string{"the node's --trial-user"} : u["account"].get<std::string>())
            << "\n";
}

// The head's answer to `op`, as text.
void print_answer(const std::string& op, const nlohmann::json& j, const std::string& out_file) {
  if (op == "list") {
    if (j.empty()) std::cout << "no users yet: tune user add NAME (only the admin token acts until then)\n";
    for (auto& u : j) print_user(u);
  } else if (op == "remove") {
    std::cout << "removed user " << j["name"].get<std::string>() << ": their token no longer works\n";
  } else {
    if (op == "add") std::cout << "added ";
    print_user(j);
    if (op == "add" || op == "token")
      std::cout << "their token is in " << out_file << " (mode 0600): give it to " << j["name"].get<std::string>()
                << ", who passes it as --token-file (or puts it in ~/.tune/token)\n";
  }
}

}  // namespace

int cmd_user(const args& a) {
  auto desc = user_options();
  po::positional_options_description pos;
  pos.add("op", 1).add("name", 1);
  po::variables_map vm;
  if (int rc = parse("user", a, desc, "tune user <add|set|list|remove|token> [NAME] [options] --address HOST:PORT", vm,
                     &pos, user_about);
      rc >= 0)
    return rc;
  if (!vm.count("op")) return fail("user", "say what to do: tune user add|set|list|remove|token (tune user --help)", 2);
  const auto op = vm["op"].as<std::string>();
  auto body = user_request(op, vm);
  if (auto* rc = std::get_if<int>(&body)) return *rc;
  auto out_file = vm.count("out") ? vm["out"].as<std::string>()
                                  : user_token_file_beside(vm["token-file"].as<std::string>(), text_option(vm, "name"));
  auto c = connect_head("user", vm);
  if (auto* rc = std::get_if<int>(&c)) return *rc;
  auto& conn = std::get<connected>(c);
  auto text = conn.client->manage_users(op, json_text(std::get<nlohmann::json>(body)));
  if (!text) finish(fail("user", text.error().message()));
  auto j = nlohmann::json::parse(*text);
  if (j.is_object() && j.contains("token")) {  // add, token: the user's token to its file
    auto written = write_token_file(out_file, j["token"].get<std::string>());
    if (!written) finish(fail("user", written.message()));
    j.erase("token");
  }
  if (vm.count("json")) {
    std::cout << json_text(j) << "\n";
    finish(0);
  }
  print_answer(op, j, out_file);
  finish(0);
}

}  // namespace tune::cli
