/*
 * server/tenants.h — who may call the server and how much: a tenants file (keys stored only as
 * sha256, weights and priorities for the scheduler's fair share, limits, prefix-cache
 * isolation), key lookup in constant time, and the per-tenant quota state (concurrency, and
 * requests and tokens per minute as token buckets).
 *
 * The file (--tenants FILE, the config file's "tenants", PAGODA_TENANTS):
 *   {"tenants": [{"name": "acme", "keys_sha256": ["<64 hex>"], "weight": 2, "priority": 0,
 *                 "limits": {"max_concurrent": 16, "rpm": 600, "tpm": 200000,
 *                            "max_tokens": 4096, "max_context": 8192},
 *                 "prefix_cache": "isolated"}],
 *    "admin_keys_sha256": ["<64 hex>"], "unauthenticated": ["/health"]}
 * A limit left out is unlimited; weight defaults to 1, priority to 0, prefix_cache to
 * "isolated" (the tenant salts every prefix-cache key: no other tenant gets hits, or a timing
 * signal, from its prompts; "shared" opts in to sharing); "unauthenticated" defaults to
 * ["/health"]. Unknown fields are refused (a typo must not silently lift a limit).
 *
 * A loaded file (pgd_tenants) is immutable: a reload (SIGHUP) loads a new one and swaps it in;
 * requests already running keep what they started with. The quota state (pgd_tenant_state) is
 * kept per tenant name across reloads, by the server.
 *
 * Threading: loading is pure (any thread); lookups and quota state belong to the loop thread.
 */
#ifndef PGD_SERVER_TENANTS_H
#define PGD_SERVER_TENANTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PGD_TENANT_UNLIMITED (-1)
#define PGD_TENANT_NAME_MAX  64

typedef struct pgd_tenant_limits {
    int64_t max_concurrent; /* requests in flight; PGD_TENANT_UNLIMITED when absent */
    int64_t rpm;            /* requests per minute */
    int64_t tpm;            /* tokens (prompt + max_tokens reserved, refunded) per minute */
    int64_t max_tokens;     /* output tokens one request may ask for */
    int64_t max_context;    /* prompt + output tokens of one request */
} pgd_tenant_limits;

typedef struct pgd_tenant_conf {
    char name[PGD_TENANT_NAME_MAX];
    uint8_t (*keys)[32]; /* [n_keys] sha256 of each key */
    size_t n_keys;
    double weight;    /* > 0: its share of the machine, relative to the others */
    int32_t priority; /* orders its own requests (higher first) */
    pgd_tenant_limits limits;
    bool shared_cache; /* prefix_cache "shared" */
} pgd_tenant_conf;

typedef struct pgd_tenants {
    pgd_tenant_conf *t; /* [n] */
    size_t n;
    uint8_t (*admin)[32]; /* [n_admin] */
    size_t n_admin;
    char **open_paths; /* [n_open] paths served without a key */
    size_t n_open;
} pgd_tenants;

/* Parse a tenants file's text (`src` names it in errors). 0, or PGD_EINVAL / PGD_EFORMAT with a
 * detail naming the field; PGD_ENOMEM. */
int pgd_tenants_parse(const char *json, size_t len, const char *src, pgd_tenants **out);
int pgd_tenants_load(const char *path, pgd_tenants **out);
void pgd_tenants_free(pgd_tenants *t); /* NULL is fine */

/* Whether `path` is served without a key. */
bool pgd_tenants_is_open(const pgd_tenants *t, const char *path);

/* The tenant whose key this is (index), or -1; *admin tells whether it is an admin key. The
 * key's sha256 is compared with every stored hash in constant time, all of them every time. */
int pgd_tenants_lookup(const pgd_tenants *t, const char *key, size_t len, bool *admin);

/* The sha256 of a key as 64 lower-case hex digits and a NUL (pagoda hash-key). 0 or PGD_EIO
 * (libsodium failed to start). */
int pgd_key_sha256_hex(const char *key, size_t len, char out[65]);

/* The value of an Authorization header's bearer token (scheme case-insensitive, spaces
 * around skipped), or NULL. *len gets its length. */
const char *pgd_bearer_token(const char *header, size_t *len);

/* ---- quota state ---------------------------------------------------------------------------- */

/* A token bucket: `capacity` tokens, refilled at capacity per 60 s, starting full. */
typedef struct pgd_bucket {
    double tokens, capacity;
    uint64_t last_ns;
} pgd_bucket;

void pgd_bucket_init(pgd_bucket *b, double capacity, uint64_t now_ns);
/* Take `amount` if the bucket holds it (after refilling to now): true; else false with
 * *retry_s the seconds until it will. An amount above the capacity never fits (*retry_s = -1). */
bool pgd_bucket_take(pgd_bucket *b, double amount, uint64_t now_ns, double *retry_s);
/* Give back `amount` (capped at the capacity). */
void pgd_bucket_refund(pgd_bucket *b, double amount, uint64_t now_ns);
/* Tokens now, and seconds until full. */
double pgd_bucket_level(pgd_bucket *b, uint64_t now_ns);
double pgd_bucket_reset_s(const pgd_bucket *b);

/* A duration as OpenAI's headers write it: "1s", "6m0s", "20ms". */
void pgd_duration_str(double seconds, char *out, size_t cap);

#endif
