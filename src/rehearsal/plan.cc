// The rehearsal's plan: which host connects to which, a pure function of the hosts.
// What the connections found is read by rules/paths.cc.

#include "rehearsal/plan.h"

#include <algorithm>
#include <random>
#include <set>

namespace rankcheck {
namespace {

// NCCL's binary tree over n nodes (src/graph/trees.cc ncclGetBtree): the parent
// of `rank`, or -1 for the root.
long btree_parent(long n, long rank) {
  if (rank == 0) return -1;
  long bit = 1;
  for (; bit < n; bit <<= 1) {
    if ((bit & rank) != 0) break;
  }
  long up = (rank ^ bit) | (bit << 1);
  if (up >= n) up = rank ^ bit;
  return up;
}

// The second tree of ncclGetDtree: shifted by one for an odd count, mirrored for an even one.
long dtree_parent(long n, long rank) {
  if (n % 2 == 1) {
    long u = btree_parent(n, (rank - 1 + n) % n);
    return u == -1 ? -1 : (u + 1) % n;
  }
  long u = btree_parent(n, n - 1 - rank);
  return u == -1 ? -1 : n - 1 - u;
}

}  // namespace

std::vector<PathEdge> rehearsal_plan(size_t hosts, uint64_t seed) {
  std::set<PathEdge> edges;
  auto both = [&edges](size_t a, size_t b) {
    if (a == b) return;
    edges.insert({uint32_t(a), uint32_t(b)});
    edges.insert({uint32_t(b), uint32_t(a)});
  };
  if (hosts < 2) return {};
  if (hosts <= kAllPairsHosts) {
    for (size_t a = 0; a < hosts; ++a) {
      for (size_t b = a + 1; b < hosts; ++b)
        both(a, b);
    }
    return {edges.begin(), edges.end()};
  }
  const long n = static_cast<long>(hosts);
  for (size_t i = 1; i < hosts; ++i)
    both(0, i);  // the root and every rank
  for (size_t i = 0; i < hosts; ++i)
    both(i, (i + 1) % hosts);  // the ring, both neighbours
  for (long r = 0; r < n; ++r) {
    if (long p = btree_parent(n, r); p >= 0) both(size_t(r), size_t(p));
    if (long p = dtree_parent(n, r); p >= 0) both(size_t(r), size_t(p));
  }
  size_t sample = 1;
  while ((size_t(1) << sample) < hosts)
    ++sample;  // ceil(log2 hosts)
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> pick(0, hosts - 1);
  for (size_t i = 0; i < hosts; ++i) {
    for (size_t k = 0; k < sample; ++k) {
      size_t j = pick(rng);
      if (j != i) edges.insert({uint32_t(i), uint32_t(j)});
    }
  }
  return {edges.begin(), edges.end()};
}

}  // namespace rankcheck
