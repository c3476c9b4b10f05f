/*
 * engine/sampling/json_schema.c — the static free-object schema and the schemas' references
 * (json_schema.h).
 */
#include "engine/sampling/json_schema.h"

#include <stdlib.h>

const pgd_jlit pgd_json_schema_words[PGD_JLIT_WORDS] = {
    {"false", 5, 0},
    {"null", 4, 0},
    {"true", 4, 0},
};

void pgd_json_schema_base_nodes(pgd_jnode out[2]) {
    for (int i = 0; i < 2; i++) {
        out[i] = (pgd_jnode){.max_len = PGD_JSON_NO_MAX,
                             .items = PGD_JNODE_ANY,
                             .max_items = PGD_JSON_NO_MAX,
                             .extra = PGD_JNODE_ANY,
                             .need = i == PGD_JNODE_ANY ? 0 : 1,
                             .need_obj = 1,
                             .need_arr = 1};
        for (int c = 0; c < PGD_JC_COUNT; c++) out[i].cls[c] = PGD_JNODE_NONE;
    }
    for (int c = 0; c < PGD_JC_COUNT; c++) out[PGD_JNODE_ANY].cls[c] = PGD_JNODE_ANY;
    out[PGD_JNODE_OBJ].cls[PGD_JC_OBJECT] = PGD_JNODE_OBJ;
}

#define NONE PGD_JNODE_NONE
#define BASE                                                                                       \
    .max_len = PGD_JSON_NO_MAX, .items = PGD_JNODE_ANY, .max_items = PGD_JSON_NO_MAX,              \
    .extra = PGD_JNODE_ANY, .need_obj = 1, .need_arr = 1
static const pgd_jnode k_object_nodes[2] = {
    {.cls = {0, 0, 0, 0, 0, 0, 0}, BASE, .need = 0},
    {.cls = {1, NONE, NONE, NONE, NONE, NONE, NONE}, BASE, .need = 1},
};
#undef BASE
#undef NONE

static pgd_json_schema k_object = {
    .nodes = k_object_nodes,
    .lits = pgd_json_schema_words,
    .n_nodes = 2,
    .n_lits = PGD_JLIT_WORDS,
    .root = PGD_JNODE_OBJ,
    .refs = -1,
};

const pgd_json_schema *pgd_json_schema_object(void) {
    return &k_object;
}

const pgd_json_schema *pgd_json_schema_ref(const pgd_json_schema *s) {
    pgd_json_schema *m = (pgd_json_schema *)s;
    if (m && atomic_load(&m->refs) >= 0) atomic_fetch_add(&m->refs, 1);
    return s;
}

void pgd_json_schema_unref(const pgd_json_schema *s) {
    pgd_json_schema *m = (pgd_json_schema *)s;
    if (!m || atomic_load(&m->refs) < 0) return;
    if (atomic_fetch_sub(&m->refs, 1) != 1) return;
    free(m->mem);
    free(m);
}
