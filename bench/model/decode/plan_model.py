"""Python model of hopperkit's dynamic decode plan (src/decode/plan_host.cpp + heuristics.h) and of the
alternatives (a)-(d). BF16, 8 q heads / 1 KV head, block 64, 132 SMs x 2 CTAs/SM = 264 resident CTAs,
long-pair cap 132 (BF16, per_sm >= 2; opt-in since session 62: HOPPERKIT_DECODE_LONG_CTAS=1)."""
import json
from dataclasses import dataclass, field

TILE = 64
SMS = 132
MAX_CTAS = 264           # SMs x occupancy (2 per SM for the 16-row BF16 variant, docs)
LONG_PAIR_CTAS = 132     # planner.cu: BF16, per_sm >= 2 and HOPPERKIT_DECODE_LONG_CTAS=1 -> sms
K_LONG_PAIR_TILES = 48
MIN_TILES = 4
MAX_CHUNKS = 3
MAX_CHUNKS_FP8 = 2        # kMaxChunksPerCtaFp8 (session 64)
MERGE_GROUP = 8          # kMergeGroup: group size AND loads per round in merge_slots

import os
_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.normpath(os.path.join(_HERE, "..", "..", ".."))
# the benchmark's anchors: bench/anchors/ (copied on the device) or ../shared/anchors/ next to the checkout
SCEN_PATH = next((p for p in (os.path.join(_REPO, "bench", "anchors", "decode_scenarios.json"),
                              os.path.join(_REPO, "..", "shared", "anchors", "decode_scenarios.json"))
                  if os.path.exists(p)), os.path.join(_REPO, "bench", "anchors", "decode_scenarios.json"))


def scenarios():
    d = json.load(open(SCEN_PATH))
    out = {}
    for name, s in d["scenarios"].items():
        lens = []
        for n, l in s["lens"]:
            lens += [l] * n
        out[name] = lens
    return out


def ntiles(l):
    return 0 if l <= 0 else (l + TILE - 1) // TILE


# ---------------- current planner (twin logic) ----------------
def cta_cap(T, P, max_ctas=MAX_CTAS, long_ctas=LONG_PAIR_CTAS):
    is_long = long_ctas > 0 and P > 0 and T >= K_LONG_PAIR_TILES * P
    return long_ctas if is_long and long_ctas < max_ctas else max_ctas


def by_sm(T, P, C, max_ctas=MAX_CTAS, long_ctas=LONG_PAIR_CTAS):
    return (long_ctas > 0 and long_ctas < max_ctas and 0 < C <= long_ctas
            and cta_cap(T, P, max_ctas, long_ctas) == long_ctas)


def pair_of_tile(prefix, P, x):
    lo, hi = 0, P
    while hi - lo > 1:
        mid = (lo + hi) >> 1
        if prefix[mid] <= x:
            lo = mid
        else:
            hi = mid
    return lo


def cta_begin(i, T, C):
    return (i * T) // C


def cta_chunks(prefix, P, T, C, i):
    b, e = cta_begin(i, T, C), cta_begin(i + 1, T, C)
    return 0 if e <= b else pair_of_tile(prefix, P, e - 1) - pair_of_tile(prefix, P, b) + 1


def next_ctas(C, cap, T):
    n = min(2 * C, cap, T)
    return n if n > C else 0


def current_C(prefix, min_tiles=MIN_TILES, max_chunks=MAX_CHUNKS):
    P = len(prefix) - 1
    T = prefix[-1]
    cap = cta_cap(T, P)
    C = max(1, min(T // min_tiles, cap)) if T > 0 else 0
    nxt = next_ctas(C, cap, T)
    while max_chunks > 0 and nxt != 0:
        if not any(cta_chunks(prefix, P, T, C, i) > max_chunks for i in range(C)):
            break
        C = nxt
        nxt = next_ctas(C, cap, T)
    return C


@dataclass
class Plan:
    name: str
    prefix: list
    starts: list                      # C+1 tile starts (non-decreasing; empty CTAs allowed)
    by_sm: bool = False
    group: int = MERGE_GROUP          # merge group size (pieces per level-1 group)
    loads_per_round: int = MERGE_GROUP
    # derived
    chunks: list = field(default_factory=list)   # per CTA: list of (pair, tiles, piece k)
    pieces: list = field(default_factory=list)   # per pair

    def __post_init__(self):
        P = len(self.prefix) - 1
        C = len(self.starts) - 1
        first_cta = [None] * P
        self.pieces = [0] * P
        self.chunks = []
        for i in range(C):
            b, e = self.starts[i], self.starts[i + 1]
            ch = []
            if e > b:
                p0 = pair_of_tile(self.prefix, P, b)
                p1 = pair_of_tile(self.prefix, P, e - 1)
                for p in range(p0, p1 + 1):
                    lo, hi = max(b, self.prefix[p]), min(e, self.prefix[p + 1])
                    if hi <= lo:
                        continue  # empty pair
                    if first_cta[p] is None:
                        first_cta[p] = i
                    ch.append([p, hi - lo, self.pieces[p]])
                    self.pieces[p] += 1
            self.chunks.append(ch)

    @property
    def C(self):
        return len(self.starts) - 1

    @property
    def active(self):
        return sum(1 for c in self.chunks if c)

    def levels(self, p):
        n = self.pieces[p]
        return 0 if n <= 1 else (1 if n <= self.group else 2)

    def summary(self):
        P = len(self.prefix) - 1
        n = self.pieces
        split = [p for p in range(P) if n[p] > 1]
        maxp = max(n)
        pl = max(range(P), key=lambda p: n[p])
        groups = -(-maxp // self.group) if maxp > self.group else 0
        return dict(C=self.C, active=self.active, T=self.prefix[-1],
                    tiles_per_cta=(min(c2 - c1 for c1, c2 in zip(self.starts, self.starts[1:]) if c2 > c1),
                                   max(c2 - c1 for c1, c2 in zip(self.starts, self.starts[1:]))),
                    max_chunks=max(len(c) for c in self.chunks), split_pairs=len(split),
                    max_pieces=maxp, levels=self.levels(pl), l2_groups=groups,
                    l2_rounds=-(-groups // self.loads_per_round) if groups else 0, by_sm=self.by_sm)


def prefix_of(lens):
    pre = [0]
    for l in lens:
        pre.append(pre[-1] + ntiles(l))
    return pre


def current_plan(lens, min_tiles=MIN_TILES, max_chunks=MAX_CHUNKS, **kw):
    pre = prefix_of(lens)
    P, T = len(pre) - 1, pre[-1]
    C = current_C(pre, min_tiles, max_chunks)
    starts = [cta_begin(i, T, C) for i in range(C + 1)]
    return Plan("current", pre, starts, by_sm(T, P, C), **kw)


# ---------------- (a) cost-equal budgets ----------------
def cost_cut(pre, C, k, weights=None):
    """Pair p costs k + w_p * tiles_p (the k overhead units placed before its tiles); cut the cost line into C
    equal budgets; a boundary inside a pair's overhead snaps to the pair's first tile."""
    P, T = len(pre) - 1, pre[-1]
    w = weights or [1.0] * P
    q = [0.0]
    for p in range(P):
        t = pre[p + 1] - pre[p]
        q.append(q[-1] + (k + w[p] * t if t > 0 else 0.0))
    Q = q[-1]
    starts = []
    for i in range(C + 1):
        x = Q * i / C
        if i == C:
            starts.append(T)
            continue
        p = max(0, min(P - 1, pair_of_tile(q, P, x)))
        t = pre[p + 1] - pre[p]
        off = x - q[p] - (k if t > 0 else 0)
        tile = pre[p] + (0 if off <= 0 else min(t, int(off / w[p] + 1e-9)))
        starts.append(tile)
    for i in range(1, len(starts)):
        starts[i] = max(starts[i], starts[i - 1])
    return starts, Q


def cost_plan(lens, k, c_rule="now", **kw):
    pre = prefix_of(lens)
    P, T = len(pre) - 1, pre[-1]
    if c_rule == "now":
        C = current_C(pre)
    else:  # cost / 4, same cap
        Q = sum(k + (pre[p + 1] - pre[p]) for p in range(P) if pre[p + 1] > pre[p])
        C = max(1, min(int(Q // 4), cta_cap(T, P)))
    starts, _ = cost_cut(pre, C, k)
    return Plan(f"cost k={k} C={c_rule}", pre, starts, by_sm(T, P, C), **kw)


# ---------------- (d) minimum tiles per CTA for long pairs only ----------------
def min_long_plan(lens, m, **kw):
    """Keep C as now; pairs with >= 2m tiles are long; if the equal budget b = T/C < m, weight long pairs'
    tiles by w so that a budget holds m long-pair tiles and short pairs share the rest of the CTAs."""
    pre = prefix_of(lens)
    P, T = len(pre) - 1, pre[-1]
    C = current_C(pre)
    tl = [pre[p + 1] - pre[p] for p in range(P)]
    long_ = [t >= 2 * m for t in tl]
    L = sum(t for t, lg in zip(tl, long_) if lg)
    S = T - L
    if T / C >= m or L == 0:
        starts = [cta_begin(i, T, C) for i in range(C + 1)]
    elif C > L / m and S > 0:
        B = S / (C - L / m)
        w = [B / m if lg else 1.0 for lg in long_]
        starts, _ = cost_cut(pre, C, 0, w)
    else:
        C = max(1, T // m)
        starts = [cta_begin(i, T, C) for i in range(C + 1)]
    return Plan(f"min{m} long", pre, starts, by_sm(T, P, C), **kw)
