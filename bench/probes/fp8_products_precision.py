# Precision model (numpy + ml_dtypes, no GPU): sparse decode's two products on fp8 tensor cores,
# with the bf16 operand split into two e4m3 terms (x = s (hi + lo), s a power of two per row, so
# that the e4m3 codes of the cache are multiplied as they are and no key is dequantized), against
# the kernels' bf16 products over dequantized keys, both against float64. One query token of 16
# rows over 2048 V3.2 records (e4m3 with an fp32 scale per 128 dims, bf16 RoPE dims); the scale of
# a record's group is applied to the group's partial score, and folded into P for the value
# product (one P per group). Accumulators are exact fp32 or keep 13 mantissa bits per k32 step (a
# pessimistic model of Hopper's fp8 accumulation; each 128-dim group and each 32-token step is
# added into fp32 separately). docs/design/hopper-narrow-rows.md section 9.
#   python3 bench/probes/fp8_products_precision.py [SEED]
import numpy as np, ml_dtypes, sys
E4 = ml_dtypes.float8_e4m3fn; BF = ml_dtypes.bfloat16
rng = np.random.default_rng(int(sys.argv[1]) if len(sys.argv) > 1 else 0)

def bf(x): return np.asarray(x, np.float32).astype(BF).astype(np.float64)
def e4(x): return np.asarray(x, np.float64).astype(np.float32).astype(E4).astype(np.float64)
def f32(x): return np.asarray(x, np.float64).astype(np.float32).astype(np.float64)
def pow2_scale(m): return 2.0 ** np.ceil(np.log2(np.maximum(m, 1e-30) / 448.0))
def trunc_acc(x, bits=13):
    # an accumulator that keeps `bits` explicit mantissa bits (truncation)
    m, e = np.frexp(x); return np.ldexp(np.trunc(m * 2.0 ** (bits + 1)) / 2.0 ** (bits + 1), e)

def split(x, axis):
    s = pow2_scale(np.max(np.abs(x), axis=axis, keepdims=True))
    hi = e4(x / s); lo = e4(x / s - hi)
    return hi, lo, s

def run(h, T, qmul, acc_bits):
    d_nope, d_rope = 512, 64
    kv = rng.standard_normal((T, d_nope + d_rope))
    q = bf(rng.standard_normal((h, d_nope + d_rope)) * qmul)
    # V3.2 records: nope e4m3 with an fp32 scale per 128 dims, rope bf16
    g = kv[:, :d_nope].reshape(T, 4, 128)
    sc = f32(np.max(np.abs(g), axis=2) / 448.0)                 # [T, 4]
    k8 = e4(g / sc[:, :, None])                                  # [T, 4, 128]
    rope = bf(kv[:, d_nope:])
    K = np.concatenate([(k8 * sc[:, :, None]).reshape(T, d_nope), rope], 1)  # exact values
    scale = (d_nope + d_rope) ** -0.5
    def finish(s, pv_fn):
        m = s.max(1, keepdims=True); p = np.exp(s - m); l = p.sum(1, keepdims=True)
        return pv_fn(p) / l, m[:, 0] + np.log(l[:, 0])
    # float64 oracle
    s_ref = q @ K.T * scale
    ref, lse_ref = finish(s_ref, lambda p: p @ K[:, :d_nope])
    # today: bf16 keys (dequantized), fp32 scores, bf16 P times bf16 V, fp32 sums
    Kb = bf(K)
    s_a = f32(q @ Kb.T) * scale
    a, lse_a = finish(s_a, lambda p: f32(bf(p) @ Kb[:, :d_nope]))
    # fp8 products: S = sum_g sc[t,g] * sigma * (k8_g . (q_hi + q_lo)_g) + rope (bf16 product)
    qn = q[:, :d_nope].reshape(h, 4, 128)
    hi, lo, sig = split(q[:, :d_nope], 1)                        # per-row power-of-two scale
    hi = hi.reshape(h, 4, 128); lo = lo.reshape(h, 4, 128)
    s_b = np.zeros((h, T))
    for gi in range(4):
        part = np.zeros((h, T))
        for c in range(4):                                       # k32 steps of the group
            sl = slice(32 * c, 32 * c + 32)
            part = trunc_acc(part + (hi[:, gi, sl] + lo[:, gi, sl]) @ k8[:, gi, sl].T, acc_bits)
        s_b += f32(part) * sig * sc[None, :, gi]
    s_b = f32(s_b + f32(q[:, d_nope:] @ rope.T)) * scale
    def pv_fp8(p):
        out = np.zeros((h, d_nope))
        for gi in range(4):
            pg = p * sc[None, :, gi]                             # the group's scale folded into P
            ph, pl, ps = split(pg, 1)
            acc = np.zeros((h, 128))
            for c in range(0, T, 32):
                acc = trunc_acc(acc + (ph[:, c:c+32] + pl[:, c:c+32]) @ k8[c:c+32, gi, :], acc_bits)
            out[:, 128 * gi:128 * gi + 128] = f32(acc) * ps
        return out
    b, lse_b = finish(s_b, pv_fp8)
    res = {}
    for name, o, lse in (("bf16 products", a, lse_a), ("fp8 split", b, lse_b)):
        ob = bf(o); err = np.abs(ob - ref).max() / np.abs(ref).max()
        cos = (ob * ref).sum() / np.sqrt((ob * ob).sum() * (ref * ref).sum())
        res[name] = (err, cos, np.abs(lse - lse_ref).max())
    return res

for qmul in (1.0, 4.0, 16.0):
    for acc_bits in (23, 13):
        r = run(16, 2048, qmul, acc_bits)
        print(f"q x{qmul:4.0f} acc {acc_bits:2d} bits: " + "  ".join(f"{k}: max_rel {v[0]:.2e} cos {v[1]:.7f} lse {v[2]:.1e}" for k, v in r.items()))
