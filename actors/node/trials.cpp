// The node's trials: who each runs as and its folder, its starts carried out as the
// start plan decides (start_plan.hpp: fetch its program or working directory, copy the
// checkpoint it starts from, start its process), and what its running trials tell the
// node.
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "audit.hpp"
#include "log.hpp"
#include "node_state.hpp"
#include "trial/trial.hpp"
#include "tune/cluster/groups.hpp"
#include "tune/cluster/token.hpp"
#include "tune/core/trace.hpp"
#include "tune/trial/paths.hpp"
#include "tune/core/overloaded.hpp"

namespace tune {
namespace node_impl {

namespace {

// Who trial `spec` runs as: its user's account when the head named one, else the
// node's own choice (--trial-user). An account the node cannot switch to is an error
// that says why.
expected<unix_account> account_for(node_actor self, const wire::wire_trial_spec& spec) {
  auto& st = self->state;
  auto& mine = st.opt.trial_account;
  if (spec.account.empty() || spec.account == mine.name) return mine;
  if (!mine.switches)
    return status{errc::invalid_argument, "node " + st.opt.node_id + " runs as " + mine.name + ", not as root: it cannot "
                                          "run trials as " + spec.account + " (their user's account); start it as root"};
  auto a = find_account(spec.account);
  if (!a) return status{a.error().code(), "node " + st.opt.node_id + ", the account of this trial's user: " + a.error().message()};
  return a;
}

// The trial's folder, made when missing (the account's, 0700) or checked when there (a
// folder, not a link, and the account's): the folder the trial writes in and the node
// prepares its start in.
status ensure_trial_folder(node_actor self, const std::string& trial, const unix_account& account) {
  auto& st = self->state;
  std::error_code ec;
  std::filesystem::create_directories(st.opt.work_dir + "/trials", ec);
  auto dir = st.opt.work_dir + "/trials/" + trial;
  auto fail = [&](const std::string& why) { return status{errc::invalid_argument, "node " + st.opt.node_id + ": " + why}; };
  if (::mkdir(dir.c_str(), 0700) == 0) {
    if (account.switches && ::chown(dir.c_str(), account.uid, account.gid) != 0)
      return fail("cannot give " + dir + " to " + account.name + ": " + std::strerror(errno));
    return status::ok();
  }
  if (errno != EEXIST) return fail("cannot create " + dir + ": " + std::strerror(errno));
  struct stat s {};
  if (::lstat(dir.c_str(), &s) != 0 || !S_ISDIR(s.st_mode)) return fail(dir + " is not a folder");
  if (account.switches && s.st_uid != account.uid)
    return fail(dir + " belongs to uid " + std::to_string(s.st_uid) + ", not to " + account.name + " (uid " +
                std::to_string(account.uid) + "), who this trial runs as: an earlier run of it ran as another account; "
                "remove the folder to start it afresh");
  return status::ok();
}

// Who trial `spec` runs as, its folder ready for it (account_for, then
// ensure_trial_folder): what a start needs before the node writes anything there.
expected<unix_account> trial_folder_for(node_actor self, const wire::wire_trial_spec& spec) {
  auto account = account_for(self, spec);
  if (!account) return account;
  if (auto made = ensure_trial_folder(self, spec.trial_id, *account); !made) return made;
  return account;
}

// The secret its owner reads its checkpoints with (a user's token is not the node's),
// where the trial cannot reach it. A trial started again in its folder (a resume, PBT's
// exploit) keeps the secret it had: its owner may still be copying a checkpoint of the
// run before with it.
expected<std::string> write_access(node_actor self, const std::string& trial) {
  auto access_dir = self->state.opt.work_dir + "/access";
  auto access = ensure_token(access_dir + "/" + trial);  // the one there, else a new one (0600, folder 0700)
  if (!access) return status{errc::invalid_argument, "cannot keep the trial's access secret in " + access_dir + ": " +
                                                         access.error().message()};
  return access->token;
}

// How trial `spec` runs in the bundle it holds, with what was fetched for it.
trial_options options_for(node_actor self, const wire::wire_trial_spec& spec, const reservation_table::hold& hold,
                          const prepared& what) {
  auto& st = self->state;
  trial_options t;
  t.spec = spec;
  t.program = what.program;
  t.workdir = what.workdir;
  t.workdir_blobs = st.opt.work_dir + "/files";
  t.python_path = st.python_path;
  t.pythons = st.pythons;
  t.programs = st.programs;
  t.idle = st.idle;
  if (!st.opt.work_dir.empty()) t.reuse_root = st.opt.work_dir + "/reuse";
  t.node_id = st.opt.node_id;
  t.trial_dir = st.opt.work_dir + "/trials/" + spec.trial_id;
  for (auto& g : hold.alloc.gpus) {
    t.cards.push_back(st.table.resources().gpus()[g.card]);
    t.grants.push_back(g);
  }
  t.base_env = st.opt.trial_env;
  t.cpu_threads = std::max(1, static_cast<int>(std::ceil(hold.request.cpu().to_double() - 1e-9)));
  t.audit = st.audit;
  t.workers = st.opt.workers;
  t.contain = st.opt.contain;
  t.limits.memory = hold.request.memory();
  t.limits.cpus = hold.request.cpu().to_double();
  t.limits.pids = st.opt.trial_max_pids;
  t.node = caf::actor_cast<node_iface>(self);
  return t;
}

// The start plan's `spawn`: the trial's actor, which answers the start once its process
// runs; or why not.
void spawn(node_actor self, start_id id) {
  auto& st = self->state;
  auto* s = st.plan->find(id);
  auto p = st.pending.find(id);
  if (!s || p == st.pending.end()) return;
  auto* hold = st.table.find(s->key);
  auto account = trial_folder_for(self, s->spec);
  auto access = account ? write_access(self, s->spec.trial_id) : expected<std::string>{account.error()};
  if (!hold || !access) return st.plan->on_failed(id, hold ? access.error().message() : "the bundle is gone");
  auto t = options_for(self, s->spec, *hold, p->second.what);
  if (t.spec.gang.world_size > 0 && t.spec.gang.rank == 0 && t.spec.gang.master_port == 0) {  // the gang meets here
    auto point = rendezvous_point(st.opt.address);
    if (!point) return st.plan->on_failed(id, point.error().message());
    std::tie(t.spec.gang.master_addr, t.spec.gang.master_port) = *point;
  }
  t.account = *account;
  t.access = *access;
  t.owner = caf::actor_cast<trial_events_iface>(p->second.owner);
  t.started = std::move(p->second.rp);
  st.pending.erase(p);
  auto a = spawn_trial(self, std::move(t));
  st.trial_actors[++st.next_trial] = a;
  st.plan->on_spawned(id, st.next_trial);
}

// The checkpoint file `file` into `dir`, in the trial's folder as its account (a link
// it left there leads nowhere it could not write): the descriptor, or why not.
expected<int> open_restore(node_actor self, const std::string& dest,
                           const unix_account& account) {
  int fd = -1;
  std::error_code ec;
  {
    as_account as(account);
    std::filesystem::create_directories(std::filesystem::path(dest).parent_path(), ec);
    if (!ec) fd = ::open(dest.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  }
  if (fd < 0)
    return status{errc::invalid_argument, "node " + self->state.opt.node_id + ": cannot create " + dest + ": " +
                                              (ec ? ec.message() : std::string{std::strerror(errno)})};
  return fd;
}

// The start plan's `restore`: a checkpoint file in place, from its standby copy on this
// node or fetched from the client's server.
void restore(node_actor self, const starting::restore& r) {
  auto& st = self->state;
  auto* s = st.plan->find(r.start);
  auto p = st.pending.find(r.start);
  if (!s || p == st.pending.end()) return;
  auto account = trial_folder_for(self, s->spec);
  auto fd = account ? open_restore(self, r.dir + "/" + r.file.name, *account) : expected<int>{account.error()};
  if (!fd) return st.plan->on_restored(r.start, fd.error());
  auto began = std::chrono::steady_clock::now();
  auto said = [began, id = s->spec.trial_id, f = r.file](const char* how) {
    char took[96];
    std::snprintf(took, sizeof took, "%.1f MB in %.3f s", static_cast<double>(f.size) / 1e6,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count());
    log_line("trial " + id + ": checkpoint file " + f.name + how + " (" + took + ")");
  };
  if (from_standby(self, r.file.sha256, r.file.size, *fd)) {
    ::close(*fd);
    said(" from its standby copy");
    return st.plan->on_restored(r.start, status::ok());
  }
  auto done = [self, id = r.start, said, name = r.file.name](const status& got) {
    if (got) said(" fetched");
    self->state.plan->on_restored(id, got ? got : status{got.code(), "node " + self->state.opt.node_id +
                                                                        ": cannot fetch checkpoint file " + name + ": " +
                                                                        got.message()});
    carry_out(self);
  };
  fetch_file(self, p->second.server, r.file.sha256, r.file.size, r.dir + "/" + r.file.name, done, *fd, *account);
}

// The start plan's fetches: the program, or the working directory.
void fetch_program(node_actor self, start_id id) {
  auto& st = self->state;
  auto* s = st.plan->find(id);
  auto p = st.pending.find(id);
  if (!s || p == st.pending.end()) return;
  auto& spec = s->spec;
  auto programs = st.opt.work_dir + "/programs";
  ensure_file(
      self, programs, spec.program_sha256, spec.program_size, p->second.server, true, "program " + spec.program_name,
      [self, id, cached = programs + "/" + spec.program_sha256](const status& got) {
        auto& st = self->state;
        if (auto p = st.pending.find(id); got && p != st.pending.end()) p->second.what.program = cached;
        st.plan->on_fetched(id, got ? got : status{got.code(), "node " + st.opt.node_id + ": " + got.message()});
        carry_out(self);
      },
      true);
}

void fetch_workdir(node_actor self, start_id id) {
  auto& st = self->state;
  auto* s = st.plan->find(id);
  auto p = st.pending.find(id);
  if (!s || p == st.pending.end()) return;
  prepare_workdir(self, s->spec, p->second.server, [self, id](expected<std::shared_ptr<const workdir_manifest>> m) {
    auto& st = self->state;
    if (auto p = st.pending.find(id); m && p != st.pending.end()) p->second.what.workdir = *m;
    st.plan->on_fetched(id, m ? status::ok() : status{m.error().code(), "node " + st.opt.node_id + ": " + m.error().message()});
    carry_out(self);
  });
}

void refuse(node_actor self, const starting::refuse& r) {
  auto& st = self->state;
  auto p = st.pending.find(r.start);
  if (p == st.pending.end()) return;
  auto running = st.trial_actors.find(r.running);
  p->second.rp.deliver(wire::start_refusal(
      r.answer, running == st.trial_actors.end() ? caf::actor{} : caf::actor_cast<caf::actor>(running->second)));
  st.pending.erase(p);
}

void release(node_actor self, const starting::release& r) {
  if (auto a = self->state.trial_actors.find(r.trial); a != self->state.trial_actors.end())
    self->send(a->second, trial_release_atom::value, r.why);
}

void carry_out_one(node_actor self, const start_command& c) {
  std::visit(overloaded{
                 [self](const starting::fetch_program& x) { fetch_program(self, x.start); },
                 [self](const starting::fetch_workdir& x) { fetch_workdir(self, x.start); },
                 [self](const starting::restore& x) { restore(self, x); },
                 [self](const starting::spawn& x) { spawn(self, x.start); },
                 [self](const starting::refuse& x) { refuse(self, x); },
                 [self](const starting::release& x) { release(self, x); },
                 [](const starting::say& x) { log_line(x.line); },
             },
             c);
}

// What the plan cannot see about a start: where it came from, its account, its
// working directory run in place, its checkpoint folder on this node.
start_facts facts_of(node_actor self, const wire::wire_trial_spec& spec, const caf::actor& server) {
  auto& st = self->state;
  start_facts f;
  f.from_head = from_head(self);
  f.has_work_dir = !st.opt.work_dir.empty();
  f.has_server = static_cast<bool>(server);
  auto account = account_for(self, spec);
  if (!account) f.account = account.error();
  if (!spec.workdir_path.empty()) {
    std::error_code ec;
    if (!std::filesystem::path(spec.workdir_path).is_absolute() || !std::filesystem::is_directory(spec.workdir_path, ec))
      f.in_place = {errc::invalid_argument, "its working directory " + spec.workdir_path + " is not a folder on this node's machine (" +
                                                st.opt.hostname + "): in-place trials run only on the machine they were started from"};
    else if (account)
      if (auto s = reachable(*account, spec.workdir_path); !s)
        f.in_place = {s.code(), "its working directory, run in place: " + s.message()};
  }
  if (!spec.restore_dir.empty() && f.has_work_dir) {
    // Only a checkpoint folder of a trial of this node: nothing else of its disk.
    auto dir = folder_inside(st.opt.work_dir + "/trials", spec.restore_dir);
    f.restore_local = !dir.empty() && dir.string().find("/checkpoints/") != std::string::npos;
  }
  return f;
}

caf::response_promise trial_start(node_actor self, const wire::wire_trial_spec& spec, const std::string& key,
                                  uint32_t bundle, const caf::actor& server, const caf::actor& owner) {
  trace_step("start_received", spec.trial_id);
  auto& st = self->state;
  auto facts = facts_of(self, spec, server);  // before the promise: making it takes the sender away
  auto rp = self->make_response_promise();
  auto id = st.plan->begin(spec, {key, bundle}, facts);
  st.pending[id] = {rp, server, owner, {}};
  carry_out(self);
  return rp;
}

}  // namespace

void carry_out(node_actor self) {
  auto& st = self->state;
  if (st.carrying) return;  // the loop below takes the new commands in their turn
  st.carrying = true;
  for (auto commands = st.plan->take(); !commands.empty(); commands = st.plan->take())
    for (auto& c : commands) carry_out_one(self, c);
  st.carrying = false;
}

void trial_ended(node_actor self, const caf::actor_addr& source, bool& was_trial) {
  auto& st = self->state;
  auto a = std::find_if(st.trial_actors.begin(), st.trial_actors.end(), [&](const auto& t) { return t.second.address() == source; });
  was_trial = a != st.trial_actors.end();
  if (!was_trial) return;
  auto handle = a->first;
  auto id = st.plan->on_ended(handle);
  st.trial_actors.erase(handle);
  if (id && st.host_use.erase(*id)) send_report(self);
  carry_out(self);
}

void hold_trials(node_actor self) {
  for (auto& [handle, actor] : self->state.trial_actors) self->send(actor, trial_hold_atom::value);
}

std::string trial_owner(node_actor self, const std::string& trial) {
  std::string group, owner;
  uint64_t attempt = 0;
  if (auto* t = self->state.plan->trial(trial)) parse_node_key(t->key, group, attempt, &owner);
  return owner;
}

node_trials_iface::behavior_type trial_handlers(node_actor self) {
  return {
      [self](wire::trial_start_atom, const wire::wire_trial_spec& spec, const std::string& key, uint32_t bundle,
             const caf::actor& server,
             const caf::actor& owner) -> caf::result<wire::trial_start_atom, wire::wire_trial_started, caf::actor> {
        return trial_start(self, spec, key, bundle, server, owner);
      },
      // A client's greeting for one of its trials (through the head): passed on to it.
      [self](wire::route_atom, const std::string& trial, uint64_t received) {
        auto* t = self->state.plan->trial(trial);
        if (auto a = t ? self->state.trial_actors.find(t->actor) : self->state.trial_actors.end(); a != self->state.trial_actors.end())
          self->delegate(a->second, wire::route_atom::value, received);
      },
      [self](audit_report_atom, std::vector<wire::wire_card_report>& report) {
        auto& st = self->state;
        if (!st.audit || self->current_sender() != st.audit.address()) return;
        st.audit_report = std::move(report);
        send_report(self, true);
      },
      [self](trial_host_atom, const std::string& id, const host_usage& usage) {
        auto& st = self->state;
        auto* t = st.plan->trial(id);
        auto a = t ? st.trial_actors.find(t->actor) : st.trial_actors.end();
        if (a == st.trial_actors.end() || self->current_sender() != a->second.address()) return;
        st.host_use[id] = usage;
        send_report(self);
      },
  };
}

}  // namespace node_impl
}  // namespace tune
