#include "services.hpp"

#include <algorithm>
#include <future>
#include <sstream>
#include <tuple>

#include "log.hpp"
#include "tune/host/nvml.hpp"
#include "tune/host/simulated_gpus.hpp"

namespace tune {

expected<node_host> open_node_host(const node_host_options& opt) {
  node_host h;
  auto account = opt.embedded ? own_trial_account(opt.trial_user) : trial_account(opt.trial_user);
  if (!account) return status{account.error().code(), "--trial-user: " + account.error().message()};
  h.trial_account = *account;
  if (auto w = spawner::start()) h.workers = *w;
  else log_line("workers start from this process itself: " + w.error().message());
  auto c = containment::open(opt.containment, opt.node_id, opt.require_limits);
  if (!c) return c.error();
  h.contain = *c;
  return h;
}

status check_gpu_audit_ms(int ms, const std::string& option) {
  if (ms == 0 || (ms >= min_audit_ms && ms <= max_audit_ms)) return status::ok();
  return {errc::invalid_argument, option + " must be 0 (off) or between " + std::to_string(min_audit_ms) + " and " +
                                      std::to_string(max_audit_ms) + " (ms), not " + std::to_string(ms)};
}

status check_trial_max_pids(int64_t n, const std::string& option) {
  if (n == 0 || n >= min_trial_pids) return status::ok();
  return {errc::invalid_argument,
          option + " must be 0 (no limit) or at least " + std::to_string(min_trial_pids) + ", not " + std::to_string(n)};
}

expected<others_policy> parse_others_policy(const std::string& threshold, const std::string& margin,
                                            const std::string& threshold_option, const std::string& margin_option) {
  others_policy p;
  for (auto [text, option, field] : {std::tuple{&threshold, &threshold_option, &p.threshold},
                                     std::tuple{&margin, &margin_option, &p.margin}}) {
    if (text->empty()) continue;
    auto b = parse_bytes(*text, *option);
    if (!b) return status{errc::invalid_argument, *option + " " + *text + ": " + b.error().message()};
    if (*b < 0) return status{errc::invalid_argument, *option + " " + *text + ": give a size of 0 or more"};
    *field = *b;
  }
  return p;
}

node_option_names api_option_names() { return {"num_cpus", "num_gpus", "gpus", "resources", "mps"}; }

namespace {

status bad_resource(std::string message) { return {errc::invalid_argument, std::move(message)}; }

expected<quantity> node_cpus(const node_resource_request& req, const host_info& host, const node_option_names& names) {
  if (!req.num_cpus) return host.cpus;
  auto n = quantity::from_double(*req.num_cpus, names.num_cpus);
  if (!n) return n.error();
  if (!(*n > quantity{})) return bad_resource(names.num_cpus + " must be more than 0");
  return *n;
}

status add_custom_resources(resource_set& r, const std::string& json, const node_option_names& names) {
  auto custom = resource_set::from_json(json);
  if (!custom) return bad_resource(names.resources + ": " + custom.error().message());
  if (!custom->cpu().is_zero() || !custom->gpu().is_zero() || custom->memory() || custom->gpu_memory())
    return bad_resource(names.resources + " is for custom resources; give CPUs with " + names.num_cpus +
                        " and GPUs with " + names.num_gpus + " or " + names.gpus);
  for (auto& [name, q] : custom->customs()) r.set_custom(name, q);
  return status::ok();
}

// The cards named by index ("0,2"), each once.
expected<std::vector<gpu_instance>> gpus_by_index(const std::string& list, const host_info& host,
                                                  const node_option_names& names) {
  auto& cards = host.gpu.gpus;
  if (cards.empty())
    return bad_resource(names.gpus + ": this machine has no GPU (" + host.gpu.note + "); " + names.num_gpus +
                        " N declares N logical GPUs");
  std::vector<gpu_instance> chosen;
  std::stringstream items{list};
  std::string item;
  while (std::getline(items, item, ',')) {
    if (item.empty() || item.find_first_not_of("0123456789") != std::string::npos)
      return bad_resource(names.gpus + " '" + list + "': give GPU indices separated by commas, e.g. 0,2");
    int index = std::stoi(item);
    if (index >= static_cast<int>(cards.size()))
      return bad_resource(names.gpus + ": there is no GPU " + item + "; this machine has " +
                          std::to_string(cards.size()) + " (0.." + std::to_string(cards.size() - 1) + ")");
    for (auto& c : chosen)
      if (c.index == index) return bad_resource(names.gpus + ": GPU " + item + " is listed twice");
    chosen.push_back(cards[static_cast<size_t>(index)]);
  }
  return chosen;
}

expected<std::vector<gpu_instance>> node_gpus(const node_resource_request& req, const host_info& host,
                                              const std::string& node_id, const node_option_names& names) {
  if (req.gpus && req.num_gpus)
    return bad_resource("give " + names.gpus + " or " + names.num_gpus + ", not both");
  if (req.gpus) return gpus_by_index(*req.gpus, host, names);
  if (req.num_gpus) return first_gpus(host.gpu.gpus, *req.num_gpus, node_id, names.num_gpus);
  return host.gpu.gpus;
}

}  // namespace

expected<node_resources> node_resources_for(const node_resource_request& req, const host_info& host,
                                            const std::string& node_id, const node_option_names& names) {
  auto cpus = node_cpus(req, host, names);
  if (!cpus) return cpus.error();
  resource_set r;
  r.set_cpu(*cpus).set_memory(host.memory);
  if (req.resources)
    if (auto s = add_custom_resources(r, *req.resources, names); !s) return s;
  auto gpus = node_gpus(req, host, node_id, names);
  if (!gpus) return gpus.error();
  return node_resources::make(r, std::move(gpus).value());
}

void fill_node_options(node_options& opt, const node_host& host, int gpu_audit_ms, int64_t trial_max_pids) {
  opt.trial_env = inherited_trial_env();  // never CUDA_VISIBLE_DEVICES
  opt.workers = host.workers;
  opt.contain = host.contain;
  opt.trial_max_pids = trial_max_pids;
  opt.trial_account = host.trial_account;
  log_line("trials run as " + host.trial_account.name + " (uid " + std::to_string(host.trial_account.uid) + ")" +
           (host.trial_account.switches ? ", unless their user's settings name another account" : ", the node's own account"));
  auto& gpus = opt.resources.gpus();
  bool real = std::any_of(gpus.begin(), gpus.end(), [](auto& g) { return !g.logical; });
  bool simulated = std::any_of(gpus.begin(), gpus.end(), [](auto& g) { return g.simulated; });
  if ((!real && !simulated) || gpu_audit_ms <= 0) return;
  opt.audit_interval = std::chrono::milliseconds(gpu_audit_ms);
  if (simulated) {  // the cards of a simulated view, read from its folder (tune/host/simulated_gpus.hpp)
    if (auto view = simulated_gpus::open(simulated_gpus_dir())) opt.gpu_library = *view;
    else log_line("GPU audit off: " + view.error().message());
    return;
  }
  if (auto lib = nvml::load()) opt.gpu_library = *lib;
  else log_line("GPU audit off: " + lib.error().message());
}

status check_trial_folder(const node_options& opt) {
  if (opt.work_dir.empty()) return status::ok();
  return reachable(opt.trial_account, opt.work_dir + "/trials");
}

namespace {

// The MPS daemon over the node's real cards; its clients' environment goes into the trials'.
node_start start_mps(node_options& opt, const node_option_names& names) {
  node_start out;
  auto& gpus = opt.resources.gpus();
  bool real = std::any_of(gpus.begin(), gpus.end(), [](auto& g) { return !g.logical; });
  if (!real) {
    out.at = node_start::step::mps_cards;
    out.why = {errc::invalid_argument, names.mps + " needs real GPUs (this node has " +
                                           std::string{gpus.empty() ? "none" : "logical ones only"} + ")"};
    return out;
  }
  std::vector<std::string> uuids;
  for (auto& g : gpus) uuids.push_back(g.uuid);
  auto m = mps_daemon::start(opt.work_dir + "/mps", uuids, opt.trial_env);
  if (!m) {
    out.at = node_start::step::mps_daemon;
    out.why = {m.error().code(), "cannot start CUDA MPS: " + m.error().message()};
    return out;
  }
  out.mps = std::move(m).value();
  for (auto& [k, v] : out.mps->client_env()) opt.trial_env[k] = v;
  log_line("CUDA MPS on (daemon pid " + std::to_string(out.mps->pid()) + ")");
  return out;
}

}  // namespace

node_start start_node_service(caf::actor_system& sys, node_options opt, const node_start_options& how) {
  node_start out;
  if (how.mps) {
    out = start_mps(opt, how.names);
    if (!out) return out;
  }
  auto joined = std::make_shared<std::promise<status>>();
  auto answer = joined->get_future();
  opt.on_first_join = [joined](const status& st) { joined->set_value(st); };
  auto node = spawn_node(sys, std::move(opt));
  if (answer.wait_for(how.join_timeout) != std::future_status::ready) {
    out.at = node_start::step::no_answer;
    out.why = {errc::insufficient, "no answer from the head in " + std::to_string(how.join_timeout.count()) + " ms"};
  } else if (auto st = answer.get(); !st) {
    out.at = node_start::step::refused;
    out.why = st;
  } else {
    out.node = node;
    return out;
  }
  caf::anon_send_exit(node, caf::exit_reason::user_shutdown);
  return out;
}

expected<head_service> start_head_service(caf::actor_system& sys, head_options opt,
                                          const std::optional<dashboard_options>& dashboard, const std::string& shown_host) {
  head_service h;
  if (dashboard) {
    auto bound = dashboard_server::bind(sys, *dashboard);
    if (!bound) return bound.error();
    h.dashboard = std::move(*bound);
    bool wildcard = dashboard->host == "0.0.0.0" || dashboard->host == "::" || dashboard->host.empty();
    h.dashboard_url = std::string{dashboard->tls ? "https://" : "http://"} + (wildcard ? shown_host : dashboard->host) + ":" + std::to_string(h.dashboard->port()) + "/";
    opt.dashboard = h.dashboard_url;
  }
  h.head = spawn_head(sys, opt);
  if (h.dashboard) h.dashboard->serve(h.head);
  return h;
}

}  // namespace tune
