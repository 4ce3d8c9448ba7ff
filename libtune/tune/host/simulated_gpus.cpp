#include "tune/host/simulated_gpus.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tune/core/json_text.hpp"
#include "tune/host/card_claims.hpp"
#include <sstream>

#include "tune/core/quantity.hpp"

namespace tune {

namespace {

namespace fs = std::filesystem;

bool alive(int pid) { return pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM); }

// A whole number of bytes, or a text with a unit ("16GiB").
expected<int64_t> bytes_of(const nlohmann::json& v, const std::string& what) {
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return v.get<int64_t>();
  if (v.is_string()) return parse_bytes(v.get<std::string>(), what);
  return status{errc::invalid_argument, what + ": give bytes (a whole number) or a size such as \"16GiB\""};
}

}  // namespace

std::string simulated_gpus_dir() {
  const char* d = std::getenv("TUNE_SIMULATED_GPUS");
  return d && *d ? std::string{d} : std::string{};
}

expected<std::shared_ptr<simulated_gpus>> simulated_gpus::open(const std::string& dir) {
  auto file = dir + "/cards.json";
  auto bad = [&](const std::string& why) {
    return status{errc::invalid_argument, "the simulated GPUs (TUNE_SIMULATED_GPUS): " + file + ": " + why};
  };
  if (::access(file.c_str(), R_OK) != 0)
    return bad("cannot read it: write the cards there, e.g. [{\"uuid\": \"GPU-sim-0\", \"memory\": \"16GiB\"}]");
  auto j = read_json_file(file);
  if (!j.is_array()) return bad("not a JSON array of cards");
  std::shared_ptr<simulated_gpus> s{new simulated_gpus};
  s->dir_ = dir;
  for (size_t i = 0; i < j.size(); ++i) {
    auto& c = j[i];
    auto where = "card " + std::to_string(i);
    if (!c.is_object() || !c.contains("uuid") || !c["uuid"].is_string() || c["uuid"].get<std::string>().empty())
      return bad(where + ": give its \"uuid\"");
    if (!c.contains("memory")) return bad(where + ": give its \"memory\"");
    auto memory = bytes_of(c["memory"], where + " memory");
    if (!memory) return bad(memory.error().message());
    if (*memory <= 0) return bad(where + ": its memory must be more than 0");
    gpu_instance g;
    g.index = static_cast<int32_t>(i);
    g.uuid = c["uuid"].get<std::string>();
    g.pci_bus_id = "simulated:" + std::to_string(i);
    g.name = c.contains("name") && c["name"].is_string() ? c["name"].get<std::string>() : "simulated GPU";
    g.memory_total = *memory;
    g.logical = true;
    g.simulated = true;
    for (auto& other : s->cards_)
      if (other.uuid == g.uuid) return bad("UUID " + g.uuid + " appears twice");
    s->cards_.push_back(std::move(g));
  }
  return s;
}

expected<std::vector<gpu_card_sample>> simulated_gpus::sample() {
  std::vector<gpu_card_sample> out;
  std::map<std::string, size_t> by_uuid;
  for (auto& c : cards_) {
    by_uuid[c.uuid] = out.size();
    out.push_back({c.index, c.uuid, c.pci_bus_id, c.memory_total, 0, -1, {}});
  }
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir_ + "/procs", ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    auto name = it->path().filename().string();
    char* end = nullptr;
    long pid = std::strtol(name.c_str(), &end, 10);
    if (name.empty() || *end || pid <= 0) continue;  // a file being written (PID.tmp), or not ours
    if (!alive(static_cast<int>(pid))) {
      fs::remove(it->path(), ec);  // the driver frees an ended process's memory
      ec.clear();
      continue;
    }
    auto j = read_json_file(it->path().string());
    if (!j.is_object()) continue;
    for (auto& [uuid, v] : j.items()) {
      auto card = by_uuid.find(uuid);
      if (card == by_uuid.end() || !v.is_number_integer() || v.get<int64_t>() < 0) continue;
      auto& c = out[card->second];
      c.processes.push_back({static_cast<int>(pid), v.get<int64_t>(), -1});
      c.used += v.get<int64_t>();
    }
  }
  return out;
}

status simulated_gpus::hold(const std::string& dir, int pid, const std::map<std::string, int64_t>& bytes) {
  std::error_code ec;
  fs::create_directories(dir + "/procs", ec);
  auto path = dir + "/procs/" + std::to_string(pid);
  if (bytes.empty()) {
    fs::remove(path, ec);
    return status::ok();
  }
  auto tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << json_text(nlohmann::json(bytes)) << "\n";
    if (!out) return {errc::invalid_argument, "cannot write " + tmp};
  }
  fs::rename(tmp, path, ec);
  if (ec) return {errc::invalid_argument, "cannot write " + path + ": " + ec.message()};
  return status::ok();
}

}  // namespace tune
