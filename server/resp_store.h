/*
 * server/resp_store.h — the stored responses of POST /v1/responses (`store`, the default): each
 * response's object as it was answered (for GET /v1/responses/{id}) and its conversation — the
 * chat messages of its input, its previous responses' included, and of its output — which a
 * later request continues with previous_response_id.
 *
 * Owns: every entry (id, owner, the object's JSON text, the conversation's jansson tree), in
 * memory only, bounded by max_bytes (the text and the conversation's compact JSON size counted):
 * the least recently used entries (put, or read by either lookup) are dropped first. An entry is
 * visible only to its owner (a tenant's id; 0 for callers without a tenant).
 *
 * Threading: the loop thread only.
 */
#ifndef PGD_SERVER_RESP_STORE_H
#define PGD_SERVER_RESP_STORE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/text.h"

typedef struct pgd_resp_store pgd_resp_store;

/* A store of at most max_bytes (> 0). 0 or PGD_ENOMEM. */
int pgd_resp_store_new(size_t max_bytes, pgd_resp_store **out);
void pgd_resp_store_free(pgd_resp_store *s); /* NULL is fine */

/* Keeps response `id` of `owner`: its object's JSON text json[len] (copied) and its
 * conversation (a JSON array of chat messages; the store takes the reference). 0; PGD_EFULL
 * with a detail, an entry larger than the whole store (not kept, nothing dropped); or
 * PGD_ENOMEM (nothing kept). The reference is dropped when nothing is kept. */
int pgd_resp_store_put(pgd_resp_store *s, const char *id, uint64_t owner, const char *json,
                       size_t len, json_t *conversation);

/* Owner's response `id`: its conversation (borrowed: valid until the next put or delete) or its
 * object's text (*out points into the store, valid as long). NULL / PGD_ENOTFOUND when there is
 * none for this owner. Both count as a use. */
const json_t *pgd_resp_store_conversation(pgd_resp_store *s, const char *id, uint64_t owner);
int pgd_resp_store_object(pgd_resp_store *s, const char *id, uint64_t owner, pgd_str *out);

/* Drops owner's response `id`: 0, or PGD_ENOTFOUND. */
int pgd_resp_store_delete(pgd_resp_store *s, const char *id, uint64_t owner);

/* Entries kept, and the bytes they count. */
size_t pgd_resp_store_count(const pgd_resp_store *s);
size_t pgd_resp_store_bytes(const pgd_resp_store *s);

#endif
