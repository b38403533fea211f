// Who is this host: its name and an identity string that tells whether two
// processes run on the same machine and can share /dev/shm.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace loom {

// The full name from gethostname(2) (not cut at the first '.'); "unknown" if
// the call fails. Thread-safe, does not block.
std::string Hostname();

// A string that is equal for two processes exactly when they run on the same
// host (same kernel boot) and can therefore share /dev/shm and local IPC:
// "<hostname>/<boot_id>" with boot_id from /proc/sys/kernel/random/boot_id
// (just the hostname when that file cannot be read).
//
// LOOM_HOSTID, else NCCL_HOSTID (as NCCL's getHostHash), replaces the whole
// string verbatim when set and non-empty: tests set it to pretend that ranks
// on one machine are on different hosts, and operators set it where the
// default is wrong (containers that share a kernel but not /dev/shm).
// Read on each call, so a test may change the variable between calls.
// Thread-safe as far as getenv is; does not block.
std::string HostIdentity();

// 64-bit FNV-1a of the bytes of s: a stable hash to put a host identity or a
// name on the wire in 8 bytes. Not cryptographic. Pure.
uint64_t HashString(std::string_view s);

}  // namespace loom
