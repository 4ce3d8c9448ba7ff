// A set of resource amounts: CPU, GPU, memory, GPU memory and named custom resources.
// CPU, GPU and custom amounts are exact fixed-point quantities; memory amounts are
// bytes. As a request (a bundle), `gpu_memory` is the memory wanted on each card
// the request gets; as a node's total or availability it is the sum over its cards.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tune/core/quantity.hpp"
#include "tune/core/status.hpp"

namespace tune {

namespace resource_names {
inline constexpr std::string_view cpu = "cpu";
inline constexpr std::string_view gpu = "gpu";
inline constexpr std::string_view memory = "memory";
inline constexpr std::string_view gpu_memory = "gpu_memory";
}  // namespace resource_names

// A custom resource name: a letter or '_', then letters, digits or "_.:/-", at most
// 64 characters, and none of the built-in names in another spelling ("GPU", "gpus").
status check_resource_name(std::string_view name);

class resource_set {
 public:
  using custom_list = std::vector<std::pair<std::string, quantity>>;  // sorted, no zeros

  resource_set() = default;

  // {"cpu": 4, "gpu": 0.5, "memory": "16GiB", "tpu": 2}: numbers or decimal texts;
  // memory amounts also accept a unit. Any bad name or amount is an error naming it.
  static expected<resource_set> from_json(std::string_view json);
  // {{"cpu", 4}, {"gpu", 0.5}}: the same checks as from_json.
  static expected<resource_set> make(std::initializer_list<std::pair<std::string_view, double>>);

  // Sets one amount by name, checked; memory amounts are bytes.
  status set(std::string_view name, double amount);
  status set(std::string_view name, std::string_view amount_text);

  // Typed setters for amounts that are already checked quantities.
  resource_set& set_cpu(quantity q) { cpu_ = q; return *this; }
  resource_set& set_gpu(quantity q) { gpu_ = q; return *this; }
  resource_set& set_memory(int64_t bytes) { memory_ = bytes; return *this; }
  resource_set& set_gpu_memory(int64_t bytes) { gpu_memory_ = bytes; return *this; }
  // `name` must pass check_resource_name (asserted); a zero amount removes it.
  resource_set& set_custom(std::string_view name, quantity q);

  quantity cpu() const { return cpu_; }
  quantity gpu() const { return gpu_; }
  int64_t memory() const { return memory_; }
  int64_t gpu_memory() const { return gpu_memory_; }
  quantity custom(std::string_view name) const;
  const custom_list& customs() const { return custom_; }

  bool empty() const;
  // The name of the first negative amount, or "" when none is.
  std::string first_negative() const;
  // Every amount here is <= the same amount in `other` (a missing custom is zero).
  bool fits_in(const resource_set& other) const;
  // The non-GPU amounts only (cpu, memory, customs): what a node checks besides cards.
  bool host_fits_in(const resource_set& other) const;

  resource_set& operator+=(const resource_set& o);
  resource_set& operator-=(const resource_set& o);  // amounts may go negative: callers check fits first
  friend bool operator==(const resource_set&, const resource_set&) = default;

  // {cpu: 4, gpu: 0.5, memory: 16 GiB, tpu: 2}: for people.
  std::string to_string() const;
  // {"cpu":4,"gpu":0.5,"memory":17179869184,"tpu":2}: from_json reads it back.
  std::string to_json() const;

 private:
  // Checks `name`, then stores bytes() (memory names) or amount() (the others).
  template <class Bytes, class Amount>
  status assign(std::string_view name, Bytes bytes, Amount amount);

  quantity cpu_, gpu_;
  int64_t memory_ = 0, gpu_memory_ = 0;
  custom_list custom_;
};

// The rules a bundle (one request) must follow, beyond valid amounts:
// - GPU: 0, a share of one card below 1 (0.25), or a whole number of cards (1, 2, ...);
//   1.5 is refused.
// - gpu_memory needs a GPU amount (it is memory on the cards the request gets).
// - At least one amount is non-zero.
status check_request(const resource_set& request);

}  // namespace tune
