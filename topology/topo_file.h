// The loom topology file: one host's Topology as JSON (format documented in
// docs/TOPOLOGY.md), written by LOOM_TOPO_DUMP_FILE and `loom topo --dump`,
// read by LOOM_TOPO_FILE. dump → load → dump gives identical text.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"
#include "topology/json.h"
#include "topology/model.h"

namespace loom::topology {

inline constexpr std::string_view kTopologyFormat = "loom-topology";
inline constexpr int kTopologyVersion = 1;

// The JSON form of `t` (which should be valid): {"format", "version",
// "hostname", "nodes": [...], "links": [...]}; each node carries only the
// members meaningful for its kind and different from their defaults. Pure.
json::Value ToJson(const Topology& t);
std::string DumpTopologyJson(const Topology& t);

// Reads the JSON form. Strict, so that a typo in a hand-written fixture is
// an error rather than a silently different machine: unknown members,
// members that do not belong to the node's kind, wrong types, non-integral
// integers, a parent or link end that is not an earlier node, and anything
// Topology::Validate refuses are InvalidArgument naming the node.
Result<Topology> FromJson(const json::Value& v);
Result<Topology> ParseTopologyJson(std::string_view text);

// Reads a topology file, deciding the format by its first non-blank
// character: '{' is the loom format, '<' is NCCL's topology XML
// (NCCL_TOPO_FILE / NCCL_TOPO_DUMP_FILE output, see nccl_xml.h). SystemError
// when the file cannot be read; errors are prefixed with the path. Blocks on
// file I/O.
Result<Topology> LoadTopologyFile(const std::string& path);

// Writes DumpTopologyJson(t) to `path` (replaced atomically through a
// temporary file in the same directory). SystemError naming the path.
Status WriteTopologyFile(const std::string& path, const Topology& t);

// Reads a whole file into a string. SystemError naming the path.
Result<std::string> ReadWholeFile(const std::string& path);

}  // namespace loom::topology
