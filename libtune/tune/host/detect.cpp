#include "tune/host/detect.hpp"
#include "tune/host/simulated_gpus.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#ifdef LIBTUNE_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace tune {

#ifdef LIBTUNE_HAVE_CUDA
namespace {

std::string format_uuid(const cudaUUID_t& u) {
  auto b = reinterpret_cast<const unsigned char*>(u.bytes);
  char buf[64];
  std::snprintf(buf, sizeof buf,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
                b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12],
                b[13], b[14], b[15]);
  return buf;
}

}  // namespace

gpu_probe detect_gpus() {
  gpu_probe out;
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    out.note = std::string{"no usable CUDA device ("} + cudaGetErrorString(err) + ")";
    cudaGetLastError();  // clear the sticky error for later calls
    return out;
  }
  if (count == 0) {
    out.note = "no CUDA device";
    return out;
  }
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, d) != cudaSuccess) continue;
    gpu_instance g;
    g.uuid = format_uuid(p.uuid);
    char bus[32];
    std::snprintf(bus, sizeof bus, "%08x:%02x:%02x.0", static_cast<unsigned>(p.pciDomainID),
                  static_cast<unsigned>(p.pciBusID), static_cast<unsigned>(p.pciDeviceID));
    g.pci_bus_id = bus;
    g.name = p.name;
    g.memory_total = static_cast<int64_t>(p.totalGlobalMem);
    out.gpus.push_back(std::move(g));
  }
  std::sort(out.gpus.begin(), out.gpus.end(),
            [](const gpu_instance& a, const gpu_instance& b) { return a.pci_bus_id < b.pci_bus_id; });
  for (size_t i = 0; i < out.gpus.size(); ++i) out.gpus[i].index = static_cast<int32_t>(i);
  return out;
}
#else
gpu_probe detect_gpus() {
  gpu_probe out;
  out.note = "libtune was built without CUDA";
  return out;
}
#endif

namespace {

int64_t mem_total_bytes() {
  std::ifstream in{"/proc/meminfo"};
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit)
    if (key == "MemTotal:") return kib * 1024;
  return 0;
}

int usable_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace

std::string hostname() {
  char name[256] = {};
  return ::gethostname(name, sizeof name - 1) == 0 ? std::string{name} : std::string{"localhost"};
}

host_info detect_host() {
  host_info h;
  h.hostname = hostname();
  h.cpus = quantity::whole(usable_cpus());
  h.memory = mem_total_bytes();
  if (auto dir = simulated_gpus_dir(); !dir.empty()) {
    auto view = simulated_gpus::open(dir);
    if (view) h.gpu.gpus = (*view)->cards();
    else h.gpu.error = view.error().message();
    h.gpu.note = "simulated GPUs from TUNE_SIMULATED_GPUS=" + dir;
    return h;
  }
  h.gpu = detect_gpus();
  return h;
}

std::vector<gpu_instance> logical_gpus(const std::string& owner, int count, int64_t memory) {
  std::vector<gpu_instance> out;
  for (int i = 0; i < count; ++i) {
    gpu_instance g;
    g.index = i;
    g.uuid = "LOGICAL-" + owner + "-" + std::to_string(i);
    g.pci_bus_id = "logical:" + std::to_string(i);
    g.name = "logical GPU";
    g.memory_total = memory;
    g.logical = true;
    out.push_back(std::move(g));
  }
  return out;
}

expected<std::vector<gpu_instance>> first_gpus(const std::vector<gpu_instance>& cards, int count,
                                               const std::string& owner, const std::string& option) {
  if (count < 0 || count > 1024) return status{errc::invalid_argument, option + " must be between 0 and 1024"};
  if (cards.empty()) return logical_gpus(owner, count, logical_gpu_memory);
  if (count > static_cast<int>(cards.size()))
    return status{errc::invalid_argument, option + " " + std::to_string(count) + ": this machine has only " +
                                              std::to_string(cards.size()) + " GPUs"};
  return std::vector<gpu_instance>(cards.begin(), cards.begin() + count);
}

expected<node_resources> local_node_resources(const host_info& host) {
  resource_set r;
  r.set_cpu(host.cpus).set_memory(host.memory);
  return node_resources::make(r, host.gpu.gpus);
}

}  // namespace tune
