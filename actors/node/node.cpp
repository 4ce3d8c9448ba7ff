// The node actor: what it sets up, joining the head (and again when it went away), its
// heartbeats and what it reports beyond them. Its other concerns are in reservations.cpp,
// files.cpp and trials.cpp (node_state.hpp).
#include "node.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <set>

#include "audit.hpp"
#include "transport/dial.hpp"
#include "log.hpp"
#include "node_state.hpp"
#include "typed.hpp"
#include "trial/trial.hpp"
#include "tune/cluster/version.hpp"

namespace tune {
namespace node_impl {

namespace {

constexpr std::chrono::milliseconds max_backoff{2000};

std::string where(node_actor self) {
  return self->state.opt.head_host + ":" + std::to_string(self->state.opt.head_port);
}

void report_first(node_actor self, const status& st) {
  if (self->state.reported) return;
  self->state.reported = true;
  if (self->state.opt.on_first_join) self->state.opt.on_first_join(st);
}

void fatal(node_actor self, const std::string& why) {
  log_line("giving up: " + why);
  if (!self->state.ever_joined) report_first(self, {errc::invalid_argument, why});
  else if (self->state.opt.on_fatal) self->state.opt.on_fatal({errc::invalid_argument, why});
  self->quit();
}

void schedule_retry(node_actor self, const std::string& why) {
  auto& st = self->state;
  st.connecting = false;
  if (!st.ever_joined && self->clock().now() - st.started > st.opt.first_join_deadline) {
    fatal(self, "cannot reach the head at " + where(self) + " (" + why + ")");
    return;
  }
  self->delayed_send(self, st.backoff, wire::retry_atom::value);
  st.backoff = std::min(st.backoff * 2, max_backoff);
}

// What the head shows of this node beyond its resources: the GPU audit's cards (each
// trial on them named with its user: the head shows a user only their own), how its
// trials are contained and what each uses of the host (memory, CPU), at most once a
// second and only when it changed.
wire::wire_node_report node_report(node_actor self) {
  auto& st = self->state;
  wire::wire_node_report r;
  if (st.audit_report) {
    r.audited = true;
    r.cards = *st.audit_report;
    for (auto& card : r.cards)
      for (auto& t : card.trials) t.owner = trial_owner(self, t.trial);
  }
  if (st.opt.contain) {
    auto& caps = st.opt.contain->caps();
    r.contained = true;
    r.containment_kind = caps.kind();
    r.containment_description = caps.describe();
    r.limits_memory = caps.memory;
    r.limits_cpu = caps.cpu;
    r.limits_pids = caps.pids;
  }
  for (auto& [id, use] : st.host_use)
    r.trials.push_back({id, trial_owner(self, id), use.memory, use.memory_peak, use.pids, use.cpu_seconds});
  return r;
}

void joined(node_actor self) {
  auto& st = self->state;
  st.joined = true;
  st.backoff = std::chrono::milliseconds{250};
  log_line(std::string{st.ever_joined ? "joined the head again" : "joined the head"} + " at " + where(self) + " as " +
           st.opt.node_id);
  st.ever_joined = true;
  report_first(self, status::ok());
  self->send(self, wire::beat_atom::value, ++st.generation);
  st.last_report.reset();
  send_report(self, true);
}

void send_join(node_actor self) {
  auto& st = self->state;
  auto ad = wire::make_ad(st.opt.node_id, st.opt.hostname, st.opt.address, st.table.resources());
  ad.version = version();
  ad.holdings = wire::holdings_of(st.table);
  ad.holdings_version = st.table.version();
  self->request(st.head, wire::request_timeout, wire::join_atom::value, st.opt.token, ad)
      .then(
          [self](wire::join_atom, const std::string&) {
            self->state.connecting = false;
            joined(self);
          },
          [self](caf::error& err) {
            if (!wire::is_refusal(err)) return schedule_retry(self, "join: " + to_string(err));
            self->state.connecting = false;
            fatal(self, "the head at " + where(self) + " refused this node: " + wire::refusal_reason(err));
          });
}

// Connects to the head (or, connected already, joins again).
void connect(node_actor self) {
  auto& st = self->state;
  if (st.joined || st.connecting) return;
  st.connecting = true;
  if (!st.head && st.opt.head_actor) {  // a head in this process
    st.head = caf::actor_cast<head_iface>(st.opt.head_actor);
    self->monitor(st.head);
  }
  if (st.head) return send_join(self);  // connected (or in this process); a rejoin asked
  auto d = dial(self->home_system(), st.opt.head_host, st.opt.head_port);
  if (!d) return schedule_retry(self, d.error().message());
  self->request(d->to, wire::request_timeout, std::move(d->msg))
      .then(
          [self](const caf::node_id&, caf::strong_actor_ptr& ptr, const std::set<std::string>&) {
            if (!ptr) return schedule_retry(self, "no libtune head at that port");
            self->state.head = caf::actor_cast<head_iface>(ptr);
            self->monitor(self->state.head);
            send_join(self);
          },
          [self, id = d->id](caf::error& err) {
            auto f = connect_failure(self->home_system(), id, err);
            // A TLS refusal is not cured by trying again: said at once, at the start.
            if (!self->state.ever_joined && f.hopeless)
              return fatal(self, "the head at " + where(self) + " refused the connection: " + f.why);
            schedule_retry(self, "connect: " + f.why);
          });
}

// The GPU audit of the node's real cards (with NVML).
void start_audit(node_actor self) {
  auto& st = self->state;
  if (!st.opt.gpu_library) return;
  std::set<std::string> cards;
  for (auto& g : st.opt.resources.gpus())
    if (shared_card(g)) cards.insert(g.uuid);
  if (cards.empty()) return;
  // A first look before the node offers anything: a card another program holds now is
  // not given away in the moments before the audit's first report.
  if (auto now = st.opt.gpu_library->sample()) {
    st.foreign = gpu_audit{cards, {::getpid()}}.check(*now).foreign;
    look_at_claims(self);
  }
  st.audit = spawn_gpu_audit(self, {st.opt.gpu_library, cards, st.opt.audit_interval, caf::actor_cast<node_iface>(self)});
  log_line("GPU audit on: " + std::to_string(cards.size()) + " card(s), every " +
           std::to_string(st.opt.audit_interval.count()) + " ms");
}

bool switched_off(const char* variable) {
  const char* v = std::getenv(variable);
  return v && *v;
}

// What its trials start from: the warm spawners of C++ and Python trials (unless told
// not to), the pool of idle workers, the Python module; an earlier run's folders gone.
void open_trials(node_actor self) {
  auto& st = self->state;
  // C++ trials fork from their program started once as a spawner, unless told not to.
  if (!switched_off("LIBTUNE_FRESH_PROCESS")) st.programs = std::make_shared<program_spawners>(st.opt.trial_env);
  // An idle worker waits this long for the experiment's next trial on its cards.
  long linger = 2000;
  if (const char* v = std::getenv("LIBTUNE_REUSE_LINGER_MS"); v && *v) linger = std::clamp(std::atol(v), 0L, 600000L);
  st.idle = std::make_shared<reuse::idle_pool>(std::chrono::milliseconds(linger));
  if (st.opt.work_dir.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(st.opt.work_dir + "/reuse", ec);   // an earlier run's hand-over folders
  std::filesystem::remove_all(st.opt.work_dir + "/staged", ec);  // an earlier run's: no record of them
  auto py = install_python_module(st.opt.work_dir + "/python");
  if (!py) return log_line("trials get no libtune Python module: " + py.error().message());
  st.python_path = *py;
  // Python trials fork from warm interpreters, unless the node is told not to.
  if (!switched_off("LIBTUNE_FRESH_PYTHON")) st.pythons = std::make_shared<python_spawners>(*py, st.opt.trial_env);
}

void on_down(node_actor self, caf::down_msg& dm) {
  auto& st = self->state;
  if (!st.head || dm.source != st.head.address()) return;
  log_line("lost the head at " + where(self) + " (" + to_string(dm.reason) + "); reconnecting");
  hold_trials(self);  // its trials run on; what they report waits until their owner greets them again
  st.head = nullptr;
  st.joined = false;
  ++st.generation;
  schedule_retry(self, "head lost");
}

// Trials are linked to the node so that they end with it; a trial's own end must not
// end the node. (An exit message sent to the node itself, e.g. on `tune stop`, does.)
void on_exit(node_actor self, caf::exit_msg& m) {
  if (self->state.audit && m.source == self->state.audit.address()) {
    log_line("the GPU audit ended (" + to_string(m.reason) + "): trials run without it from now on");
    self->state.audit = nullptr;
    return;
  }
  bool was_trial = false;
  trial_ended(self, m.source, was_trial);
  if (!was_trial) self->quit(m.reason);
}

// What the node sets up before it joins: its reservation table, what its trials start
// from, what it does when the head or a trial goes, the card claims, the GPU audit.
void open_node(node_actor self, node_options opt) {
  auto& st = self->state;
  st.opt = std::move(opt);
  // Versions start from the clock: a restarted node's are larger than its earlier ones.
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch());
  st.table = reservation_table{st.opt.resources, static_cast<uint64_t>(us.count())};
  st.plan = std::make_unique<start_plan>(st.opt.node_id, st.opt.work_dir, st.table);
  st.started = self->clock().now();
  open_trials(self);
  self->set_down_handler([self](caf::down_msg& dm) { on_down(self, dm); });
  self->set_exit_handler([self](caf::exit_msg& m) { on_exit(self, m); });
  if (st.opt.contain) log_line("containment: " + st.opt.contain->caps().describe());
  open_claims(self);
  start_audit(self);
  self->send(self, wire::retry_atom::value);
  self->delayed_send(self, st.opt.prepare_ttl / 4, wire::expire_atom::value);
}

// From this process: leave the cluster (on tune stop). Replies when the head has taken
// note, or with an error when there is no head to tell.
caf::response_promise leave(node_actor self) {
  auto& st = self->state;
  auto rp = self->make_response_promise();
  if (!st.head || !st.joined) {
    rp.deliver(caf::make_error(caf::sec::request_receiver_down));
    return rp;
  }
  st.joined = false;
  ++st.generation;
  self->request(st.head, wire::request_timeout, wire::leave_atom::value, st.opt.token, st.opt.node_id)
      .then([rp](wire::leave_atom, bool left) mutable { rp.deliver(wire::leave_atom::value, left); },
            [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
  return rp;
}

node_iface::behavior_type node(node_actor self, node_options opt) {
  open_node(self, std::move(opt));
  return typed_union<node_iface>(membership(self), reservations(self), file_handlers(self), trial_handlers(self));
}

}  // namespace

bool from_head(node_actor self) {
  auto& st = self->state;
  auto sender = self->current_sender();
  return st.head && sender && sender->node() == st.head.node();
}

void send_heartbeat(node_actor self) {
  auto& st = self->state;
  self->send(st.head, wire::heartbeat_atom::value, st.opt.token, st.opt.node_id, st.table.version(),
             wire::to_wire(st.table.resources().availability()), wire::holdings_of(st.table));
}

void send_report(node_actor self, bool now) {
  auto& st = self->state;
  if (!st.joined || !st.head) return;
  if (!now) {
    if (!st.report_due) {
      st.report_due = true;
      self->delayed_send(self, std::chrono::seconds(1), node_report_atom::value);
    }
    return;
  }
  auto report = node_report(self);
  if (report == st.last_report) return;
  st.last_report = report;
  self->send(st.head, wire::gpu_audit_atom::value, st.opt.token, st.opt.node_id, std::move(report));
}

node_membership_iface::behavior_type membership(node_actor self) {
  return {
      [self](wire::retry_atom) { connect(self); },
      [self](wire::beat_atom, uint64_t generation) {
        auto& st = self->state;
        if (!st.joined || generation != st.generation) return;
        send_heartbeat(self);
        self->delayed_send(self, wire::heartbeat_period, wire::beat_atom::value, generation);
      },
      [self](wire::rejoin_atom) {
        auto& st = self->state;
        if (!st.head || st.connecting) return;
        log_line("the head asked this node to join again");
        st.joined = false;
        ++st.generation;
        st.connecting = true;
        send_join(self);
      },
      [self](wire::leave_atom) -> caf::result<wire::leave_atom, bool> { return leave(self); },
      [self](node_report_atom) {
        self->state.report_due = false;
        send_report(self, true);
      },
  };
}

}  // namespace node_impl

caf::actor spawn_node(caf::actor_system& sys, node_options opt) {
  return caf::actor_cast<caf::actor>(sys.spawn(node_impl::node, std::move(opt)));
}

}  // namespace tune
