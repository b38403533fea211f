// Reading and writing the loom topology file (topo_file.h).
#include "topology/topo_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <initializer_list>

#include "topology/nccl_xml.h"

namespace loom::topology {
namespace {

bool IsPciKind(NodeKind k) {
  return k == NodeKind::kPci || k == NodeKind::kGpu || k == NodeKind::kNic ||
         k == NodeKind::kNvSwitch;
}

// The members a node of `kind` may carry besides id, kind and parent.
bool MemberAllowed(NodeKind kind, std::string_view key) {
  auto in = [&](std::initializer_list<std::string_view> keys) {
    return std::find(keys.begin(), keys.end(), key) != keys.end();
  };
  if (IsPciKind(kind) && in({"bus_id", "pcie_gen", "pcie_width"})) return true;
  switch (kind) {
    case NodeKind::kNuma: return in({"numa_id", "cores", "cpuset"});
    case NodeKind::kPci: return key == "host_bridge";
    case NodeKind::kGpu: return in({"gpu_index", "model", "sm"});
    case NodeKind::kNic:
      return in({"link_layer", "rdma", "port", "rate_gbps", "netdev", "up", "mtu", "roce_version"});
    default: return false;
  }
}

class MemberReader {
 public:
  MemberReader(std::string who, const json::Value::Member& m) : who_(std::move(who)), m_(m) {}

  Status Int(int* out) const {
    const json::Value& v = m_.second;
    // The whole range of an int, so that whatever a Topology holds dumps and reads back.
    if (!v.is_number() || std::floor(v.number()) != v.number() || v.number() < INT_MIN ||
        v.number() > INT_MAX)
      return Bad("an integer that fits an int");
    *out = static_cast<int>(v.number());
    return Status::Ok();
  }
  Status Number(double* out) const {
    if (!m_.second.is_number()) return Bad("a number");
    *out = m_.second.number();
    return Status::Ok();
  }
  Status String(std::string* out) const {
    if (!m_.second.is_string()) return Bad("a string");
    *out = m_.second.string();
    return Status::Ok();
  }
  Status Bool(bool* out) const {
    if (!m_.second.is_bool()) return Bad("true or false");
    *out = m_.second.boolean();
    return Status::Ok();
  }

 private:
  Status Bad(const char* what) const {
    return InvalidArgument(who_ + ": \"" + m_.first + "\" must be " + what);
  }
  std::string who_;
  const json::Value::Member& m_;
};

Status ReadNodeMember(const std::string& who, const json::Value::Member& m, Node* n) {
  const MemberReader r(who, m);
  const std::string& k = m.first;
  if (k == "bus_id") {
    std::string raw;
    LOOM_TRY(r.String(&raw));
    auto norm = NormalizeBusId(raw);
    if (!norm.ok()) return norm.status().WithContext(who);
    n->bus_id = *norm;
    return Status::Ok();
  }
  if (k == "pcie_gen") return r.Int(&n->pcie_gen);
  if (k == "pcie_width") return r.Int(&n->pcie_width);
  if (k == "numa_id") return r.Int(&n->numa_id);
  if (k == "cores") return r.Int(&n->cores);
  if (k == "cpuset") return r.String(&n->cpuset);
  if (k == "host_bridge") return r.Bool(&n->host_bridge);
  if (k == "gpu_index") return r.Int(&n->gpu_index);
  if (k == "model") return r.String(&n->model);
  if (k == "sm") return r.Int(&n->sm);
  if (k == "rdma") return r.Bool(&n->rdma);
  if (k == "port") return r.Int(&n->port);
  if (k == "rate_gbps") return r.Number(&n->rate_gbps);
  if (k == "netdev") return r.String(&n->netdev);
  if (k == "up") return r.Bool(&n->up);
  if (k == "mtu") return r.Int(&n->mtu);
  if (k == "roce_version") return r.Int(&n->roce_version);
  if (k == "link_layer") {
    std::string s;
    LOOM_TRY(r.String(&s));
    auto layer = ParseLinkLayer(s);
    if (!layer.ok()) return layer.status().WithContext(who);
    n->link_layer = *layer;
    return Status::Ok();
  }
  return InternalError(who + ": member \"" + k + "\" allowed but not read");
}

Status ReadNode(const json::Value& v, size_t index, Topology* t) {
  std::string who = "topology node " + std::to_string(index);
  if (!v.is_object()) return InvalidArgument(who + ": must be an object");
  const json::Value* id = v.Find("id");
  if (id == nullptr || !id->is_string() || id->string().empty())
    return InvalidArgument(who + ": needs a non-empty string \"id\"");
  who += " '" + id->string() + "'";
  const json::Value* kind_v = v.Find("kind");
  if (kind_v == nullptr || !kind_v->is_string()) return InvalidArgument(who + ": needs \"kind\"");
  auto kind = ParseNodeKind(kind_v->string());
  if (!kind.ok()) return kind.status().WithContext(who);

  Node n;
  n.kind = *kind;
  n.id = id->string();
  for (const json::Value::Member& m : v.object()) {
    if (m.first == "id" || m.first == "kind") continue;
    if (m.first == "parent") {
      if (!m.second.is_string()) return InvalidArgument(who + ": \"parent\" must be a node id");
      n.parent = t->Find(m.second.string());
      if (n.parent < 0)
        return InvalidArgument(who + ": parent '" + m.second.string() +
                               "' is not a node listed before it");
      continue;
    }
    if (!MemberAllowed(n.kind, m.first))
      return InvalidArgument(who + ": \"" + m.first + "\" is not a member of a " +
                             std::string(Name(n.kind)) + " node");
    LOOM_TRY(ReadNodeMember(who, m, &n));
  }
  if (n.kind != NodeKind::kMachine && n.parent < 0)
    return InvalidArgument(who + ": needs a \"parent\"");
  t->Add(std::move(n));
  return Status::Ok();
}

Status ReadLink(const json::Value& v, size_t index, Topology* t) {
  const std::string who = "topology link " + std::to_string(index);
  if (!v.is_object()) return InvalidArgument(who + ": must be an object");
  Link l;
  bool have_kind = false;
  for (const json::Value::Member& m : v.object()) {
    const MemberReader r(who, m);
    if (m.first == "a" || m.first == "b") {
      std::string id;
      LOOM_TRY(r.String(&id));
      const int i = t->Find(id);
      if (i < 0) return InvalidArgument(who + ": no node '" + id + "'");
      (m.first == "a" ? l.a : l.b) = i;
    } else if (m.first == "kind") {
      std::string s;
      LOOM_TRY(r.String(&s));
      auto kind = ParseLinkKind(s);
      if (!kind.ok()) return kind.status().WithContext(who);
      l.kind = *kind;
      have_kind = true;
    } else if (m.first == "count") {
      LOOM_TRY(r.Int(&l.count));
    } else if (m.first == "bw_gbs") {
      LOOM_TRY(r.Number(&l.bw_gbs));
    } else {
      return InvalidArgument(who + ": unknown member \"" + m.first + "\"");
    }
  }
  if (!have_kind || l.a < 0 || l.b < 0)
    return InvalidArgument(who + ": needs \"a\", \"b\", \"kind\" and \"bw_gbs\"");
  t->links.push_back(l);
  return Status::Ok();
}

}  // namespace

json::Value ToJson(const Topology& t) {
  json::Value::Array nodes;
  for (const Node& n : t.nodes) {
    json::Value::Object o;
    o.emplace_back("id", n.id);
    o.emplace_back("kind", std::string(Name(n.kind)));
    if (n.parent >= 0) o.emplace_back("parent", t.nodes[static_cast<size_t>(n.parent)].id);
    if (!n.bus_id.empty()) o.emplace_back("bus_id", n.bus_id);
    if (n.pcie_gen > 0) o.emplace_back("pcie_gen", n.pcie_gen);
    if (n.pcie_width > 0) o.emplace_back("pcie_width", n.pcie_width);
    switch (n.kind) {
      case NodeKind::kNuma:
        o.emplace_back("numa_id", n.numa_id);
        if (n.cores > 0) o.emplace_back("cores", n.cores);
        if (!n.cpuset.empty()) o.emplace_back("cpuset", n.cpuset);
        break;
      case NodeKind::kPci:
        if (n.host_bridge) o.emplace_back("host_bridge", true);
        break;
      case NodeKind::kGpu:
        if (n.gpu_index >= 0) o.emplace_back("gpu_index", n.gpu_index);
        if (!n.model.empty()) o.emplace_back("model", n.model);
        if (n.sm > 0) o.emplace_back("sm", n.sm);
        break;
      case NodeKind::kNic:
        o.emplace_back("link_layer", std::string(Name(n.link_layer)));
        if (n.rdma) o.emplace_back("rdma", true);
        if (n.port > 0) o.emplace_back("port", n.port);
        if (n.rate_gbps > 0) o.emplace_back("rate_gbps", n.rate_gbps);
        if (!n.netdev.empty()) o.emplace_back("netdev", n.netdev);
        if (!n.up) o.emplace_back("up", false);
        if (n.mtu > 0) o.emplace_back("mtu", n.mtu);
        if (n.roce_version > 0) o.emplace_back("roce_version", n.roce_version);
        break;
      default:
        break;
    }
    nodes.emplace_back(std::move(o));
  }
  json::Value::Array links;
  for (const Link& l : t.links) {
    json::Value::Object o;
    o.emplace_back("a", t.nodes[static_cast<size_t>(l.a)].id);
    o.emplace_back("b", t.nodes[static_cast<size_t>(l.b)].id);
    o.emplace_back("kind", std::string(Name(l.kind)));
    if (l.kind == LinkKind::kNvLink) o.emplace_back("count", l.count);
    o.emplace_back("bw_gbs", l.bw_gbs);
    links.emplace_back(std::move(o));
  }
  json::Value::Object root;
  root.emplace_back("format", std::string(kTopologyFormat));
  root.emplace_back("version", kTopologyVersion);
  root.emplace_back("hostname", t.hostname);
  root.emplace_back("nodes", std::move(nodes));
  root.emplace_back("links", std::move(links));
  return json::Value(std::move(root));
}

std::string DumpTopologyJson(const Topology& t) { return json::Dump(ToJson(t)); }

Result<Topology> FromJson(const json::Value& v) {
  if (!v.is_object()) return InvalidArgument("topology: the document must be a JSON object");
  const json::Value* format = v.Find("format");
  if (format == nullptr || !format->is_string() || format->string() != kTopologyFormat)
    return InvalidArgument("topology: \"format\" must be \"loom-topology\"");
  const json::Value* version = v.Find("version");
  if (version == nullptr || !version->is_number() || version->number() != kTopologyVersion)
    return InvalidArgument("topology: unsupported \"version\" (this build reads version 1)");
  Topology t;
  for (const json::Value::Member& m : v.object()) {
    if (m.first == "format" || m.first == "version") continue;
    if (m.first == "hostname") {
      if (!m.second.is_string()) return InvalidArgument("topology: \"hostname\" must be a string");
      t.hostname = m.second.string();
    } else if (m.first == "nodes") {
      if (!m.second.is_array()) return InvalidArgument("topology: \"nodes\" must be an array");
      for (size_t i = 0; i < m.second.array().size(); ++i)
        LOOM_TRY(ReadNode(m.second.array()[i], i, &t));
    } else if (m.first == "links") {
      if (!m.second.is_array()) return InvalidArgument("topology: \"links\" must be an array");
      for (size_t i = 0; i < m.second.array().size(); ++i)
        LOOM_TRY(ReadLink(m.second.array()[i], i, &t));
    } else {
      return InvalidArgument("topology: unknown member \"" + m.first + "\"");
    }
  }
  LOOM_TRY(t.Validate());
  return t;
}

Result<Topology> ParseTopologyJson(std::string_view text) {
  LOOM_ASSIGN_OR_RETURN(json::Value v, json::Parse(text));
  return FromJson(v);
}

Result<std::string> ReadWholeFile(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return SystemError("cannot open '" + path + "'", errno);
  std::string text;
  char buf[65536];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) return SystemError("cannot read '" + path + "'", EIO);
  return text;
}

Result<Topology> LoadTopologyFile(const std::string& path) {
  LOOM_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path));
  const size_t first = text.find_first_not_of(" \t\r\n");
  Result<Topology> t = InvalidArgument("neither a loom topology (JSON) nor an NCCL topology (XML)");
  if (first != std::string::npos && text[first] == '{') {
    t = ParseTopologyJson(text);
  } else if (first != std::string::npos && text[first] == '<') {
    t = ParseNcclTopoXml(text);
  }
  if (!t.ok()) return t.status().WithContext("topology file '" + path + "'");
  return t;
}

Status WriteTopologyFile(const std::string& path, const Topology& t) {
  const std::string text = DumpTopologyJson(t);
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return SystemError("cannot create '" + tmp + "'", errno);
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return SystemError("cannot write '" + tmp + "'", err);
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0 || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return SystemError("cannot write topology file '" + path + "'", err);
  }
  return Status::Ok();
}

}  // namespace loom::topology
