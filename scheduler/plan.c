/*
 * scheduler/plan.c — a step's plan, allocated as it is built (see plan.h).
 *
 * Items live in parallel arrays in the order they were added; a dropped item leaves a hole
 * (dropped = true) that pgd_plan_finish squeezes out. Invariants: n_live counts the items not
 * dropped and n_tokens their tokens; each live item's table covers [0, start + n).
 */
#include "scheduler/plan.h"

#include <stdlib.h>
#include <string.h>

#include "common/error.h"

struct pgd_plan {
    uint32_t max_tokens;
    /* items [cap] */
    pgd_step_item *items;
    pgd_block_table **bts;
    pgd_block_copy *cows;
    void **owners;
    bool *dropped;
    uint32_t n, cap, n_live, n_tokens;
    /* the finished view */
    int64_t *slots;      /* [max_tokens] */
    int32_t *tables;     /* [n_live][stride] */
    uint64_t tables_cap; /* entries */
    int32_t *copy_src;   /* [cap] */
    int32_t *copy_dst;   /* [cap] */
    pgd_step_plan view;
};

int pgd_plan_create(uint32_t max_tokens, pgd_plan **out) {
    *out = NULL;
    pgd_plan *p = calloc(1, sizeof *p);
    if (!p) return PGD_ENOMEM;
    p->max_tokens = max_tokens;
    p->slots = malloc((max_tokens ? max_tokens : 1) * sizeof *p->slots);
    if (!p->slots) {
        free(p);
        return PGD_ENOMEM;
    }
    *out = p;
    return 0;
}

void pgd_plan_destroy(pgd_plan *p) {
    if (!p) return;
    free(p->items);
    free(p->bts);
    free(p->cows);
    free(p->owners);
    free(p->dropped);
    free(p->slots);
    free(p->tables);
    free(p->copy_src);
    free(p->copy_dst);
    free(p);
}

void pgd_plan_reset(pgd_plan *p) {
    p->n = p->n_live = p->n_tokens = 0;
}

/* Room for one more item. 0 or PGD_ENOMEM (nothing changed). */
static int grow_items(pgd_plan *p) {
    if (p->n < p->cap) return 0;
    uint32_t cap = p->cap ? p->cap * 2 : 64;
#define GROW(field)                                                                                \
    do {                                                                                           \
        void *q = realloc(p->field, cap * sizeof *p->field);                                       \
        if (!q) return PGD_ENOMEM;                                                                 \
        p->field = q;                                                                              \
    } while (0)
    GROW(items);
    GROW(bts);
    GROW(cows);
    GROW(owners);
    GROW(dropped);
    GROW(copy_src);
    GROW(copy_dst);
#undef GROW
    p->cap = cap;
    return 0;
}

int pgd_plan_add(pgd_plan *p, pgd_seq *seq, pgd_block_table *bt, uint32_t start, uint32_t n,
                 bool all_logits, void *owner, uint32_t *index) {
    PGD_ASSERT(n > 0 && start + n <= seq->tokens.n && p->n_tokens + n <= p->max_tokens);
    PGD_ASSERT(bt->n_tokens == start || bt->n_tokens == start + n);
    int rc = grow_items(p);
    if (rc) return rc;
    pgd_block_copy cow = {0, 0};
    if (bt->n_tokens == start && (rc = pgd_block_table_grow(bt, n, &cow))) return rc;
    uint32_t k = p->n++;
    p->items[k] =
        (pgd_step_item){.seq = seq, .start = start, .n_tokens = n, .all_logits = all_logits};
    p->bts[k] = bt;
    p->cows[k] = cow;
    p->owners[k] = owner;
    p->dropped[k] = false;
    p->n_live++;
    p->n_tokens += n;
    *index = k;
    return 0;
}

void pgd_plan_set_pool(pgd_plan *p, uint32_t index, pgd_pooling pool) {
    PGD_ASSERT(index < p->n && !p->dropped[index]);
    p->items[index].pool = pool;
}

void pgd_plan_drop(pgd_plan *p, uint32_t index) {
    PGD_ASSERT(index < p->n && !p->dropped[index]);
    p->dropped[index] = true;
    p->n_live--;
    p->n_tokens -= p->items[index].n_tokens;
}

uint32_t pgd_plan_n_items(const pgd_plan *p) {
    return p->n_live;
}

uint32_t pgd_plan_n_tokens(const pgd_plan *p) {
    return p->n_tokens;
}

int pgd_plan_finish(pgd_plan *p, pgd_step_plan **out) {
    /* squeeze out the dropped items, keeping the order */
    uint32_t m = 0;
    for (uint32_t k = 0; k < p->n; k++) {
        if (p->dropped[k]) continue;
        p->items[m] = p->items[k];
        p->bts[m] = p->bts[k];
        p->cows[m] = p->cows[k];
        p->owners[m] = p->owners[k];
        p->dropped[m] = false;
        m++;
    }
    p->n = m;
    PGD_ASSERT(m == p->n_live);
    uint32_t stride = 1;
    for (uint32_t k = 0; k < m; k++)
        if (p->bts[k]->n_blocks > stride) stride = p->bts[k]->n_blocks;
    uint64_t need = (uint64_t)m * stride;
    if (need > p->tables_cap) {
        uint64_t cap = p->tables_cap ? p->tables_cap : 1024;
        while (cap < need) cap *= 2;
        int32_t *t = realloc(p->tables, cap * sizeof *t);
        if (!t) return pgd_error_set(PGD_ENOMEM, "out of memory for the block tables");
        p->tables = t;
        p->tables_cap = cap;
    }
    uint32_t t = 0, n_copies = 0;
    for (uint32_t k = 0; k < m; k++) {
        const pgd_step_item *it = &p->items[k];
        const pgd_block_table *bt = p->bts[k];
        int rc = pgd_block_table_slots(bt, it->start, it->n_tokens, p->slots + t);
        PGD_ASSERT(rc == 0); /* the table covers the item: pgd_plan_add grew it */
        t += it->n_tokens;
        memcpy(p->tables + (uint64_t)k * stride, bt->blocks, bt->n_blocks * sizeof(int32_t));
        if (p->cows[k].src) {
            p->copy_src[n_copies] = p->cows[k].src;
            p->copy_dst[n_copies++] = p->cows[k].dst;
        }
    }
    p->view = (pgd_step_plan){.items = p->items,
                              .n_items = m,
                              .n_tokens = t,
                              .slots = p->slots,
                              .block_tables = p->tables,
                              .bt_stride = stride,
                              .copy_src = p->copy_src,
                              .copy_dst = p->copy_dst,
                              .n_copies = n_copies};
    *out = &p->view;
    return 0;
}

void *pgd_plan_owner(const pgd_plan *p, uint32_t k) {
    PGD_ASSERT(k < p->n);
    return p->owners[k];
}

const pgd_step_item *pgd_plan_item(const pgd_plan *p, uint32_t k) {
    PGD_ASSERT(k < p->n);
    return &p->items[k];
}

int pgd_plan_commit(pgd_plan *p) {
    for (uint32_t k = 0; k < p->n; k++) {
        if (p->dropped[k]) continue;
        const pgd_step_item *it = &p->items[k];
        int rc =
            pgd_block_table_cache_blocks(p->bts[k], it->seq->tokens.ids, it->start + it->n_tokens);
        if (rc) return rc;
    }
    return 0;
}
