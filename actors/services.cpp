#include "services.hpp"

#include <algorithm>
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
