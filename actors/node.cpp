#include "node.hpp"

#include <dlfcn.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "audit.hpp"
#include "dial.hpp"
#include "log.hpp"
#include "tune/core/json_text.hpp"
#include "tune/core/utf8.hpp"
#include "tune/core/trace.hpp"
#include "tune/trial/paths.hpp"
#include "trial.hpp"
#include "tune/cluster/groups.hpp"
#include "tune/cluster/token.hpp"
#include "tune/core/quantity.hpp"
#include "tune/trial/command.hpp"
#include "tune/trial/python_module.hpp"
#include "tune/trial/sha256.hpp"
#include "tune/trial/workdir.hpp"
#include "tune/cluster/reservations.hpp"
#include "tune/cluster/version.hpp"
#include "tune/host/card_claims.hpp"
#include "tune/trial/others.hpp"

namespace tune {

namespace {

struct node_state {
  node_options opt;
  reservation_table table{node_resources{}};
  caf::actor head;
  bool joined = false, ever_joined = false, connecting = false, reported = false;
  uint64_t generation = 0;  // a new generation stops the old heartbeat chain
  std::chrono::milliseconds backoff{250};
  caf::actor_clock::time_point started;
  // The trials running here, by id, with the bundle each runs in. One whose bundle was
  // released is `ending` (being killed); a start of the same id waits for its end
  // (`after_end`): never two processes of one trial in one folder.
  struct running {
    caf::actor actor;
    bundle_key key;
    bool ending = false;
  };
  std::map<std::string, running> trials;
  std::map<std::string, std::vector<std::function<void()>>> after_end;
  caf::actor audit;                          // the GPU audit, when there is one
  std::string audit_report;                  // its latest report, for the head
  // Each running trial's host usage from its cgroup (json), for the head's status.
  std::map<std::string, nlohmann::json> host_use;
  bool report_due = false;  // a report to the head is scheduled
  std::string last_report;  // the last one sent
  uint64_t fetches = 0;                       // names files being fetched
  // Files being fetched (programs, working-directory files), by their path in the cache
  // and the server they come from: the starts waiting for each (trials started at once
  // share one fetch, not one each; another client's trials of the same file fetch from
  // their own, should this one's die mid-fetch).
  std::map<std::pair<std::string, caf::actor_addr>, std::vector<std::function<void(const status&)>>> file_fetches;
  // Working-directory manifests read, by SHA-256 (a few: each start of a trial needs one).
  std::map<std::string, std::shared_ptr<const workdir_manifest>> manifests;
  std::set<std::string> complete_workdirs;  // manifests whose every file is in the cache
  // Standby checkpoint copies (wire.hpp, stage_atom), files in <work dir>/staged/ by
  // SHA-256, by key "<user>/<trial>": a restart of the trial here copies them in place
  // instead of fetching them. Cleared when the node starts.
  struct standby {
    int64_t iteration = -1;
    std::vector<std::string> shas;
    uint64_t bytes = 0, seq = 0;  // seq: the oldest go first when space runs out
  };
  std::map<std::string, standby> staged;
  uint64_t staged_seq = 0;
  std::string python_path;  // the trials' Python module (empty: not installed)
  std::shared_ptr<python_spawners> pythons;  // warm interpreters for Python trials (none: off)
  std::shared_ptr<program_spawners> programs;  // warm libtune programs for C++ trials (none: off)
  std::shared_ptr<reuse::idle_pool> idle;  // C++ trials' workers kept for the next trial (tune/trial/reuse.hpp)
  // Other programs on the cards (docs/gpu-sharing.md): the machine's card claims (none:
  // this node has no card another program could use), and the GPU audit's latest list
  // of processes on the cards that are none of its trials.
  std::unique_ptr<card_claims> claims;
  bool release_due = false;  // released bundles not written to the claims yet
  std::vector<foreign_process> foreign;
  static inline const char* name = "tune.node";
};

using node_actor = caf::stateful_actor<node_state>*;

constexpr std::chrono::milliseconds max_backoff{2000};
// The most bytes of standby copies a node keeps (the oldest go first).
constexpr uint64_t staged_max_bytes = uint64_t{8} << 30;

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

// Placement-group messages come from the head's process only.
bool from_head(node_actor self) {
  auto& st = self->state;
  auto sender = self->current_sender();
  return st.head && sender && sender->node() == st.head.node();
}

// --- other programs on the cards (docs/gpu-sharing.md) ----------------------------

using claims_tick_atom = caf::atom_constant<caf::atom("claimtick")>;
// How often the node looks at the other nodes' claims on this machine's cards.
constexpr auto claims_period = std::chrono::milliseconds(200);

void send_heartbeat(node_actor self) {
  auto& st = self->state;
  self->send(st.head, wire::heartbeat_atom::value, st.opt.token, st.opt.node_id, st.table.version(),
             wire::to_wire(st.table.resources().availability()), wire::holdings_of(st.table));
}

// What this node's bundles (prepared or committed) hold on each card other programs can
// use too: its claims.
std::map<std::string, card_claim> own_claims(const reservation_table& table) {
  std::map<std::string, card_claim> out;
  auto& gpus = table.resources().gpus();
  for (auto& h : table.holdings())
    for (auto& g : h.alloc.gpus) {
      if (!shared_card(gpus[g.card])) continue;
      auto& c = out[gpus[g.card].uuid];
      c.units += g.share.units();
      c.memory += g.memory;
    }
  return out;
}

// Under the cards' locks (`held`'s, or taken by write()): every write to a card's folder is.
void write_claims(node_actor self, const card_claims::lock* held = nullptr) {
  auto& st = self->state;
  if (!st.claims) return;
  if (auto s = st.claims->write(own_claims(st.table), held); !s) log_line("card claims: " + s.message());
}

// What other programs hold on the cards, from the other nodes' `claims` and the audit's
// foreign processes, into the reservation table; the head hears of a change at once.
void set_others(node_actor self, const std::vector<claimer>& claims) {
  auto& st = self->state;
  auto& gpus = st.table.resources().gpus();
  auto before = st.table.resources().others();
  auto now = others_on_cards(gpus, claims, st.foreign, st.opt.others);
  if (auto s = st.table.set_others(now); !s) return log_line("what others hold on the cards: " + s.message());
  auto& after = st.table.resources().others();
  if (after == before) return;
  for (size_t c = 0; c < gpus.size(); ++c) {
    bool was = !before.empty() && before[c].any(), is = !after.empty() && after[c].any();
    if (is && (!was || before[c].holds_card != after[c].holds_card))
      log_line("GPU " + std::to_string(gpus[c].index) + " (" + gpus[c].uuid + "): in use by another program: " + after[c].who +
               (after[c].holds_card ? " (not given whole)" : ""));
    else if (was && !is)
      log_line("GPU " + std::to_string(gpus[c].index) + " (" + gpus[c].uuid + "): no other program on it any more");
  }
  if (st.joined && st.head) send_heartbeat(self);
}

using claims_write_atom = caf::atom_constant<caf::atom("claimwrite")>;
// Releases reach the claims within this long, many in one write (a prepare in between
// writes them at once): a claim that lasts a little longer only makes another cluster
// wait a little longer, never share a card.
constexpr auto release_delay = std::chrono::milliseconds(20);

void release_claims(node_actor self) {
  auto& st = self->state;
  if (!st.claims || st.release_due) return;
  st.release_due = true;
  self->delayed_send(self, release_delay, claims_write_atom::value);
}

// The other nodes' claims (the folders of `fresh` read again when they changed; all: the
// node's every card).
void look_at_claims(node_actor self, const std::vector<std::string>* fresh = nullptr) {
  auto& st = self->state;
  if (!st.claims) return set_others(self, {});
  set_others(self, fresh ? st.claims->others(*fresh) : st.claims->others());
}

// The shared cards of an allocation, by UUID.
std::vector<std::string> shared_cards_of(node_actor self, const allocation& a) {
  auto& gpus = self->state.table.resources().gpus();
  std::vector<std::string> out;
  for (auto& g : a.gpus)
    if (shared_card(gpus[g.card])) out.push_back(gpus[g.card].uuid);
  return out;
}

// A bundle reserved on this node's reservation table with what the other nodes on the
// machine claim taken into account: under the locks of the cards it will likely take
// (the head's choice, else where this node's rules put it), their claims read again; if
// it went to other cards after all, taken back and decided again under every card's lock.
// Nodes on disjoint cards never wait for each other; the node's claims are written before
// the locks go.
expected<allocation> prepare_claimed(node_actor self, const bundle_key& key, const resource_set& request,
                                     const allocation& preferred) {
  auto& st = self->state;
  auto now = self->clock().now();
  if (!st.claims || request.gpu().is_zero()) return st.table.prepare(key, request, preferred, now);
  auto& res = st.table.resources();
  std::vector<std::string> cards;
  if (res.follows_rules(request, preferred)) cards = shared_cards_of(self, preferred);
  else if (auto guess = res.plan(request)) cards = shared_cards_of(self, *guess);
  bool all = cards.empty();
  auto held = all ? st.claims->hold_all() : st.claims->hold(cards);
  look_at_claims(self, all ? &st.claims->cards() : &cards);
  auto taken = st.table.prepare(key, request, preferred, now);
  if (taken && !all)
    for (auto& uuid : shared_cards_of(self, *taken))
      if (std::find(cards.begin(), cards.end(), uuid) == cards.end()) {
        st.table.abort(key);
        {
          auto none = std::move(held);  // let go first: never two sets of locks at once
        }
        auto every = st.claims->hold_all();
        look_at_claims(self);
        taken = st.table.prepare(key, request, preferred, now);
        if (taken) write_claims(self, &every);
        return taken;
      }
  if (taken) write_claims(self, &held);
  return taken;
}

// The machine's card claims, for a node with cards other programs can use.
void open_claims(node_actor self) {
  auto& st = self->state;
  auto& gpus = st.opt.resources.gpus();
  if (std::none_of(gpus.begin(), gpus.end(), [](const gpu_instance& g) { return shared_card(g); })) return;
  claimer me;
  me.node = st.opt.node_id;
  me.pid = ::getpid();
  me.started = process_start_time(me.pid);
  me.uid = ::getuid();
  me.user = user_name(me.uid);
  if (st.opt.contain && st.opt.contain->caps().cgroup) me.cgroup = st.opt.contain->caps().trials_path;
  auto dir = st.opt.claims_dir.empty() ? shared_dir() + "/gpus" : st.opt.claims_dir;
  std::vector<std::string> uuids;
  for (auto& g : gpus)
    if (shared_card(g)) uuids.push_back(g.uuid);
  auto c = card_claims::open(dir, std::move(me), uuids);
  if (!c) {
    log_line("card claims off (" + c.error().message() + "): another libtune cluster on this machine may give these "
             "cards too until a trial of its shows on them");
    return;
  }
  st.claims = std::move(*c);
  log_line("card claims in " + st.claims->dir() + ": other libtune nodes on this machine see what this one gives");
  self->send(self, claims_tick_atom::value);
}

// --- trials -------------------------------------------------------------------



using report_atom = caf::atom_constant<caf::atom("nodereport")>;

// What the head shows of this node beyond its resources: the GPU audit's cards, how its
// trials are contained and what each uses of the host (memory, CPU), at most once a
// second and only when it changed.
std::string node_report(node_actor self) {
  auto& st = self->state;
  nlohmann::json j = nlohmann::json::object();
  // Each trial's user (its bundle's key names them): the head shows a user only their own.
  auto owner_of = [&](const std::string& trial) {
    std::string group, owner;
    uint64_t attempt = 0;
    if (auto t = st.trials.find(trial); t != st.trials.end()) parse_node_key(t->second.key, group, attempt, &owner);
    return owner;
  };
  auto audit = nlohmann::json::parse(st.audit_report.empty() ? "{}" : st.audit_report, nullptr, false);
  if (audit.is_object() && audit.contains("cards") && audit["cards"].is_array()) {
    for (auto& card : audit["cards"])
      if (card.is_object() && card.contains("trials") && card["trials"].is_array())
        for (auto& t : card["trials"])
          if (t.is_object() && t.contains("trial") && t["trial"].is_string()) t["owner"] = owner_of(t["trial"].get<std::string>());
    j["cards"] = audit["cards"];
  }
  if (st.opt.contain) {
    auto& caps = st.opt.contain->caps();
    j["containment"] = {{"kind", caps.kind()}, {"description", caps.describe()}, {"memory", caps.memory},
                        {"cpu", caps.cpu}, {"pids", caps.pids}};
  }
  nlohmann::json trials = nlohmann::json::object();
  for (auto& [id, use] : st.host_use) {
    trials[id] = use;
    trials[id]["owner"] = owner_of(id);
  }
  j["trials"] = trials;
  return json_text(j);
}

void send_report(node_actor self, bool now = false) {
  auto& st = self->state;
  if (!st.joined || !st.head) return;
  if (!now) {
    if (!st.report_due) {
      st.report_due = true;
      self->delayed_send(self, std::chrono::seconds(1), report_atom::value);
    }
    return;
  }
  auto text = node_report(self);
  if (text == st.last_report) return;
  st.last_report = text;
  self->send(st.head, wire::gpu_audit_atom::value, st.opt.token, st.opt.node_id, text);
}

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

// Who owns a trial's folder: what the node reads there, it reads as them.
unix_account folder_owner(const std::string& dir) {
  unix_account a = own_account();
  struct stat s {};
  if (::stat(dir.c_str(), &s) == 0 && ::geteuid() == 0 && s.st_uid != 0) {
    a.name = std::to_string(s.st_uid);
    a.uid = s.st_uid;
    a.gid = s.st_gid;
    a.groups = {s.st_gid};
    a.switches = true;
  }
  return a;
}

// What a start needs on this node, once fetched: a trainable's program, or a program
// trial's working directory (none: it runs in its trial folder).
struct prepared {
  std::string program;
  std::shared_ptr<const workdir_manifest> workdir;
};

void start_trial(node_actor self, const wire::wire_trial_spec& spec, const reservation_table::hold& hold,
                 const prepared& what, caf::actor owner, caf::response_promise rp) {
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
  auto account = trial_folder_for(self, spec);
  if (!account) {
    rp.deliver(wire::start_answer(false, account.error().message()));
    return;
  }
  t.account = *account;
  // The secret its owner reads its checkpoints with (a user's token is not the node's),
  // where the trial cannot reach it.
  auto access = random_token();
  auto access_dir = st.opt.work_dir + "/access";
  std::error_code ec;
  std::filesystem::create_directories(access_dir, ec);
  ::chmod(access_dir.c_str(), 0700);
  if (!access || !write_token_file(access_dir + "/" + spec.trial_id, *access)) {
    rp.deliver(wire::start_answer(false, "cannot write the trial's access secret in " + access_dir));
    return;
  }
  t.access = *access;
  for (auto& g : hold.alloc.gpus) {
    t.cards.push_back(st.table.resources().gpus()[g.card]);
    t.grants.push_back(g);
  }
  t.base_env = st.opt.trial_env;
  t.cpu_threads = std::max(1, static_cast<int>(std::ceil(hold.request.cpu().to_double() - 1e-9)));
  t.owner = std::move(owner);
  t.audit = st.audit;
  t.workers = st.opt.workers;
  t.contain = st.opt.contain;
  t.limits.memory = hold.request.memory();
  t.limits.cpus = hold.request.cpu().to_double();
  t.limits.pids = st.opt.trial_max_pids;
  t.node = caf::actor_cast<caf::actor>(self);
  t.started = std::move(rp);
  auto a = spawn_trial(self, std::move(t));
  st.trials[spec.trial_id] = {a, hold.key};
}

// A file being fetched: up to `fetch_window` chunks in flight, each written at its
// offset as it comes.
struct fetch_job {
  caf::actor server;
  std::string sha, dest;
  uint64_t size = 0, next = 0, written = 0;
  int fd = -1, in_flight = 0;
  bool over = false;
  // The hash of the bytes written so far, in order (answers come in the order asked: one
  // server, one connection); a chunk out of order turns it off and the file is hashed
  // once whole instead.
  std::unique_ptr<sha256_stream> hash = std::make_unique<sha256_stream>();
  uint64_t hashed = 0;
  std::function<void(const status&)> done;
  // Into a trial's folder: its file is checked and, when bad, removed as the trial's
  // account (a folder on the way may have become a link since it was opened).
  std::optional<unix_account> as;
};
constexpr int fetch_window = 4;

void fetch_end(std::shared_ptr<fetch_job> f, const std::string& why) {
  if (f->over) return;
  f->over = true;
  if (f->fd >= 0) ::close(f->fd);
  f->fd = -1;
  status outcome = status::ok();
  {
    std::optional<as_account> guard;  // only for the check and the removal: `done` runs as the node
    if (f->as) guard.emplace(*f->as);
    if (why.empty()) {
      auto got = f->hash && f->hashed == f->size ? expected<std::string>{f->hash->hex()} : sha256_file(f->dest);
      if (!got || *got != f->sha)
        outcome = status{errc::not_found, got ? "its SHA-256 is " + *got + ", not " + f->sha : got.error().message()};
    } else {
      outcome = status{errc::not_found, why};
    }
    if (!outcome) std::remove(f->dest.c_str());
  }
  f->done(outcome);
}

void fetch_more(node_actor self, std::shared_ptr<fetch_job> f) {
  while (!f->over && f->in_flight < fetch_window && f->next < f->size) {
    uint64_t offset = f->next;
    auto length = static_cast<uint32_t>(std::min<uint64_t>(wire::max_chunk, f->size - offset));
    f->next += length;
    ++f->in_flight;
    self->request(f->server, std::chrono::seconds(60), wire::program_get_atom::value, f->sha, offset, length)
        .then(
            [self, f, offset, length](wire::program_get_atom, const std::string& bytes) {
              --f->in_flight;
              if (f->over) return;
              if (bytes.size() != length)
                return fetch_end(f, "the server sent " + std::to_string(bytes.size()) + " bytes, not " + std::to_string(length));
              if (::pwrite(f->fd, bytes.data(), length, static_cast<off_t>(offset)) != static_cast<ssize_t>(length))
                return fetch_end(f, "cannot write " + f->dest);
              if (f->hash && offset == f->hashed) {
                f->hash->add(bytes);
                f->hashed += length;
              } else {
                f->hash.reset();
              }
              f->written += length;
              if (f->written == f->size) return fetch_end(f, "");
              fetch_more(self, f);
            },
            [f](caf::error& err) {
              --f->in_flight;
              fetch_end(f, to_string(err));
            });
  }
}

// Fetches a file by its SHA-256 from a client's server in chunks (never one giant
// message; a few in flight at once) into `dest`, checks the hash, then calls `done`
// (ok, or why not; `dest` is removed then).
void fetch_file(node_actor self, caf::actor server, std::string sha, uint64_t size, std::string dest,
                std::function<void(const status&)> done, int opened = -1, std::optional<unix_account> as = {}) {
  auto f = std::make_shared<fetch_job>();
  f->server = std::move(server);
  f->sha = std::move(sha);
  f->dest = std::move(dest);
  f->size = size;
  f->done = std::move(done);
  f->as = std::move(as);
  f->fd = opened >= 0 ? opened : ::open(f->dest.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (f->fd < 0) return fetch_end(f, "cannot create " + f->dest + ": " + std::strerror(errno));
  if (size == 0) return fetch_end(f, "");
  fetch_more(self, f);
}

// Makes sure <dir>/<sha> is in this node's cache (fetched from `server` when it is not:
// starts that need the same file share one fetch; written under a temporary name, moved
// into place once its hash is checked), then calls `done` (its error names `what`).
// `logged`: its fetch is said in the node's log ("program NAME (sha) fetched");
// `fetching`: called when this call begins a fetch (not when it waits for another's).
void ensure_file(node_actor self, const std::string& dir, const std::string& sha, uint64_t size, const caf::actor& server,
                 bool executable, const std::string& what, std::function<void(const status&)> done, bool logged = false,
                 const std::function<void()>& fetching = {}) {
  auto& st = self->state;
  auto path = dir + "/" + sha;
  if (::access(path.c_str(), executable ? X_OK : R_OK) == 0) return done(status::ok());
  if (!server) return done(status{errc::not_found, what + " is not on this node and nobody serves it"});
  auto key = std::make_pair(path, server.address());
  auto& waiting = st.file_fetches[key];
  waiting.push_back(std::move(done));
  if (waiting.size() > 1) return;  // being fetched for another start already
  if (fetching) fetching();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::string tmp = dir + "/." + sha + "." + std::to_string(::getpid()) + "." + std::to_string(++st.fetches);
  std::remove(tmp.c_str());
  fetch_file(self, server, sha, size, tmp, [self, tmp, path, key, executable, logged, what, sha](const status& got) {
    status outcome = got ? got : status{got.code(), "cannot fetch " + what + ": " + got.message()};
    if (outcome) {
      ::chmod(tmp.c_str(), executable ? 0755 : 0444);
      if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        std::remove(tmp.c_str());
        outcome = status{errc::invalid_argument, "cannot move " + what + " into the cache"};
      } else if (logged) {
        log_line(what + " (" + sha.substr(0, 12) + ") fetched");
      }
    }
    auto waiters = std::move(self->state.file_fetches[key]);
    self->state.file_fetches.erase(key);
    for (auto& w : waiters) w(outcome);
  });
}

// The files of a working directory this node lacks, a few fetches at a time; `done`
// once all are in (or with the first failure).
struct files_job {
  std::vector<workdir_file> wanted;
  size_t next = 0, finished = 0;
  bool failed = false;
  size_t fetched = 0;  // fetches this start began (others it shared with starts before it)
  uint64_t bytes = 0;  // their bytes
  std::function<void(const status&)> done;
};

void ensure_more(node_actor self, std::shared_ptr<files_job> job, caf::actor server) {
  constexpr size_t at_once = 8;
  while (!job->failed && job->next < job->wanted.size() && job->next - job->finished < at_once) {
    auto f = job->wanted[job->next++];
    ensure_file(
        self, self->state.opt.work_dir + "/files", f.sha256, f.size, server, false, f.path + " of the working directory",
        [self, job, server](const status& got) {
          ++job->finished;
          if (job->failed) return;
          if (!got) {
            job->failed = true;
            return job->done(got);
          }
          if (job->finished == job->wanted.size()) return job->done(status::ok());
          ensure_more(self, job, server);
        },
        false,
        [job, size = f.size] {  // this start fetches it (others it waits for, or finds)
          ++job->fetched;
          job->bytes += size;
        });
  }
}

// A program trial's working directory on this node: its manifest (fetched and read once
// per node), then the files the cache lacks. `done` gets the manifest, or why not.
void prepare_workdir(node_actor self, const wire::wire_trial_spec& spec, const caf::actor& server,
                     std::function<void(expected<std::shared_ptr<const workdir_manifest>>)> done) {
  auto& st = self->state;
  auto files = st.opt.work_dir + "/files";
  auto sha = spec.workdir_sha256;
  auto with_manifest = [self, server, files, done, sha](std::shared_ptr<const workdir_manifest> m) {
    // Once all its files were in, they stay (nothing is taken out of the cache).
    if (self->state.complete_workdirs.count(sha)) return done(m);
    auto job = std::make_shared<files_job>();
    std::set<std::string> seen;
    for (auto& f : m->files)
      if (seen.insert(f.sha256).second && ::access((files + "/" + f.sha256).c_str(), R_OK) != 0) job->wanted.push_back(f);
    if (job->wanted.empty()) {
      self->state.complete_workdirs.insert(sha);
      return done(m);
    }
    std::weak_ptr<files_job> weak = job;
    job->done = [self, m, done, weak, sha, total = m->files.size()](const status& got) {
      if (!got) return done(got);
      self->state.complete_workdirs.insert(sha);
      if (auto j = weak.lock(); j && j->fetched > 0)
        log_line("working directory: fetched " + std::to_string(j->fetched) + " of its " + std::to_string(total) + " files (" +
                 format_bytes(static_cast<int64_t>(j->bytes)) + ")");
      done(m);
    };
    ensure_more(self, job, server);
  };
  if (auto it = st.manifests.find(sha); it != st.manifests.end()) return with_manifest(it->second);
  ensure_file(self, files, sha, spec.workdir_size, server, false, "the working directory's manifest",
              [self, files, sha, done, with_manifest](const status& got) {
                if (!got) return done(got);
                std::ifstream in(files + "/" + sha);
                std::string text{std::istreambuf_iterator<char>(in), {}};
                auto m = workdir_manifest::from_json(text);
                if (!m) return done(m.error());
                auto shared = std::make_shared<const workdir_manifest>(std::move(*m));
                auto& cache = self->state.manifests;
                if (cache.size() >= 32) cache.erase(cache.begin());
                cache[sha] = shared;
                with_manifest(shared);
              });
}

// A checkpoint copy to start from ({"iteration", "files": [{"name", "size", "sha256"}]}):
// its files, checked (names inside the folder, hashes well-formed), or why not.
expected<nlohmann::json> restore_manifest(const std::string& text) {
  auto m = nlohmann::json::parse(text, nullptr, false);
  if (!m.is_object() || !m.contains("files") || !m["files"].is_array() || !m.contains("iteration") ||
      !m["iteration"].is_number_integer())
    return status{errc::invalid_argument, "the checkpoint to restore is not a manifest"};
  for (auto& f : m["files"]) {
    if (!f.is_object() || !f.contains("name") || !f["name"].is_string() || !f.contains("sha256") ||
        !f["sha256"].is_string() || !is_sha256_hex(f["sha256"].get<std::string>()) || !f.contains("size") ||
        !f["size"].is_number_unsigned())
      return status{errc::invalid_argument, "the checkpoint to restore has a malformed file entry"};
    if (!stays_inside(f["name"].get<std::string>()))
      return status{errc::invalid_argument, "the checkpoint to restore names a file outside it: " + f["name"].get<std::string>()};
  }
  return m;
}

std::string staged_dir(node_actor self) { return self->state.opt.work_dir + "/staged"; }

// Removes those of `shas` that no standby set names any more.
void remove_unnamed(node_actor self, const std::vector<std::string>& shas) {
  for (auto& sha : shas) {
    bool named = false;
    for (auto& [key, s] : self->state.staged) named = named || std::find(s.shas.begin(), s.shas.end(), sha) != s.shas.end();
    if (!named) std::remove((staged_dir(self) + "/" + sha).c_str());
  }
}

void drop_staged(node_actor self, const std::string& key) {
  auto it = self->state.staged.find(key);
  if (it == self->state.staged.end()) return;
  auto shas = std::move(it->second.shas);
  self->state.staged.erase(it);
  remove_unnamed(self, shas);
}

// A standby copy of a trial's checkpoint (wire.hpp, stage_atom): its files (and the
// trial's program) fetched into this node's caches, each checked against its hash.
caf::result<caf::message> stage(node_actor self, const std::string& key, const std::string& manifest,
                                const std::string& program_sha, uint64_t program_size, const caf::actor& server) {
  auto& st = self->state;
  auto no = [](const std::string& why) { return caf::make_message(wire::stage_atom::value, false, why); };
  auto yes = [](const std::string& what) { return caf::make_message(wire::stage_atom::value, true, what); };
  if (!from_head(self)) return no("standby copies come only through the head this node joined");
  if (st.opt.work_dir.empty()) return no("this node runs no trials (it has no work folder)");
  auto m = restore_manifest(manifest);
  if (!m) return no(m.error().message());
  auto& files = (*m)["files"];
  if (files.empty()) {
    drop_staged(self, key);
    return yes("dropped");
  }
  if (!program_sha.empty() && !is_sha256_hex(program_sha)) return no("the program's SHA-256 is not 64 hex digits");
  if (!server) return no("nobody serves the checkpoint");
  int64_t iteration = (*m)["iteration"].get<int64_t>();
  if (auto it = st.staged.find(key); it != st.staged.end() && it->second.iteration >= iteration)
    return yes("iteration " + std::to_string(it->second.iteration) + " is here already");
  uint64_t bytes = 0;
  std::vector<std::string> shas;
  for (auto& f : files) {
    bytes += f["size"].get<uint64_t>();
    shas.push_back(f["sha256"].get<std::string>());
  }
  if (bytes > staged_max_bytes)
    return no("the checkpoint (" + format_bytes(static_cast<int64_t>(bytes)) + ") is larger than a node's standby space (" +
              format_bytes(static_cast<int64_t>(staged_max_bytes)) + ")");
  struct job {
    size_t left = 0;
    std::string error;
  };
  auto j = std::make_shared<job>();
  j->left = files.size() + (program_sha.empty() ? 0 : 1);
  auto rp = self->make_response_promise<caf::message>();
  auto one = [self, j, rp, key, iteration, shas, bytes, no, yes](const status& got) mutable {
    if (!got && j->error.empty()) j->error = got.message();
    if (--j->left > 0) return;
    auto& st = self->state;
    auto& have = st.staged[key];
    if (!j->error.empty() || have.iteration >= iteration) {  // failed, or a newer one came meanwhile
      if (have.shas.empty()) st.staged.erase(key);
      remove_unnamed(self, shas);
      rp.deliver(j->error.empty() ? yes("a newer copy is here already") : no(j->error));
      return;
    }
    auto old = std::move(have.shas);
    have = {iteration, shas, bytes, ++st.staged_seq};
    remove_unnamed(self, old);
    // Within the node's space: the oldest sets go.
    for (;;) {
      uint64_t total = 0;
      auto oldest = st.staged.end();
      for (auto it = st.staged.begin(); it != st.staged.end(); ++it) {
        total += it->second.bytes;
        if (it->first != key && (oldest == st.staged.end() || it->second.seq < oldest->second.seq)) oldest = it;
      }
      if (total <= staged_max_bytes || oldest == st.staged.end()) break;
      drop_staged(self, oldest->first);
    }
    rp.deliver(yes("iteration " + std::to_string(iteration) + " staged"));
  };
  if (!program_sha.empty())
    ensure_file(self, st.opt.work_dir + "/programs", program_sha, program_size, server, true, "the trial's program", one, true);
  for (auto& f : files)
    ensure_file(self, staged_dir(self), f["sha256"].get<std::string>(), f["size"].get<uint64_t>(), server, false,
                "checkpoint file " + f["name"].get<std::string>(), one);
  return rp;
}

// Copies `size` bytes of the standby file `sha` into `fd` (at its start): false when
// there is none whole, `fd` then empty again. The file stays until its set is dropped
// (the trial's client does once it runs here; another trial's set may name it too).
bool from_standby(node_actor self, const std::string& sha, uint64_t size, int fd) {
  int src = ::open((staged_dir(self) + "/" + sha).c_str(), O_RDONLY | O_CLOEXEC);
  if (src < 0) return false;
  struct ::stat s {};
  uint64_t done = 0;
  if (::fstat(src, &s) == 0 && static_cast<uint64_t>(s.st_size) == size) {
    while (done < size) {
      auto n = ::sendfile(fd, src, nullptr, static_cast<size_t>(std::min<uint64_t>(size - done, 1u << 30)));
      if (n <= 0) break;
      done += static_cast<uint64_t>(n);
    }
  }
  ::close(src);
  if (done != size) {  // emptied again for the fetch (it writes at offsets: a failure here is its error)
    if (::ftruncate(fd, 0) != 0) log_line("cannot empty a checkpoint file after a failed copy: " + std::string{std::strerror(errno)});
    return false;
  }
  return true;
}

// The trial's program is on this node: fetch the checkpoint copy it starts from, when it
// has one, then start it. The fetches took a while, so the bundle is checked again (its
// group may be gone, a trial of this id started meanwhile), as trial_start did.
void continue_start(node_actor self, wire::wire_trial_spec spec, bundle_key key, prepared program,
                    caf::actor server, caf::actor owner, caf::response_promise rp, nlohmann::json files,
                    const char* fetched = "") {
  auto& st = self->state;
  if (auto old = st.trials.find(spec.trial_id); old != st.trials.end() && old->second.ending) {
    // An earlier start of this trial whose bundle was taken back: starts once it ended.
    log_line("trial " + spec.trial_id + " starts once its earlier process, being killed, has ended");
    st.after_end[spec.trial_id].push_back([=] {
      continue_start(self, spec, key, program, server, owner, rp, files, fetched);
    });
    return;
  }
  auto* now = st.table.find(key);
  std::string why = !now || now->state != hold_state::committed
                        ? "bundle " + std::to_string(key.bundle) + " of group " + spec.group +
                              " was released while " + fetched + " was fetched"
                    : st.trials.count(spec.trial_id) ? "trial " + spec.trial_id + " already runs here"
                                                     : "";
  if (!why.empty()) {
    log_line("trial " + spec.trial_id + " not started: " + why);
    auto running = st.trials.find(spec.trial_id);
    bool runs = running != st.trials.end() && (!now || now->state == hold_state::committed);
    rp.deliver(wire::start_answer(false, "node " + st.opt.node_id + ": " + why, runs ? running->second.actor : caf::actor{}));
    return;
  }
  if (files.is_object() && !files["files"].empty()) {
    auto dir = st.opt.work_dir + "/trials/" + spec.trial_id + "/restore/" + std::to_string(files["iteration"].get<int64_t>());
    auto f = files["files"].back();
    files["files"].erase(files["files"].size() - 1);
    auto dest = dir + "/" + f["name"].get<std::string>();
    auto account = trial_folder_for(self, spec);
    if (!account) {
      rp.deliver(wire::start_answer(false, account.error().message()));
      return;
    }
    int fd = -1;
    std::error_code ec;
    {  // in the trial's folder as its account: a link it left there leads nowhere it could not write
      as_account as(*account);
      std::filesystem::create_directories(std::filesystem::path(dest).parent_path(), ec);
      if (!ec) fd = ::open(dest.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    }
    if (fd < 0) {
      rp.deliver(wire::start_answer(false, "node " + st.opt.node_id + ": cannot create " + dest + ": " +
                                               (ec ? ec.message() : std::string{std::strerror(errno)})));
      return;
    }
    spec.restore_dir = dir;
    auto began = std::chrono::steady_clock::now();
    auto took = [began, size = f["size"].get<double>()] {
      char text[96];
      std::snprintf(text, sizeof text, "%.1f MB in %.3f s", size / 1e6,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count());
      return std::string{text};
    };
    if (from_standby(self, f["sha256"], f["size"], fd)) {
      ::close(fd);
      log_line("trial " + spec.trial_id + ": checkpoint file " + f["name"].get<std::string>() + " from its standby copy (" +
               took() + ")");
      continue_start(self, spec, key, program, server, owner, rp, files, "its checkpoint");
      return;
    }
    fetch_file(self, server, f["sha256"], f["size"], dest,
               [=](const status& got) mutable {
                 if (!got) {
                   std::string text = "cannot fetch checkpoint file " + f["name"].get<std::string>() + ": " + got.message();
                   log_line("trial " + spec.trial_id + " not started: " + text);
                   rp.deliver(wire::start_answer(false, "node " + self->state.opt.node_id + ": " + text));
                   return;
                 }
                 log_line("trial " + spec.trial_id + ": checkpoint file " + f["name"].get<std::string>() + " fetched (" +
                          took() + ")");
                 continue_start(self, spec, key, program, server, owner, rp, files, "its checkpoint");
               },
               fd, *account);
    return;
  }
  start_trial(self, spec, *now, program, std::move(owner), std::move(rp));
}

caf::response_promise trial_start(node_actor self, const wire::wire_trial_spec& spec, const std::string& key,
                                  uint32_t bundle, const caf::actor& server, const caf::actor& owner) {
  trace_step("start_received", spec.trial_id);
  auto& st = self->state;
  bool trusted = from_head(self);  // before the promise: making it takes the sender away
  auto rp = self->make_response_promise();
  auto no = [&](const std::string& why) {
    rp.deliver(wire::start_answer(false, "node " + st.opt.node_id + ": " + why));
    return rp;
  };
  if (!trusted) return no("trials start only through the head this node joined");
  if (st.opt.work_dir.empty()) return no("this node runs no trials (it has no work folder)");
  if (spec.trial_id.empty() || spec.trial_id.find_first_of("/\\ \t\n") != std::string::npos || spec.trial_id[0] == '.')
    return no("bad trial id \"" + spec.trial_id + "\": no slashes, spaces or leading dot");
  if (auto old = st.trials.find(spec.trial_id); old != st.trials.end() && !old->second.ending) {
    // Not started again; the answer names the trial actor that runs it (wire.hpp).
    rp.deliver(wire::start_answer(false, "node " + st.opt.node_id + ": trial " + spec.trial_id + " already runs here",
                                  old->second.actor));
    return rp;
  }
  if (auto account = account_for(self, spec); !account) {
    rp.deliver(wire::start_answer(false, account.error().message()));
    return rp;
  }
  auto* hold = st.table.find({key, bundle});
  if (!hold || hold->state != hold_state::committed)
    return no("it holds no committed bundle " + std::to_string(bundle) + " of group " + spec.group);
  bool program_trial = !spec.command.empty();
  if (!program_trial && !is_sha256_hex(spec.program_sha256)) return no("the program's SHA-256 is not 64 hex digits");
  if (program_trial) {
    for (auto& kv : spec.env) {
      auto eq = kv.find('=');
      if (auto s = check_env_name(kv.substr(0, eq)); eq == std::string::npos || !s)
        return no("the trial's environment: " + (eq == std::string::npos ? "\"" + kv + "\" is not NAME=VALUE" : s.message()));
    }
    if (!spec.workdir_sha256.empty() && !is_sha256_hex(spec.workdir_sha256))
      return no("the working directory's SHA-256 is not 64 hex digits");
    if (!spec.workdir_path.empty()) {  // in place: the folder itself, on this machine
      if (!spec.workdir_sha256.empty()) return no("a working directory is both shipped and run in place");
      std::error_code ec;
      if (!std::filesystem::path(spec.workdir_path).is_absolute() || !std::filesystem::is_directory(spec.workdir_path, ec))
        return no("its working directory " + spec.workdir_path + " is not a folder on this node's machine (" +
                  st.opt.hostname + "): in-place trials run only on the machine they were started from");
      auto account = account_for(self, spec);
      if (account)
        if (auto s = reachable(*account, spec.workdir_path); !s) return no("its working directory, run in place: " + s.message());
    }
  }
  // Where it starts from: a checkpoint folder of this node's (restore_dir), else a copy
  // the client serves (restore_files, fetched into the trial's folder), else afresh.
  nlohmann::json files;
  wire::wire_trial_spec started = spec;
  bool local = false;
  if (!spec.restore_dir.empty()) {
    // Only a checkpoint folder of a trial of this node: nothing else of its disk.
    auto dir = folder_inside(st.opt.work_dir + "/trials", spec.restore_dir);
    local = !dir.empty() && dir.string().find("/checkpoints/") != std::string::npos;
    if (!local && spec.restore_files.empty())
      return no("restore folder " + spec.restore_dir + " is not a trial's checkpoint on this node");
  }
  if (!local) {
    started.restore_dir.clear();
    if (!spec.restore_files.empty()) {
      auto m = restore_manifest(spec.restore_files);
      if (!m) return no(m.error().message());
      if (!server) return no("the checkpoint to restore is not on this node and nobody serves it");
      files = std::move(*m);
    }
  }
  auto key_of = hold->key;
  // This start goes on once what it needs is in the cache (or fails with the fetch).
  auto failed = [self, rp, id = spec.trial_id](const std::string& text) mutable {
    log_line("trial " + id + " not started: " + text);
    rp.deliver(wire::start_answer(false, "node " + self->state.opt.node_id + ": " + text));
  };
  if (program_trial) {
    if (spec.workdir_sha256.empty()) {
      continue_start(self, started, key_of, {}, server, owner, rp, files);
      return rp;
    }
    prepare_workdir(self, spec, server, [=](expected<std::shared_ptr<const workdir_manifest>> m) mutable {
      if (!m) return failed(m.error().message());
      continue_start(self, started, key_of, {"", *m}, server, owner, rp, files, "its working directory");
    });
    return rp;
  }
  std::string programs = st.opt.work_dir + "/programs";
  std::string cached = programs + "/" + spec.program_sha256;
  ensure_file(
      self, programs, spec.program_sha256, spec.program_size, server, true, "program " + spec.program_name,
      [=](const status& got) mutable {
        if (!got) return failed(got.message());
        continue_start(self, started, key_of, {cached, nullptr}, server, owner, rp, files, "its program");
      },
      true);
  return rp;
}

void send_join(node_actor self) {
  auto& st = self->state;
  auto ad = wire::make_ad(st.opt.node_id, st.opt.hostname, st.opt.address, st.table.resources());
  ad.version = version();
  ad.holdings = wire::holdings_of(st.table);
  ad.holdings_version = st.table.version();
  self->request(st.head, wire::request_timeout, wire::join_atom::value, st.opt.token, ad)
      .then(
          [self](wire::join_atom, bool accepted, const std::string& text) {
            auto& st = self->state;
            st.connecting = false;
            if (!accepted) {
              fatal(self, "the head at " + where(self) + " refused this node: " + text);
              return;
            }
            st.joined = true;
            st.backoff = std::chrono::milliseconds{250};
            log_line(std::string{st.ever_joined ? "joined the head again" : "joined the head"} + " at " +
                     where(self) + " as " + st.opt.node_id);
            st.ever_joined = true;
            report_first(self, status::ok());
            self->send(self, wire::beat_atom::value, ++st.generation);
            st.last_report.clear();
            send_report(self, true);
          },
          [self](caf::error& err) { schedule_retry(self, "join: " + to_string(err)); });
}

// A checkpoint folder of one of this node's trials, from a client's request: the
// canonical path when `path` is a folder inside <work dir>/trials/<trial>/ (no link out
// of it), else why not.
expected<std::filesystem::path> checkpoint_folder(node_actor self, const std::string& trial, const std::string& path) {
  namespace fs = std::filesystem;
  auto& st = self->state;
  if (st.opt.work_dir.empty()) return status{errc::not_found, "this node runs no trials"};
  if (trial.empty() || trial.find_first_of("/\\") != std::string::npos || trial[0] == '.')
    return status{errc::invalid_argument, "bad trial id \"" + trial + "\""};
  auto root = st.opt.work_dir + "/trials/" + trial;
  if (!fs::is_directory(root)) return status{errc::not_found, "no trial " + trial + " on node " + st.opt.node_id};
  auto dir = folder_inside(root, path);
  if (dir.empty()) return status{errc::not_found, "no checkpoint folder " + path + " of trial " + trial + " on node " + st.opt.node_id};
  return dir;
}

// Connects to the head (or, connected already, joins again).
void connect(node_actor self) {
  auto& st = self->state;
  if (st.joined || st.connecting) return;
  st.connecting = true;
  if (st.head) {  // connected, but the head asked us to join again
    send_join(self);
    return;
  }
  if (st.opt.head_actor) {  // a head in this process
    st.head = st.opt.head_actor;
    self->monitor(st.head);
    send_join(self);
    return;
  }
  auto d = dial(self->home_system(), st.opt.head_host, st.opt.head_port);
  if (!d) {
    schedule_retry(self, d.error().message());
    return;
  }
  self->request(d->to, wire::request_timeout, std::move(d->msg))
      .then(
          [self](const caf::node_id&, caf::strong_actor_ptr& ptr, const std::set<std::string>&) {
            auto& st = self->state;
            if (!ptr) {
              schedule_retry(self, "no libtune head at that port");
              return;
            }
            st.head = caf::actor_cast<caf::actor>(ptr);
            self->monitor(st.head);
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

// Whether `token` may read trial `trial`'s checkpoints: the node's own token, or the
// trial's access secret (made at its start, kept in its folder, given to its owner).
bool may_read(node_actor self, const std::string& token, const std::string& trial) {
  bool node = token_equal(token, self->state.opt.token);
  bool owner = false;
  if (!trial.empty() && trial.find_first_of("/\\") == std::string::npos && trial[0] != '.' && !self->state.opt.work_dir.empty()) {
    std::ifstream in(self->state.opt.work_dir + "/access/" + trial);
    std::string secret;
    owner = std::getline(in, secret) && secret.size() == 64 && token_equal(token, secret);
  }
  return node || owner;
}

std::string not_allowed(const std::string& trial) {
  return "not allowed to read trial " + trial + "'s checkpoints: only its owner (with its access secret) or a holder of "
         "the node's token may";
}

// A checkpoint's files (name, size), for a client that copies it.
caf::message list_checkpoint(node_actor self, const std::string& token, const std::string& trial, const std::string& path) {
  auto no = [](const std::string& why) { return caf::make_message(wire::ckpt_list_atom::value, false, why); };
  if (!may_read(self, token, trial)) return no(not_allowed(trial));
  as_account as(folder_owner(self->state.opt.work_dir + "/trials/" + trial));  // read as the trial's account
  auto dir = checkpoint_folder(self, trial, path);
  if (!dir) return no(dir.error().message());
  namespace fs = std::filesystem;
  nlohmann::json files = nlohmann::json::array();
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(*dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (it->is_symlink(ec)) return no("checkpoint " + path + " holds a symbolic link: " + it->path().string());
    auto name = it->path().lexically_relative(*dir).string();
    if (!valid_utf8(name))  // copies name their files in JSON text: one such name could not be asked for
      return no("checkpoint " + path + " holds a file whose name is not UTF-8 (" + shown_utf8(name) +
                "): it cannot be copied; give its files UTF-8 names");
    if (it->is_regular_file(ec)) files.push_back({{"name", name}, {"size", it->file_size(ec)}});
  }
  if (ec) return no("cannot list " + path + ": " + ec.message());
  return caf::make_message(wire::ckpt_list_atom::value, true, json_text(files));
}

// A chunk of one of a checkpoint's files.
caf::message read_checkpoint(node_actor self, const std::string& token, const std::string& trial, const std::string& path,
                             const std::string& name, uint64_t offset, uint32_t length) {
  auto no = [](const std::string& why) { return caf::make_message(wire::ckpt_read_atom::value, false, why); };
  if (!may_read(self, token, trial)) return no(not_allowed(trial));
  if (length > wire::max_chunk) return no("at most " + std::to_string(wire::max_chunk) + " bytes at a time");
  as_account as(folder_owner(self->state.opt.work_dir + "/trials/" + trial));  // read as the trial's account
  auto dir = checkpoint_folder(self, trial, path);
  if (!dir) return no(dir.error().message());
  namespace fs = std::filesystem;
  std::error_code ec;
  auto file = stays_inside(name) ? fs::canonical(*dir / name, ec) : fs::path{};
  if (file.empty() || ec || !within(*dir, file) || !fs::is_regular_file(file))
    return no("no file " + name + " in checkpoint " + path);
  std::ifstream in(file, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(offset));
  std::string bytes(length, '\0');
  in.read(bytes.data(), length);
  bytes.resize(static_cast<size_t>(std::max<std::streamsize>(in.gcount(), 0)));
  return caf::make_message(wire::ckpt_read_atom::value, true, std::move(bytes));
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
  st.audit = spawn_gpu_audit(self, {st.opt.gpu_library, cards, st.opt.audit_interval, caf::actor_cast<caf::actor>(self)});
  log_line("GPU audit on: " + std::to_string(cards.size()) + " card(s), every " +
           std::to_string(st.opt.audit_interval.count()) + " ms");
}

// What the node sets up before it joins: its reservation table, the Python module and
// warm interpreters for its trials, what it does when the head or a trial goes, the
// GPU audit.
void open_node(node_actor self, node_options opt) {
  self->state.opt = std::move(opt);
  // Versions start from the clock: a restarted node's are larger than its earlier ones.
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch());
  self->state.table = reservation_table{self->state.opt.resources, static_cast<uint64_t>(us.count())};
  self->state.started = self->clock().now();
  // C++ trials fork from their program started once as a spawner, unless told not to.
  if (const char* fresh = std::getenv("LIBTUNE_FRESH_PROCESS"); !fresh || !*fresh)
    self->state.programs = std::make_shared<program_spawners>(self->state.opt.trial_env);
  // An idle worker waits this long for the experiment's next trial on its cards.
  {
    long linger = 2000;
    if (const char* v = std::getenv("LIBTUNE_REUSE_LINGER_MS"); v && *v) linger = std::clamp(std::atol(v), 0L, 600000L);
    self->state.idle = std::make_shared<reuse::idle_pool>(std::chrono::milliseconds(linger));
  }
  if (!self->state.opt.work_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(self->state.opt.work_dir + "/reuse", ec);  // an earlier run's hand-over folders
  }
  if (!self->state.opt.work_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(self->state.opt.work_dir + "/staged", ec);  // an earlier run's: no record of them
    if (auto py = install_python_module(self->state.opt.work_dir + "/python")) {
      self->state.python_path = *py;
      // Python trials fork from warm interpreters, unless the node is told not to.
      if (const char* fresh = std::getenv("LIBTUNE_FRESH_PYTHON"); !fresh || !*fresh)
        self->state.pythons = std::make_shared<python_spawners>(*py, self->state.opt.trial_env);
    } else {
      log_line("trials get no libtune Python module: " + py.error().message());
    }
  }
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& st = self->state;
    if (!st.head || dm.source != st.head.address()) return;
    log_line("lost the head at " + where(self) + " (" + to_string(dm.reason) + "); reconnecting");
    // Its trials run on; what they report waits until their owner greets them again.
    for (auto& [id, t] : st.trials) self->send(t.actor, trial_hold_atom::value);
    st.head = nullptr;
    st.joined = false;
    ++st.generation;
    schedule_retry(self, "head lost");
  });
  // Trials are linked to the node so that they end with it; a trial's own end must not
  // end the node. (An exit message sent to the node itself, e.g. on `tune stop`,
  // does.)
  self->set_exit_handler([self](caf::exit_msg& m) {
    if (self->state.audit && m.source == self->state.audit.address()) {
      log_line("the GPU audit ended (" + to_string(m.reason) + "): trials run without it from now on");
      self->state.audit = nullptr;
      return;
    }
    auto& trials = self->state.trials;
    auto it = std::find_if(trials.begin(), trials.end(), [&](const auto& t) { return t.second.actor.address() == m.source; });
    if (it != trials.end()) {
      auto id = it->first;
      trials.erase(it);
      if (self->state.host_use.erase(id)) send_report(self);
      if (auto w = self->state.after_end.find(id); w != self->state.after_end.end()) {
        auto waiting = std::move(w->second);
        self->state.after_end.erase(w);
        for (auto& f : waiting) f();
      }
      return;
    }
    self->quit(m.reason);
  });
  if (self->state.opt.contain) log_line("containment: " + self->state.opt.contain->caps().describe());
  open_claims(self);
  start_audit(self);
  self->send(self, wire::retry_atom::value);
  self->delayed_send(self, self->state.opt.prepare_ttl / 4, wire::expire_atom::value);
}

caf::message_handler membership(node_actor self) {
  return {
      [self](wire::retry_atom) { connect(self); },
      [self](wire::beat_atom, uint64_t generation) {
        auto& st = self->state;
        if (!st.joined || generation != st.generation) return;
        send_heartbeat(self);
        self->delayed_send(self, wire::heartbeat_period, wire::beat_atom::value, generation);
      },
      [self](wire::expire_atom) {
        auto& st = self->state;
        auto gone = st.table.expire(self->clock().now(), st.opt.prepare_ttl);
        for (auto& k : gone)
          log_line("released bundle " + k.to_string() + ": prepared but never committed within " +
                   std::to_string(st.opt.prepare_ttl.count()) + " ms");
        if (!gone.empty()) release_claims(self);
        self->delayed_send(self, st.opt.prepare_ttl / 4, wire::expire_atom::value);
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
      // From this process: leave the cluster (on tune stop). Replies when the head
      // has taken note, or with an error when there is no head to tell.
      [self](wire::leave_atom) -> caf::response_promise {
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
      },
  };
}

// Reservations: prepares and commits from the head.
caf::message_handler reservations(node_actor self) {
  return {
      // Prepares and commits come as plain messages and are answered with plain messages
      // (no request timeouts: the head times attempts out itself). A commit is answered
      // only when it fails.
      [self](wire::prepare_atom, const std::string& key, uint32_t bundle, const wire::wire_request& req,
             const wire::wire_alloc& preferred) {
        auto& st = self->state;
        auto to = caf::actor_cast<caf::actor>(self->current_sender());
        if (!to) return;
        auto answer = [&](bool ok, wire::wire_alloc taken, std::string why) {
          self->send(to, wire::prepare_atom::value, st.opt.node_id, key, bundle, ok, std::move(taken), std::move(why),
                     st.table.version());
        };
        if (!from_head(self)) return answer(false, {}, "only the head this node joined may reserve here");
        auto request = wire::request_from_wire(req);
        if (!request) return answer(false, {}, request.error().message());
        auto pref = wire::alloc_from_wire(preferred, st.table.resources());
        // Two clusters on one machine never give one card twice (prepare_claimed).
        auto taken = prepare_claimed(self, {key, bundle}, *request, pref ? *pref : allocation{});
        if (!taken) return answer(false, {}, taken.error().message());
        answer(true, wire::to_wire(*taken), {});
      },
      [self](wire::commit_atom, const std::string& key, uint32_t bundle) {
        auto& st = self->state;
        auto to = caf::actor_cast<caf::actor>(self->current_sender());
        auto done = from_head(self) ? st.table.commit({key, bundle})
                                    : status{errc::invalid_argument, "only the head this node joined may commit here"};
        if (!done && to) self->send(to, wire::commit_atom::value, st.opt.node_id, key, bundle, false, done.message());
      },
      [self](wire::abort_atom, const std::string& key, uint32_t bundle) {
        if (!from_head(self)) return;
        auto& st = self->state;
        st.table.abort({key, bundle});
        release_claims(self);
        // A trial in that bundle has no reservation any more: it must not go on using
        // the cards (the head may have given them, or this trial, to someone else).
        for (auto& [id, t] : st.trials)
          if (t.key == bundle_key{key, bundle} && !t.ending) {
            t.ending = true;
            log_line("trial " + id + " killed: the head released its bundle " + t.key.to_string());
            self->send(t.actor, trial_release_atom::value,
                       "killed on node " + st.opt.node_id + ": the head released its bundle " + t.key.to_string() +
                           " (its placement group was removed or placed elsewhere)");
          }
      },
  };
}

// Its trials: starts, greetings, their checkpoints, what they use.
caf::message_handler trial_handlers(node_actor self) {
  return {
      [self](wire::trial_start_atom, const wire::wire_trial_spec& spec, const std::string& key, uint32_t bundle,
             const caf::actor& server, const caf::actor& owner) {
        return trial_start(self, spec, key, bundle, server, owner);
      },
      [self](wire::stage_atom, const std::string& key, const std::string& manifest, const std::string& program_sha,
             uint64_t program_size, const caf::actor& server) {
        return stage(self, key, manifest, program_sha, program_size, server);
      },
      // A trial's checkpoint, read by a client in chunks (also after the trial ended).
      [self](wire::ckpt_list_atom, const std::string& token, const std::string& trial, const std::string& path) {
        return list_checkpoint(self, token, trial, path);
      },
      [self](wire::ckpt_read_atom, const std::string& token, const std::string& trial, const std::string& path,
             const std::string& name, uint64_t offset, uint32_t length) {
        return read_checkpoint(self, token, trial, path, name, offset, length);
      },
      // A client's greeting for one of its trials (through the head): passed on to it.
      [self](wire::route_atom, const std::string& trial, uint64_t received) {
        auto it = self->state.trials.find(trial);
        if (it != self->state.trials.end()) self->delegate(it->second.actor, wire::route_atom::value, received);
      },
      // The GPU audit's processes on the cards that are none of this node's trials.
      [self](audit_foreign_atom, const std::string& list) {
        auto& st = self->state;
        if (!st.audit || self->current_sender() != st.audit.address()) return;
        st.foreign = foreign_from_json(list);
        look_at_claims(self);
      },
      [self](claims_write_atom) {
        self->state.release_due = false;
        write_claims(self);
      },
      [self](claims_tick_atom) {
        look_at_claims(self);
        self->delayed_send(self, claims_period, claims_tick_atom::value);
      },
      [self](audit_report_atom, const std::string& report) {
        auto& st = self->state;
        if (!st.audit || self->current_sender() != st.audit.address()) return;
        st.audit_report = report;
        send_report(self, true);
      },
      [self](trial_host_atom, const std::string& id, const std::string& usage) {
        auto& st = self->state;
        auto t = st.trials.find(id);
        if (t == st.trials.end() || self->current_sender() != t->second.actor.address()) return;
        auto u = nlohmann::json::parse(usage, nullptr, false);
        if (!u.is_object()) return;
        st.host_use[id] = std::move(u);
        send_report(self);
      },
      [self](report_atom) {
        self->state.report_due = false;
        send_report(self, true);
      },
  };
}

caf::behavior node(node_actor self, node_options opt) {
  open_node(self, std::move(opt));
  return caf::behavior{membership(self).or_else(reservations(self)).or_else(trial_handlers(self))};
}

}  // namespace

caf::actor spawn_node(caf::actor_system& sys, node_options opt) {
  return sys.spawn(node, std::move(opt));
}

std::map<std::string, std::string> inherited_trial_env() {
  std::map<std::string, std::string> env;
  for (auto name : {"PATH", "HOME", "LD_LIBRARY_PATH", "TMPDIR", "LANG", "TUNE_FASHION_MNIST_DIR",
                    "TUNE_TRAIN_POOLED_GRADS", "TUNE_TRAIN_DIRECT_CONV", "TUNE_SIMULATED_GPUS"})
    if (const char* v = std::getenv(name)) env[name] = v;
  if (!env.count("PATH")) env["PATH"] = "/usr/local/bin:/usr/bin:/bin";
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&inherited_trial_env), &info) != 0 && info.dli_fname != nullptr) {
    auto found = env.find("LD_LIBRARY_PATH");
    auto path = trial_library_path(found == env.end() ? nullptr : found->second.c_str(), info.dli_fname);
    if (path) env["LD_LIBRARY_PATH"] = *path;
  }
  return env;
}

std::optional<std::string> trial_library_path(const char* current, const std::string& library) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path file = fs::weakly_canonical(library, ec);
  if (ec || file.filename().string().rfind("libtune.so", 0) != 0) return std::nullopt;
  auto dir = file.parent_path().string();
  static const std::set<std::string> searched{"/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib",
                                              "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
                                              "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu"};
  if (searched.count(dir)) return std::nullopt;
  std::string now = current ? current : "";
  for (size_t start = 0; start <= now.size();) {
    auto end = now.find(':', start);
    if (end == std::string::npos) end = now.size();
    if (now.compare(start, end - start, dir) == 0 && end - start == dir.size()) return std::nullopt;
    start = end + 1;
  }
  return now.empty() ? dir : now + ":" + dir;
}

}  // namespace tune
