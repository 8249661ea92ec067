// The attention problems the kernel suites build (cpu/attention.h, engine-internal): n_q
// queries at the end of a cache of n_kv keys.
#pragma once

#include "cpu/attention.h"

#include <cstdint>

namespace longscope::test {

// Query i at position n_kv - n_q + i over rows of float keys and values (set k_type / v_type
// for encoded rows), default scale, no soft-cap, no window, keys already rotated, no output.
inline AttentionProblem last_queries_problem(int n_head, int n_head_kv, int head_dim, const float *q, int64_t n_q,
                                             const void *k, const void *v, int64_t n_kv)
{
    AttentionProblem p;
    p.n_head = n_head;
    p.n_head_kv = n_head_kv;
    p.head_dim = head_dim;
    p.q = q;
    p.n_q = n_q;
    p.q_pos0 = n_kv - n_q;
    p.k = k;
    p.v = v;
    p.n_kv = n_kv;
    return p;
}

} // namespace longscope::test
