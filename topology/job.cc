// Fusing per-rank records into the job-wide topology (job.h).
#include "topology/job.h"

#include <algorithm>
#include <cstdio>
#include <map>

namespace loom::topology {

namespace {

// The worse of two links in every respect.
LinkCost Worst(const LinkCost& a, const LinkCost& b) {
  return LinkCost{std::max(a.latency_us, b.latency_us), std::min(a.bandwidth_gbs, b.bandwidth_gbs),
                  std::min(a.peer_read_gbs, b.peer_read_gbs),
                  std::max(a.peer_read_setup_us, b.peer_read_setup_us)};
}

// printf of one or two doubles into a string.
std::string Fmt(const char* fmt, double a, double b = 0) {
  char buf[96];
  std::snprintf(buf, sizeof(buf), fmt, a, b);
  return buf;
}

}  // namespace

int JobTopology::ranks_per_host() const {
  if (host_ranks.empty()) return 0;
  const size_t p = host_ranks.front().size();
  for (const auto& h : host_ranks) {
    if (h.size() != p) return 0;
  }
  return static_cast<int>(p);
}

std::string JobTopology::Describe() const {
  std::string s = std::to_string(hosts()) + (hosts() == 1 ? " host x " : " hosts x ");
  const int p = ranks_per_host();
  s += p > 0 ? std::to_string(p) + (p == 1 ? " rank" : " ranks") : "uneven ranks";
  s += " (";
  for (int h = 0; h < hosts(); ++h) {
    if (h > 0) s += "; ";
    s += host_names[h] + ":";
    // Long jobs: the first and last rank of a host are enough to read.
    const auto& rs = host_ranks[h];
    if (rs.size() <= 4) {
      for (size_t i = 0; i < rs.size(); ++i) s += (i ? "," : " ") + std::to_string(rs[i]);
    } else {
      s += " " + std::to_string(rs.front()) + ".." + std::to_string(rs.back()) + " (" +
           std::to_string(rs.size()) + ")";
    }
  }
  s += "), intra " + Fmt("%.1f us %.1f GB/s", intra.latency_us, intra.bandwidth_gbs);
  if (intra.peer_read_gbs > 0) {
    s += Fmt(" (peer reads %.1f GB/s + %.1f us)", intra.peer_read_gbs, intra.peer_read_setup_us);
  }
  if (hosts() > 1) {
    s += ", inter " + Fmt("%.1f us %.2f GB/s per host", inter.latency_us, inter.bandwidth_gbs);
    double slowest = 0;
    for (double g : host_nic_gbs) {
      if (g > 0 && (slowest == 0 || g < slowest)) slowest = g;
    }
    s += slowest > 0 ? Fmt(" (slowest NIC %.2f GB/s)", slowest) : " (NIC speeds unknown)";
  }
  return s;
}

JobTopology JobTopology::Uniform(int hosts, int per_host, LinkCost intra, LinkCost inter) {
  std::vector<RankRecord> records;
  for (int h = 0; h < hosts; ++h) {
    for (int i = 0; i < per_host; ++i) {
      records.push_back(RankRecord{"host" + std::to_string(h), "host" + std::to_string(h),
                                   inter.bandwidth_gbs, intra, inter});
    }
  }
  return FuseJobTopology(records).value();
}

Result<JobTopology> FuseJobTopology(std::span<const RankRecord> ranks) {
  if (ranks.empty()) return InvalidArgument("job topology: no rank records");
  JobTopology job;
  job.nranks = static_cast<int>(ranks.size());
  std::map<std::string, int> host_index;
  for (int r = 0; r < job.nranks; ++r) {
    const RankRecord& rec = ranks[r];
    if (rec.host_id.empty()) {
      return InvalidArgument("job topology: rank " + std::to_string(r) + " (" + rec.hostname +
                             ") published no host identity");
    }
    auto [it, fresh] = host_index.emplace(rec.host_id, job.hosts());
    if (fresh) {
      job.host_names.push_back(rec.hostname.empty() ? rec.host_id : rec.hostname);
      job.host_ranks.emplace_back();
      job.host_nic_gbs.push_back(0);
    }
    const int h = it->second;
    job.host_of_rank.push_back(h);
    job.local_index.push_back(static_cast<int>(job.host_ranks[h].size()));
    job.host_ranks[h].push_back(r);
    double& nic = job.host_nic_gbs[h];
    if (rec.nic_gbs > 0 && (nic == 0 || rec.nic_gbs < nic)) nic = rec.nic_gbs;
  }

  bool have_intra = false;
  job.intra = ranks[0].intra;
  job.inter = ranks[0].inter;
  for (int r = 0; r < job.nranks; ++r) {
    if (job.host_ranks[job.host_of_rank[r]].size() > 1) {
      job.intra = have_intra ? Worst(job.intra, ranks[r].intra) : ranks[r].intra;
      have_intra = true;
    }
    job.inter = Worst(job.inter, ranks[r].inter);
  }
  for (double nic : job.host_nic_gbs) {
    if (nic > 0) job.inter.bandwidth_gbs = std::min(job.inter.bandwidth_gbs, nic);
  }
  job.inter.peer_read_gbs = 0;  // no process reads another host's memory
  return job;
}

}  // namespace loom::topology
