// tune tls init DIR: a CA and a certificate for a test or small cluster's TLS.
#include <iostream>

#include "commands.hpp"
#include "options.hpp"

namespace tune::cli {

int cmd_tls(const args& a) {
  const char* about =
      "  init DIR [--host NAME]... [--days N] [--force]\n"
      "      makes DIR/ca.crt (the cluster's CA), DIR/ca.key, DIR/cluster.crt and DIR/cluster.key\n"
      "      (keys 0600) for a test or small cluster: every process of the cluster is started with\n"
      "      --tls-cert DIR/cluster.crt --tls-key DIR/cluster.key --tls-ca DIR/ca.crt (or the\n"
      "      TUNE_TLS_CERT, TUNE_TLS_KEY and TUNE_TLS_CA variables). --host adds a name or address\n"
      "      to the certificate (localhost, 127.0.0.1 and ::1 are always in it); peers are checked\n"
      "      against the CA, not by name. Existing files are kept unless --force.";
  po::options_description desc("tune tls options");
  desc.add_options()("help,h", "show this help")("op", po::value<std::string>(), "init")(
      "dir", po::value<std::string>(), "where the files go")("host", po::value<std::vector<std::string>>(),
                                                              "a name or address the certificate names (repeatable)")(
      "days", po::value<int>()->default_value(825), "how long the certificates are valid")(
      "force", "replace files that exist");
  po::positional_options_description pos;
  pos.add("op", 1).add("dir", 1);
  po::variables_map vm;
  if (int rc = parse("tls", a, desc, "tune tls init DIR [options]", vm, &pos, about); rc >= 0) return rc;
  if (!vm.count("op") || vm["op"].as<std::string>() != "init")
    return fail("tls", "say what to do: tune tls init DIR (tune tls --help)", 2);
  if (!vm.count("dir")) return fail("tls", "say where: tune tls init DIR", 2);
  tls::init_options opt;
  opt.dir = vm["dir"].as<std::string>();
  opt.days = vm["days"].as<int>();
  opt.force = vm.count("force") > 0;
  if (vm.count("host")) opt.hosts = vm["host"].as<std::vector<std::string>>();
  auto made = tls::init(opt);
  if (!made) return fail("tls", made.error().message(), made.error().code() == errc::already_exists ? 1 : 2);
  std::cout << "tune: " << *made << "\n";
  return 0;
}

}  // namespace tune::cli
