#include "tune/train/backend.hpp"

#include <algorithm>
#include <charconv>

namespace tune::train {

std::vector<int> device_spec::devices() const {
  if (!cuda) return {};
  if (all) {
    std::vector<int> v(static_cast<size_t>(std::max(0, cuda_device_count())));
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int>(i);
    return v;
  }
  if (!indices.empty()) return indices;
  return {index};
}

std::string device_spec::to_string() const {
  if (!cuda) return "cpu";
  if (all) return "cuda:all";
  if (indices.empty()) return "cuda:" + std::to_string(index);
  std::string s = "cuda:";
  for (size_t i = 0; i < indices.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(indices[i]);
  }
  return s;
}

expected<device_spec> parse_device(std::string_view text) {
  if (text == "cpu") return device_spec{};
  if (text == "cuda" || text == "gpu") return device_spec{true, 0};
  auto bad = [&](const std::string& why) {
    return status{errc::invalid_argument, "device \"" + std::string{text} + "\" is not understood" +
                                              (why.empty() ? "" : " (" + why + ")") +
                                              ": write cpu, cuda, cuda:N, cuda:N,M,... or cuda:all"};
  };
  std::string_view rest;
  if (text.starts_with("cuda:")) rest = text.substr(5);
  else if (text.starts_with("gpu:")) rest = text.substr(4);
  else return bad("");
  if (rest == "all") {
    device_spec d{true, 0};
    d.all = true;
    return d;
  }
  std::vector<int> list;
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    int index = -1;
    auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), index);
    if (item.empty() || ec != std::errc{} || p != item.data() + item.size() || index < 0)
      return bad(item.empty() ? std::string{"an empty device number"}
                              : std::string{"\""}.append(item).append("\" is not a device number"));
    if (std::find(list.begin(), list.end(), index) != list.end())
      return bad(std::string{"device "}.append(std::to_string(index)).append(" appears twice"));
    list.push_back(index);
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  device_spec d{true, list[0]};
  if (list.size() > 1) d.indices = std::move(list);
  return d;
}

expected<std::unique_ptr<backend>> make_backend(const hyperparameters& hp, const network& net,
                                                const device_spec& device) {
  if (auto s = hp.check(); !s) return s;
  if (!device.cuda) return make_cpu_backend(hp, net);
  const std::vector<int> devices = device.devices();
  if (devices.empty())
    return status{errc::invalid_argument, "device " + device.to_string() +
                                              " asked for, but this process sees no CUDA device: use --device cpu, "
                                              "or check CUDA_VISIBLE_DEVICES and the driver"};
  if (devices.size() == 1) return make_cuda_backend(hp, net, devices[0]);  // the one-device path, unchanged
  return make_data_parallel_backend(hp, net, devices);
}

#ifndef LIBTUNE_HAVE_CUDA
int cuda_device_count() { return 0; }

expected<std::unique_ptr<backend>> make_cuda_backend(const hyperparameters&, const network&, int device) {
  return status{errc::invalid_argument, "device cuda:" + std::to_string(device) +
                                            " asked for, but libtune was built without CUDA: use --device cpu, or "
                                            "rebuild where nvcc is installed"};
}

expected<std::unique_ptr<backend>> make_data_parallel_backend(const hyperparameters&, const network&,
                                                              const std::vector<int>& devices) {
  device_spec d{true, devices.empty() ? 0 : devices[0]};
  d.indices = devices;
  return status{errc::invalid_argument, "devices " + d.to_string() +
                                            " asked for, but libtune was built without CUDA: use --device cpu, or "
                                            "rebuild where nvcc is installed"};
}
#endif

}  // namespace tune::train
