// A trial worker that uses real GPUs, for tests/gpu_isolation_test.cpp (GPU machine).
// Modes (config "mode"):
//   probe   report how many devices it sees, the UUID of device 0, and what happens
//           when it tries to open device 1 and the machine's other cards
//   hold    allocate config "mib" MiB on device 0 (in 256 MiB steps, touched), then
//           report every 100 ms until stopped
//   escape  start a child without CUDA_VISIBLE_DEVICES (so it sees every card) that
//           allocates on device config "card"; report its pid; wait
// Not a trial:  gpu_worker --foreign MIB  allocates MIB MiB on device 0 and sleeps.
#include <cuda_runtime.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <thread>
#include <vector>

#include "tune/trial/context.hpp"

using namespace tune;

namespace {

std::string uuid_of(int device) {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, device) != cudaSuccess) return "";
  char buf[64];
  auto& u = p.uuid.bytes;
  std::snprintf(buf, sizeof buf, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
                u[0] & 0xff, u[1] & 0xff, u[2] & 0xff, u[3] & 0xff, u[4] & 0xff, u[5] & 0xff, u[6] & 0xff, u[7] & 0xff,
                u[8] & 0xff, u[9] & 0xff, u[10] & 0xff, u[11] & 0xff, u[12] & 0xff, u[13] & 0xff, u[14] & 0xff,
                u[15] & 0xff);
  return buf;
}

// Allocates and touches `mib` MiB on the current device; false on failure.
bool allocate(int64_t mib, std::vector<void*>& blocks, std::string& error) {
  for (int64_t done = 0; done < mib;) {
    int64_t step = std::min<int64_t>(256, mib - done);
    void* p = nullptr;
    auto e = cudaMalloc(&p, static_cast<size_t>(step) << 20);
    if (e != cudaSuccess) {
      error = cudaGetErrorString(e);
      return false;
    }
    cudaMemset(p, 1, static_cast<size_t>(step) << 20);
    blocks.push_back(p);
    done += step;
  }
  cudaDeviceSynchronize();
  return true;
}

void hold_until_stopped(trial_context& ctx, int64_t mib) {
  for (int i = 0; !trial_context::should_stop(); ++i) {
    ctx.report({{"held_mib", static_cast<double>(mib)}, {"tick", i}});
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--foreign") == 0) {
    std::vector<void*> blocks;
    std::string error;
    if (!allocate(std::atoll(argv[2]), blocks, error)) {
      std::cerr << "gpu_worker: " << error << "\n";
      return 1;
    }
    std::cout << "ready" << std::endl;
    std::this_thread::sleep_for(std::chrono::seconds(120));
    return 0;
  }
  if (argc == 3 && std::strcmp(argv[1], "--child") == 0) {  // the escaped child
    if (cudaSetDevice(std::atoi(argv[2])) != cudaSuccess) return 3;
    std::vector<void*> blocks;
    std::string error;
    if (!allocate(256, blocks, error)) return 4;
    std::this_thread::sleep_for(std::chrono::seconds(120));
    return 0;
  }
  auto ctx = trial_context::from_environment();
  if (!ctx) {
    std::cerr << "gpu_worker: " << ctx.error().message() << "\n";
    return 2;
  }
  auto mode = ctx->text_or("mode", "probe").value_or("?");
  if (mode == "probe") {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) n = -1;
    std::string mine = n > 0 ? uuid_of(0) : "";
    bool match = !ctx->gpus().empty() && mine == ctx->gpus()[0].uuid;
    auto set1 = cudaSetDevice(1);
    auto set0 = cudaSetDevice(0);
    void* p = nullptr;
    auto alloc = cudaMalloc(&p, 1 << 20);
    std::cerr << "devices " << n << ", device 0 is " << mine << "; cudaSetDevice(1): " << cudaGetErrorString(set1)
              << "; cudaSetDevice(0): " << cudaGetErrorString(set0) << "; cudaMalloc: " << cudaGetErrorString(alloc) << "\n";
    auto st = ctx->report({{"devices", n},
                           {"uuid_matches", match ? 1 : 0},
                           {"set_device_1_ok", set1 == cudaSuccess ? 1 : 0},
                           {"set_device_0_ok", set0 == cudaSuccess ? 1 : 0},
                           {"malloc_ok", alloc == cudaSuccess ? 1 : 0}});
    return st ? 0 : 1;
  }
  if (mode == "hold") {
    int64_t mib = ctx->integer_or("mib", 1024).value_or(1024);
    std::vector<void*> blocks;
    std::string error;
    if (!allocate(mib, blocks, error)) {
      std::cerr << "gpu_worker: cannot allocate " << mib << " MiB: " << error << "\n";
      return 1;
    }
    hold_until_stopped(*ctx, mib);
    return 0;
  }
  if (mode == "escape") {
    pid_t child = ::fork();
    if (child == 0) {
      std::string card = std::to_string(ctx->integer_or("card", 0).value_or(0));
      ::unsetenv("CUDA_VISIBLE_DEVICES");
      ::execl("/proc/self/exe", argv[0], "--child", card.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ctx->report({{"child", static_cast<double>(child)}});
    while (!trial_context::should_stop()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ::kill(child, SIGTERM);
    ::waitpid(child, nullptr, 0);
    return 0;
  }
  std::cerr << "gpu_worker: unknown mode " << mode << "\n";
  return 2;
}
