// tune status, tune dashboard: what the head shows of its cluster.
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "connect.hpp"
#include "tune/cluster/status_text.hpp"
#include "tune/cluster/token.hpp"

namespace tune::cli {

int cmd_status(const args& a) {
  po::options_description desc("tune status options");
  desc.add_options()("help,h", "show this help")("json", "print one JSON object instead of text");
  add_client_options(desc);
  po::variables_map vm;
  if (int rc = parse("status", a, desc, "tune status --address HOST:PORT [--json]", vm); rc >= 0) return rc;
  auto c = connect_head("status", vm);
  if (auto* rc = std::get_if<int>(&c)) return *rc;
  auto& conn = std::get<connected>(c);
  auto text = conn.client->status_json();
  if (!text) finish(fail("status", "the head at " + conn.where + ": " + text.error().message()));
  if (vm.count("json")) {
    std::cout << *text << "\n";
    finish(0);
  }
  auto rendered = render_status_text(*text);
  if (!rendered) finish(fail("status", rendered.error().message()));
  std::cout << *rendered;
  finish(0);
}

int cmd_dashboard(const args& a) {
  po::options_description desc("tune dashboard options");
  desc.add_options()("help,h", "show this help")("url-only", "print only the address, without the token");
  add_client_options(desc);
  po::variables_map vm;
  if (int rc = parse("dashboard", a, desc, "tune dashboard --address HOST:PORT [--url-only]", vm, nullptr,
                     "Prints the web dashboard's address, and a link that signs in with the cluster token (keep it "
                     "as private as the token file). The head serves it on --dashboard-port (default 8265).");
      rc >= 0)
    return rc;
  auto c = connect_head("dashboard", vm);
  if (auto* rc = std::get_if<int>(&c)) return *rc;
  auto& conn = std::get<connected>(c);
  auto text = conn.client->status_json();
  if (!text) finish(fail("dashboard", "the head at " + conn.where + ": " + text.error().message()));
  auto j = nlohmann::json::parse(*text, nullptr, false);
  std::string url = j.is_object() && j.contains("head") ? j["head"].value("dashboard", "") : "";
  if (url.empty())
    finish(fail("dashboard", "the head at " + conn.where + " serves no dashboard (it was started with --no-dashboard)"));
  if (vm.count("url-only")) {
    std::cout << url << "\n";
    finish(0);
  }
  auto token = read_token(vm["token-file"].as<std::string>());
  std::cout << "dashboard: " << url << "\n";
  if (token) std::cout << "signed in: " << url << "?token=" << token->token << "  (contains the cluster token)\n";
  std::cout << "metrics:   " << url << "metrics  (Authorization: Bearer <token>)\n";
  finish(0);
}

}  // namespace tune::cli
