// What the benchmarks that start real processes share: the tune binary, and running a
// command against one cluster's runtime directory and token file.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

namespace tune::bench {

// The tune binary: $TUNE_BINARY (a build moved to another machine), else the one built.
inline std::string tune_binary() {
  const char* e = std::getenv("TUNE_BINARY");
  return e && *e ? e : TUNE_BINARY;
}

// Runs `cmd` through the shell with the cluster's runtime dir and token file, no CUDA
// device visible unless the command sets one; its output and errors.
inline std::string sh(const std::string& dir, const std::string& token_path, const std::string& cmd) {
  std::string full = "TUNE_RUNTIME_DIR=" + dir + " TUNE_TOKEN_FILE=" + token_path + " CUDA_VISIBLE_DEVICES= " + cmd + " 2>&1";
  FILE* p = ::popen(full.c_str(), "r");
  std::string out;
  char buf[4096];
  while (p && std::fgets(buf, sizeof buf, p)) out += buf;
  if (p) ::pclose(p);
  return out;
}

}  // namespace tune::bench
