#include "checkpoint_copy.hpp"

#include <sys/stat.h>
#include <time.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include <nlohmann/json.hpp>

#include "client/client.hpp"
#include "tune/core/json_text.hpp"
#include "tune/trial/paths.hpp"
#include "tune/trial/sha256.hpp"
#include "wire.hpp"

namespace tune {

namespace {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

struct copier_state {
  copier_setup setup;
  static inline const char* name = "tune.checkpoint_copier";
};
using copier_actor = copier_iface::stateful_pointer<copier_state>;

// One copy on its way.
struct copy_job {
  std::string trial, path, dest, part;
  std::string token;  // what the node is shown: the trial's access secret, or the client's token
  int64_t iteration = 0;
  caf::actor server;
  caf::response_promise answer;
  std::vector<wire::wire_file> files;
  size_t index = 0;
  uint64_t offset = 0;
  std::ofstream out;
  std::unique_ptr<sha256_stream> sha;
  nlohmann::json manifest = nlohmann::json::array();
  uint64_t bytes = 0;
  clock_type::time_point t0 = clock_type::now();
};
using job_ptr = std::shared_ptr<copy_job>;

void failed(const job_ptr& job, const std::string& why) {
  std::error_code ec;
  if (job->out.is_open()) job->out.close();
  fs::remove_all(job->part, ec);
  job->answer.deliver(wire::refusal(errc::invalid_argument, why));
}

// Why a stream's write failed, as the system said (errno), when it said.
std::string why_not() { return errno ? std::strerror(errno) : "the write failed"; }

// Complete: its manifest written, the folder moved into place.
void complete(const job_ptr& job) {
  double secs = std::chrono::duration<double>(clock_type::now() - job->t0).count();
  nlohmann::json m{{"trial", job->trial}, {"iteration", job->iteration}, {"files", job->manifest},
                   {"bytes", job->bytes},  {"seconds", secs}};
  errno = 0;
  std::ofstream manifest(job->part + "/MANIFEST.json");
  manifest << json_text(m, 1) << "\n";
  manifest.close();
  if (!manifest) return failed(job, "cannot write the copy's MANIFEST.json: " + why_not());
  std::error_code ec;
  fs::remove_all(job->dest, ec);
  fs::rename(job->part, job->dest, ec);
  if (ec) return failed(job, "cannot move the copy into place at " + job->dest + ": " + ec.message());
  nlohmann::json stat = nlohmann::json::object();
  for (auto& f : job->manifest) stat[f["name"].get<std::string>()] = file_identity(job->dest + "/" + f["name"].get<std::string>());
  m["stat"] = std::move(stat);
  job->answer.deliver(ckpt_copy_atom::value, json_text(m), job->bytes);
}

// The next chunk of the current file (or the next file).
void step(copier_actor self, const job_ptr& job) {
  auto& setup = self->state.setup;
  if (job->index == job->files.size()) return complete(job);
  auto& f = job->files[job->index];
  fs::path name = f.name;
  if (!stays_inside(name)) return failed(job, "a file outside the checkpoint: " + name.string());
  uint64_t size = f.size;
  if (!job->out.is_open()) {
    std::error_code ec;
    auto to = fs::path(job->part) / name;
    fs::create_directories(to.parent_path(), ec);
    errno = 0;
    job->out.open(to, std::ios::binary | std::ios::trunc);
    if (!job->out) return failed(job, "cannot write " + to.string() + ": " + why_not());
    job->sha = std::make_unique<sha256_stream>();
  }
  if (job->offset >= size) {
    errno = 0;
    job->out.close();  // what was buffered is written now: a full disk may only show here
    if (!job->out) return failed(job, "cannot write " + (fs::path(job->part) / name).string() + ": " + why_not());
    job->manifest.push_back({{"name", name.string()}, {"size", size}, {"sha256", job->sha->hex()}});
    job->bytes += size;
    ++job->index;
    job->offset = 0;
    return step(self, job);
  }
  auto length = static_cast<uint32_t>(std::min<uint64_t>(wire::max_chunk, size - job->offset));
  self->request(job->server, setup.request_timeout, wire::ckpt_read_atom::value, job->token, job->trial, job->path,
                name.string(), job->offset, length)
      .then(
          [self, job, length](wire::ckpt_read_atom, const std::string& bytes) {
            if (bytes.size() != length) return failed(job, "the file changed on its node while it was copied");
            errno = 0;
            job->out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
            if (!job->out) return failed(job, "cannot write a checkpoint file: " + why_not());
            job->sha->add(bytes);
            job->offset += length;
            step(self, job);
          },
          [self, job](caf::error& err) {
            failed(job, words(self->system(), err, "read: "));
          });
}

void copy(copier_actor self, const job_ptr& job) {
  auto& setup = self->state.setup;
  std::error_code ec;
  fs::remove_all(job->part, ec);
  fs::create_directories(job->part, ec);
  if (ec) return failed(job, "cannot create " + job->part + ": " + ec.message());
  self->request(job->server, setup.request_timeout, wire::ckpt_list_atom::value, job->token, job->trial, job->path)
      .then(
          [self, job](wire::ckpt_list_atom, std::vector<wire::wire_file>& files) {
            job->files = std::move(files);
            step(self, job);
          },
          [self, job](caf::error& err) {
            failed(job, words(self->system(), err, "list: "));
          });
}

// A copy's files, one after the other, through the program server.
struct check_job {
  std::string dir;
  nlohmann::json files;
  nlohmann::json stat;  // name -> file_identity() when this process wrote it
  size_t index = 0;
  caf::response_promise answer;
};

void check_next(copier_actor self, const std::shared_ptr<check_job>& job) {
  if (job->index == job->files.size()) return job->answer.deliver(ckpt_check_atom::value);
  auto& f = job->files[job->index];
  if (!f.is_object() || !f.contains("name") || !f["name"].is_string() || !f.contains("sha256"))
    return job->answer.deliver(wire::refusal(errc::invalid_argument, "a malformed manifest"));
  auto name = f["name"].get<std::string>();
  std::string path = job->dir + "/" + name;
  bool as_written = f["sha256"].is_string() && f.contains("size") && f["size"].is_number_unsigned() &&
                    job->stat.is_object() && job->stat.contains(name) && !job->stat[name].is_null() &&
                    job->stat[name] == file_identity(path);
  if (as_written) {  // as this process wrote and hashed it: served with the manifest's hash
    std::vector<std::string> paths{path}, shas{f["sha256"].get<std::string>()};
    std::vector<uint64_t> sizes{f["size"].get<uint64_t>()};
    self->request(self->state.setup.programs, self->state.setup.request_timeout, wire::program_add_atom::value, paths,
                  shas, sizes)
        .then(
            [self, job](wire::program_add_atom) {
              ++job->index;
              check_next(self, job);
            },
            [self, job](caf::error& err) {
              job->answer.deliver(
                  wire::refusal(errc::invalid_argument, words(self->system(), err, "the program server: ")));
            });
    return;
  }
  self->request(self->state.setup.programs, self->state.setup.request_timeout, wire::program_add_atom::value, path)
      .then(
          [self, job](wire::program_add_atom, std::string& sha, uint64_t) {
            auto& f = job->files[job->index];
            if (sha != f["sha256"])
              return job->answer.deliver(wire::refusal(
                  errc::invalid_argument, f["name"].get<std::string>() + " changed on disk (SHA-256 " + sha + ")"));
            ++job->index;
            check_next(self, job);
          },
          [self, job](caf::error& err) {
            job->answer.deliver(
                wire::refusal(errc::invalid_argument, words(self->system(), err, "the program server: ")));
          });
}

copier_iface::behavior_type copier(copier_actor self, copier_setup setup) {
  self->state.setup = std::move(setup);
  return {
      [self](ckpt_copy_atom, const std::string& trial, int64_t iteration, const std::string& path, const caf::actor& server,
             const std::string& dest, const std::string& access) -> caf::result<ckpt_copy_atom, std::string, uint64_t> {
        auto job = std::make_shared<copy_job>();
        job->trial = trial;
        job->token = access.empty() ? self->state.setup.token : access;
        job->iteration = iteration;
        job->path = path;
        job->server = server;
        job->dest = dest;
        job->part = dest + ".part";
        job->answer = self->make_response_promise();
        copy(self, job);
        return job->answer;
      },
      [self](ckpt_check_atom, const std::string& dir, const std::string& manifest,
             const std::string& stat) -> caf::result<ckpt_check_atom> {
        auto m = nlohmann::json::parse(manifest, nullptr, false);
        if (!m.is_object() || !m.contains("files") || !m["files"].is_array())
          return wire::refusal(errc::invalid_argument, "a malformed manifest");
        auto job = std::make_shared<check_job>();
        job->dir = dir;
        job->stat = nlohmann::json::parse(stat, nullptr, false);
        job->answer = self->make_response_promise();
        job->files = m["files"];
        check_next(self, job);
        return job->answer;
      },
  };
}

}  // namespace

nlohmann::json file_identity(const std::string& path) {
  struct ::stat s {};
  if (::stat(path.c_str(), &s) != 0) return nullptr;
  // A change in the clock tick of the last one could keep the same change time (where
  // the kernel stamps files with its coarse clock): only a file last changed before the
  // current tick is told apart from any later change.
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME_COARSE, &now);
  if (std::make_pair(s.st_ctim.tv_sec, s.st_ctim.tv_nsec) >= std::make_pair(now.tv_sec, now.tv_nsec)) return nullptr;
  return nlohmann::json::array({static_cast<uint64_t>(s.st_dev), static_cast<uint64_t>(s.st_ino),
                                static_cast<uint64_t>(s.st_size),
                                static_cast<int64_t>(s.st_ctim.tv_sec) * 1000000000 + s.st_ctim.tv_nsec});
}

copier_iface spawn_checkpoint_copier(caf::actor_system& sys, copier_setup setup) {
  return sys.spawn(copier, std::move(setup));
}

}  // namespace tune
