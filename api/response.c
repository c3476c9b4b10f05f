/*
 * api/response.c — OpenAI response, chunk, model-list and tokenize bodies built with jansson.
 *
 * Each builder makes one jansson tree, dumps it into the caller's buffer and frees it. Any
 * allocation failure unwinds to `fail` with the buffer untouched.
 */
#include "api/response.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "api/jsonutil.h"
#include "common/error.h"
#include "engine/sampling/sampler.h"

#define LOGPROB_FLOOR (-9999.0) /* OpenAI's stand-in for -inf */

#define TRY(x)                                                                                     \
    do {                                                                                           \
        if (x) goto fail;                                                                          \
    } while (0)

/* ---- ids ------------------------------------------------------------------------------------ */

void pgd_api_format_id(char out[PGD_API_ID_CAP], const char *prefix, uint64_t hi, uint64_t lo) {
    snprintf(out, PGD_API_ID_CAP, "%.14s%016" PRIx64 "%016" PRIx64, prefix, hi, lo);
}

void pgd_api_new_id(char out[PGD_API_ID_CAP], pgd_api_kind kind) {
    uint64_t hi = pgd_sampler_random_seed(), lo = pgd_sampler_random_seed();
    pgd_api_format_id(out, kind == PGD_API_CHAT ? "chatcmpl-" : "cmpl-", hi, lo);
}

/* ---- pieces -----------------------------------------------------------------------------------
 */

static json_t *jint(int64_t v) {
    return json_integer((json_int_t)v);
}

static json_t *jstr(pgd_str s) {
    return pgd__api_jstr(s.ptr, (size_t)s.len);
}

static json_t *jlogprob(float lp) {
    return pgd__api_jfloat(lp, LOGPROB_FLOOR);
}

static json_t *finish_reason(pgd_finish f) {
    const char *s = pgd_finish_str(f);
    return s ? json_string(s) : json_null();
}

/* {id, object, created, model[, system_fingerprint]} */
static json_t *head(const pgd_api_meta *m, const char *object) {
    json_t *o = json_object();
    if (!o) return NULL;
    const char *id = m->id ? m->id : "";
    TRY(pgd__api_set(o, "id", pgd__api_jstr(id, strlen(id))));
    TRY(pgd__api_set(o, "object", json_string(object)));
    TRY(pgd__api_set(o, "created", jint(m->created)));
    TRY(pgd__api_set(o, "model", jstr(m->model)));
    if (m->system_fingerprint)
        TRY(pgd__api_set(o, "system_fingerprint",
                         pgd__api_jstr(m->system_fingerprint, strlen(m->system_fingerprint))));
    return o;
fail:
    json_decref(o);
    return NULL;
}

static json_t *usage_obj(const pgd_api_usage *u) {
    json_t *o = json_object(), *d = NULL;
    if (!o) return NULL;
    TRY(pgd__api_set(o, "prompt_tokens", jint(u->prompt_tokens)));
    TRY(pgd__api_set(o, "completion_tokens", jint(u->completion_tokens)));
    TRY(pgd__api_set(o, "total_tokens", jint(u->prompt_tokens + u->completion_tokens)));
    d = json_object();
    TRY(pgd__api_set(o, "prompt_tokens_details", d)); /* o owns d from here (or freed it) */
    TRY(pgd__api_set(d, "cached_tokens", jint(u->cached_tokens)));
    if (u->reasoning_tokens) {
        d = json_object();
        TRY(pgd__api_set(o, "completion_tokens_details", d));
        TRY(pgd__api_set(d, "reasoning_tokens", jint(u->reasoning_tokens)));
    }
    return o;
fail:
    json_decref(o);
    return NULL;
}

static json_t *bytes_arr(pgd_str s) {
    json_t *a = json_array();
    if (!a) return NULL;
    for (uint64_t i = 0; i < s.len; i++)
        TRY(json_array_append_new(a, json_integer((unsigned char)s.ptr[i])));
    return a;
fail:
    json_decref(a);
    return NULL;
}

/* {token, logprob, bytes} */
static json_t *chat_top(pgd_str text, float lp) {
    json_t *o = json_object();
    if (!o) return NULL;
    TRY(pgd__api_set(o, "token", jstr(text)));
    TRY(pgd__api_set(o, "logprob", jlogprob(lp)));
    TRY(pgd__api_set(o, "bytes", bytes_arr(text)));
    return o;
fail:
    json_decref(o);
    return NULL;
}

json_t *pgd__api_logprob_entries(const pgd_api_token_logprob *tokens, size_t n) {
    json_t *content = json_array();
    for (size_t i = 0; content && i < n; i++) {
        const pgd_api_token_logprob *t = &tokens[i];
        json_t *e = chat_top(t->text, t->logprob), *tops = json_array();
        if (!e || !tops || pgd__api_set(e, "top_logprobs", tops)) {
            json_decref(e);
            if (!e) json_decref(tops);
            goto fail;
        }
        TRY(json_array_append_new(content, e));
        for (size_t k = 0; k < t->n_top; k++)
            TRY(json_array_append_new(tops, chat_top(t->top[k].text, t->top[k].logprob)));
    }
    return content;
fail:
    json_decref(content);
    return NULL;
}

/* {"content": [{token, logprob, bytes, top_logprobs: [...]}, ...]} */
static json_t *chat_logprobs(const pgd_api_choice *c) {
    json_t *o = json_object();
    if (!o || pgd__api_set(o, "content", pgd__api_logprob_entries(c->tokens, c->n_tokens))) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* Adds key -> logprob unless the key is already there (an earlier, more probable token whose
 * repaired text is the same string). */
static int dict_add(json_t *d, pgd_str text, float lp) {
    json_t *k = jstr(text);
    if (!k) return PGD_ENOMEM;
    int rc = 0;
    const char *key = json_string_value(k);
    size_t klen = json_string_length(k);
    if (!json_object_getn(d, key, klen))
        rc = json_object_setn_new_nocheck(d, key, klen, jlogprob(lp)) ? PGD_ENOMEM : 0;
    json_decref(k);
    return rc;
}

/* Legacy {tokens, token_logprobs, top_logprobs, text_offset}. top_logprobs[i] holds the
 * alternatives and the chosen token (so up to n_top + 1 entries, as OpenAI documents). */
static json_t *legacy_logprobs(const pgd_api_choice *c) {
    json_t *o = json_object();
    TRY(!o);
    TRY(pgd__api_set(o, "tokens", json_array()));
    TRY(pgd__api_set(o, "token_logprobs", json_array()));
    TRY(pgd__api_set(o, "top_logprobs", json_array()));
    TRY(pgd__api_set(o, "text_offset", json_array()));
    json_t *toks = json_object_get(o, "tokens"), *lps = json_object_get(o, "token_logprobs");
    json_t *tops = json_object_get(o, "top_logprobs"), *offs = json_object_get(o, "text_offset");
    int64_t off = c->text_offset;
    for (size_t i = 0; i < c->n_tokens; i++) {
        const pgd_api_token_logprob *t = &c->tokens[i];
        TRY(json_array_append_new(toks, jstr(t->text)));
        TRY(json_array_append_new(offs, jint(off)));
        off += (int64_t)pgd_api_utf8_chars(t->text.ptr, (size_t)t->text.len);
        if (isnan(t->logprob)) {
            TRY(json_array_append_new(lps, json_null()));
            TRY(json_array_append_new(tops, json_null()));
            continue;
        }
        TRY(json_array_append_new(lps, jlogprob(t->logprob)));
        json_t *d = json_object();
        TRY(json_array_append_new(tops, d));
        for (size_t k = 0; k < t->n_top; k++) TRY(dict_add(d, t->top[k].text, t->top[k].logprob));
        TRY(dict_add(d, t->text, t->logprob));
    }
    return o;
fail:
    json_decref(o);
    return NULL;
}

/* Adds "<id>": {logprob, rank, decoded_token} unless the id is there already. */
static int ranked_add(json_t *d, const pgd_api_ranked_logprob *r) {
    char key[16];
    snprintf(key, sizeof key, "%d", (int)r->id);
    if (json_object_get(d, key)) return 0;
    json_t *o = json_object();
    if (!o || json_object_set_new(d, key, o)) return PGD_ENOMEM;
    TRY(pgd__api_set(o, "logprob", jlogprob(r->logprob)));
    TRY(pgd__api_set(o, "rank", jint(r->rank)));
    TRY(pgd__api_set(o, "decoded_token", jstr(r->text)));
    return 0;
fail:
    return PGD_ENOMEM;
}

/* vLLM's [null, {...}, ...] */
static json_t *prompt_logprobs(const pgd_api_choice *c) {
    json_t *a = json_array();
    TRY(!a || json_array_append_new(a, json_null()));
    for (size_t i = 0; i < c->n_prompt_lp; i++) {
        const pgd_api_prompt_logprob *p = &c->prompt_lp[i];
        json_t *d = json_object();
        TRY(json_array_append_new(a, d));
        TRY(ranked_add(d, &p->token));
        for (size_t k = 0; k < p->n_top; k++) TRY(ranked_add(d, &p->top[k]));
    }
    return a;
fail:
    json_decref(a);
    return NULL;
}

static json_t *choice_logprobs(const pgd_api_choice *c, bool chat) {
    if (!c->logprobs) return json_null();
    return chat ? chat_logprobs(c) : legacy_logprobs(c);
}

/* Dumps root into out and drops it. */
static int finish(json_t *root, pgd_buf *out) {
    int rc = root ? pgd__api_dump(root, out) : PGD_ENOMEM;
    json_decref(root);
    return rc;
}

/* ---- chat ----------------------------------------------------------------------------------- */

/* [{[index], id, type, function: {name, arguments}}, ...]; indexes first, first + 1, ... when
 * `indexed` (stream chunks). */
static json_t *tool_calls(const pgd_api_tool_call *calls, size_t n, size_t first, bool indexed) {
    json_t *arr = json_array();
    for (size_t k = 0; arr && k < n; k++) {
        json_t *c = json_object(), *fn = json_object();
        if (!c || !fn || json_array_append_new(arr, c)) {
            json_decref(fn);
            goto fail;
        }
        bool cont = indexed && !calls[k].id[0]; /* a continuation: its arguments' next bytes */
        if ((indexed && pgd__api_set(c, "index", jint((int64_t)(first + k)))) ||
            (!cont && (pgd__api_set(c, "id", json_string(calls[k].id)) ||
                       pgd__api_set(c, "type", json_string("function"))))) {
            json_decref(fn);
            goto fail;
        }
        if (pgd__api_set(c, "function", fn) ||
            (!cont && pgd__api_set(fn, "name", jstr(calls[k].name))) ||
            pgd__api_set(fn, "arguments", jstr(calls[k].arguments)))
            goto fail;
    }
    return arr;
fail:
    json_decref(arr);
    return NULL;
}

int pgd_api_chat_completion(const pgd_api_meta *m, const pgd_api_choice *choices, size_t n,
                            const pgd_api_usage *u, pgd_buf *out) {
    json_t *root = head(m, "chat.completion"), *arr = json_array();
    if (!root || !arr) {
        json_decref(arr);
        goto fail;
    }
    TRY(pgd__api_set(root, "choices", arr));
    for (size_t i = 0; i < n; i++) {
        const pgd_api_choice *c = &choices[i];
        json_t *ch = json_object(), *msg;
        TRY(json_array_append_new(arr, ch)); /* arr owns ch from here (or freed it) */
        TRY(pgd__api_set(ch, "index", jint(c->index)));
        msg = json_object();
        TRY(pgd__api_set(ch, "message", msg));
        TRY(pgd__api_set(msg, "role", json_string("assistant")));
        bool none = (c->n_calls || c->has_reasoning) && !c->text.len;
        TRY(pgd__api_set(msg, "content", none ? json_null() : jstr(c->text)));
        if (c->has_reasoning) TRY(pgd__api_set(msg, "reasoning_content", jstr(c->reasoning)));
        if (c->n_calls)
            TRY(pgd__api_set(msg, "tool_calls", tool_calls(c->calls, c->n_calls, 0, false)));
        TRY(pgd__api_set(ch, "logprobs", choice_logprobs(c, true)));
        TRY(pgd__api_set(ch, "finish_reason", finish_reason(c->finish)));
    }
    TRY(pgd__api_set(root, "usage", usage_obj(u)));
    if (n && choices[0].prompt_logprobs)
        TRY(pgd__api_set(root, "prompt_logprobs", prompt_logprobs(&choices[0])));
    return finish(root, out);
fail:
    json_decref(root);
    return PGD_ENOMEM;
}

/* A chunk with one choice {index, delta, logprobs, finish_reason}; takes delta. */
static int chat_chunk(const pgd_api_meta *m, uint32_t index, json_t *delta, json_t *logprobs,
                      pgd_finish f, bool include_usage, pgd_buf *out) {
    json_t *root = head(m, "chat.completion.chunk"), *arr = json_array(), *ch = json_object();
    if (!root || !arr || !ch) {
        json_decref(arr);
        json_decref(ch);
        goto fail;
    }
    if (pgd__api_set(root, "choices", arr)) {
        json_decref(ch);
        goto fail;
    }
    TRY(json_array_append_new(arr, ch));
    TRY(pgd__api_set(ch, "index", jint(index)));
    /* set_new consumes the value even when it fails: forget it before checking */
    int bad = pgd__api_set(ch, "delta", delta);
    delta = NULL;
    TRY(bad);
    bad = pgd__api_set(ch, "logprobs", logprobs);
    logprobs = NULL;
    TRY(bad);
    TRY(pgd__api_set(ch, "finish_reason", finish_reason(f)));
    if (include_usage) TRY(pgd__api_set(root, "usage", json_null()));
    return finish(root, out);
fail:
    json_decref(delta);
    json_decref(logprobs);
    json_decref(root);
    return PGD_ENOMEM;
}

int pgd_api_chat_chunk_first(const pgd_api_meta *m, uint32_t index, bool include_usage,
                             pgd_buf *out) {
    json_t *d = json_object();
    if (!d || pgd__api_set(d, "role", json_string("assistant")) ||
        pgd__api_set(d, "content", json_string(""))) {
        json_decref(d);
        return PGD_ENOMEM;
    }
    return chat_chunk(m, index, d, json_null(), PGD_FINISH_NONE, include_usage, out);
}

/* A chunk whose delta is {key: text}, with c's logprobs and finish. */
static int text_chunk(const pgd_api_meta *m, const pgd_api_choice *c, const char *key, pgd_str text,
                      bool include_usage, pgd_buf *out) {
    json_t *d = json_object();
    if (!d || pgd__api_set(d, key, jstr(text))) {
        json_decref(d);
        return PGD_ENOMEM;
    }
    json_t *lp = choice_logprobs(c, true);
    if (!lp) {
        json_decref(d);
        return PGD_ENOMEM;
    }
    return chat_chunk(m, c->index, d, lp, c->finish, include_usage, out);
}

int pgd_api_chat_chunk_content(const pgd_api_meta *m, const pgd_api_choice *c, bool include_usage,
                               pgd_buf *out) {
    return text_chunk(m, c, "content", c->text, include_usage, out);
}

int pgd_api_chat_chunk_reasoning(const pgd_api_meta *m, const pgd_api_choice *c, bool include_usage,
                                 pgd_buf *out) {
    return text_chunk(m, c, "reasoning_content", c->reasoning, include_usage, out);
}

int pgd_api_chat_chunk_finish(const pgd_api_meta *m, uint32_t index, pgd_finish f,
                              bool include_usage, pgd_buf *out) {
    json_t *d = json_object();
    if (!d) return PGD_ENOMEM;
    return chat_chunk(m, index, d, json_null(), f, include_usage, out);
}

int pgd_api_chat_chunk_tool_calls(const pgd_api_meta *m, uint32_t index,
                                  const pgd_api_tool_call *calls, size_t n, size_t first,
                                  bool include_usage, pgd_buf *out) {
    json_t *d = json_object();
    if (!d || pgd__api_set(d, "tool_calls", tool_calls(calls, n, first, true))) {
        json_decref(d);
        return PGD_ENOMEM;
    }
    return chat_chunk(m, index, d, json_null(), PGD_FINISH_NONE, include_usage, out);
}

int pgd_api_chunk_usage(const pgd_api_meta *m, pgd_api_kind kind, const pgd_api_usage *u,
                        pgd_buf *out) {
    json_t *root = head(m, kind == PGD_API_CHAT ? "chat.completion.chunk" : "text_completion");
    TRY(!root);
    TRY(pgd__api_set(root, "choices", json_array()));
    TRY(pgd__api_set(root, "usage", usage_obj(u)));
    return finish(root, out);
fail:
    json_decref(root);
    return PGD_ENOMEM;
}

/* ---- completions ---------------------------------------------------------------------------- */

static json_t *completion_choice(const pgd_api_choice *c) {
    json_t *ch = json_object();
    if (!ch) return NULL;
    TRY(pgd__api_set(ch, "index", jint(c->index)));
    TRY(pgd__api_set(ch, "text", jstr(c->text)));
    TRY(pgd__api_set(ch, "logprobs", choice_logprobs(c, false)));
    TRY(pgd__api_set(ch, "finish_reason", finish_reason(c->finish)));
    if (c->prompt_logprobs) TRY(pgd__api_set(ch, "prompt_logprobs", prompt_logprobs(c)));
    return ch;
fail:
    json_decref(ch);
    return NULL;
}

int pgd_api_completion(const pgd_api_meta *m, const pgd_api_choice *choices, size_t n,
                       const pgd_api_usage *u, pgd_buf *out) {
    json_t *root = head(m, "text_completion"), *arr = json_array();
    if (!root || !arr) {
        json_decref(arr);
        goto fail;
    }
    TRY(pgd__api_set(root, "choices", arr));
    for (size_t i = 0; i < n; i++) TRY(json_array_append_new(arr, completion_choice(&choices[i])));
    TRY(pgd__api_set(root, "usage", usage_obj(u)));
    return finish(root, out);
fail:
    json_decref(root);
    return PGD_ENOMEM;
}

int pgd_api_completion_chunk(const pgd_api_meta *m, const pgd_api_choice *c, bool include_usage,
                             pgd_buf *out) {
    json_t *root = head(m, "text_completion"), *arr = json_array();
    if (!root || !arr) {
        json_decref(arr);
        goto fail;
    }
    TRY(pgd__api_set(root, "choices", arr));
    TRY(json_array_append_new(arr, completion_choice(c)));
    if (include_usage) TRY(pgd__api_set(root, "usage", json_null()));
    return finish(root, out);
fail:
    json_decref(root);
    return PGD_ENOMEM;
}

/* ---- models, tokenize, detokenize ------------------------------------------------------------ */

static json_t *model_obj(const pgd_api_model_info *mi) {
    json_t *o = json_object();
    if (!o) return NULL;
    const char *id = mi->id ? mi->id : "", *owner = mi->owned_by ? mi->owned_by : "pagoda";
    TRY(pgd__api_set(o, "id", pgd__api_jstr(id, strlen(id))));
    TRY(pgd__api_set(o, "object", json_string("model")));
    TRY(pgd__api_set(o, "created", jint(mi->created)));
    TRY(pgd__api_set(o, "owned_by", pgd__api_jstr(owner, strlen(owner))));
    if (mi->max_model_len > 0) TRY(pgd__api_set(o, "max_model_len", jint(mi->max_model_len)));
    return o;
fail:
    json_decref(o);
    return NULL;
}

int pgd_api_models_list(const pgd_api_model_info *models, size_t n, pgd_buf *out) {
    json_t *root = json_object(), *arr = json_array(), *a;
    TRY(!root || !arr);
    for (size_t i = 0; i < n; i++) TRY(json_array_append_new(arr, model_obj(&models[i])));
    TRY(pgd__api_set(root, "object", json_string("list")));
    a = arr;
    arr = NULL; /* set_new takes it, also when it fails */
    TRY(pgd__api_set(root, "data", a));
    return finish(root, out);
fail:
    json_decref(arr);
    json_decref(root);
    return PGD_ENOMEM;
}

int pgd_api_model_object(const pgd_api_model_info *model, pgd_buf *out) {
    return finish(model_obj(model), out);
}

int pgd_api_tokenize_response(const int32_t *ids, size_t n, int64_t max_model_len, pgd_buf *out) {
    json_t *root = json_object(), *arr = json_array(), *a;
    TRY(!root || !arr);
    for (size_t i = 0; i < n; i++) TRY(json_array_append_new(arr, jint(ids[i])));
    TRY(pgd__api_set(root, "count", jint((int64_t)n)));
    TRY(pgd__api_set(root, "max_model_len", jint(max_model_len)));
    a = arr;
    arr = NULL; /* set_new takes it, also when it fails */
    TRY(pgd__api_set(root, "tokens", a));
    return finish(root, out);
fail:
    json_decref(arr);
    json_decref(root);
    return PGD_ENOMEM;
}

int pgd_api_detokenize_response(const char *text, size_t len, pgd_buf *out) {
    json_t *root = json_object();
    TRY(!root);
    TRY(pgd__api_set(root, "prompt", pgd__api_jstr(text, len)));
    return finish(root, out);
fail:
    json_decref(root);
    return PGD_ENOMEM;
}

/* ---- SSE ------------------------------------------------------------------------------------- */

int pgd_api_sse_data(const char *json, size_t len, pgd_buf *out) {
    if (len && (memchr(json, '\n', len) || memchr(json, '\r', len)))
        return pgd_error_set(PGD_EINVAL, "an SSE data line cannot hold a line break");
    size_t before = out->len;
    int rc = pgd_buf_reserve(out, len + 8);
    if (!rc) rc = pgd_buf_append(out, "data: ", 6);
    if (!rc) rc = pgd_buf_append(out, json, len);
    if (!rc) rc = pgd_buf_append(out, "\n\n", 2);
    if (rc) {
        out->len = before;
        if (out->data) out->data[before] = '\0';
    }
    return rc;
}
