import plan_model as pm
SC = pm.scenarios()
NAMES = ["uniform_512","uniform_4096","skewed_mix","skewed_extreme","one_64k_7x4k","one_64k_15x4k",
         "one_64k_31x4k","one_128k_31x4k","two_32k_30x4k"]

def variants():
    V = {}
    V["current"] = lambda l: pm.current_plan(l)
    for k in (2, 3, 4):
        V[f"a k={k} C=now"] = (lambda k: lambda l: pm.cost_plan(l, k, "now"))(k)
        V[f"a k={k} C=cost/4"] = (lambda k: lambda l: pm.cost_plan(l, k, "cost4"))(k)
    V["b final 1 round"] = lambda l: pm.current_plan(l, loads_per_round=16)  # final level reads <=16 in one round
    V["c G=16 (16/round)"] = lambda l: pm.current_plan(l, group=16, loads_per_round=16)
    V["c one level, 8/round"] = lambda l: pm.current_plan(l, group=10**6, loads_per_round=8)
    V["c one level, 16/round"] = lambda l: pm.current_plan(l, group=10**6, loads_per_round=16)
    V["d min6 long"] = lambda l: pm.min_long_plan(l, 6)
    V["d min8 long"] = lambda l: pm.min_long_plan(l, 8)
    return V

if __name__ == "__main__":
    for vn, f in variants().items():
        print("==", vn)
        for n in NAMES:
            s = f(SC[n]).summary()
            print(f"   {n:16s} C={s['C']:3d} act={s['active']:3d} tiles/CTA={s['tiles_per_cta']} chunks<={s['max_chunks']} "
                  f"maxpieces={s['max_pieces']:3d} lev={s['levels']} l2g={s['l2_groups']} l2r={s['l2_rounds']}")
