// The online softmax of a stream of score tiles, row by row, in registers: what sits between the
// two GEMMs of a FlashAttention-style kernel (softmax(Q K^T) V over key tiles that arrive one
// after another).
//
//     blasdx::online_softmax<QK::accumulator> softmax(log2f(e) / sqrtf(d));  // running maxima and sums
//     for each key tile:
//         auto scores = ...;                           // S = Q K^T of the tile (QK's accumulator)
//         softmax.mask(scores, keep);                  // optional: -inf where !keep(row, col)
//         const bool shrink = softmax.update(scores);  // scores -> P (unnormalised), in place
//         if (shrink) softmax.rescale(out);            // O's rows follow the running maxima
//         out += P V;                                  // PV's accumulator (the same rows)
//     softmax.finish(out);                             // O / the row sums (times a scale of V: finish(out, s))
//
// Per row slot r of the calling thread (blasdx::rows): the running maximum m[r] of the scores
// seen so far and the running sum l[r] of exp(score - m[r]) over them (this thread's elements
// only, combined across the quad once in finish). Scores are scaled by `scale_log2` (log2(e) /
// sqrt(d) for attention) and exponentiated with exp2f: P = 2^(s * scale_log2 - m * scale_log2).
//
// Lazy rescaling: the maximum moves only where a row's tile maximum exceeds it by more than
// GROWTH_LOG2 (8: P stays below 2^8, which f16 / bf16 P and the f32 sums carry), decided for all
// rows of a warp at once (one vote), so most tiles after the first few leave O alone and update()
// says so. The first tile must hold at least one unmasked key per row (its maxima start from
// -infinity): a causal tile of queries starting at key tile 0 does. The result is the same
// softmax whichever maximum each row uses (the maximum cancels in P / l).
//
// Two accumulators of GEMMs with the same m, the same threads and plans whose tiles span N have
// the same row slots (accumulator_rows.cuh), so the values found on the scores (QK) apply to O
// (PV). Every thread of the GEMMs' warps calls update / finish together (they shuffle and vote).
#pragma once

#include "accumulator_rows.cuh"
#include "types.cuh"

namespace blasdx {

template <class Acc> class online_softmax;

template <class Cfg>
class online_softmax<accumulator<Cfg>> {
  public:
    using rows_type = accumulator_rows<Cfg>;
    // Row slots per thread.
    static constexpr int count = rows_type::count;
    // How far (log2 units) a row's maximum may grow before it moves.
    static constexpr float GROWTH_LOG2 = 8.0f;

    __device__ __forceinline__ explicit online_softmax(float scale_log2) : scale_log2_(scale_log2) {
#pragma unroll
        for (int r = 0; r < count; ++r) max_[r] = minus_infinity(), sum_[r] = 0.0f;
    }

    // scores = -infinity where !keep(row, col) (row, col: of the tile of C), e.g. keys past the end
    // of the sequence, or after the query (causal).
    template <class C, class Keep> __device__ __forceinline__ static void mask(accumulator<C>& scores, Keep keep) {
        auto s = rows(scores);
        s.transform([&](int r, int col, float x) { return keep(s.row(r), col) ? x : minus_infinity(); });
    }

    // scores -> P = exp2(scores * scale_log2 - m * scale_log2) in place (unnormalised), the
    // maxima and sums carried on; returns whether O's rows must shrink (rescale(out)).
    template <class C> __device__ __forceinline__ bool update(accumulator<C>& scores) {
        static_assert(accumulator_rows<C>::count == count, "the scores have this softmax's row slots");
        auto s = rows(scores);
        float tile_max[count], shift[count], tile_sum[count];
        s.max(tile_max);
        bool grows = false;  // the first tile has a key for every row: it grows them all from -inf
#pragma unroll
        for (int r = 0; r < count; ++r) grows |= (tile_max[r] - max_[r]) * scale_log2_ > GROWTH_LOG2;
        grows = __any_sync(0xffffffffu, grows);
#pragma unroll
        for (int r = 0; r < count; ++r) {
            const float new_max = grows ? fmaxf(max_[r], tile_max[r]) : max_[r];
            rescale_[r] = exp2f((max_[r] - new_max) * scale_log2_);
            max_[r] = new_max;
            shift[r] = new_max * scale_log2_;
        }
        s.transform([&](int r, int, float x) { return exp2f(x * scale_log2_ - shift[r]); });
        s.thread_reduce(tile_sum, 0.0f, [](float a, float b) { return a + b; });  // this thread's part
#pragma unroll
        for (int r = 0; r < count; ++r) sum_[r] = sum_[r] * rescale_[r] + tile_sum[r];
        return grows;
    }

    // O's rows times the factor of the last update (where it moved the maxima).
    template <class C> __device__ __forceinline__ void rescale(accumulator<C>& out) const {
        static_assert(accumulator_rows<C>::count == count, "O has this softmax's row slots");
        rows(out).transform([&](int r, int, float x) { return x * rescale_[r]; });
    }

    // O * numerator / the row sums (whole rows: the quad's partial sums combined): the softmax of all
    // tiles, times V (numerator: a scale of V folded in, e.g. the per-tensor scale of fp8 V).
    template <class C> __device__ __forceinline__ void finish(accumulator<C>& out, float numerator = 1.0f) {
        static_assert(accumulator_rows<C>::count == count, "O has this softmax's row slots");
        auto o = rows(out);
        o.all_reduce(sum_, [](float a, float b) { return a + b; });
#pragma unroll
        for (int r = 0; r < count; ++r) sum_[r] = numerator / sum_[r];
        o.transform([&](int r, int, float x) { return x * sum_[r]; });
    }

  private:
    __device__ __forceinline__ static float minus_infinity() { return __int_as_float(0xff800000); }

    float max_[count], sum_[count], rescale_[count];
    float scale_log2_;
};

}  // namespace blasdx
