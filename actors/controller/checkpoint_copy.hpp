// The checkpoint copier: an actor that copies one trial checkpoint at a time from the
// node that holds it into the experiment folder, and checks a copy before a trial
// starts from it. The controller asks; it answers copied or failed.
//
//   (ckpt_copy_atom, trial, iteration, path, node actor, dest, access)
//        -> (ckpt_copy_atom, manifest JSON, bytes), or a refusal saying why (wire.hpp)
//      The checkpoint's files are listed (ckpt_list_atom, with the trial's `access`
//      secret, or the setup's token when it is empty) and read in chunks of at most
//      wire::max_chunk (ckpt_read_atom, never one giant message), each hashed as it
//      comes, into <dest>.part, which is renamed to <dest> when complete, with its
//      MANIFEST.json ({"trial", "iteration", "files": [{"name", "size", "sha256"}],
//      "bytes", "seconds"}). A failed copy leaves nothing behind.
//      The answer's JSON also holds "stat": {name: [device, inode, size, change time
//      in ns]} of each file as written (not in MANIFEST.json), for a later check.
//   (ckpt_check_atom, dir, manifest JSON, stat JSON)
//        -> (ckpt_check_atom), or a refusal saying why
//      Every file of the copy taken by the program server (which serves it to the node
//      that restores from it) and its SHA-256 compared with the manifest's. A file whose
//      device, inode, size and change time are still those `stat` recorded when this process
//      wrote and hashed it is taken with the manifest's hash, not read again (a restart
//      after a node's death does not wait for 100 MB to be hashed); the node that
//      fetches it checks the hash of what it receives either way.
//
// Copies of different trials proceed side by side (the controller asks for one copy
// per trial at a time).
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include "wire.hpp"

namespace tune {

struct copier_setup {
  std::string token;                          // the client's (for nodes of trials without an access secret)
  caf::actor programs;                        // the program server (for checks)
  std::chrono::milliseconds request_timeout{10000};
};

copier_iface spawn_checkpoint_copier(caf::actor_system& sys, copier_setup setup);

// What identifies a file as written: [device, inode, size, change time in ns], or null
// when it cannot be read or was changed within the current tick of the kernel's coarse
// clock (a change later in that tick could keep its change time). Its owner cannot set
// the change time back (touch sets the modification time): any later write, truncation
// or replacement changes it.
nlohmann::json file_identity(const std::string& path);

}  // namespace tune
