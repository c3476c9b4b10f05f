/*
 * tests/support/json_walk.c — random walks through what a JSON schema allows (json_walk.h).
 */
#include "support/json_walk.h"

#include <stdbool.h>

#include "engine/sampling/json_fsm.h"

static uint64_t next(uint64_t *r) {
    *r ^= *r << 13, *r ^= *r >> 7, *r ^= *r << 17;
    return *r;
}

static bool closing(uint8_t b) {
    return b == '"' || b == '}' || b == ']';
}

long pgd_test_json_walk(const pgd_json_schema *s, uint64_t *rng, char *out, size_t cap) {
    pgd_json_fsm f;
    pgd_json_fsm_init(&f, s);
    size_t n = 0;
    while (n + 1 < cap) {
        if (pgd_json_fsm_done(&f) && (next(rng) % 4 == 0 || n > cap / 2)) break;
        uint8_t ok[256];
        int k = 0, n_close = 0;
        for (int c = 1; c < 256; c++) {
            uint8_t b = (uint8_t)c;
            if (!pgd_json_fsm_try(&f, &b, 1)) continue;
            ok[k++] = b;
            n_close += closing(b);
        }
        if (!k) break;
        uint8_t b = ok[next(rng) % (uint64_t)k];
        if (n_close && next(rng) % 1000 < 300 + 600 * n / cap) {
            int j = (int)(next(rng) % (uint64_t)n_close);
            for (int i = 0; i < k; i++)
                if (closing(ok[i]) && j-- == 0) b = ok[i];
        } else if (next(rng) % 3 == 0) { /* structure, digits and words: shorter strings */
            static const char pref[] = "{}[],:\"0123456789-.eE+truefalsn ";
            uint8_t p = (uint8_t)pref[next(rng) % (sizeof pref - 1)];
            if (pgd_json_fsm_try(&f, &p, 1)) b = p;
        }
        if (!pgd_json_fsm_feed(&f, &b, 1)) return -1; /* taken when tried: cannot be */
        out[n++] = (char)b;
    }
    out[n] = 0;
    if (pgd_json_fsm_done(&f)) return (long)n;
    return n + 1 < cap ? -1 : -2;
}
