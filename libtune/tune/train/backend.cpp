#include "tune/train/backend.hpp"

#include <charconv>

namespace tune::train {

expected<device_spec> parse_device(std::string_view text) {
  if (text == "cpu") return device_spec{};
  if (text == "cuda" || text == "gpu") return device_spec{true, 0};
  std::string_view rest;
  if (text.starts_with("cuda:")) rest = text.substr(5);
  else if (text.starts_with("gpu:")) rest = text.substr(4);
  int index = -1;
  if (!rest.empty()) {
    auto [p, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), index);
    if (ec != std::errc{} || p != rest.data() + rest.size()) index = -1;
  }
  if (index < 0)
    return status{errc::invalid_argument,
                  "device \"" + std::string{text} + "\" is not understood: write cpu, cuda or cuda:N"};
  return device_spec{true, index};
}

expected<std::unique_ptr<backend>> make_backend(const hyperparameters& hp, const network& net,
                                                const device_spec& device) {
  if (auto s = hp.check(); !s) return s;
  if (!device.cuda) return make_cpu_backend(hp, net);
  return make_cuda_backend(hp, net, device.index);
}

#ifndef LIBTUNE_HAVE_CUDA
int cuda_device_count() { return 0; }

expected<std::unique_ptr<backend>> make_cuda_backend(const hyperparameters&, const network&, int device) {
  return status{errc::invalid_argument, "device cuda:" + std::to_string(device) +
                                            " asked for, but libtune was built without CUDA: use --device cpu, or "
                                            "rebuild where nvcc is installed"};
}
#endif

}  // namespace tune::train
