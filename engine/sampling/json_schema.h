/*
 * engine/sampling/json_schema.h — a JSON schema compiled for constrained output (json_fsm.h):
 * immutable tables of nodes, properties and literals.
 *
 * A node says, for each way a JSON value can begin (its class: '{', '[', '"', a number, true,
 * false, null), which node reads a value that begins so (anyOf branches and type lists resolve
 * here, so the first byte of a value always picks one), or none. The node a value is read by
 * then constrains it:
 *   - an enum (or const): the value is one of the node's literals, byte for byte in their
 *     compact JSON text (sorted, so the literals sharing a prefix are one range);
 *   - a string: its length in code points within [min_len, max_len];
 *   - a number: int_only refuses a fraction or an exponent; a number may be bounded, and a
 *     digit is taken only while some number within the bounds begins so (a bounded number that
 *     need not be an integer is written without exponent, in at most PGD_JSON_DEC_DIGITS
 *     digits);
 *   - an array: each item read by `items` (the leading ones by their own nodes: a tuple),
 *     their count within [min_items, max_items];
 *   - an object with properties: only those keys, in their declared order, each at most once,
 *     every required one present; keys are literals (their JSON text, quotes included, tagged
 *     with the property's index);
 *   - an object without: any keys, each value read by `extra`;
 *   - an object of one of several branches (anyOf of objects): keys any live branch may take
 *     next, each key keeping the branches that have it, an enum value (a discriminator) those
 *     whose enum holds it; it may close when a live branch may.
 * Each node also says how deep the smallest value it reads nests (need): the recognizer opens
 * a container, or takes a key or an item, only where what must follow fits under its depth
 * limit, so that no walk meets a dead end there.
 * Node 0 reads any JSON value (its objects and arrays hold any values); node 1 reads any JSON
 * object: pgd_json_schema_object(), the free object of JSON mode, is these two. Literals 0..2
 * are "false", "null", "true", the words any boolean or null is read by.
 *
 * Built by the API (api/json_schema.h compiles a request's schema) or static (the free
 * object); shared read-only between the thread that made it and the scheduler thread, counted:
 * pgd_json_schema_ref / _unref (NULL and the static one are fine).
 */
#ifndef PGD_ENGINE_JSON_SCHEMA_H
#define PGD_ENGINE_JSON_SCHEMA_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* The classes a value begins in, by its first byte. */
enum {
    PGD_JC_OBJECT, /* { */
    PGD_JC_ARRAY,  /* [ */
    PGD_JC_STRING, /* " */
    PGD_JC_NUMBER, /* - 0-9 */
    PGD_JC_TRUE,   /* t */
    PGD_JC_FALSE,  /* f */
    PGD_JC_NULL,   /* n */
    PGD_JC_COUNT
};

#define PGD_JNODE_NONE  UINT16_MAX /* no node: a value cannot begin in that class */
#define PGD_JSON_NO_MAX UINT32_MAX /* no upper bound (max_len, max_items) */
#define PGD_JNODE_ANY   0          /* any JSON value */
#define PGD_JNODE_OBJ   1          /* any JSON object */
#define PGD_JLIT_WORDS  3          /* literals 0..2: false, null, true */
#define PGD_JNEED_INF   UINT8_MAX  /* pgd_jnode.need of a node no finite value satisfies */
/* Digits of a bounded decimal: doubles tell such numbers apart, so exact and double
 * comparisons agree. */
#define PGD_JSON_DEC_DIGITS 15
/* Object branches of one anyOf. */
#define PGD_JSON_MAX_BRANCHES 16

typedef struct pgd_jnode {
    uint16_t cls[PGD_JC_COUNT]; /* the node reading a value of each class; PGD_JNODE_NONE */
    uint32_t lit0, n_lits;      /* enum: literals [lit0, lit0 + n_lits); n_lits 0: no enum */
    bool int_only;              /* number: an integer (no '.', no exponent) */
    bool has_lo, has_hi;        /* number: bounded below / above */
    int64_t lo, hi;             /* ... within [lo, hi] (each where has_*): an integer's bounds,
                                   or the integer parts of a decimal's (below) */
    bool dec;                   /* a number that need not be an integer, bounded: written without
                                   an exponent in at most PGD_JSON_DEC_DIGITS digits */
    int64_t lo_frac, hi_frac;   /* dec: the bounds' fractions in units of 10^-15, [0, 10^15):
                                   the bound is lo + lo_frac * 10^-15 (so -0.5 is -1 + 5e14) */
    uint32_t min_len, max_len;  /* string: code points */
    uint16_t items;             /* array: the items' node (past the leading ones) */
    uint32_t tup0, n_tup;       /* array: its leading items' nodes (prefixItems), props
                                   [tup0, tup0 + n_tup) */
    uint32_t min_items, max_items;
    bool props;              /* object: declared properties only (else any keys -> extra) */
    uint32_t prop0, n_props; /* object: properties [prop0, prop0 + n_props) in their order */
    uint32_t key0;           /* object: their keys, literals [key0, key0 + n_props), sorted */
    uint16_t extra;          /* object without properties: the values' node */
    bool uobj;               /* an object of one of several branches (anyOf of objects): its
                                branches are props [br0, br0 + n_br); its keys, all of theirs,
                                are [key0, key0 + n_props) tagged branch << 16 | property, and
                                the value after key entry i is read by props[prop0 + i] */
    uint32_t br0, n_br;
    bool disc;        /* an enum of a union's values that tells its branches apart:
                         each literal's tag is the branch it belongs to */
    uint8_t need;     /* levels of objects and arrays the smallest value of this node opens
                         (0: a scalar will do); PGD_JNEED_INF: no finite value */
    uint8_t need_obj; /* ... the smallest object it reads (1 + its required values' need) */
    uint8_t need_arr; /* ... the smallest array it reads (1, or 1 + the items' need) */
} pgd_jnode;

/* An object's property, or an array's leading item (node only). */
typedef struct pgd_jprop {
    uint16_t node;     /* the value's node */
    bool required;     /* must be present */
    uint32_t next_req; /* the index (in the object) of the first required property at or after
                          this one; n_props when none */
} pgd_jprop;

typedef struct pgd_jlit {
    const char *text; /* compact JSON text (a key: its string, quotes included) */
    uint32_t len;
    uint32_t tag; /* a key: its property's index in the object; else 0 */
} pgd_jlit;

typedef struct pgd_json_schema {
    const pgd_jnode *nodes; /* [n_nodes] */
    const pgd_jprop *props; /* [n_props] */
    const pgd_jlit *lits;   /* [n_lits] */
    uint32_t n_nodes, n_props, n_lits;
    uint16_t root;   /* the node reading the whole document */
    atomic_int refs; /* references; < 0: static */
    void *mem;       /* freed with the last reference (free()) */
} pgd_json_schema;

/* JSON mode's schema: any one object (static). */
const pgd_json_schema *pgd_json_schema_object(void);

/* Node 0, node 1 and the three words, as every schema's first entries (for a compiler). */
void pgd_json_schema_base_nodes(pgd_jnode out[2]);
extern const pgd_jlit pgd_json_schema_words[PGD_JLIT_WORDS];

/* Counted references: _ref returns s; _unref frees `mem` and then the schema itself (both
 * allocated with malloc) with the last one. NULL and the static schema are fine. */
const pgd_json_schema *pgd_json_schema_ref(const pgd_json_schema *s);
void pgd_json_schema_unref(const pgd_json_schema *s);

#endif
