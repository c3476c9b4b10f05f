/*
 * tests/support/fake_backend.c — the deterministic fake backend and fake model (see
 * fake_backend.h).
 *
 * Owns: its slot array ([n_blocks * block_size] records {hash, token, position}), a per-slot
 * stamp used to find two writes to one slot within a batch, and the step log. Hidden states
 * are not stored: each is computed from its slot's hash when asked.
 * Threading: one caller at a time (the scheduler thread).
 */
#include "support/fake_backend.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/counter_hash.h"
#include "common/error.h"
#include "engine/model/model.h"
#include "engine/text/tokenizer.h"

#define H0 0x243F6A8885A308D3ull

typedef struct fake_slot {
    uint64_t h;
    int32_t token;
    int32_t pos; /* -1 = never written */
} fake_slot;

typedef struct fake_backend {
    pgd_backend base;
    pgd_fake_config cfg;
    fake_slot *slots;          /* [n_blocks * block_size] */
    uint64_t *stamp;           /* [n_blocks * block_size] batch number of the last write */
    pgd_model model;           /* config only */
    float row[PGD_FAKE_VOCAB]; /* a sampled row's logits */
    pgd_sampler_scratch *sscratch;
    uint64_t n_batches;
    uint64_t n_copies;
    pgd_fake_batch *log;
    size_t n_log, cap_log;
} fake_backend;

uint64_t pgd_fake_chain(uint64_t prev, int32_t token, uint32_t pos) {
    return pgd_hash64(prev ^ ((uint64_t)(uint32_t)token * 0x9E3779B97F4A7C15ull) ^
                      ((uint64_t)pos << 40) ^ 0xD6E8FEB86659FD93ull);
}

uint64_t pgd_fake_hash(const int32_t *tokens, uint32_t n) {
    uint64_t h = H0;
    for (uint32_t i = 0; i < n; i++) h = pgd_fake_chain(h, tokens[i], i);
    return h;
}

float pgd_fake_hidden(uint64_t h, uint32_t i) {
    uint64_t x =
        pgd_hash64(h ^ ((uint64_t)(i + 1) * 0xC2B2AE3D27D4EB4Full) ^ 0x5851F42D4C957F2Dull);
    return (float)((int32_t)(x >> 40) - (1 << 23)) / (float)(1 << 23); /* 24 bits: exact */
}

int32_t pgd_fake_next(uint64_t h, uint32_t eos_every) {
    if (eos_every && (h >> 33) % eos_every == 0) return PGD_FAKE_EOS;
    return (int32_t)(32 + h % 95);
}

uint32_t pgd_fake_greedy(const int32_t *prompt, uint32_t n_prompt, uint32_t max_tokens,
                         uint32_t eos_every, bool ignore_eos, int32_t *out) {
    uint64_t h = pgd_fake_hash(prompt, n_prompt);
    uint32_t n = 0;
    while (n < max_tokens) {
        int32_t t = pgd_fake_next(h, eos_every);
        out[n] = t;
        h = pgd_fake_chain(h, t, n_prompt + n);
        n++;
        if (t == PGD_FAKE_EOS && !ignore_eos) break;
    }
    return n;
}

static void write_row(uint64_t h, uint32_t eos_every, float *row) {
    for (uint32_t v = 0; v < PGD_FAKE_VOCAB; v++)
        row[v] = (float)((pgd_hash64(h ^ ((uint64_t)(v + 1) << 20)) >> 40) & 0xff) / 128.0f;
    row[pgd_fake_next(h, eos_every)] = 6.0f;
}

double pgd_fake_logprob(const int32_t *tokens, uint32_t n, uint32_t eos_every, int32_t n_top,
                        int32_t *top, int32_t *rank) {
    float row[PGD_FAKE_VOCAB];
    write_row(pgd_fake_hash(tokens, n - 1), eos_every, row);
    double m = row[0], z = 0;
    for (uint32_t v = 1; v < PGD_FAKE_VOCAB; v++)
        if (row[v] > m) m = row[v];
    for (uint32_t v = 0; v < PGD_FAKE_VOCAB; v++) z += exp((double)row[v] - m);
    /* the n_top best ids by selection: higher logit, then lower id */
    bool taken[PGD_FAKE_VOCAB] = {false};
    for (int32_t k = 0; k < n_top; k++) {
        int32_t best = -1;
        for (int32_t v = 0; v < PGD_FAKE_VOCAB; v++)
            if (!taken[v] && (best < 0 || row[v] > row[best])) best = v;
        taken[best] = true;
        top[k] = best;
    }
    *rank = 1;
    for (uint32_t v = 0; v < PGD_FAKE_VOCAB; v++) *rank += row[v] > row[tokens[n - 1]];
    return (double)row[tokens[n - 1]] - m - log(z);
}

static int bad(const char *what, uint32_t a, uint32_t b) {
    return pgd_error_set(PGD_EINVAL, "fake backend: %s (%u, %u)", what, a, b);
}

/* Re-hash the whole context of sequence s up to position `last` from the stored tokens. */
static int verify_context(const fake_backend *fb, const int32_t *table, uint32_t last) {
    uint32_t bs = fb->cfg.block_size;
    uint64_t h = H0;
    for (uint32_t p = 0; p <= last; p++) {
        const fake_slot *sl = &fb->slots[(uint64_t)table[p / bs] * bs + p % bs];
        if (sl->pos != (int32_t)p) return bad("context slot holds another position", p, sl->pos);
        h = pgd_fake_chain(h, sl->token, p);
        if (h != sl->h) return bad("context hash mismatch at position", p, last);
    }
    return 0;
}

static int fake_forward(pgd_backend *b, const pgd_batch *batch, float *logits,
                        pgd_sample_result *sampled) {
    fake_backend *fb = (fake_backend *)b;
    uint32_t bs = fb->cfg.block_size, nb = fb->cfg.n_blocks;
    if (batch->n_tokens == 0 || batch->n_tokens > fb->cfg.max_tokens)
        return bad("batch size", batch->n_tokens, fb->cfg.max_tokens);
    if (batch->q_start[0] != 0 || batch->q_start[batch->n_seqs] != batch->n_tokens)
        return bad("q_start does not cover the batch", batch->q_start[batch->n_seqs],
                   batch->n_tokens);
    uint64_t stamp = ++fb->n_batches;
    if (fb->cfg.fail_at == stamp || (fb->cfg.lost && fb->cfg.fail_at && stamp > fb->cfg.fail_at))
        return fb->cfg.lost ? pgd_error_set(PGD_EDEVLOST, "fake backend: the device is lost")
                            : pgd_error_set(PGD_EIO, "fake backend: forward %llu fails",
                                            (unsigned long long)stamp);
    /* which row of the batch each logits row is; -1 when none */
    for (uint32_t s = 0; s < batch->n_seqs; s++) {
        uint32_t q0 = batch->q_start[s], q1 = batch->q_start[s + 1];
        if (q1 <= q0) return bad("empty sequence in batch", s, q0);
        uint32_t kv = batch->kv_len[s], n = q1 - q0;
        if (kv < n) return bad("kv_len shorter than the query", kv, n);
        const int32_t *table = batch->block_tables + (uint64_t)s * batch->bt_stride;
        for (uint32_t t = q0; t < q1; t++) {
            uint32_t pos = kv - n + (t - q0);
            if ((uint32_t)batch->positions[t] != pos)
                return bad("position not consecutive", batch->positions[t], pos);
            int32_t blk = table[pos / bs];
            if (blk <= 0 || (uint32_t)blk >= nb) return bad("bad block id", (uint32_t)blk, pos);
            int64_t slot = (int64_t)blk * bs + pos % bs;
            if (batch->slots[t] != slot) return bad("slot does not match the block table", t, pos);
            if (fb->stamp[slot] == stamp)
                return bad("two tokens of one batch write a slot", t, pos);
            fb->stamp[slot] = stamp;
            uint64_t prev = H0;
            if (pos > 0) {
                const fake_slot *ps =
                    &fb->slots[(uint64_t)table[(pos - 1) / bs] * bs + (pos - 1) % bs];
                if (ps->pos != (int32_t)pos - 1)
                    return bad("previous position's slot is stale", pos - 1, ps->pos);
                prev = ps->h;
            }
            fake_slot *sl = &fb->slots[slot];
            sl->h = pgd_fake_chain(prev, batch->tokens[t], pos);
            sl->token = batch->tokens[t];
            sl->pos = (int32_t)pos;
        }
    }
    /* rows: the full-logit ones, then the sampled ones (into a scratch row) */
    for (uint32_t r = 0; r < batch->n_logits + batch->n_samples; r++) {
        bool full = r < batch->n_logits;
        uint32_t t = full ? batch->logit_rows[r] : batch->samples[r - batch->n_logits].token;
        if (t >= batch->n_tokens) return bad("logit row out of range", t, batch->n_tokens);
        uint32_t s = 0;
        while (batch->q_start[s + 1] <= t) s++;
        const fake_slot *sl = &fb->slots[batch->slots[t]];
        if (fb->cfg.verify) {
            int rc = verify_context(fb, batch->block_tables + (uint64_t)s * batch->bt_stride,
                                    (uint32_t)batch->positions[t]);
            if (rc) return rc;
        }
        if (full) {
            write_row(sl->h, fb->cfg.eos_every, logits + (uint64_t)r * PGD_FAKE_VOCAB);
            continue;
        }
        const pgd_sample_row *sr = &batch->samples[r - batch->n_logits];
        write_row(sl->h, fb->cfg.eos_every, fb->row);
        int rc = pgd_sample_logits(fb->row, PGD_FAKE_VOCAB, &sr->spec, sr->draw, fb->sscratch,
                                   &sampled[r - batch->n_logits]);
        if (rc) return rc;
    }
    /* hidden rows: each one's state from its position's context hash */
    if (batch->n_hidden > fb->base.caps.max_hidden_rows)
        return bad("too many hidden rows", batch->n_hidden, fb->base.caps.max_hidden_rows);
    if (batch->n_hidden && (!batch->hidden_rows || !batch->hidden))
        return bad("hidden rows without their arrays", batch->n_hidden, 0);
    for (uint32_t r = 0; r < batch->n_hidden; r++) {
        uint32_t t = batch->hidden_rows[r];
        if (t >= batch->n_tokens) return bad("hidden row out of range", t, batch->n_tokens);
        if (fb->cfg.verify) {
            uint32_t s = 0;
            while (batch->q_start[s + 1] <= t) s++;
            int rc = verify_context(fb, batch->block_tables + (uint64_t)s * batch->bt_stride,
                                    (uint32_t)batch->positions[t]);
            if (rc) return rc;
        }
        uint64_t h = fb->slots[batch->slots[t]].h;
        for (uint32_t i = 0; i < PGD_FAKE_EMBD; i++)
            batch->hidden[(uint64_t)r * PGD_FAKE_EMBD + i] = pgd_fake_hidden(h, i);
    }
    if (fb->cfg.record) {
        if (fb->n_log == fb->cap_log) {
            size_t cap = fb->cap_log ? fb->cap_log * 2 : 256;
            pgd_fake_batch *p = realloc(fb->log, cap * sizeof *p);
            if (!p) return PGD_ENOMEM;
            fb->log = p;
            fb->cap_log = cap;
        }
        fb->log[fb->n_log++] = (pgd_fake_batch){
            batch->n_tokens, batch->n_seqs, batch->n_logits + batch->n_samples, batch->n_hidden};
    }
    if (fb->cfg.delay_us) {
        struct timespec ts = {fb->cfg.delay_us / 1000000,
                              (long)(fb->cfg.delay_us % 1000000) * 1000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

static int fake_copy_blocks(pgd_backend *b, const int32_t *src, const int32_t *dst, uint32_t n) {
    fake_backend *fb = (fake_backend *)b;
    uint32_t bs = fb->cfg.block_size;
    for (uint32_t i = 0; i < n; i++) {
        if (src[i] <= 0 || dst[i] <= 0 || (uint32_t)src[i] >= fb->cfg.n_blocks ||
            (uint32_t)dst[i] >= fb->cfg.n_blocks || src[i] == dst[i])
            return bad("bad copy", (uint32_t)src[i], (uint32_t)dst[i]);
        memcpy(&fb->slots[(uint64_t)dst[i] * bs], &fb->slots[(uint64_t)src[i] * bs],
               bs * sizeof(fake_slot));
        fb->n_copies++;
    }
    return 0;
}

static void fake_destroy(pgd_backend *b) {
    fake_backend *fb = (fake_backend *)b;
    pgd_sampler_scratch_destroy(fb->sscratch);
    free(fb->slots);
    free(fb->stamp);
    free(fb->log);
    free(fb);
}

static const pgd_backend_ops k_fake_ops = {
    .forward = fake_forward, .copy_blocks = fake_copy_blocks, .destroy = fake_destroy};

const pgd_fake_batch *pgd_fake_log(const pgd_backend *b, size_t *n) {
    const fake_backend *fb = (const fake_backend *)b;
    *n = fb->n_log;
    return fb->log;
}

void pgd_fake_log_clear(pgd_backend *b) {
    ((fake_backend *)b)->n_log = 0;
}

uint64_t pgd_fake_n_copies(const pgd_backend *b) {
    return ((const fake_backend *)b)->n_copies;
}

uint64_t pgd_fake_n_forwards(const pgd_backend *b) {
    return ((const fake_backend *)b)->n_batches;
}

static int make_tokenizer(pgd_tokenizer **out) {
    static char names[256][8];
    const char *tokens[PGD_FAKE_VOCAB];
    int32_t types[PGD_FAKE_VOCAB];
    for (int i = 0; i < 256; i++) {
        snprintf(names[i], sizeof names[i], "<0x%02X>", i);
        tokens[i] = names[i];
        types[i] = PGD_TOKEN_BYTE;
    }
    tokens[PGD_FAKE_EOS] = "</s>";
    types[PGD_FAKE_EOS] = PGD_TOKEN_CONTROL;
    pgd_tokenizer_desc d;
    pgd_tokenizer_desc_init(&d);
    d.model = "llama";
    d.n_vocab = PGD_FAKE_VOCAB;
    d.tokens = tokens;
    d.types = types;
    d.eos = PGD_FAKE_EOS;
    d.add_bos = 0;
    d.add_space_prefix = 0;
    return pgd_tokenizer_create(&d, out);
}

int pgd_fake_create(const pgd_fake_config *c, pgd_model_info **info, pgd_runner **runner) {
    *info = NULL;
    *runner = NULL;
    pgd_fake_config cfg = *c;
    if (!cfg.block_size) cfg.block_size = 16;
    if (!cfg.max_tokens) cfg.max_tokens = 512;
    if (!cfg.n_ctx) cfg.n_ctx = 8192;
    if (cfg.n_blocks < 2) return pgd_error_set(PGD_EINVAL, "fake backend: need >= 2 blocks");
    fake_backend *fb = calloc(1, sizeof *fb);
    pgd_tokenizer *tok = NULL;
    uint64_t n_slots = (uint64_t)cfg.n_blocks * cfg.block_size;
    if (fb) {
        fb->slots = malloc(n_slots * sizeof *fb->slots);
        fb->stamp = calloc(n_slots, sizeof *fb->stamp);
    }
    int rc = PGD_ENOMEM;
    if (!fb || !fb->slots || !fb->stamp ||
        (rc = pgd_sampler_scratch_create(PGD_FAKE_VOCAB, &fb->sscratch)) ||
        (rc = make_tokenizer(&tok))) {
        if (fb) fake_destroy(&fb->base);
        return rc;
    }
    for (uint64_t i = 0; i < n_slots; i++) fb->slots[i] = (fake_slot){0, -1, -1};
    pgd_model_config *mc = &fb->model.cfg;
    mc->arch = PGD_ARCH_LLAMA;
    snprintf(mc->arch_name, sizeof mc->arch_name, "fake");
    mc->n_vocab = PGD_FAKE_VOCAB;
    mc->n_ctx_train = cfg.n_ctx;
    mc->n_layer = 1;
    mc->n_embd = PGD_FAKE_EMBD;
    fb->cfg = cfg;
    fb->base.ops = &k_fake_ops;
    fb->base.model = &fb->model;
    fb->base.caps = (pgd_backend_caps){.kind = PGD_DEVICE_CPU,
                                       .name = "fake",
                                       .n_blocks = cfg.n_blocks,
                                       .block_size = cfg.block_size,
                                       .max_tokens = cfg.max_tokens,
                                       .max_seqs = 64,
                                       .max_logit_rows = cfg.max_tokens,
                                       .max_context = (uint32_t)n_slots,
                                       .kv_dtype = PGD_KV_F32,
                                       .kv_bytes = n_slots * sizeof(fake_slot),
                                       .max_hidden_rows = cfg.no_hidden ? 0 : cfg.max_tokens};
    if ((rc = pgd_model_info_wrap(mc, tok, NULL, 0, info))) {
        fake_destroy(&fb->base);
        return rc;
    }
    if ((rc = pgd_runner_wrap(*info, &fb->base, runner))) {
        pgd_model_info_close(*info);
        *info = NULL;
    }
    return rc;
}
