/* The non-product parts of one decode step of a Llama-family decoder layer, fused (see decode_kernel.py).
 *
 * A decode step of the tiny world's model is ~60 small torch operations, most of them cheaper than their
 * dispatch; its weight products are left to torch (MKL), everything between them is here, one call each:
 *   rms_rows   x / sqrt(mean(x^2) + eps), row by row (the norm's weight is folded into the next product)
 *   attend     RoPE of the new q and k heads (optional per-head q/k RMSNorm first), the new k and v written
 *              into the KV cache, softmax(bias + scale * q.K^T) . V over the filled slots
 *   silu_mul   silu(gate) * up
 * Bits are the same on every x86-64 CPU: plain IEEE float operations in a fixed order, no libm (exp is the
 * polynomial below), no fused multiply-add (built with -ffp-contract=off). Vector loops run across keys or
 * across a head's width, never along a sum, so a wider vector unit gives the same results.
 */
#include <stdint.h>
#include <string.h>
#include <math.h>

/* 8 floats as one value (GCC / Clang vector extension): one AVX register, or two SSE ones; lane by lane the
 * same IEEE operations as scalar code */
typedef float v8 __attribute__((vector_size(32)));
static inline v8 load8(const float *p) { v8 v; memcpy(&v, p, sizeof v); return v; }
static inline void store8(float *p, v8 v) { memcpy(p, &v, sizeof v); }

/* e^x in float: x = n ln2 + r (|r| <= ln2/2), e^r by its degree-7 Taylor polynomial (error < 1e-8 relative),
 * times 2^n built in the exponent bits (2^128 as 2^127 * 2); 0 below -87 and for -inf, +inf above the largest
 * float's log. Branch-free, so that loops over it vectorise. */
static inline float exp_f(float x) {
    const float hi = 88.7228f;
    float xc = x < -87.0f ? -87.0f : (x > hi ? hi : x);
    float nf = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;   /* round to nearest (1.5 * 2^23) */
    float r = (xc - nf * 0.693145751953125f) - nf * 1.428606765330187e-06f;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t n = (int32_t)nf;
    int32_t bits = ((n > 127 ? 127 : n) + 127) << 23;
    float s;
    memcpy(&s, &bits, sizeof s);
    float e = p * s * (n > 127 ? 2.0f : 1.0f);
    return x > hi ? INFINITY : (x > -87.0f ? e : 0.0f);
}

/* The largest of x[0 .. m) (exact in any order: 8 running maxima). */
static inline float max_f(const float *restrict x, int64_t m) {
    float l[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    int64_t s = 0;
    for (; s + 8 <= m; s += 8)
        for (int k = 0; k < 8; k++) l[k] = x[s + k] > l[k] ? x[s + k] : l[k];
    for (; s < m; s++) l[0] = x[s] > l[0] ? x[s] : l[0];
    float mx = l[0];
    for (int k = 1; k < 8; k++) mx = l[k] > mx ? l[k] : mx;
    return mx;
}

/* The sum of x[0 .. m) in a fixed order: 8 partial sums over s mod 8, the rest, then the 8 in turn. */
static inline float sum_f(const float *restrict x, int64_t m) {
    float l[8] = {0};
    int64_t s = 0;
    for (; s + 8 <= m; s += 8)
        for (int k = 0; k < 8; k++) l[k] += x[s + k];
    float t = 0.0f;
    for (; s < m; s++) t += x[s];
    for (int k = 0; k < 8; k++) t += l[k];
    return t;
}

/* x [n, h] -> out [n, h]: each row divided by its root mean square (eps inside the root). */
void rms_rows(int64_t n, int64_t h, const float *x, float *out, float eps) {
    for (int64_t r = 0; r < n; r++) {
        const float *xr = x + r * h;
        float *o = out + r * h;
        double ss = 0.0;
        for (int64_t j = 0; j < h; j++) ss += (double)xr[j] * (double)xr[j];
        float inv = 1.0f / sqrtf((float)(ss / (double)h) + eps);
        for (int64_t j = 0; j < h; j++) o[j] = xr[j] * inv;
    }
}

/* gu [n, 2 * inter] ([gate | up]) -> out [n, inter] = gate / (1 + e^-gate) * up. */
void silu_mul(int64_t n, int64_t inter, const float *gu, float *out) {
    for (int64_t r = 0; r < n; r++) {
        const float *g = gu + r * 2 * inter, *u = g + inter;
        float *o = out + r * inter;
        for (int64_t j = 0; j < inter; j++) o[j] = g[j] / (1.0f + exp_f(-g[j])) * u[j];
    }
}

/* One head's vector v [d] -> out [d]: optional RMSNorm with weight w (NULL: none), then RoPE:
 * out[j] = v[j] cos[j] + v[(j + d/2) mod d] ssin[j] (ssin: sin signed -1 on the first half). */
static inline void norm_rope(const float *v, int64_t d, const float *w, float eps, const float *cos,
                             const float *ssin, float *tmp, float *out, int64_t out_stride) {
    const float *src = v;
    if (w) {
        double ss = 0.0;
        for (int64_t j = 0; j < d; j++) ss += (double)v[j] * (double)v[j];
        float inv = 1.0f / sqrtf((float)(ss / (double)d) + eps);
        for (int64_t j = 0; j < d; j++) tmp[j] = w[j] * (v[j] * inv);
        src = tmp;
    }
    int64_t half = d / 2;
    for (int64_t j = 0; j < half; j++) out[j * out_stride] = src[j] * cos[j] + src[j + half] * ssin[j];
    for (int64_t j = half; j < d; j++) out[j * out_stride] = src[j] * cos[j] + src[j - half] * ssin[j];
}

/* The attention of one decode step, for n rows at cache slot end - 1.
 *   y      [n, (hq + 2 hkv) d]   the step's q, k, v heads (after the fused projection)
 *   cs     [slots, 2, hq + 2 hkv, d]   cos and signed sin of each position (StaticStepper.cs)
 *   pos    [n]                   each row's position (int64)
 *   qn_w, kn_w [d] or NULL       per-head q / k RMSNorm weights (Qwen3), eps qk_eps
 *   keys_t [n, hkv, d, slots]    this layer's keys, transposed (row stride hkv d slots)
 *   values [n, hkv, slots, d]    this layer's values
 *   bias   [n, hq, slots]        0 where a key may be read, -inf on padding
 *   out    [n, hq d]             the attention output, heads side by side
 *   work   [hq d + 2 d + slots]  scratch
 * Query head h reads kv head h / (hq / hkv). Scores: bias + scale * (q . k), summed over d in order. */
void attend(int64_t n, int64_t hq, int64_t hkv, int64_t d, int64_t slots, int64_t end, float scale,
            const float *y, const float *cs, const int64_t *pos, const float *qn_w, const float *kn_w,
            float qk_eps, float *keys_t, float *values, const float *bias, float *out, float *work) {
    int64_t heads = hq + 2 * hkv, g = hq / hkv, s_new = end - 1;
    float *q = work, *tmp = work + hq * d, *restrict acc = tmp + 2 * d;
    for (int64_t r = 0; r < n; r++) {
        const float *yr = y + r * heads * d;
        const float *cos = cs + pos[r] * 2 * heads * d, *ssin = cos + heads * d;
        float *kr = keys_t + r * hkv * d * slots, *vr = values + r * hkv * slots * d;
        for (int64_t h = 0; h < hq; h++)
            norm_rope(yr + h * d, d, qn_w, qk_eps, cos, ssin, tmp, q + h * d, 1);
        for (int64_t h = 0; h < hkv; h++) {
            norm_rope(yr + (hq + h) * d, d, kn_w, qk_eps, cos, ssin, tmp, kr + h * d * slots + s_new, slots);
            memcpy(vr + (h * slots + s_new) * d, yr + (hq + hkv + h) * d, d * sizeof(float));
        }
        for (int64_t h = 0; h < hq; h++) {
            const float *kt = kr + (h / g) * d * slots, *v = vr + (h / g) * slots * d, *qh = q + h * d;
            const float *restrict b = bias + (r * hq + h) * slots;
            float *restrict o = out + r * hq * d + h * d;
            /* q . k for each slot, summed over j in order; 8 slots at a time in registers */
            int64_t s = 0;
            for (; s + 32 <= end; s += 32) {          /* four independent sums in flight */
                v8 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
                for (int64_t j = 0; j < d; j++) {
                    const float *kj = kt + j * slots + s;
                    a0 += qh[j] * load8(kj);
                    a1 += qh[j] * load8(kj + 8);
                    a2 += qh[j] * load8(kj + 16);
                    a3 += qh[j] * load8(kj + 24);
                }
                store8(acc + s, a0);
                store8(acc + s + 8, a1);
                store8(acc + s + 16, a2);
                store8(acc + s + 24, a3);
            }
            for (; s + 8 <= end; s += 8) {
                v8 a = {0};
                for (int64_t j = 0; j < d; j++) a += qh[j] * load8(kt + j * slots + s);
                store8(acc + s, a);
            }
            for (; s < end; s++) {
                float a = 0.0f;
                for (int64_t j = 0; j < d; j++) a += qh[j] * kt[j * slots + s];
                acc[s] = a;
            }
            for (int64_t s = 0; s < end; s++) acc[s] = b[s] + scale * acc[s];
            float mx = max_f(acc, end);
            for (int64_t s = 0; s < end; s++) acc[s] = exp_f(acc[s] - mx);
            float inv = 1.0f / sum_f(acc, end);
            for (int64_t t = 0; t < end; t++) acc[t] *= inv;
            /* p . V for each of the head's d entries: the even slots summed in order, the odd ones, then the
             * two added (two independent sums in flight); 8 entries at a time */
            int64_t j = 0;
            for (; j + 8 <= d; j += 8) {
                v8 a0 = {0}, a1 = {0};
                int64_t t = 0;
                for (; t + 2 <= end; t += 2) {
                    a0 += acc[t] * load8(v + t * d + j);
                    a1 += acc[t + 1] * load8(v + (t + 1) * d + j);
                }
                if (t < end) a0 += acc[t] * load8(v + t * d + j);
                store8(o + j, a0 + a1);
            }
            for (; j < d; j++) {
                float a0 = 0.0f, a1 = 0.0f;
                int64_t t = 0;
                for (; t + 2 <= end; t += 2) {
                    a0 += acc[t] * v[t * d + j];
                    a1 += acc[t + 1] * v[(t + 1) * d + j];
                }
                if (t < end) a0 += acc[t] * v[t * d + j];
                o[j] = a0 + a1;
            }
        }
    }
}
