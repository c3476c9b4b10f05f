/*
 * server/resp_store.c — stored responses: a jansson object indexes the entries by id (its hash
 * table; the value holds the entry's address), a doubly linked list orders them by use (head:
 * the most recent), and the least recent go when the bytes counted pass the bound.
 */
#include "server/resp_store.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

typedef struct entry {
    struct entry *prev, *next; /* by use, most recent first */
    char *id;
    uint64_t owner;
    char *json; /* [len] the object's text */
    size_t len;
    json_t *conversation;
    size_t bytes; /* counted against the bound */
} entry;

struct pgd_resp_store {
    size_t max_bytes, bytes, n;
    json_t *index; /* id -> integer: the entry's address */
    entry *head, *tail;
};

int pgd_resp_store_new(size_t max_bytes, pgd_resp_store **out) {
    pgd_resp_store *s = calloc(1, sizeof *s);
    *out = NULL;
    if (!s || !(s->index = json_object())) {
        free(s);
        return PGD_ENOMEM;
    }
    s->max_bytes = max_bytes;
    *out = s;
    return 0;
}

static void unlink_entry(pgd_resp_store *s, entry *e) {
    if (e->prev)
        e->prev->next = e->next;
    else
        s->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        s->tail = e->prev;
    e->prev = e->next = NULL;
}

static void push_front(pgd_resp_store *s, entry *e) {
    e->next = s->head;
    if (s->head) s->head->prev = e;
    s->head = e;
    if (!s->tail) s->tail = e;
}

static void free_entry(entry *e) {
    free(e->id);
    free(e->json);
    json_decref(e->conversation);
    free(e);
}

static void drop(pgd_resp_store *s, entry *e) {
    unlink_entry(s, e);
    json_object_del(s->index, e->id);
    s->bytes -= e->bytes;
    s->n--;
    free_entry(e);
}

void pgd_resp_store_free(pgd_resp_store *s) {
    if (!s) return;
    while (s->head) drop(s, s->head);
    json_decref(s->index);
    free(s);
}

/* Owner's entry `id`, moved to the front (a use); NULL when there is none for it. */
static entry *find(pgd_resp_store *s, const char *id, uint64_t owner) {
    json_t *v = json_object_get(s->index, id);
    entry *e = v ? (entry *)(uintptr_t)json_integer_value(v) : NULL;
    if (!e || e->owner != owner) return NULL;
    unlink_entry(s, e);
    push_front(s, e);
    return e;
}

int pgd_resp_store_put(pgd_resp_store *s, const char *id, uint64_t owner, const char *json,
                       size_t len, json_t *conversation) {
    char *text = json_dumps(conversation, JSON_COMPACT);
    size_t bytes = len + (text ? strlen(text) : 0) + strlen(id) + sizeof(entry);
    free(text);
    if (!text || bytes > s->max_bytes) {
        json_decref(conversation);
        if (!text) return PGD_ENOMEM;
        return pgd_error_set(PGD_EFULL,
                             "it takes %zu bytes, more than the whole store holds (%zu: "
                             "--responses-store-mb)",
                             bytes, s->max_bytes);
    }
    entry *e = calloc(1, sizeof *e);
    if (!e || !(e->id = strdup(id)) || !(e->json = malloc(len ? len : 1))) goto fail;
    memcpy(e->json, json, len);
    e->len = len;
    e->owner = owner;
    e->bytes = bytes;
    e->conversation = conversation;
    conversation = NULL;
    json_t *old = json_object_get(s->index, id); /* ids are random: only a replay repeats one */
    if (old) drop(s, (entry *)(uintptr_t)json_integer_value(old));
    if (json_object_set_new(s->index, id, json_integer((json_int_t)(uintptr_t)e))) goto fail;
    push_front(s, e);
    s->bytes += bytes;
    s->n++;
    while (s->bytes > s->max_bytes && s->tail != e) drop(s, s->tail);
    return 0;
fail:
    if (e) free_entry(e);
    json_decref(conversation);
    return PGD_ENOMEM;
}

const json_t *pgd_resp_store_conversation(pgd_resp_store *s, const char *id, uint64_t owner) {
    entry *e = find(s, id, owner);
    return e ? e->conversation : NULL;
}

int pgd_resp_store_object(pgd_resp_store *s, const char *id, uint64_t owner, pgd_str *out) {
    entry *e = find(s, id, owner);
    if (!e) return PGD_ENOTFOUND;
    *out = (pgd_str){e->json, e->len};
    return 0;
}

int pgd_resp_store_delete(pgd_resp_store *s, const char *id, uint64_t owner) {
    entry *e = find(s, id, owner);
    if (!e) return PGD_ENOTFOUND;
    drop(s, e);
    return 0;
}

size_t pgd_resp_store_count(const pgd_resp_store *s) {
    return s->n;
}

size_t pgd_resp_store_bytes(const pgd_resp_store *s) {
    return s->bytes;
}
