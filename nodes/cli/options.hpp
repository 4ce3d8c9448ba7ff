// What the subcommands of `tune` share: their errors, parsing their options with
// Boost.Program_options, and the options of every command that talks to a head.
#pragma once

#include <boost/program_options.hpp>
#include <string>
#include <vector>

#include "tune/net/tls.hpp"

namespace tune::cli {

namespace po = boost::program_options;

// "tune COMMAND: MESSAGE" on standard error; returns `code` (the process's exit code).
int fail(const std::string& command, const std::string& message, int code = 1);

// Parses `args` with `desc` (and `positional`, when given: options named by place);
// on --help prints the synopsis, `about` and the options and returns 0; on a bad option
// returns 2 with a message. -1 means: go on.
int parse(const std::string& command, const std::vector<std::string>& args, const po::options_description& desc,
          const std::string& synopsis, po::variables_map& vm,
          const po::positional_options_description* positional = nullptr, const std::string& about = {});

// The option's value, or "" when it was not given.
std::string text_option(const po::variables_map& vm, const char* name);

// --tls-cert, --tls-key, --tls-ca (docs/cluster.md, Security).
void add_tls_options(po::options_description& desc);
// The TLS files the options (or the environment) give; none: plain.
tls::files tls_files(const po::variables_map& vm);
// Makes this process dial heads over TLS when it has TLS files; the exit code after a
// message when they are bad, -1 to go on.
int use_client_tls(const std::string& command, const po::variables_map& vm);

// Options every command that talks to a head takes: --address, --token-file, --timeout
// and the TLS files (connect.hpp reads them).
void add_client_options(po::options_description& desc);

}  // namespace tune::cli
