// tune stop: the heads and nodes `tune start` started from this runtime directory.
#include <algorithm>
#include <iostream>

#include "commands.hpp"
#include "daemon.hpp"
#include "options.hpp"

namespace tune::cli {

int cmd_stop(const args& a) {
  po::options_description desc("tune stop options");
  desc.add_options()
      ("help,h", "show this help")
      ("runtime-dir", po::value<std::string>()->default_value(""), "where `tune start` put its pid files")
      ("grace", po::value<int>()->default_value(10), "seconds to wait for a clean stop before killing");
  po::variables_map vm;
  if (int rc = parse("stop", a, desc, "tune stop [--runtime-dir DIR]", vm); rc >= 0) return rc;
  auto dir = runtime_dir(vm["runtime-dir"].as<std::string>());
  if (!dir) return fail("stop", dir.error().message());
  auto done = stop_all(*dir, std::max(0, vm["grace"].as<int>()));
  if (done.empty()) std::cout << "tune stop: nothing running from " << *dir << "\n";
  for (auto& s : done)
    std::cout << "tune: stopped " << s.name << " (pid " << s.pid << ")" << (s.forced ? ", killed after the grace period" : "") << "\n";
  return 0;
}

}  // namespace tune::cli
