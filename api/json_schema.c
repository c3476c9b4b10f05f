/*
 * api/json_schema.c — JSON Schema -> constrained-output tables (json_schema.h).
 *
 * One pass over the schema builds a node per subschema (memoised by the subschema's address,
 * so a $ref met twice, or a recursive one, is one node), each object's properties and keys as
 * contiguous ranges reserved before its children are compiled, and every literal's text in one
 * arena; then a fixpoint finds the nodes some finite value satisfies, and the tables are packed
 * into one block.
 */
#include "api/json_schema.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sampling/json_fsm.h"
#include "common/error.h"

#define MAX_DEPTH    64 /* subschemas nested in the schema's text */
#define MAX_REF_HOPS 32 /* $ref to $ref to ... */
#define MAX_PATH     512
#define MAX_TEXT     (1u << 20) /* bytes of literal text (keys, enum values) */

typedef struct lit {
    size_t off; /* into text */
    uint32_t len, tag;
} lit;

typedef struct builder {
    const json_t *root;
    pgd_jnode *nodes;
    bool *ready;  /* [node] its classes are known (anyOf may merge it) */
    bool *done;   /* [node] compiled whole (a union of objects may merge its keys) */
    char **paths; /* [node] where it is, for messages */
    size_t n_nodes, cap_nodes;
    pgd_jprop *props;
    size_t n_props, cap_props;
    lit *lits;
    size_t n_lits, cap_lits;
    char *text;
    size_t n_text, cap_text;
    const json_t **memo_key; /* [n_memo] subschema -> node */
    uint16_t *memo_node;
    size_t n_memo, cap_memo;
    char *msg;
    size_t msg_cap;
} builder;

static int fail(builder *b, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(builder *b, const char *path, const char *fmt, ...) {
    char what[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(b->msg, b->msg_cap, "%s (at %s)", what, *path ? path : "the schema's root");
    return PGD_EINVAL;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap * 2 : 16;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return PGD_ENOMEM;
    *p = q;
    *cap = c;
    return 0;
}

/* ---- tables ---------------------------------------------------------------------------------- */

static int new_node(builder *b, const char *path, uint16_t *out) {
    if (b->n_nodes >= PGD_API_SCHEMA_MAX_NODES)
        return fail(b, path, "the schema has more than %d subschemas", PGD_API_SCHEMA_MAX_NODES);
    if (b->n_nodes == b->cap_nodes) {
        size_t c = b->cap_nodes ? b->cap_nodes * 2 : 16;
        pgd_jnode *nodes = realloc(b->nodes, c * sizeof *nodes);
        if (nodes) b->nodes = nodes;
        bool *ready = realloc(b->ready, c * sizeof *ready);
        if (ready) b->ready = ready;
        bool *done = realloc(b->done, c * sizeof *done);
        if (done) b->done = done;
        char **paths = realloc(b->paths, c * sizeof *paths);
        if (paths) b->paths = paths;
        if (!nodes || !ready || !done || !paths) return PGD_ENOMEM;
        b->cap_nodes = c;
    }
    if (!(b->paths[b->n_nodes] = strdup(path))) return PGD_ENOMEM;
    pgd_jnode base[2];
    pgd_json_schema_base_nodes(base);
    b->nodes[b->n_nodes] = base[PGD_JNODE_OBJ];
    b->nodes[b->n_nodes].cls[PGD_JC_OBJECT] = PGD_JNODE_NONE;
    b->ready[b->n_nodes] = b->done[b->n_nodes] = false;
    *out = (uint16_t)b->n_nodes++;
    return 0;
}

static int memo_put(builder *b, const json_t *s, uint16_t node) {
    size_t cap = b->cap_memo;
    if (grow((void **)&b->memo_key, &cap, b->n_memo + 1, sizeof *b->memo_key) ||
        grow((void **)&b->memo_node, &b->cap_memo, b->n_memo + 1, sizeof *b->memo_node))
        return PGD_ENOMEM;
    b->memo_key[b->n_memo] = s;
    b->memo_node[b->n_memo++] = node;
    return 0;
}

static bool memo_get(const builder *b, const json_t *s, uint16_t *node) {
    for (size_t i = 0; i < b->n_memo; i++)
        if (b->memo_key[i] == s) {
            *node = b->memo_node[i];
            return true;
        }
    return false;
}

/* Appends a literal: its text p[n]. */
static int add_lit(builder *b, const char *path, const char *p, size_t n, uint32_t tag) {
    if (b->n_text + n > MAX_TEXT)
        return fail(b, path, "the schema's keys and enum values exceed %u bytes", MAX_TEXT);
    if (grow((void **)&b->text, &b->cap_text, b->n_text + n + 1, 1) ||
        grow((void **)&b->lits, &b->cap_lits, b->n_lits + 1, sizeof *b->lits))
        return PGD_ENOMEM;
    memcpy(b->text + b->n_text, p, n);
    b->lits[b->n_lits++] = (lit){b->n_text, (uint32_t)n, tag};
    b->n_text += n;
    return 0;
}

/* Literal (a JSON value's compact text) of v. */
static int add_value_lit(builder *b, const char *path, const json_t *v, uint32_t tag) {
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!s) return PGD_ENOMEM;
    int rc = add_lit(b, path, s, strlen(s), tag);
    free(s);
    return rc;
}

static const char *g_text; /* the arena while sorting (qsort has no context argument) */

static int lit_cmp(const void *x, const void *y) {
    const lit *a = x, *c = y;
    size_t n = a->len < c->len ? a->len : c->len;
    int r = memcmp(g_text + a->off, g_text + c->off, n);
    if (r) return r;
    return (a->len > c->len) - (a->len < c->len);
}

static int lit_tag_cmp(const void *x, const void *y) {
    int r = lit_cmp(x, y);
    if (r) return r;
    const lit *a = x, *c = y;
    return (a->tag > c->tag) - (a->tag < c->tag);
}

/* Sorts literals [from, n_lits) bytewise (equal texts by tag) and, with `dedupe`, drops
 * repeated texts. */
static void sort_lits(builder *b, size_t from, bool dedupe) {
    g_text = b->text;
    qsort(b->lits + from, b->n_lits - from, sizeof *b->lits, lit_tag_cmp);
    if (!dedupe) return;
    size_t w = from;
    for (size_t i = from; i < b->n_lits; i++)
        if (w == from || lit_cmp(&b->lits[w - 1], &b->lits[i])) b->lits[w++] = b->lits[i];
    b->n_lits = w;
}

/* Appends a copy of literal i with another tag (the arena may move meanwhile). */
static int copy_lit(builder *b, const char *path, size_t i, uint32_t tag) {
    size_t n = b->lits[i].len;
    char *t = malloc(n ? n : 1);
    if (!t) return PGD_ENOMEM;
    memcpy(t, b->text + b->lits[i].off, n);
    int rc = add_lit(b, path, t, n, tag);
    free(t);
    return rc;
}

/* ---- keywords ----------------------------------------------------------------------------------
 */

/* Keywords that constrain values in ways this does not follow. */
static const char *const k_refused[] = {
    "not",
    "if",
    "then",
    "else",
    "multipleOf",
    "pattern",
    "patternProperties",
    "propertyNames",
    "minProperties",
    "maxProperties",
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
    "contains",
    "minContains",
    "maxContains",
    "unevaluatedItems",
    "unevaluatedProperties",
    "$dynamicRef",
    "$recursiveRef",
};

/* Keywords this follows (besides $ref, anyOf, oneOf, allOf). */
static const char *const k_followed[] = {
    "type",  "enum",     "const",    "properties", "required",  "additionalProperties",
    "items", "minItems", "maxItems", "minLength",  "maxLength",
};

static int check_refused(builder *b, const json_t *s, const char *path) {
    for (size_t i = 0; i < PGD_ARRAY_LEN(k_refused); i++)
        if (json_object_get(s, k_refused[i]))
            return fail(b, path, "'%s' is not supported in a response_format schema", k_refused[i]);
    json_t *u = json_object_get(s, "uniqueItems");
    if (u && !json_is_false(u))
        return fail(b, path, "'uniqueItems' is not supported in a response_format schema");
    return 0;
}

/* The first keyword of s that constrains values, other than `but` (NULL if none). */
static const char *constraint_besides(const json_t *s, const char *but) {
    static const char *const comb[] = {"$ref", "anyOf", "oneOf", "allOf"};
    for (size_t i = 0; i < PGD_ARRAY_LEN(k_followed); i++)
        if (json_object_get(s, k_followed[i])) return k_followed[i];
    for (size_t i = 0; i < PGD_ARRAY_LEN(comb); i++)
        if (strcmp(comb[i], but) != 0 && json_object_get(s, comb[i])) return comb[i];
    return NULL;
}

/* path + "/" + seg (the segment escaped as a JSON pointer has it). */
static void path_join(char *out, const char *path, const char *seg) {
    size_t n = (size_t)snprintf(out, MAX_PATH, "%s/", path);
    for (const char *p = seg; *p && n + 3 < MAX_PATH; p++) {
        if (*p == '~' || *p == '/') {
            out[n++] = '~';
            out[n++] = *p == '~' ? '0' : '1';
        } else {
            out[n++] = *p;
        }
    }
    out[n < MAX_PATH ? n : MAX_PATH - 1] = 0;
}

/* A non-negative integer keyword (absent: dflt). */
static int get_count(builder *b, const json_t *s, const char *key, const char *path, uint32_t dflt,
                     uint32_t *out) {
    json_t *v = json_object_get(s, key);
    *out = dflt;
    if (!v) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return fail(b, path, "'%s' must be a non-negative integer", key);
    json_int_t x = json_integer_value(v);
    *out = x >= (json_int_t)PGD_JSON_NO_MAX ? PGD_JSON_NO_MAX - 1 : (uint32_t)x;
    return 0;
}

/* ---- $ref -------------------------------------------------------------------------------------
 */

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* The subschema a local $ref points to ("#" or "#/a/b~1c/0", percent-escapes decoded). */
static int resolve(builder *b, const char *ref, const char *path, const json_t **out) {
    if (ref[0] != '#')
        return fail(b, path,
                    "$ref '%.128s' is not supported: only a reference into the schema "
                    "itself (\"#/...\")",
                    ref);
    const json_t *cur = b->root;
    const char *p = ref + 1;
    if (*p && *p != '/') return fail(b, path, "$ref '%.128s' is not a JSON pointer", ref);
    while (*p == '/') {
        char seg[256];
        size_t n = 0;
        for (p++; *p && *p != '/'; p++) {
            char c = *p;
            if (c == '~' && (p[1] == '0' || p[1] == '1')) {
                c = *++p == '0' ? '~' : '/';
            } else if (c == '%' && hexval(p[1]) >= 0 && hexval(p[2]) >= 0) {
                c = (char)(hexval(p[1]) * 16 + hexval(p[2]));
                p += 2;
            }
            if (n + 1 >= sizeof seg) return fail(b, path, "$ref '%.128s' is too long", ref);
            seg[n++] = c;
        }
        seg[n] = 0;
        const json_t *next = NULL;
        if (json_is_object(cur)) {
            next = json_object_get(cur, seg);
        } else if (json_is_array(cur)) {
            char *end;
            unsigned long i = strtoul(seg, &end, 10);
            if (n && !*end) next = json_array_get(cur, i);
        }
        if (!next) return fail(b, path, "$ref '%.128s' points to nothing in the schema", ref);
        cur = next;
    }
    *out = cur;
    return 0;
}

/* ---- compiling ----------------------------------------------------------------------------------
 */

static int compile(builder *b, const json_t *s, const char *path, int depth, uint16_t *out);

/* Whether nodes x and y read the same values (compiled alike; recursion beyond a few levels
 * is taken as different). */
static bool node_equiv(const builder *b, uint16_t x, uint16_t y, int depth) {
    if (x == y) return true;
    if (x == PGD_JNODE_NONE || y == PGD_JNODE_NONE || depth > 12) return false;
    const pgd_jnode *X = &b->nodes[x], *Y = &b->nodes[y];
    if (X->uobj || Y->uobj || X->disc || Y->disc || X->int_only != Y->int_only ||
        X->min_len != Y->min_len || X->max_len != Y->max_len || X->min_items != Y->min_items ||
        X->max_items != Y->max_items || X->has_lo != Y->has_lo || X->has_hi != Y->has_hi ||
        X->lo != Y->lo || X->hi != Y->hi || X->dec != Y->dec || X->lo_frac != Y->lo_frac ||
        X->hi_frac != Y->hi_frac || X->props != Y->props || X->n_lits != Y->n_lits ||
        X->n_props != Y->n_props || X->n_tup != Y->n_tup)
        return false;
    for (int c = 0; c < PGD_JC_COUNT; c++) {
        uint16_t cx = X->cls[c], cy = Y->cls[c];
        if ((cx == x) != (cy == y)) return false;
        if (cx != x && !node_equiv(b, cx, cy, depth + 1)) return false;
    }
    for (uint32_t i = 0; i < X->n_lits; i++) {
        const lit *a = &b->lits[X->lit0 + i], *c = &b->lits[Y->lit0 + i];
        if (a->len != c->len || memcmp(b->text + a->off, b->text + c->off, a->len)) return false;
    }
    for (uint32_t i = 0; X->props && i < X->n_props; i++) {
        const lit *a = &b->lits[X->key0 + i], *c = &b->lits[Y->key0 + i];
        const pgd_jprop *p = &b->props[X->prop0 + i], *q = &b->props[Y->prop0 + i];
        if (a->len != c->len || a->tag != c->tag ||
            memcmp(b->text + a->off, b->text + c->off, a->len) || p->required != q->required ||
            !node_equiv(b, p->node, q->node, depth + 1))
            return false;
    }
    for (uint32_t i = 0; i < X->n_tup; i++)
        if (!node_equiv(b, b->props[X->tup0 + i].node, b->props[Y->tup0 + i].node, depth + 1))
            return false;
    bool arr = X->cls[PGD_JC_ARRAY] == x, obj = X->cls[PGD_JC_OBJECT] == x && !X->props;
    return (!arr || node_equiv(b, X->items, Y->items, depth + 1)) &&
           (!obj || node_equiv(b, X->extra, Y->extra, depth + 1));
}

/* The class of a literal, by its first byte. */
static int lit_class(char c) {
    return c == '"'   ? PGD_JC_STRING
           : c == 't' ? PGD_JC_TRUE
           : c == 'f' ? PGD_JC_FALSE
           : c == 'n' ? PGD_JC_NULL
                      : PGD_JC_NUMBER;
}

/* The discriminator after one key of a union of objects: an enum of the values of the enums
 * val[n] of the branches named by the key entries [k, k + n), each tagged with its branch. */
static int discriminator(builder *b, const char *path, size_t k, const uint16_t *val, size_t n,
                         uint16_t *out) {
    uint16_t v;
    int rc = new_node(b, path, &v);
    if (rc) return rc;
    size_t l0 = b->n_lits;
    for (size_t j = 0; j < n; j++) {
        uint32_t bi = b->lits[k + j].tag >> 16, a = b->nodes[val[j]].lit0;
        for (uint32_t q = 0; q < b->nodes[val[j]].n_lits; q++)
            if ((rc = copy_lit(b, path, a + q, bi))) return rc;
    }
    sort_lits(b, l0, false);
    pgd_jnode *d = &b->nodes[v];
    d->disc = true;
    d->lit0 = (uint32_t)l0;
    d->n_lits = (uint32_t)(b->n_lits - l0);
    for (size_t q = l0; q < b->n_lits; q++) d->cls[lit_class(b->text[b->lits[q].off])] = v;
    b->ready[v] = b->done[v] = true;
    *out = v;
    return 0;
}

/* Whether enum nodes x and y share a value. */
static bool enums_meet(const builder *b, uint16_t x, uint16_t y) {
    const pgd_jnode *X = &b->nodes[x], *Y = &b->nodes[y];
    for (uint32_t i = 0; i < X->n_lits; i++)
        for (uint32_t j = 0; j < Y->n_lits; j++) {
            const lit *a = &b->lits[X->lit0 + i], *c = &b->lits[Y->lit0 + j];
            if (a->len == c->len && !memcmp(b->text + a->off, b->text + c->off, a->len))
                return true;
        }
    return false;
}

/* Whether the branches holding the key of entries [g, e) (of the union's sorted key entries
 * k0 .. k0 + nk, tagged branch << 16 | property) are told apart before that key can be read: by
 * a key each of them requires and declares before it, whose values are enums no two of them
 * share (a discriminator, such as "name": {"const": ...}). Keys come in their declared order and
 * a required one cannot be skipped, so when the key is read at most one of those branches is
 * still live, and its own value node may read the value. */
static bool told_apart(const builder *b, const uint16_t *br, size_t k0, size_t nk, size_t g,
                       size_t e) {
    for (size_t d = 0; d < nk;) { /* each other key's entries [d, de) */
        size_t de = d + 1;
        const lit *dk = &b->lits[k0 + d];
        while (de < nk && b->lits[k0 + de].len == dk->len &&
               !memcmp(b->text + b->lits[k0 + de].off, b->text + dk->off, dk->len))
            de++;
        bool ok = d != g;
        uint16_t dval[PGD_JSON_MAX_BRANCHES];
        for (size_t j = g; ok && j < e; j++) {
            uint32_t bj = b->lits[k0 + j].tag >> 16, pj = b->lits[k0 + j].tag & 0xFFFF;
            size_t q = d;
            while (q < de && b->lits[k0 + q].tag >> 16 != bj) q++;
            uint32_t pd = q < de ? b->lits[k0 + q].tag & 0xFFFF : 0;
            const pgd_jprop *dp = q < de ? &b->props[b->nodes[br[bj]].prop0 + pd] : NULL;
            ok = dp && dp->required && pd < pj && b->nodes[dp->node].n_lits &&
                 !b->nodes[dp->node].disc;
            if (ok) dval[j - g] = dp->node;
            for (size_t i = g; ok && i < j; i++) ok = !enums_meet(b, dval[i - g], dval[j - g]);
        }
        if (ok) return true;
        d = de;
    }
    return false;
}

/* An object of one of the object nodes br[n] (anyOf of objects, json_schema.h): its branches,
 * their keys merged, and the value after each key: the branches' common node, or an enum of
 * all their enums' values, each tagged with its branch (a discriminator), or — where a
 * discriminator read before it leaves one branch live (told_apart) — each branch's own. */
static int union_object(builder *b, const char *path, const uint16_t *br, size_t n, uint16_t *out) {
    for (size_t i = 0; i < n; i++) {
        const pgd_jnode *B = &b->nodes[br[i]];
        if (!B->props || B->uobj)
            return fail(b, b->paths[br[i]],
                        "an object branch of a union must declare its properties (no "
                        "additionalProperties schema, no nested union of objects)");
        if (!b->done[br[i]])
            return fail(b, b->paths[br[i]],
                        "a union of objects whose branch refers back to the union");
    }
    uint16_t u;
    int rc = new_node(b, path, &u);
    if (rc) return rc;
    size_t br0 = b->n_props;
    if (grow((void **)&b->props, &b->cap_props, br0 + n, sizeof *b->props)) return PGD_ENOMEM;
    b->n_props += n;
    size_t k0 = b->n_lits;
    for (size_t i = 0; i < n; i++) {
        b->props[br0 + i] = (pgd_jprop){.node = br[i]};
        uint32_t key0 = b->nodes[br[i]].key0, np = b->nodes[br[i]].n_props;
        for (uint32_t j = 0; j < np; j++)
            if ((rc = copy_lit(b, path, key0 + j, (uint32_t)i << 16 | b->lits[key0 + j].tag)))
                return rc;
    }
    sort_lits(b, k0, false);
    size_t nk = b->n_lits - k0, v0 = b->n_props;
    if (grow((void **)&b->props, &b->cap_props, v0 + nk, sizeof *b->props)) return PGD_ENOMEM;
    b->n_props += nk;
    for (size_t g = 0; g < nk;) { /* a group of one key text */
        size_t e = g + 1;
        while (e < nk && !lit_cmp(&b->lits[k0 + g], &b->lits[k0 + e])) e++;
        uint16_t val[PGD_JSON_MAX_BRANCHES];
        bool same = true, enums = true;
        for (size_t j = g; j < e; j++) {
            uint32_t tag = b->lits[k0 + j].tag;
            const pgd_jnode *B = &b->nodes[br[tag >> 16]];
            val[j - g] = b->props[B->prop0 + (tag & 0xFFFF)].node;
            same = same && node_equiv(b, val[0], val[j - g], 0);
            enums = enums && b->nodes[val[j - g]].n_lits && !b->nodes[val[j - g]].disc;
        }
        uint16_t v = val[0];
        bool own = !same && !enums && told_apart(b, br, k0, nk, g, e);
        if (!same && !enums && !own) {
            const lit *l = &b->lits[k0 + g];
            return fail(b, path,
                        "union branches %u and %u differ at key %.*s: their values must agree, "
                        "or all be enum / const (a discriminator), or a discriminator must come "
                        "before it in each",
                        b->lits[k0 + g].tag >> 16, b->lits[k0 + e - 1].tag >> 16,
                        (int)(l->len < 80 ? l->len : 80), b->text + l->off);
        }
        if (!same && !own && (rc = discriminator(b, path, k0 + g, val, e - g, &v))) return rc;
        for (size_t j = g; j < e; j++) b->props[v0 + j] = (pgd_jprop){.node = own ? val[j - g] : v};
        g = e;
    }
    pgd_jnode *un = &b->nodes[u];
    un->cls[PGD_JC_OBJECT] = u;
    un->props = un->uobj = true;
    un->br0 = (uint32_t)br0, un->n_br = (uint32_t)n;
    un->key0 = (uint32_t)k0, un->n_props = (uint32_t)nk, un->prop0 = (uint32_t)v0;
    b->ready[u] = b->done[u] = true;
    *out = u;
    return 0;
}

/* A number without enum or bounds (an integer or any number). */
static bool plain_number(const pgd_jnode *n) {
    return !n->n_lits && !n->has_lo && !n->has_hi;
}

/* anyOf / oneOf: the branches' classes merged into node `me`; two branches may not both take
 * one class, but for unbounded numbers (any number then). */
static int compile_union(builder *b, const json_t *arr, const char *key, const char *path,
                         int depth, uint16_t me) {
    if (!json_is_array(arr) || !json_array_size(arr))
        return fail(b, path, "'%s' must be a non-empty array of schemas", key);
    static const char *const names[PGD_JC_COUNT] = {"an object", "an array", "a string", "a number",
                                                    "true",      "false",    "null"};
    size_t from[PGD_JC_COUNT] = {0};
    uint16_t objs[PGD_JSON_MAX_BRANCHES];
    size_t n_objs = 0;
    for (size_t i = 0; i < json_array_size(arr); i++) {
        char sub[MAX_PATH], idx[24];
        snprintf(idx, sizeof idx, "%s/%zu", key, i);
        snprintf(sub, sizeof sub, "%s/%s", path, idx);
        uint16_t br;
        int rc = compile(b, json_array_get(arr, i), sub, depth + 1, &br);
        if (rc) return rc;
        if (!b->ready[br])
            return fail(b, sub, "a '%s' branch that refers back to its own union", key);
        for (int c = 0; c < PGD_JC_COUNT; c++) {
            uint16_t h = b->nodes[br].cls[c], was = b->nodes[me].cls[c];
            if (h == PGD_JNODE_NONE) continue;
            if (c == PGD_JC_OBJECT) { /* objects: merged below if several */
                bool seen = false;
                for (size_t k = 0; k < n_objs; k++) seen = seen || objs[k] == h;
                if (!seen && n_objs >= PGD_JSON_MAX_BRANCHES)
                    return fail(b, path, "more than %d object branches in one union",
                                PGD_JSON_MAX_BRANCHES);
                if (!seen) objs[n_objs++] = h;
                continue;
            }
            if (c == PGD_JC_NUMBER && was != PGD_JNODE_NONE && was != h &&
                plain_number(&b->nodes[was]) && plain_number(&b->nodes[h])) {
                /* integers or numbers (Union[int, float]): numbers */
                if (b->nodes[was].int_only) b->nodes[me].cls[c] = h, from[c] = i;
                continue;
            }
            if (was != PGD_JNODE_NONE && was != h)
                return fail(b, path,
                            "'%s' branches %zu and %zu both accept %s: branches must begin "
                            "differently (differ in JSON type)",
                            key, from[c], i, names[c]);
            b->nodes[me].cls[c] = h;
            from[c] = i;
        }
    }
    if (n_objs == 1) b->nodes[me].cls[PGD_JC_OBJECT] = objs[0];
    if (n_objs > 1) {
        uint16_t u = 0;
        int rc = union_object(b, path, objs, n_objs, &u);
        if (rc) return rc;
        b->nodes[me].cls[PGD_JC_OBJECT] = u;
    }
    return 0;
}

enum { T_OBJ = 1, T_ARR = 2, T_STR = 4, T_NUM = 8, T_INT = 16, T_BOOL = 32, T_NULL = 64 };

static int type_bits(builder *b, const json_t *t, const char *path, unsigned *out) {
    static const char *const names[] = {"object",  "array",   "string", "number",
                                        "integer", "boolean", "null"};
    *out = 0;
    if (!t) {
        *out = 127;
        return 0;
    }
    size_t n = json_is_array(t) ? json_array_size(t) : 1;
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_is_array(t) ? json_array_get(t, i) : t;
        const char *name = json_string_value(v);
        size_t k = 0;
        while (name && k < PGD_ARRAY_LEN(names) && strcmp(names[k], name)) k++;
        if (!name || k == PGD_ARRAY_LEN(names))
            return fail(b, path,
                        "'type' must be one of object, array, string, number, integer, "
                        "boolean, null (or a list of them)");
        *out |= 1u << k;
    }
    if (!*out) return fail(b, path, "'type' must not be an empty list");
    return 0;
}

static bool of_type(const json_t *v, unsigned types) {
    switch (json_typeof(v)) {
    case JSON_STRING:
        return types & T_STR;
    case JSON_INTEGER:
        return types & (T_NUM | T_INT);
    case JSON_REAL: {
        double x = json_real_value(v);
        return (types & T_NUM) || ((types & T_INT) && fabs(x) < 9e15 && x == (double)(long long)x);
    }
    case JSON_TRUE:
    case JSON_FALSE:
        return types & T_BOOL;
    case JSON_NULL:
        return types & T_NULL;
    default:
        return false;
    }
}

/* ---- numeric bounds ---------------------------------------------------------------------------
 */

typedef struct bounds {
    bool has_lo, has_hi, lo_excl, hi_excl;
    double lo, hi;
    const json_t *lo_v, *hi_v; /* the values they come from (an integer is exact) */
} bounds;

/* minimum / maximum / exclusiveMinimum / exclusiveMaximum (numbers; exclusive* as booleans, the
 * draft-4 way, too). */
static int get_bounds(builder *b, const json_t *s, const char *path, bounds *out) {
    *out = (bounds){0};
    static const char *const keys[4] = {"minimum", "maximum", "exclusiveMinimum",
                                        "exclusiveMaximum"};
    const json_t *v[4];
    for (int i = 0; i < 4; i++) {
        v[i] = json_object_get(s, keys[i]);
        if (v[i] && !json_is_number(v[i]) && !(i >= 2 && json_is_boolean(v[i])))
            return fail(b, path, "'%s' must be a number", keys[i]);
    }
    for (int i = 0; i < 2; i++) {
        const json_t *ex = v[i + 2];
        bool *has = i ? &out->has_hi : &out->has_lo, *excl = i ? &out->hi_excl : &out->lo_excl;
        double *x = i ? &out->hi : &out->lo;
        const json_t **src = i ? &out->hi_v : &out->lo_v;
        if (v[i]) *has = true, *x = json_number_value(v[i]), *excl = json_is_true(ex), *src = v[i];
        if (json_is_number(ex)) {
            double e = json_number_value(ex);
            if (!*has || (i ? e <= *x : e >= *x)) *has = true, *x = e, *excl = true, *src = ex;
        }
    }
    return 0;
}

static bool within(const bounds *bd, double x) {
    if (bd->has_lo && (bd->lo_excl ? x <= bd->lo : x < bd->lo)) return false;
    if (bd->has_hi && (bd->hi_excl ? x >= bd->hi : x > bd->hi)) return false;
    return true;
}

/* One integer bound from v (exact for a JSON integer); `up`: an upper bound. 0: none (beyond
 * int64: nothing to follow), 1: *out, -1: no integer can meet it. */
static int int_bound(const json_t *v, double x, bool excl, bool up, int64_t *out) {
    if (json_is_integer(v)) {
        json_int_t n = json_integer_value(v);
        if (excl && n == (up ? INT64_MIN : INT64_MAX)) return -1;
        *out = excl ? (up ? n - 1 : n + 1) : n;
        return 1;
    }
    const double lim = 9.2e18; /* about INT64_MAX: a real beyond bounds nothing followed here */
    double b = up ? (excl ? ceil(x) - 1 : floor(x)) : (excl ? floor(x) + 1 : ceil(x));
    if (up ? b >= lim : b <= -lim) return 0;
    if (up ? b <= -lim : b >= lim) return -1;
    *out = (int64_t)b;
    return 1;
}

/* The integer bounds of node `me`. */
static int int_bounds(builder *b, const bounds *bd, const char *path, uint16_t me) {
    pgd_jnode *n = &b->nodes[me];
    int r;
    if (bd->has_lo) {
        if ((r = int_bound(bd->lo_v, bd->lo, bd->lo_excl, false, &n->lo)) < 0)
            return fail(b, path, "no integer is within the bounds");
        n->has_lo = r > 0;
    }
    if (bd->has_hi) {
        if ((r = int_bound(bd->hi_v, bd->hi, bd->hi_excl, true, &n->hi)) < 0)
            return fail(b, path, "no integer is within the bounds");
        n->has_hi = r > 0;
    }
    if (n->has_lo && n->has_hi && n->lo > n->hi)
        return fail(b, path, "no integer is within the bounds");
    return 0;
}

/* A bound in units of 10^-15 (the grid a bounded decimal's digits write on), rounded inward
 * (`up`: an upper bound, rounded down), exclusive made inclusive on the grid. A real is read
 * through its shortest round-trip decimal, which is what a double comparison of a number of at
 * most PGD_JSON_DEC_DIGITS digits agrees with. 1: *out; 0: past any such number on the open
 * side (no bound); -1: past it on the other (nothing is within). */
static int dec_bound(const json_t *v, double x, bool excl, bool up, __int128 *out) {
    const __int128 lim = (__int128)1000000000000000LL * 1000000000000000LL; /* 10^30 */
    __int128 digits = 0;
    int exp10 = 0; /* the bound is digits * 10^exp10 */
    if (json_is_integer(v)) {
        digits = json_integer_value(v);
    } else {
        char buf[40];
        int p = 1;
        for (; p <= 17; p++) {
            snprintf(buf, sizeof buf, "%.*e", p - 1, x);
            if (strtod(buf, NULL) == x) break;
        }
        bool neg = buf[0] == '-';
        const char *q = buf + neg;
        int nd = 0;
        for (; *q && *q != 'e'; q++)
            if (*q >= '0' && *q <= '9') digits = digits * 10 + (*q - '0'), nd++;
        exp10 = atoi(q + 1) - (nd - 1);
        if (neg) digits = -digits;
    }
    exp10 += 15; /* into units */
    __int128 u = digits;
    bool exact = true;
    for (; exp10 > 0; exp10--) {
        if (u > lim || u < -lim) break;
        u *= 10;
    }
    for (; exp10 < 0; exp10++) {
        __int128 q = u / 10, r = u % 10; /* toward zero */
        if (r) {
            exact = false;
            if (!up && r > 0) q += 1; /* a lower bound rounds up */
            if (up && r < 0) q -= 1;  /* an upper bound rounds down */
        }
        u = q;
    }
    if (excl && exact) u += up ? -1 : 1;
    if (up ? u >= lim : u <= -lim) return 0;
    if (up ? u <= -lim : u >= lim) return -1;
    *out = u;
    return 1;
}

/* The decimal bounds of node `me` (a number that need not be an integer). */
static int dec_bounds(builder *b, const bounds *bd, const char *path, uint16_t me) {
    const __int128 units = 1000000000000000LL;
    pgd_jnode *n = &b->nodes[me];
    __int128 lo = 0, hi = 0;
    int r;
    if (bd->has_lo) {
        if ((r = dec_bound(bd->lo_v, bd->lo, bd->lo_excl, false, &lo)) < 0)
            return fail(b, path, "no number of at most %d digits is within the bounds",
                        PGD_JSON_DEC_DIGITS);
        n->has_lo = r > 0;
    }
    if (bd->has_hi) {
        if ((r = dec_bound(bd->hi_v, bd->hi, bd->hi_excl, true, &hi)) < 0)
            return fail(b, path, "no number of at most %d digits is within the bounds",
                        PGD_JSON_DEC_DIGITS);
        n->has_hi = r > 0;
    }
    if (n->has_lo && n->has_hi && lo > hi) return fail(b, path, "no number is within the bounds");
    n->dec = n->has_lo || n->has_hi;
    __int128 ql = lo / units - (lo % units < 0), qh = hi / units - (hi % units < 0); /* floor */
    n->lo = (int64_t)ql, n->lo_frac = (int64_t)(lo - ql * units);
    n->hi = (int64_t)qh, n->hi_frac = (int64_t)(hi - qh * units);
    return 0;
}

/* enum / const: the literals of node `me`, filtered by the type. */
static int compile_enum(builder *b, const json_t *s, const char *path, unsigned types,
                        const bounds *bd, uint16_t me) {
    const json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
    if (en && !json_is_array(en)) return fail(b, path, "'enum' must be an array");
    size_t from = b->n_lits, n = en ? json_array_size(en) : 1;
    for (size_t i = 0; i < n; i++) {
        const json_t *v = en ? json_array_get(en, i) : cn;
        if (json_is_object(v) || json_is_array(v))
            return fail(b, path, "an '%s' value that is an object or an array is not supported",
                        en ? "enum" : "const");
        if (!of_type(v, types) || (en && cn && !json_equal(v, cn))) continue;
        if (json_is_number(v) && !within(bd, json_number_value(v))) continue;
        int rc = add_value_lit(b, path, v, 0);
        if (rc) return rc;
    }
    if (b->n_lits == from)
        return fail(b, path, "no value of '%s' is allowed by the rest of the schema",
                    en ? "enum" : "const");
    sort_lits(b, from, true);
    pgd_jnode *n0 = &b->nodes[me];
    n0->lit0 = (uint32_t)from;
    n0->n_lits = (uint32_t)(b->n_lits - from);
    for (size_t i = from; i < b->n_lits; i++) {
        char c = b->text[b->lits[i].off];
        n0->cls[lit_class(c)] = me;
    }
    return 0;
}

static int compile_object(builder *b, const json_t *s, const char *path, int depth, uint16_t me) {
    const json_t *props = json_object_get(s, "properties");
    const json_t *req = json_object_get(s, "required");
    const json_t *add = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props))
        return fail(b, path, "'properties' must be an object of schemas");
    if (req && !json_is_array(req)) return fail(b, path, "'required' must be an array");
    size_t np = props ? json_object_size(props) : 0;
    for (size_t i = 0; req && i < json_array_size(req); i++) {
        const char *k = json_string_value(json_array_get(req, i));
        if (!k) return fail(b, path, "'required' must be an array of strings");
        if (!props || !json_object_get(props, k))
            return fail(b, path,
                        "required key '%.64s' is not among 'properties' (this server writes "
                        "only declared keys)",
                        k);
    }
    if (!np) {
        if (json_is_false(add)) { /* only {} */
            b->nodes[me].props = true;
            return 0;
        }
        if (!add || json_is_true(add)) return 0; /* extra: any */
        char sub[MAX_PATH];
        snprintf(sub, sizeof sub, "%s/additionalProperties", path);
        uint16_t x;
        int rc = compile(b, add, sub, depth + 1, &x);
        if (rc) return rc;
        b->nodes[me].extra = x;
        return 0;
    }
    if (np > UINT16_MAX) return fail(b, path, "too many properties");
    /* reserve the properties and their keys, then compile the values */
    size_t p0 = b->n_props, k0 = b->n_lits;
    if (grow((void **)&b->props, &b->cap_props, p0 + np, sizeof *b->props)) return PGD_ENOMEM;
    b->n_props += np;
    const char *key;
    const json_t *v;
    size_t i = 0;
    json_object_foreach((json_t *)props, key, v) {
        json_t *k = json_string(key);
        if (!k) return PGD_ENOMEM;
        int rc = add_value_lit(b, path, k, (uint32_t)i);
        json_decref(k);
        if (rc) return rc;
        i++;
    }
    sort_lits(b, k0, true);
    b->nodes[me].props = true;
    b->nodes[me].prop0 = (uint32_t)p0;
    b->nodes[me].n_props = (uint32_t)np;
    b->nodes[me].key0 = (uint32_t)k0;
    i = 0;
    json_object_foreach((json_t *)props, key, v) {
        char sub[MAX_PATH], pp[MAX_PATH];
        path_join(pp, path, "properties");
        path_join(sub, pp, key);
        uint16_t x;
        int rc = compile(b, v, sub, depth + 1, &x);
        if (rc) return rc;
        bool r = false;
        for (size_t j = 0; req && j < json_array_size(req); j++)
            r = r || !strcmp(json_string_value(json_array_get(req, j)), key);
        b->props[p0 + i] = (pgd_jprop){.node = x, .required = r};
        i++;
    }
    uint32_t next = (uint32_t)np;
    for (size_t j = np; j-- > 0;) {
        if (b->props[p0 + j].required) next = (uint32_t)j;
        b->props[p0 + j].next_req = next;
    }
    return 0;
}

/* items, prefixItems (or the older items as an array, with additionalItems), minItems,
 * maxItems: node `me`'s array. The leading items' nodes are kept in the properties' table. */
static int compile_array(builder *b, const json_t *s, const char *path, int depth, uint16_t me) {
    const json_t *prefix = json_object_get(s, "prefixItems"), *rest = json_object_get(s, "items");
    const char *rest_key = "items", *prefix_key = "prefixItems";
    if (json_is_array(rest)) {
        if (prefix) return fail(b, path, "'items' as an array next to 'prefixItems'");
        prefix = rest, prefix_key = "items";
        rest = json_object_get(s, "additionalItems"), rest_key = "additionalItems";
    }
    if (prefix && !json_is_array(prefix))
        return fail(b, path, "'%s' must be an array of schemas", prefix_key);
    uint32_t lo, hi;
    int rc;
    if ((rc = get_count(b, s, "minItems", path, 0, &lo)) ||
        (rc = get_count(b, s, "maxItems", path, PGD_JSON_NO_MAX, &hi)))
        return rc;
    size_t np = prefix ? json_array_size(prefix) : 0;
    if (np > UINT16_MAX) return fail(b, path, "too many '%s'", prefix_key);
    if (json_is_false(rest) && hi > np) hi = (uint32_t)np; /* nothing past the leading items */
    if (lo > hi)
        return fail(b, path, "'minItems' is above %s",
                    json_is_false(rest) ? "the items allowed" : "'maxItems'");
    size_t p0 = b->n_props;
    if (np) {
        if (grow((void **)&b->props, &b->cap_props, p0 + np, sizeof *b->props)) return PGD_ENOMEM;
        b->n_props += np;
    }
    for (size_t i = 0; i < np; i++) {
        char sub[MAX_PATH];
        snprintf(sub, sizeof sub, "%s/%s/%zu", path, prefix_key, i);
        uint16_t x;
        if ((rc = compile(b, json_array_get(prefix, i), sub, depth + 1, &x))) return rc;
        b->props[p0 + i] = (pgd_jprop){.node = x};
    }
    uint16_t x = PGD_JNODE_ANY;
    if (rest && !json_is_false(rest)) {
        char sub[MAX_PATH];
        snprintf(sub, sizeof sub, "%s/%s", path, rest_key);
        if ((rc = compile(b, rest, sub, depth + 1, &x))) return rc;
    }
    pgd_jnode *n = &b->nodes[me];
    n->items = x;
    n->tup0 = (uint32_t)p0;
    n->n_tup = (uint32_t)np;
    n->min_items = lo;
    n->max_items = hi;
    return 0;
}

/* A schema with type / enum / properties / ...: node `me`. Its classes are set first, so a
 * union inside it may refer back to it. */
static int compile_plain(builder *b, const json_t *s, const char *path, int depth, uint16_t me) {
    unsigned types;
    int rc = type_bits(b, json_object_get(s, "type"), path, &types);
    if (rc) return rc;
    bounds bd;
    if ((rc = get_bounds(b, s, path, &bd))) return rc;
    if (json_object_get(s, "enum") || json_object_get(s, "const"))
        return compile_enum(b, s, path, types, &bd, me);
    if (types & T_NUM)
        rc = dec_bounds(b, &bd, path, me);
    else if (types & T_INT)
        rc = int_bounds(b, &bd, path, me);
    if (rc) return rc;
    pgd_jnode *n = &b->nodes[me];
    if (types & T_OBJ) n->cls[PGD_JC_OBJECT] = me;
    if (types & T_ARR) n->cls[PGD_JC_ARRAY] = me;
    if (types & T_STR) n->cls[PGD_JC_STRING] = me;
    if (types & (T_NUM | T_INT)) n->cls[PGD_JC_NUMBER] = me;
    n->int_only = !(types & T_NUM);
    if (types & T_BOOL) n->cls[PGD_JC_TRUE] = n->cls[PGD_JC_FALSE] = me;
    if (types & T_NULL) n->cls[PGD_JC_NULL] = me;
    if (types & T_STR) {
        uint32_t lo, hi;
        if ((rc = get_count(b, s, "minLength", path, 0, &lo)) ||
            (rc = get_count(b, s, "maxLength", path, PGD_JSON_NO_MAX, &hi)))
            return rc;
        if (lo > hi) return fail(b, path, "'minLength' is above 'maxLength'");
        n->min_len = lo;
        n->max_len = hi;
    }
    b->ready[me] = true;
    if (types & T_OBJ && (rc = compile_object(b, s, path, depth, me))) return rc;
    if (types & T_ARR && (rc = compile_array(b, s, path, depth, me))) return rc;
    return 0;
}

static int compile(builder *b, const json_t *s, const char *path, int depth, uint16_t *out) {
    if (depth > MAX_DEPTH) return fail(b, path, "the schema nests deeper than %d", MAX_DEPTH);
    for (int hops = 0;; hops++) {
        if (json_is_true(s)) {
            *out = PGD_JNODE_ANY;
            return 0;
        }
        if (json_is_false(s)) return fail(b, path, "the schema 'false' admits no value");
        if (!json_is_object(s)) return fail(b, path, "a schema must be an object or a boolean");
        if (memo_get(b, s, out)) return 0;
        int rc = check_refused(b, s, path);
        if (rc) return rc;
        const json_t *ref = json_object_get(s, "$ref"), *all = json_object_get(s, "allOf");
        const char *but = ref ? "$ref" : "allOf";
        if (!ref && !all) break;
        const char *other = constraint_besides(s, but);
        if (other)
            return fail(b, path, "'%s' next to '%s' is not supported", other,
                        ref ? "$ref" : "allOf");
        if (hops >= MAX_REF_HOPS) return fail(b, path, "a $ref loop");
        if (ref) {
            if (!json_is_string(ref)) return fail(b, path, "'$ref' must be a string");
            if ((rc = resolve(b, json_string_value(ref), path, &s))) return rc;
        } else {
            if (!json_is_array(all) || json_array_size(all) != 1)
                return fail(b, path, "'allOf' of other than one schema is not supported");
            s = json_array_get(all, 0);
        }
    }
    uint16_t me;
    int rc;
    if ((rc = new_node(b, path, &me)) || (rc = memo_put(b, s, me))) return rc;
    const json_t *any = json_object_get(s, "anyOf"), *one = json_object_get(s, "oneOf");
    if (any || one) {
        const char *key = any ? "anyOf" : "oneOf";
        const char *other = constraint_besides(s, key);
        if (other) return fail(b, path, "'%s' next to '%s' is not supported", other, key);
        rc = compile_union(b, any ? any : one, key, path, depth, me);
    } else {
        rc = compile_plain(b, s, path, depth, me);
    }
    if (rc) return rc;
    b->ready[me] = b->done[me] = true;
    *out = me;
    return 0;
}

/* ---- how deep the smallest values nest ---------------------------------------------------- */

static uint8_t add1(uint8_t x) {
    return x >= PGD_JNEED_INF - 1 ? PGD_JNEED_INF : (uint8_t)(x + 1);
}

/* The levels the smallest value of node h read as class c opens, given need[] so far. */
static uint8_t class_need(const builder *b, const uint8_t *need, uint16_t h, int c) {
    const pgd_jnode *n = &b->nodes[h];
    if (n->n_lits || (c != PGD_JC_OBJECT && c != PGD_JC_ARRAY)) return 0;
    if (c == PGD_JC_ARRAY) { /* the items it must hold */
        uint8_t m = 0;
        for (uint32_t i = 0; i < n->min_items && i < n->n_tup; i++)
            if (need[b->props[n->tup0 + i].node] > m) m = need[b->props[n->tup0 + i].node];
        if (n->min_items > n->n_tup && need[n->items] > m) m = need[n->items];
        return add1(m);
    }
    uint8_t m = 0;
    if (n->uobj) { /* the deepest branch: keys may keep any of them */
        for (uint32_t i = 0; i < n->n_br; i++) {
            uint8_t x = class_need(b, need, b->props[n->br0 + i].node, PGD_JC_OBJECT);
            if (x > m) m = x;
        }
        return m;
    }
    for (uint32_t i = 0; n->props && i < n->n_props; i++) {
        const pgd_jprop *p = &b->props[n->prop0 + i];
        if (p->required && need[p->node] > m) m = need[p->node];
    }
    return add1(m);
}

/* Every node's need (a fixpoint from "none": they only fall); a node no finite value
 * satisfies is refused, and a root that nests deeper than the recognizer goes. */
static int compute_need(builder *b, uint16_t root) {
    uint8_t *need = malloc(b->n_nodes);
    if (!need) return PGD_ENOMEM;
    memset(need, PGD_JNEED_INF, b->n_nodes);
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t i = 0; i < b->n_nodes; i++)
            for (int c = 0; c < PGD_JC_COUNT; c++) {
                uint16_t h = b->nodes[i].cls[c];
                if (h == PGD_JNODE_NONE) continue;
                uint8_t x = class_need(b, need, h, c);
                if (x < need[i]) need[i] = x, changed = true;
            }
    }
    int rc = 0;
    for (size_t i = 0; i < b->n_nodes && !rc; i++)
        if (need[i] == PGD_JNEED_INF)
            rc = fail(b, b->paths[i], "no finite JSON value satisfies this schema");
    if (!rc && need[root] > PGD_JSON_MAX_DEPTH)
        rc = fail(b, "", "every value of the schema nests deeper than %d levels",
                  PGD_JSON_MAX_DEPTH);
    for (size_t i = 0; i < b->n_nodes && !rc; i++) {
        b->nodes[i].need = need[i];
        b->nodes[i].need_obj = class_need(b, need, (uint16_t)i, PGD_JC_OBJECT);
        b->nodes[i].need_arr = class_need(b, need, (uint16_t)i, PGD_JC_ARRAY);
    }
    free(need);
    return rc;
}

/* ---- packing
 * ------------------------------------------------------------------------------------- */

static int pack(builder *b, uint16_t root, const pgd_json_schema **out) {
    size_t nb = b->n_nodes * sizeof(pgd_jnode), pb = b->n_props * sizeof(pgd_jprop),
           lb = b->n_lits * sizeof(pgd_jlit);
    pgd_json_schema *sc = calloc(1, sizeof *sc);
    char *mem = malloc(nb + pb + lb + b->n_text + 1);
    if (!sc || !mem) {
        free(sc);
        free(mem);
        return PGD_ENOMEM;
    }
    pgd_jnode *nodes = (pgd_jnode *)mem;
    pgd_jprop *props = (pgd_jprop *)(mem + nb);
    pgd_jlit *lits = (pgd_jlit *)(mem + nb + pb);
    char *text = mem + nb + pb + lb;
    memcpy(nodes, b->nodes, nb);
    if (pb) memcpy(props, b->props, pb);
    if (b->n_text) memcpy(text, b->text, b->n_text);
    for (size_t i = 0; i < b->n_lits; i++)
        lits[i] = (pgd_jlit){text + b->lits[i].off, b->lits[i].len, b->lits[i].tag};
    sc->nodes = nodes;
    sc->props = props;
    sc->lits = lits;
    sc->n_nodes = (uint32_t)b->n_nodes;
    sc->n_props = (uint32_t)b->n_props;
    sc->n_lits = (uint32_t)b->n_lits;
    sc->root = root;
    atomic_init(&sc->refs, 1);
    sc->mem = mem;
    *out = sc;
    return 0;
}

int pgd_api_json_schema_compile(const json_t *schema, const pgd_json_schema **out, char *msg,
                                size_t cap) {
    *out = NULL;
    if (cap) msg[0] = 0;
    builder b = {.root = schema, .msg = msg, .msg_cap = cap};
    /* node 0 (any value), node 1 (any object) and the words, as in every schema */
    pgd_jnode base[2];
    pgd_json_schema_base_nodes(base);
    uint16_t id;
    int rc = 0;
    for (int i = 0; i < 2 && !rc; i++)
        if (!(rc = new_node(&b, "", &id))) b.nodes[id] = base[i];
    for (int i = 0; i < PGD_JLIT_WORDS && !rc; i++)
        rc = add_lit(&b, "", pgd_json_schema_words[i].text, pgd_json_schema_words[i].len, 0);
    uint16_t root = 0;
    if (!rc) {
        b.ready[0] = b.ready[1] = b.done[0] = b.done[1] = true;
        rc = compile(&b, schema, "", 0, &root);
    }
    if (!rc) rc = compute_need(&b, root);
    if (!rc) rc = pack(&b, root, out);
    for (size_t i = 0; i < b.n_nodes; i++) free(b.paths[i]);
    free(b.paths);
    free(b.nodes);
    free(b.ready);
    free(b.done);
    free(b.props);
    free(b.lits);
    free(b.text);
    free(b.memo_key);
    free(b.memo_node);
    if (rc == PGD_ENOMEM && cap) snprintf(msg, cap, "out of memory compiling the schema");
    return rc;
}
