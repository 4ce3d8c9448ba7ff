// What the node fetches and serves as files: programs and working directories from a
// client's program server (content-addressed, checked by SHA-256, cached in the work
// folder), standby copies of checkpoints (standby.hpp), and the checkpoints of its
// trials, read by clients in chunks.
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include "log.hpp"
#include "node_state.hpp"
#include "tune/cluster/token.hpp"
#include "tune/core/quantity.hpp"
#include "tune/core/utf8.hpp"
#include "tune/trial/account.hpp"
#include "tune/trial/paths.hpp"
#include "tune/trial/sha256.hpp"

namespace tune {
namespace node_impl {

namespace {

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

std::string staged_dir(node_actor self) { return self->state.opt.work_dir + "/staged"; }

void remove_staged(node_actor self, const std::vector<std::string>& shas) {
  for (auto& sha : shas) std::remove((staged_dir(self) + "/" + sha).c_str());
}

using stage_answer = caf::result<wire::stage_atom, std::string>;
stage_answer staged(const std::string& text) { return {wire::stage_atom::value, text}; }
caf::error not_staged(const std::string& why) { return wire::refusal(errc::invalid_argument, why); }

// A standby copy's files (and its trial's program) are in (or one failed, `error`): kept,
// unless a newer copy came meanwhile.
stage_answer stage_done(node_actor self, const std::string& key, const restore_set& set, const std::string& error) {
  uint64_t bytes = 0;
  std::vector<std::string> shas;
  for (auto& f : set.files) {
    bytes += f.size;
    shas.push_back(f.sha256);
  }
  auto& copies = self->state.staged;
  if (!error.empty()) {
    remove_staged(self, copies.unnamed(shas));
    return not_staged(error);
  }
  auto kept = copies.keep(key, set.iteration, std::move(shas), bytes);
  remove_staged(self, kept.unnamed);
  return staged(kept.kept ? "iteration " + std::to_string(set.iteration) + " staged" : "a newer copy is here already");
}

// Why a standby copy is not fetched (empty: it is).
std::string stage_refusal(node_actor self, const expected<restore_set>& m, const std::string& program_sha,
                          const caf::actor& server) {
  if (!from_head(self)) return "standby copies come only through the head this node joined";
  if (self->state.opt.work_dir.empty()) return "this node runs no trials (it has no work folder)";
  if (!m) return m.error().message();
  if (m->files.empty()) return "";
  if (!program_sha.empty() && !is_sha256_hex(program_sha)) return "the program's SHA-256 is not 64 hex digits";
  if (!server) return "nobody serves the checkpoint";
  return "";
}

// A standby copy of a trial's checkpoint (wire.hpp, stage_atom): its files (and the
// trial's program) fetched into this node's caches, each checked against its hash.
stage_answer stage(node_actor self, const std::string& key, const std::string& manifest, const std::string& program_sha,
                   uint64_t program_size, const caf::actor& server) {
  auto& st = self->state;
  auto m = parse_restore_set(manifest);
  if (auto why = stage_refusal(self, m, program_sha, server); !why.empty()) return not_staged(why);
  if (m->files.empty()) {
    remove_staged(self, st.staged.drop(key));
    return staged("dropped");
  }
  if (auto have = st.staged.iteration(key); have >= m->iteration)
    return staged("iteration " + std::to_string(have) + " is here already");
  uint64_t bytes = 0;
  for (auto& f : m->files) bytes += f.size;
  if (bytes > st.staged.max_bytes())
    return not_staged("the checkpoint (" + format_bytes(static_cast<int64_t>(bytes)) +
                      ") is larger than a node's standby space (" +
                      format_bytes(static_cast<int64_t>(st.staged.max_bytes())) + ")");
  struct job {
    size_t left = 0;
    std::string error;
  };
  auto j = std::make_shared<job>();
  j->left = m->files.size() + (program_sha.empty() ? 0 : 1);
  auto rp = self->make_response_promise<wire::stage_atom, std::string>();
  auto one = [self, j, rp, key, set = *m](const status& got) mutable {
    if (!got && j->error.empty()) j->error = got.message();
    if (--j->left > 0) return;
    if (auto done = stage_done(self, key, set, j->error); done.flag == caf::rt_error) rp.deliver(std::move(done.err));
    else rp.deliver(wire::stage_atom::value, done.value.get_as<std::string>(1));
  };
  if (!program_sha.empty())
    ensure_file(self, st.opt.work_dir + "/programs", program_sha, program_size, server, true, "the trial's program", one, true);
  for (auto& f : m->files)
    ensure_file(self, staged_dir(self), f.sha256, f.size, server, false, "checkpoint file " + f.name, one);
  return rp;
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
caf::result<wire::ckpt_list_atom, std::vector<wire::wire_file>> list_checkpoint(node_actor self, const std::string& token,
                                                                               const std::string& trial,
                                                                               const std::string& path) {
  auto no = [](const std::string& why) { return wire::refusal(errc::invalid_argument, why); };
  if (!may_read(self, token, trial)) return no(not_allowed(trial));
  as_account as(folder_owner(self->state.opt.work_dir + "/trials/" + trial));  // read as the trial's account
  auto dir = checkpoint_folder(self, trial, path);
  if (!dir) return no(dir.error().message());
  namespace fs = std::filesystem;
  std::vector<wire::wire_file> files;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(*dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (it->is_symlink(ec)) return no("checkpoint " + path + " holds a symbolic link: " + it->path().string());
    auto name = it->path().lexically_relative(*dir).string();
    if (!valid_utf8(name))  // copies name their files in JSON text: one such name could not be asked for
      return no("checkpoint " + path + " holds a file whose name is not UTF-8 (" + shown_utf8(name) +
                "): it cannot be copied; give its files UTF-8 names");
    if (it->is_regular_file(ec)) files.push_back({name, static_cast<uint64_t>(it->file_size(ec))});
  }
  if (ec) return no("cannot list " + path + ": " + ec.message());
  return {wire::ckpt_list_atom::value, std::move(files)};
}

// A chunk of one of a checkpoint's files.
caf::result<wire::ckpt_read_atom, std::string> read_checkpoint(node_actor self, const std::string& token,
                                                               const std::string& trial, const std::string& path,
                                                               const std::string& name, uint64_t offset,
                                                               uint32_t length) {
  auto no = [](const std::string& why) { return wire::refusal(errc::invalid_argument, why); };
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
  return {wire::ckpt_read_atom::value, std::move(bytes)};
}

}  // namespace

// Fetches a file by its SHA-256 from a client's server in chunks (never one giant
// message; a few in flight at once) into `dest`, checks the hash, then calls `done`
// (ok, or why not; `dest` is removed then).
void fetch_file(node_actor self, caf::actor server, std::string sha, uint64_t size, std::string dest,
                std::function<void(const status&)> done, int opened, std::optional<unix_account> as) {
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
                 bool executable, const std::string& what, std::function<void(const status&)> done, bool logged,
                 const std::function<void()>& fetching) {
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

node_files_iface::behavior_type file_handlers(node_actor self) {
  return {
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
  };
}

}  // namespace node_impl
}  // namespace tune
