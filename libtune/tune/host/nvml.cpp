#include "tune/host/nvml.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <map>

namespace tune {

// The few declarations of nvml.h used here (a stable C ABI), so that building needs
// neither the driver nor its header.
namespace {
using nvml_return = int;
constexpr nvml_return ok = 0, insufficient_size = 7;
using nvml_device = struct nvml_device_st*;
struct nvml_memory {
  unsigned long long total, free, used;
};
struct nvml_pci_info {  // nvmlPciInfo_t
  char bus_id_legacy[16];
  unsigned int domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};
struct nvml_process_info {  // nvmlProcessInfo_t (v2 layout), used by the _v2 and _v3 calls
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id, compute_instance_id;
};
struct nvml_utilization {  // nvmlUtilization_t
  unsigned int gpu, memory;
};
struct nvml_process_utilization {  // nvmlProcessUtilizationSample_t
  unsigned int pid;
  unsigned long long time_stamp;  // CPU timestamp, microseconds
  unsigned int sm_util, mem_util, enc_util, dec_util;
};
constexpr unsigned long long value_not_available = ~0ULL;
}  // namespace

struct nvml::api {
  nvml_return (*init)();
  nvml_return (*shutdown)();
  const char* (*error_string)(nvml_return);
  nvml_return (*count)(unsigned int*);
  nvml_return (*handle)(unsigned int, nvml_device*);
  nvml_return (*uuid)(nvml_device, char*, unsigned int);
  nvml_return (*pci)(nvml_device, nvml_pci_info*);
  nvml_return (*memory)(nvml_device, nvml_memory*);
  nvml_return (*processes)(nvml_device, unsigned int*, nvml_process_info*);
  // Optional (utilisation is left unknown without them).
  nvml_return (*utilization)(nvml_device, nvml_utilization*) = nullptr;
  nvml_return (*process_utilization)(nvml_device, nvml_process_utilization*, unsigned int*,
                                     unsigned long long) = nullptr;

  std::string error(nvml_return r) const {
    const char* s = error_string ? error_string(r) : nullptr;
    return s ? s : "NVML error " + std::to_string(r);
  }
};

expected<std::shared_ptr<nvml>> nvml::load(const std::string& library) {
  void* lib = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = ::dlerror();
    return status{errc::not_found, "cannot load " + library + " (the NVIDIA driver's NVML): " + (why ? why : "?")};
  }
  std::shared_ptr<nvml> n{new nvml};
  n->lib_ = lib;
  n->api_ = std::make_unique<api>();
  auto& a = *n->api_;
  std::string missing;
  auto get = [&](auto& fn, std::initializer_list<const char*> names) {
    for (const char* name : names)
      if (void* p = ::dlsym(lib, name)) {
        fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
        return;
      }
    fn = nullptr;
    missing += (missing.empty() ? "" : ", ") + std::string{*names.begin()};
  };
  get(a.init, {"nvmlInit_v2", "nvmlInit"});
  get(a.shutdown, {"nvmlShutdown"});
  get(a.error_string, {"nvmlErrorString"});
  get(a.count, {"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"});
  get(a.handle, {"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"});
  get(a.uuid, {"nvmlDeviceGetUUID"});
  get(a.pci, {"nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo_v2"});
  get(a.memory, {"nvmlDeviceGetMemoryInfo"});
  get(a.processes, {"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2"});
  if (void* p = ::dlsym(lib, "nvmlDeviceGetUtilizationRates"))
    a.utilization = reinterpret_cast<decltype(a.utilization)>(p);
  if (void* p = ::dlsym(lib, "nvmlDeviceGetProcessUtilization"))
    a.process_utilization = reinterpret_cast<decltype(a.process_utilization)>(p);
  if (!missing.empty()) {
    // The destructor would call shutdown: nothing was initialised yet.
    n->api_.reset();
    return status{errc::not_found, library + " lacks " + missing + " (a driver older than 470?)"};
  }
  if (auto r = a.init(); r != ok) {
    auto why = a.error(r);
    n->api_.reset();
    return status{errc::not_found, "NVML does not start: " + why};
  }
  return n;
}

nvml::~nvml() {
  if (api_ && api_->shutdown) api_->shutdown();
  if (lib_) ::dlclose(lib_);
}

// The per-process samples since the last look at this card, averaged per process into
// its entry of c.processes (processes without a sample keep -1). Not an error when the
// driver has none (NVML_ERROR_NOT_FOUND) or refuses: utilisation is then unknown.
void nvml::read_process_utilization(void* device, unsigned int index, gpu_card_sample& c) {
  auto& a = *api_;
  auto dev = static_cast<nvml_device>(device);
  std::vector<nvml_process_utilization> samples(64);
  unsigned int n = static_cast<unsigned int>(samples.size());
  auto r = a.process_utilization(dev, samples.data(), &n, util_seen_[index]);
  if (r == insufficient_size && n > samples.size() && n < 65536) {
    samples.resize(n);
    r = a.process_utilization(dev, samples.data(), &n, util_seen_[index]);
  }
  if (r != ok) return;
  samples.resize(std::min<size_t>(n, samples.size()));
  std::map<unsigned int, std::pair<long, int>> by_pid;  // sum, count
  for (auto& s : samples) {
    util_seen_[index] = std::max(util_seen_[index], s.time_stamp);
    if (s.sm_util > 100) continue;  // not a percentage: the driver's "not available"
    auto& [sum, k] = by_pid[s.pid];
    sum += s.sm_util;
    ++k;
  }
  for (auto& p : c.processes)
    if (auto it = by_pid.find(static_cast<unsigned int>(p.pid)); it != by_pid.end())
      p.sm_util = static_cast<int>(it->second.first / it->second.second);
}

expected<std::vector<gpu_card_sample>> nvml::sample() {
  auto& a = *api_;
  unsigned int count = 0;
  if (auto r = a.count(&count); r != ok) return status{errc::insufficient, "NVML: cannot count the cards: " + a.error(r)};
  std::vector<gpu_card_sample> cards;
  cards.reserve(count);
  util_seen_.resize(count, 0);
  for (unsigned int i = 0; i < count; ++i) {
    gpu_card_sample c;
    c.index = static_cast<int>(i);
    nvml_device dev = nullptr;
    auto fail = [&](const char* what, nvml_return r) {
      return status{errc::insufficient, "NVML: card " + std::to_string(i) + ": " + what + ": " + a.error(r)};
    };
    if (auto r = a.handle(i, &dev); r != ok) return fail("no handle", r);
    char uuid[96] = {};
    if (auto r = a.uuid(dev, uuid, sizeof uuid); r != ok) return fail("no UUID", r);
    c.uuid = uuid;
    nvml_pci_info pci{};
    if (a.pci(dev, &pci) == ok) c.pci_bus_id = pci.bus_id;
    nvml_memory mem{};
    if (auto r = a.memory(dev, &mem); r != ok) return fail("no memory information", r);
    c.total = static_cast<int64_t>(mem.total);
    c.used = static_cast<int64_t>(mem.used);
    // The process list can grow between asking its size and reading it: ask again.
    std::vector<nvml_process_info> infos(16);
    for (int attempt = 0;; ++attempt) {
      unsigned int n = static_cast<unsigned int>(infos.size());
      auto r = a.processes(dev, &n, infos.data());
      if (r == ok) {
        infos.resize(n);
        break;
      }
      if (r != insufficient_size || attempt == 4) return fail("no process list", r);
      infos.resize(static_cast<size_t>(n) * 2 + 8);
    }
    for (auto& p : infos)
      c.processes.push_back({static_cast<int>(p.pid), p.used_gpu_memory == value_not_available
                                                           ? int64_t{-1}
                                                           : static_cast<int64_t>(p.used_gpu_memory)});
    if (nvml_utilization u{}; a.utilization && a.utilization(dev, &u) == ok) c.util = static_cast<int>(u.gpu);
    if (a.process_utilization) read_process_utilization(dev, i, c);
    cards.push_back(std::move(c));
  }
  return cards;
}

}  // namespace tune
