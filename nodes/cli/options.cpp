#include "options.hpp"

#include <iostream>

#include "transport/dial.hpp"
#include "tune/cluster/token.hpp"

namespace tune::cli {

int fail(const std::string& command, const std::string& message, int code) {
  std::cerr << "tune " << command << ": " << message << "\n";
  return code;
}

int parse(const std::string& command, const std::vector<std::string>& args, const po::options_description& desc,
          const std::string& synopsis, po::variables_map& vm, const po::positional_options_description* positional,
          const std::string& about) {
  try {
    po::command_line_parser parser(args);
    parser.options(desc);
    if (positional) parser.positional(*positional);
    auto parsed = parser.run();
    po::store(parsed, vm);
    po::notify(vm);
  } catch (const po::unknown_option& e) {
    return fail(command, "unknown option '" + e.get_option_name() + "' (see tune " + command + " --help)", 2);
  } catch (const po::error& e) {
    return fail(command, std::string{e.what()} + " (see tune " + command + " --help)", 2);
  }
  if (vm.count("help")) {
    std::cout << "usage: " << synopsis << "\n\n" << about << (about.empty() ? "" : "\n\n") << desc;
    return 0;
  }
  return -1;
}

std::string text_option(const po::variables_map& vm, const char* name) {
  return vm.count(name) ? vm[name].as<std::string>() : std::string{};
}

void add_tls_options(po::options_description& desc) {
  desc.add_options()
      ("tls-cert", po::value<std::string>(), "this process's certificate, for a cluster that uses TLS (default: $TUNE_TLS_CERT)")
      ("tls-key", po::value<std::string>(), "its key (default: $TUNE_TLS_KEY)")
      ("tls-ca", po::value<std::string>(), "the cluster's CA certificate: peers must show one it signed (default: $TUNE_TLS_CA)");
}

tls::files tls_files(const po::variables_map& vm) {
  return tls::from_environment({text_option(vm, "tls-cert"), text_option(vm, "tls-key"), text_option(vm, "tls-ca")});
}

int use_client_tls(const std::string& command, const po::variables_map& vm) {
  auto files = tls_files(vm);
  if (!files.any()) return -1;
  auto ctx = tls::context::make(files, false);
  if (!ctx) return fail(command, ctx.error().message(), 2);
  set_client_tls(*ctx);
  return -1;
}

void add_client_options(po::options_description& desc) {
  desc.add_options()
      ("address", po::value<std::string>(), "HOST:PORT of the head (default: $TUNE_ADDRESS)")
      ("token-file", po::value<std::string>()->default_value(default_token_file()), "the cluster token")
      ("timeout", po::value<double>()->default_value(5.0), "seconds to wait for the head");
  add_tls_options(desc);
}

}  // namespace tune::cli
