"""Event-driven fluid time model of one decode_attention launch for a Plan (plan_model.Plan).

Each CTA walks its chunks: [start-up] then per chunk [pre (not the first chunk)] [tiles: streamed]
[epilogue] and, for a split pair, [handshake] + arrival on the pair's (or group's) counter; the CTA that
arrives last runs that merge level (entry + rounds x loads + stores/arrival), and the last group merge
arrives on the pair counter, whose last arrival runs the final level. Tiles are 32 KB (BF16 K+V of 64 tokens);
streaming CTAs share the HBM bandwidth equally, each at most one tile per t_tile (latency-bound rate).
Kernel time = last CTA exit + offset (graph launch / drain)."""
from dataclasses import dataclass, replace

TILE_BYTES = 64 * 128 * 2 * 2


@dataclass
class Params:
    t_start: float = 3.4      # entry -> first tile streaming (first TMA ~2.6 + first K/V ~1 us later)
    t_bysm: float = 0.8       # by-SM claim at start-up (long-pair cap scenarios)
    t_tile: float = 0.75      # per tile, latency-bound (trace: 0.7-0.8)
    bw: float = 4.1e6         # bytes/us shared by streaming CTAs (fit)
    t_pre: float = 0.4        # chunk after the first: query slot -> first K/V
    t_epi: float = 1.2        # row sums + token-group combine + stores (trace 0.3 + 1.0; last_tile->epilogue 1.05-1.3)
    t_hs: float = 0.7         # split handshake (release + atomic)
    t_round: float = 1.05     # one round of merge loads (<= 8 partials in flight per row); 1.3 before 8bc9c4a
    t_round_extra16: float = 0.25  # extra for a 16-load round (more in flight / more registers), guess
    t_m_entry: float = 0.3    # handshake -> merge entered
    t_m_store_final: float = 0.6   # final stores + exit
    t_m_store_arrive: float = 1.25  # group merge: stores + group-counter arrival (0.4 + 0.84)
    offset: float = 1.0       # graph-launched time minus the last CTA exit (fit)
    j_start: float = 0.0      # per-CTA start-up jitter, uniform [0, j_start] us (trace: first K/V spread ~1-1.5 us)
    j_bw: float = 0.0         # per-CTA bandwidth-share weight, lognormal sigma (unfair HBM/L2 service)
    seeds: int = 1            # Monte Carlo draws averaged when jitter is on


def merge_cost(prm, count, final, loads_per_round):
    rounds = -(-count // loads_per_round)
    r = prm.t_round + (prm.t_round_extra16 if loads_per_round > 8 and count > 8 else 0.0)
    return prm.t_m_entry + rounds * r + (prm.t_m_store_final if final else prm.t_m_store_arrive)


def simulate(plan, prm=Params(), detail=False):
    if (prm.j_start > 0 or prm.j_bw > 0) and not detail:
        return sum(_simulate(plan, prm, seed) for seed in range(prm.seeds)) / prm.seeds
    return _simulate(plan, prm, 0, detail)


def _simulate(plan, prm, seed, detail=False):
    import random
    rng = random.Random(seed)
    C = plan.C
    G, LPR = plan.group, plan.loads_per_round
    # per CTA action queue: ('d', seconds) delay, ('s', bytes) stream, ('a', pair, k) arrival (after handshake)
    queues = []
    for i, ch in enumerate(plan.chunks):
        q = []
        if ch:
            q.append(["d", prm.t_start + (prm.t_bysm if plan.by_sm else 0.0) + rng.uniform(0, prm.j_start)])
            for j, (p, t, k) in enumerate(ch):
                if j > 0:
                    q.append(["d", prm.t_pre])
                q.append(["s", float(t * TILE_BYTES)])
                q.append(["d", prm.t_epi])
                if plan.pieces[p] > 1:
                    q.append(["d", prm.t_hs])
                    q.append(["a", p, k])
        queues.append(q)
    pos = [0] * C
    wbw = [rng.lognormvariate(0, prm.j_bw) if prm.j_bw > 0 else 1.0 for _ in range(C)]
    pair_cnt = {}
    grp_cnt = {}
    t = 0.0
    exit_t = [0.0] * C
    merges = []
    max_rate = TILE_BYTES / prm.t_tile
    while True:
        # resolve zero-time actions (arrivals) in CTA order at the current time
        changed = True
        while changed:
            changed = False
            for i in range(C):
                q = queues[i]
                while pos[i] < len(q) and q[pos[i]][0] == "a":
                    _, p, k = q[pos[i]]
                    pos[i] += 1
                    changed = True
                    n = plan.pieces[p]
                    ins = []
                    if n <= G:
                        pair_cnt[p] = pair_cnt.get(p, 0) + 1
                        if pair_cnt[p] == n:
                            ins = [["d", merge_cost(prm, n, True, LPR)]]
                            merges.append((p, 1, i, t))
                    else:
                        g = k // G
                        gcount = min(G, n - g * G)
                        groups = -(-n // G)
                        grp_cnt[(p, g)] = grp_cnt.get((p, g), 0) + 1
                        if grp_cnt[(p, g)] == gcount:
                            ins = [["d", merge_cost(prm, gcount, False, LPR)], ["g", p, groups]]
                            merges.append((p, 1, i, t))
                    q[pos[i]:pos[i]] = ins
                while pos[i] < len(q) and q[pos[i]][0] == "g":
                    _, p, groups = q[pos[i]]
                    pos[i] += 1
                    changed = True
                    pair_cnt[p] = pair_cnt.get(p, 0) + 1
                    if pair_cnt[p] == groups:
                        q[pos[i]:pos[i]] = [["d", merge_cost(prm, groups, True, LPR)]]
                        merges.append((p, 2, i, t))
                if pos[i] >= len(q) and exit_t[i] == 0.0 and q:
                    exit_t[i] = t
        live = [i for i in range(C) if pos[i] < len(queues[i])]
        if not live:
            break
        streaming = [i for i in live if queues[i][pos[i]][0] == "s"]
        rates = _share(streaming, wbw, max_rate, prm.bw)
        dt = min(queues[i][pos[i]][1] / rates.get(i, 1.0) for i in live)
        t += dt
        for i in live:
            a = queues[i][pos[i]]
            a[1] -= dt * rates.get(i, 1.0)
            if a[1] <= 1e-9:
                pos[i] += 1
    end = max(exit_t)
    if detail:
        return end + prm.offset, dict(exit=exit_t, merges=merges, end=end)
    return end + prm.offset


def _share(streaming, w, max_rate, bw):
    """water-filling: bandwidth split by weight, no CTA above max_rate"""
    if not streaming:
        return {}
    if all(w[i] == 1.0 for i in streaming):
        r = min(max_rate, bw / len(streaming))
        return {i: r for i in streaming}
    order = sorted(streaming, key=lambda i: -w[i])
    tw = sum(w[i] for i in order)
    budget = bw
    rates = {}
    j = 0
    while j < len(order) and budget * w[order[j]] / tw >= max_rate:
        rates[order[j]] = max_rate
        budget -= max_rate
        tw -= w[order[j]]
        j += 1
    for i in order[j:]:
        rates[i] = budget * w[i] / tw
    return rates
