// Path classification and bottleneck bandwidth (paths.h).
#include "topology/paths.h"

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

namespace loom::topology {
namespace {

constexpr std::string_view kPathNames[] = {"LOC", "NVL", "NVB",  "PIX", "PXB",
                                           "PHB", "NODE", "SYS", "NET"};

const Node& At(const Topology& t, int i) { return t.nodes[static_cast<size_t>(i)]; }

bool NvCapable(const Topology& t, int i) {
  return At(t, i).kind == NodeKind::kGpu || At(t, i).kind == NodeKind::kNvSwitch;
}

// NVLink bandwidth and lanes of the direct links between a and b.
void DirectNvLink(const Topology& t, int a, int b, double* bw, int* lanes) {
  *bw = 0;
  *lanes = 0;
  for (const Link& l : t.links) {
    if (l.kind != LinkKind::kNvLink) continue;
    if ((l.a == a && l.b == b) || (l.a == b && l.b == a)) {
      *bw += l.bw_gbs;
      *lanes += l.count;
    }
  }
}

// NVLink between a and b, directly and through every NVSwitch both reach
// (NVSwitches are transparent, as in NCCL: their paths add up).
Path NvLinkPath(const Topology& t, int a, int b) {
  Path p{PathType::kNvl, 0, 0};
  DirectNvLink(t, a, b, &p.bw_gbs, &p.nvlinks);
  if (At(t, a).kind == NodeKind::kNvSwitch || At(t, b).kind == NodeKind::kNvSwitch) return p;
  for (int s : t.OfKind(NodeKind::kNvSwitch)) {
    double bw_a = 0;
    double bw_b = 0;
    int n_a = 0;
    int n_b = 0;
    DirectNvLink(t, a, s, &bw_a, &n_a);
    DirectNvLink(t, b, s, &bw_b, &n_b);
    p.bw_gbs += std::min(bw_a, bw_b);
    p.nvlinks += std::min(n_a, n_b);
  }
  return p;
}

// The chain from i up to the machine, i first.
std::vector<int> Ancestry(const Topology& t, int i) {
  std::vector<int> chain;
  for (; i >= 0; i = At(t, i).parent) chain.push_back(i);
  return chain;
}

double SmpGbs(const Topology& t, int numa_a, int numa_b) {
  for (const Link& l : t.links) {
    if (l.kind == LinkKind::kSmp &&
        ((l.a == numa_a && l.b == numa_b) || (l.a == numa_b && l.b == numa_a))) {
      return l.bw_gbs;
    }
  }
  return kDefaultSmpGbs;
}

Path TreePath(const Topology& t, int a, int b) {
  const std::vector<int> up_a = Ancestry(t, a);
  const std::vector<int> up_b = Ancestry(t, b);
  // Lowest common node: the first of b's chain that is also on a's chain.
  size_t ib = 0;
  size_t ia = up_a.size();
  for (; ib < up_b.size(); ++ib) {
    auto it = std::find(up_a.begin(), up_a.end(), up_b[ib]);
    if (it != up_a.end()) {
      ia = static_cast<size_t>(it - up_a.begin());
      break;
    }
  }
  const int lca = up_b[ib];
  Path p{PathType::kSys, kLocalGbs, 0};
  int switches = 0;
  auto walk = [&](const std::vector<int>& chain, size_t below) {
    for (size_t k = 0; k < below; ++k) {
      p.bw_gbs = std::min(p.bw_gbs, UplinkGbs(t, chain[k]));
      const Node& n = At(t, chain[k]);
      if (k > 0 && n.kind == NodeKind::kPci && !n.host_bridge) ++switches;
    }
  };
  walk(up_a, ia);
  walk(up_b, ib);
  const Node& top = At(t, lca);
  const bool endpoint = lca == a || lca == b;
  switch (top.kind) {
    case NodeKind::kPci:
      if (top.host_bridge) {
        p.type = PathType::kPhb;
      } else {
        if (!endpoint) ++switches;
        p.type = switches <= 1 ? PathType::kPix : PathType::kPxb;
      }
      break;
    case NodeKind::kNuma:
      p.type = endpoint ? PathType::kPhb : PathType::kNode;
      break;
    default: {
      const int na = t.NumaOf(a);
      const int nb = t.NumaOf(b);
      if (na >= 0 && nb >= 0 && na != nb) {
        p.type = PathType::kSys;
        p.bw_gbs = std::min(p.bw_gbs, SmpGbs(t, na, nb));
      } else {
        p.type = PathType::kNode;
      }
    }
  }
  return p;
}

}  // namespace

std::string_view Name(PathType type) { return kPathNames[static_cast<int>(type)]; }

Result<PathType> ParsePathType(std::string_view s) {
  std::string up(s);
  for (char& c : up) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (int i = 0; i <= static_cast<int>(PathType::kNet); ++i) {
    if (Name(static_cast<PathType>(i)) == up) return static_cast<PathType>(i);
  }
  return InvalidArgument("unknown path type '" + std::string(s) +
                         "' (one of LOC, NVL, NVB, PIX, PXB, PHB, NODE, SYS, NET)");
}

Result<PathType> ParseLevel(std::string_view text, std::string_view variable) {
  if (text.empty()) return PathType::kPxb;
  if (text.size() == 1 && text[0] >= '0' && text[0] <= '5') {
    static constexpr PathType kLegacy[] = {PathType::kLoc, PathType::kPix, PathType::kPxb,
                                           PathType::kPhb, PathType::kSys, PathType::kSys};
    return kLegacy[text[0] - '0'];
  }
  Result<PathType> t = ParsePathType(text);
  if (!t.ok() || t.value() == PathType::kNet) {
    return InvalidArgument(std::string(variable) + "='" + std::string(text) +
                           "' is not LOC, NVL, PIX, PXB, PHB, SYS or 0-5");
  }
  return t;
}

Path ClassifyPath(const Topology& t, int a, int b) {
  if (a == b) return Path{PathType::kLoc, kLocalGbs, 0};
  if (NvCapable(t, a) && NvCapable(t, b)) {
    Path nvl = NvLinkPath(t, a, b);
    if (nvl.bw_gbs > 0) return nvl;
    if (At(t, a).kind == NodeKind::kGpu && At(t, b).kind == NodeKind::kGpu) {
      // One hop through another GPU's NVLinks.
      Path nvb{PathType::kNvb, 0, 0};
      for (int c : t.OfKind(NodeKind::kGpu)) {
        if (c == a || c == b) continue;
        const Path ac = NvLinkPath(t, a, c);
        const Path cb = NvLinkPath(t, c, b);
        const double bw = std::min(ac.bw_gbs, cb.bw_gbs);
        if (bw > nvb.bw_gbs) nvb = Path{PathType::kNvb, bw, std::min(ac.nvlinks, cb.nvlinks)};
      }
      if (nvb.bw_gbs > 0) return nvb;
    }
  }
  return TreePath(t, a, b);
}

double NicGbs(const Topology& t, int nic) {
  const double rate = At(t, nic).rate_gbps;
  return rate > 0 ? rate / 8 : 1.25;
}

int ClosestNic(const Topology& t, int device) {
  const std::vector<int> nics = t.OfKind(NodeKind::kNic);
  const bool any_up = std::any_of(nics.begin(), nics.end(), [&](int n) { return At(t, n).up; });
  int best = -1;
  Path best_path;
  double best_bw = 0;
  for (int n : nics) {
    if (any_up && !At(t, n).up) continue;
    const Path p = ClassifyPath(t, device, n);
    const double bw = std::min(p.bw_gbs, NicGbs(t, n));
    if (best < 0 || p.type < best_path.type || (p.type == best_path.type && bw > best_bw)) {
      best = n;
      best_path = p;
      best_bw = bw;
    }
  }
  return best;
}

}  // namespace loom::topology
