/*
 * server/routes.c — the HTTP endpoints and the life of an API request.
 *
 *   POST /v1/chat/completions, POST /v1/completions, POST /v1/responses, POST /v1/embeddings
 *        -> tokenize on the threadpool, submit to the engine, answer from engine events (one
 *        JSON body, or an SSE stream; api/responses.h builds a Responses answer from the same
 *        events; embeddings.c an embeddings answer from the vectors their FINISH events carry)
 *   (pgd_srv_start_completion, which router.c calls once the request is routed and allowed;
 *   the other endpoints — models, health, metrics, tokenize, detokenize, admin — are in
 *   endpoints.c)
 *
 * A completion request of a tenant meets the
 * tenant's quotas: max_tokens when parsed; concurrency and requests per minute before
 * tokenization; max_context and tokens per minute after it. It carries its tenant, weight,
 * priority and prefix-cache salt into the scheduler, and gives its quota back (rctx_free)
 * whichever way it ends. As its HTTP side ends it leaves the access log its numbers
 * (access_note).
 *
 * An in-flight request (pgd_rctx) is owned jointly by the HTTP side and the engine side: it is
 * freed when both are done — the HTTP request closed (on_close) and every engine request it
 * submitted delivered its `done` event. A client that leaves aborts its engine requests; the
 * scheduler frees their KV blocks at the next step boundary.
 *
 * Threading: loop thread only, except tokenize_work() which runs on libuv's threadpool and
 * reads only the model info (immutable: tokenizer, chat template) and its own rctx.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/error.h"
#include "api/reasoning.h"
#include "api/request.h"
#include "api/response.h"
#include "api/responses.h"
#include "common/clock.h"
#include "common/error.h"
#include "server/access.h"
#include "server/server.h"

/* One choice's accumulated output (non-streamed answers; logprobs for both). */
typedef struct choice_out {
    pgd_buf text;
    pgd_finish finish;
    bool finished;
    pgd_api_token_logprob *lp; /* [n_lp] */
    size_t n_lp, cap_lp;
    pgd_buf lp_bytes;   /* token texts, referenced by offset until the answer is built */
    int64_t text_chars; /* characters emitted so far (legacy text_offset) */
    uint64_t t_last_ns;
    pgd_tool_parser *tp;      /* chat with tools offered: the output's tool calls */
    size_t calls_sent;        /* streams: calls begun so far (the id and name sent) */
    size_t args_sent;         /* ... bytes of the last one's arguments sent */
    bool call_open;           /* ... the last one's arguments may still grow */
    pgd_buf shown;            /* streams with tools: a token's text known to be content */
    pgd_reasoning_parser *rp; /* chat with --reasoning-parser: the output's reasoning */
    pgd_buf rsn;         /* its reasoning (whole answers), or a token's share of it (streams) */
    int64_t n_reasoning; /* its tokens that were reasoning (the tags too) */
    pgd_buf said;        /* streams with reasoning: a token's text known to be content */
    float *emb;          /* embeddings: the input's pooled vector ([n_embd]) once in */
} choice_out;

typedef struct lp_ref {
    size_t off, len; /* into lp_bytes */
} lp_ref;

/* One prompt's logprobs from the engine, kept for vLLM's prompt_logprobs. */
typedef struct plp_store {
    pgd_sample_result *r; /* [n] prompt tokens 1, 2, ... */
    int32_t *rank;        /* [n] */
    size_t n;
} plp_store;

struct pgd_rctx {
    pgd_srv *srv;
    pgd_rctx *prev, *next;
    pgd_http_request *http; /* NULL once the HTTP side closed */
    pgd_http_stream *stream;
    pgd_api_kind kind;
    pgd_api_request req;
    bool parsed;
    pgd_api_resp_request rq; /* POST /v1/responses: what the response repeats (its chat request
                                is moved into req) */
    pgd_api_resp *resp;      /* POST /v1/responses: the response being built; NULL for others */
    char id[PGD_API_ID_CAP];
    int64_t created;
    uint64_t t_arrival_ns, t_first_ns;
    /* tokenization (threadpool) */
    uv_work_t work;
    bool working;
    pgd_tokens *prompts; /* [n_prompts] */
    pgd_buf *echo;       /* [n_prompts] the prompts' text when completions ask for echo */
    plp_store *plp;      /* [n_prompts] when vLLM's prompt_logprobs are asked */
    size_t n_prompts;
    int work_rc;
    char work_err[512];
    bool think_open; /* chat: the prompt ends inside an open reasoning block */
    /* engine */
    uint64_t *eids; /* [n_prompts] engine request ids */
    size_t n_submitted, n_done;
    uint32_t n_per_prompt;
    choice_out *ch; /* [n_prompts * n_per_prompt] */
    pgd_api_usage usage;
    bool aborted, errored, error_sent;
    pgd_caller who;
    pgd_grant grant;        /* the tenant's quota it holds, given back in rctx_free */
    const char *end_reason; /* "stop", "length", "abort"; NULL if it failed or never ran */
    double queue_s, ttft_s, e2e_s;
    int finished_reason; /* of choice 0 */
    int64_t tokens_out;  /* token events so far, all choices */
};

/* ---- small helpers --------------------------------------------------------------------- */

/* The field that holds a request's prompts: messages, prompt or input. */
static const char *prompt_param(const pgd_rctx *c) {
    return c->kind == PGD_API_CHAT ? "messages" : c->kind == PGD_API_EMBEDDING ? "input" : "prompt";
}

/* An error about a completion request: a /v1/responses request's parameter under its own name. */
static void respond_req_error(const pgd_rctx *c, pgd_http_request *req, pgd_api_error *e) {
    if (c->resp) pgd_api_resp_error(&c->rq, e);
    pgd_srv_respond_error(req, e);
}

static void respond_req_simple(const pgd_rctx *c, int status, const char *param, const char *msg) {
    pgd_api_error e;
    pgd_api_error_set(&e, status, param, NULL, "%s", msg);
    respond_req_error(c, c->http, &e);
}

int pgd_srv_error_body(void *arg, int status, const char *message, pgd_buf *out) {
    (void)arg;
    pgd_api_error e;
    pgd_api_error_set(&e, status, NULL, NULL, "%s", message);
    return pgd_api_error_body(&e, out);
}

/* ---- request context lifetime ---------------------------------------------------------- */

static void rctx_free(pgd_rctx *c) {
    pgd_srv *srv = c->srv;
    if (c->prev)
        c->prev->next = c->next;
    else
        srv->inflight = c->next;
    if (c->next) c->next->prev = c->prev;
    srv->n_inflight--;
    size_t n_ch = c->n_prompts * c->n_per_prompt;
    for (size_t i = 0; c->ch && i < n_ch; i++) {
        pgd_buf_free(&c->ch[i].text);
        pgd_buf_free(&c->ch[i].lp_bytes);
        for (size_t j = 0; j < c->ch[i].n_lp; j++) free((void *)c->ch[i].lp[j].top);
        free(c->ch[i].lp);
        pgd_tool_parser_free(c->ch[i].tp);
        pgd_buf_free(&c->ch[i].shown);
        pgd_reasoning_parser_free(c->ch[i].rp);
        pgd_buf_free(&c->ch[i].rsn);
        pgd_buf_free(&c->ch[i].said);
        free(c->ch[i].emb);
    }
    free(c->ch);
    for (size_t i = 0; c->prompts && i < c->n_prompts; i++) pgd_tokens_free(&c->prompts[i]);
    free(c->prompts);
    for (size_t i = 0; c->echo && i < c->n_prompts; i++) pgd_buf_free(&c->echo[i]);
    free(c->echo);
    for (size_t i = 0; c->plp && i < c->n_prompts; i++) {
        free(c->plp[i].r);
        free(c->plp[i].rank);
    }
    free(c->plp);
    free(c->eids);
    pgd_access_release(srv->access, &c->grant, c->end_reason, c->usage.prompt_tokens,
                       c->usage.completion_tokens, c->usage.cached_tokens, c->ttft_s, c->e2e_s);
    if (c->parsed) pgd_api_request_free(&c->req);
    pgd_api_resp_request_free(&c->rq);
    pgd_api_resp_free(c->resp);
    free(c);
}

static bool engine_open(const pgd_rctx *c) {
    return c->n_done < c->n_submitted;
}

static void maybe_free(pgd_rctx *c) {
    if (!c->http && !c->working && !engine_open(c)) rctx_free(c);
}

static void abort_engine(pgd_rctx *c) {
    if (c->aborted) return;
    c->aborted = true;
    for (size_t i = 0; i < c->n_submitted; i++) pgd_worker_abort(c->srv->worker, c->eids[i]);
}

/* The access log's note on a completion request (pgd_http_request_set_note), as its HTTP side
 * ends: its id (once submitted), tenant, tokens — the engine's count once it has finished, else the
 * prompt tokens as tokenized and the tokens generated so far (a request whose client left is
 * aborted after this) — time to the first token and how it ended. */
static void access_note(const pgd_rctx *c, pgd_http_request *req) {
    pgd_buf b = PGD_BUF_INIT;
    const char *before = pgd_http_request_note(req); /* request_id=..., from the head */
    int rc = pgd_buf_printf(&b, "%s%s", *before ? " " : "", before);
    if (!rc && c->n_submitted) rc = pgd_buf_printf(&b, " id=%s", c->id);
    if (!rc && c->who.kind == PGD_CALLER_TENANT && c->who.t)
        rc = pgd_buf_printf(&b, " tenant=%s", c->who.t->name);
    bool done = c->n_submitted && !engine_open(c);
    int64_t prompt = done ? c->usage.prompt_tokens : 0;
    for (size_t i = 0; !done && c->prompts && !c->working && i < c->n_prompts; i++)
        prompt += (int64_t)c->prompts[i].n * c->n_per_prompt;
    if (!rc && c->n_submitted)
        rc = pgd_buf_printf(&b, " prompt_tokens=%lld completion_tokens=%lld", (long long)prompt,
                            (long long)(done ? c->usage.completion_tokens : c->tokens_out));
    if (!rc && done)
        rc = pgd_buf_printf(&b, " cached_tokens=%lld", (long long)c->usage.cached_tokens);
    if (!rc && c->ttft_s >= 0) rc = pgd_buf_printf(&b, " ttft_ms=%.0f", c->ttft_s * 1e3);
    const char *end = c->errored       ? "error"
                      : c->end_reason  ? c->end_reason
                      : c->n_submitted ? "abort"
                                       : NULL;
    if (!rc && end) rc = pgd_buf_printf(&b, " finish=%s", end);
    if (!rc) pgd_http_request_set_note(req, b.data + (b.len > 0)); /* without the first ' ' */
    pgd_buf_free(&b);
}

static void on_http_close(pgd_http_request *req, pgd_http_close_reason reason, void *arg) {
    pgd_rctx *c = arg;
    access_note(c, req);
    c->http = NULL;
    c->stream = NULL;
    if (engine_open(c)) abort_engine(c); /* client gone (or timeout / shutdown) */
    (void)reason;
    maybe_free(c);
}

/* ---- SSE output ------------------------------------------------------------------------- */

static void sse_write_json(pgd_rctx *c, const pgd_buf *json) {
    if (!c->stream) return;
    pgd_buf f = PGD_BUF_INIT;
    if (pgd_api_sse_data(json->data, json->len, &f) == 0)
        pgd_http_stream_write(c->stream, f.data, f.len);
    pgd_buf_free(&f);
}

/* Writes b: events of a /v1/responses stream (or an error event), already framed. */
static void sse_write_events(pgd_rctx *c, const pgd_buf *b) {
    if (c->stream && b->len) pgd_http_stream_write(c->stream, b->data, b->len);
}

static void sse_end(pgd_rctx *c) {
    if (!c->stream) return;
    if (!c->resp) /* a Responses stream ends with its last event */
        pgd_http_stream_write(c->stream, PGD_API_SSE_DONE, strlen(PGD_API_SSE_DONE));
    pgd_http_stream_end(c->stream);
}

static pgd_api_meta meta_of(const pgd_rctx *c) {
    pgd_api_meta m = {.id = c->id, .created = c->created, .system_fingerprint = NULL};
    m.model.ptr = c->srv->served_name;
    m.model.len = strlen(c->srv->served_name);
    return m;
}

/* ---- completion requests: tokenize -> submit -------------------------------------------- */

static void tokenize_work(uv_work_t *w) {
    pgd_rctx *c = w->data;
    const pgd_model_info *info = c->srv->info;
    int rc = 0;
    c->n_prompts = c->kind == PGD_API_CHAT ? 1 : c->req.n_prompts;
    c->prompts = calloc(c->n_prompts, sizeof *c->prompts);
    if (!c->prompts) {
        c->work_rc = PGD_ENOMEM;
        return;
    }
    for (size_t i = 0; i < c->n_prompts && !rc; i++) {
        if (c->kind == PGD_API_CHAT) {
            const pgd_api_tools *t = &c->req.tools;
            pgd_chat_tools ct = {t->defs, t->defs_indent,
                                 t->choice == PGD_TOOL_CHOICE_NONE ? 0 : t->n};
            pgd_chat_render_opts o = {.add_generation_prompt = true,
                                      .enable_thinking = c->req.enable_thinking,
                                      .reasoning = c->req.messages.reasoning};
            rc = pgd_encode_chat_with(info, c->req.messages.msgs, c->req.messages.n, &ct, &o,
                                      &c->prompts[0]);
            c->think_open = !rc && c->srv->reasoning &&
                            pgd_srv_reasoning_open(c->srv, c->prompts[0].ids, c->prompts[0].n);
        } else if (c->kind == PGD_API_EMBEDDING) {
            rc = pgd_srv_embed_encode(info, &c->req.prompts[i], &c->prompts[i]);
        } else if (c->req.prompts[i].is_tokens) {
            for (size_t j = 0; j < c->req.prompts[i].n_ids && !rc; j++)
                rc = pgd_tokens_push(&c->prompts[i], c->req.prompts[i].ids[j]);
        } else {
            pgd_str t = c->req.prompts[i].text;
            rc = pgd_encode_text(info, t.ptr, t.len, false, &c->prompts[i]);
        }
    }
    /* echo: the prompt as given (text), or the text of its token ids. */
    if (!rc && c->kind == PGD_API_COMPLETION && c->req.echo) {
        c->echo = calloc(c->n_prompts, sizeof *c->echo);
        if (!c->echo) rc = PGD_ENOMEM;
        for (size_t i = 0; i < c->n_prompts && !rc; i++) {
            const pgd_api_prompt *pr = &c->req.prompts[i];
            rc = pr->is_tokens ? pgd_detokenize(info->tok, c->prompts[i].ids, c->prompts[i].n,
                                                false, &c->echo[i])
                               : pgd_buf_append(&c->echo[i], pr->text.ptr, pr->text.len);
        }
    }
    c->work_rc = rc;
    if (rc) snprintf(c->work_err, sizeof c->work_err, "%s", pgd_error_detail());
}

static void submit_all(pgd_rctx *c);
static bool wants_prompt_logprobs(const pgd_rctx *c);
static int32_t engine_prompt_logprobs(const pgd_rctx *c);
static int add_first_logprobs(pgd_rctx *c);
static void send_echo(pgd_rctx *c, uint32_t g);

static void tokenize_done(uv_work_t *w, int status) {
    pgd_rctx *c = w->data;
    c->working = false;
    if (!c->http || status == UV_ECANCELED) { /* the client left while we tokenized */
        maybe_free(c);
        return;
    }
    if (c->work_rc) {
        respond_req_simple(c, c->work_rc == PGD_ENOMEM ? 500 : 400, prompt_param(c),
                           c->work_err[0] ? c->work_err : pgd_strerror(c->work_rc));
        return;
    }
    submit_all(c);
}

/* Output tokens of each prompt (outs[i]; 0 = up to the context) under the tenant's caps, and
 * the tokens the request reserves of its tokens per minute (*reserve): prompts + n × outputs.
 * Without max_tokens the output may reach the context, the tenant's max_tokens and
 * max_context, and what its tokens per minute can ever hold. 0, or PGD_EINVAL with *e a 400. */
static int plan_outputs(pgd_rctx *c, int64_t *outs, double *reserve, pgd_api_error *e) {
    const pgd_tenant_live *t = c->grant.t;
    const char *pparam = prompt_param(c);
    bool embed = c->kind == PGD_API_EMBEDDING; /* nothing generated either */
    uint64_t cap = pgd_req_token_cap(&c->srv->lim), prompts = 0, n = c->n_per_prompt;
    int64_t mt = c->req.max_tokens;
    double total = 0;
    for (size_t i = 0; i < c->n_prompts; i++) {
        uint64_t np = c->prompts[i].n;
        int64_t room = cap > np ? (int64_t)(cap - np) : 1;
        outs[i] = 0;
        if (t) {
            const pgd_tenant_limits *l = &t->conf.limits;
            if (l->max_context != PGD_TENANT_UNLIMITED) {
                if (embed && (int64_t)np > l->max_context)
                    return pgd_api_error_set(e, 400, pparam, "context_length_exceeded",
                                             "the input (%llu tokens) exceeds this key's "
                                             "max_context of %lld tokens",
                                             (unsigned long long)np, (long long)l->max_context);
                if (!embed && (int64_t)np + (mt > 0 ? mt : 1) > l->max_context)
                    return pgd_api_error_set(
                        e, 400, mt > 0 ? "max_tokens" : pparam, "context_length_exceeded",
                        "the prompt (%llu tokens) and max_tokens (%lld) exceed this key's "
                        "max_context of %lld tokens",
                        (unsigned long long)np, (long long)(mt > 0 ? mt : 1),
                        (long long)l->max_context);
                if (l->max_context - (int64_t)np < room) room = l->max_context - (int64_t)np;
            }
            if (l->max_tokens != PGD_TENANT_UNLIMITED && l->max_tokens < room)
                room = l->max_tokens > 0 ? l->max_tokens : 1;
            if (mt <= 0) outs[i] = room;
        }
        if (mt > 0) outs[i] = mt;
        prompts += np;
        if (c->req.prompt_only || embed) room = outs[i] = 0; /* nothing is generated */
        total += (double)np + (double)n * (double)(outs[i] > 0 ? outs[i] : room);
    }
    /* Without max_tokens, the output is capped by what the bucket holds when full. */
    if (t && mt <= 0 && t->conf.limits.tpm != PGD_TENANT_UNLIMITED &&
        total > (double)t->conf.limits.tpm && (double)prompts < (double)t->conf.limits.tpm) {
        int64_t per = (t->conf.limits.tpm - (int64_t)prompts) / (int64_t)(n * c->n_prompts);
        if (per >= 1) {
            total = (double)prompts;
            for (size_t i = 0; i < c->n_prompts; i++) {
                if (outs[i] > per) outs[i] = per;
                total += (double)n * (double)outs[i];
            }
        }
    }
    *reserve = total;
    return 0;
}

static void submit_all(pgd_rctx *c) {
    pgd_srv *srv = c->srv;
    const char *pparam = prompt_param(c);
    pgd_api_error e;
    /* Past the shutdown deadline (in-flight requests aborted) nothing new may start: a request
     * still tokenizing then would otherwise run to its end and hold the shutdown up. */
    if (srv->drain_aborted) {
        pgd_srv_respond_simple_error(c->http, 503, NULL, NULL, "the server is shutting down");
        return;
    }
    c->n_per_prompt = (uint32_t)(c->req.n > 0 ? c->req.n : 1);
    c->eids = calloc(c->n_prompts, sizeof *c->eids);
    c->ch = calloc(c->n_prompts * c->n_per_prompt, sizeof *c->ch);
    if (c->req.prompt_logprobs >= 0) c->plp = calloc(c->n_prompts, sizeof *c->plp);
    if (!c->eids || !c->ch || (c->req.prompt_logprobs >= 0 && !c->plp)) {
        pgd_srv_respond_simple_error(c->http, 500, NULL, NULL, "out of memory");
        return;
    }
    /* echo: each choice's text starts with its prompt (streams send it as the first chunk),
     * its logprobs with the prompt tokens' when asked */
    for (size_t k = 0; c->echo && !c->req.stream && k < c->n_prompts * c->n_per_prompt; k++) {
        const pgd_buf *t = &c->echo[k / c->n_per_prompt];
        if (t->len && pgd_buf_append(&c->ch[k].text, t->data, t->len)) {
            pgd_srv_respond_simple_error(c->http, 500, NULL, NULL, "out of memory");
            return;
        }
    }
    if (wants_prompt_logprobs(c) && add_first_logprobs(c)) {
        pgd_srv_respond_simple_error(c->http, 500, NULL, NULL, "out of memory");
        return;
    }
    bool reasons = c->kind == PGD_API_CHAT && c->srv->reasoning > 0;
    for (size_t k = 0; k < c->n_per_prompt; k++) {
        if ((c->req.tools.choice != PGD_TOOL_CHOICE_NONE &&
             pgd_tool_parser_new(&c->req.tools, &c->ch[k].tp)) ||
            (reasons && pgd_reasoning_parser_new(c->think_open, &c->ch[k].rp))) {
            pgd_srv_respond_simple_error(c->http, 500, NULL, NULL, "out of memory");
            return;
        }
    }
    int64_t *outs = calloc(c->n_prompts, sizeof *outs);
    double reserve = 0;
    if (!outs) {
        pgd_srv_respond_simple_error(c->http, 500, NULL, NULL, "out of memory");
        return;
    }
    if (plan_outputs(c, outs, &reserve, &e) ||
        pgd_access_reserve(srv->access, &c->grant, c->http, reserve, &e)) {
        free(outs);
        respond_req_error(c, c->http, &e);
        return;
    }
    const pgd_tenant_live *t = c->grant.t;
    uint64_t salt = pgd_access_cache_salt(t, c->req.cache_salt.ptr, c->req.cache_salt.len);
    uint64_t seed = pgd_sampler_random_seed();
    pgd_request *rs = calloc(c->n_prompts, sizeof *rs);
    int rc;
    if (!rs) {
        pgd_api_error_set(&e, 500, NULL, NULL, "out of memory");
        goto refuse;
    }
    for (size_t i = 0; i < c->n_prompts; i++) {
        pgd_request *r = &rs[i];
        pgd_request_init(r);
        r->prompt = c->prompts[i].ids;
        r->n_prompt = (uint32_t)c->prompts[i].n;
        pgd_api_request_seq_params(&c->req, 0, seed + i * 1000003ull, &r->params);
        if (outs[i] > 0) r->params.max_tokens = outs[i];
        r->params.cache_salt = salt;
        r->n = c->n_per_prompt;
        r->priority = c->req.priority;
        r->prompt_only = c->req.prompt_only;
        r->pooling = c->kind == PGD_API_EMBEDDING ? srv->pooling : PGD_POOL_NONE;
        r->prompt_logprobs = engine_prompt_logprobs(c);
        if (t) {
            r->tenant = t->id;
            r->weight = (float)t->conf.weight;
            int64_t p = (int64_t)t->conf.priority + c->req.priority;
            r->priority = p > INT32_MAX ? INT32_MAX : p < INT32_MIN ? INT32_MIN : (int32_t)p;
        }
        r->user = c;
    }
    /* All prompts or none: a request is never half queued, so a refusal aborts nothing. */
    rc = pgd_worker_submit_n(srv->worker, rs, c->n_prompts, c->eids);
    free(rs);
    if (rc == PGD_EFULL) {
        /* the whole server is overloaded, not this caller: 503, as for a proxy */
        pgd_api_error_set(&e, 503, NULL, NULL,
                          "the server is busy: too many requests are waiting; retry shortly");
        pgd_http_request_set_header(c->http, "Retry-After", "1");
        goto refuse;
    }
    if (rc == PGD_ESHUTDOWN) {
        pgd_api_error_set(&e, 503, NULL, NULL, "the server is shutting down");
        goto refuse;
    }
    if (rc) { /* checked by the worker: the param names what is wrong; or out of memory, or the
               * device lost (503: the server is stopping) */
        const char *param = pgd_error_param();
        if (param && !strcmp(param, "prompt")) param = pparam;
        pgd_api_error_set(&e, pgd_api_status_for_code(rc), rc == PGD_EINVAL ? param : NULL, NULL,
                          "%s", pgd_error_detail());
        goto refuse;
    }
    c->n_submitted = c->n_prompts;
    free(outs);
    outs = NULL;
    if (c->req.stream) {
        if (pgd_http_stream_start(c->http, 200, NULL, NULL, 0, PGD_HTTP_STREAM_SSE, &c->stream)) {
            abort_engine(c);
            return;
        }
        pgd_api_meta m = meta_of(c);
        if (c->resp) {
            pgd_buf b = PGD_BUF_INIT;
            if (!pgd_api_resp_begin(c->resp, &b)) sse_write_events(c, &b);
            pgd_buf_free(&b);
            return;
        }
        for (uint32_t k = 0; k < c->n_prompts * c->n_per_prompt; k++) {
            if (c->kind == PGD_API_COMPLETION) {
                /* a prompt whose logprobs are still to come is echoed once they are in */
                if (c->echo && (!wants_prompt_logprobs(c) || c->prompts[k / c->n_per_prompt].n < 2))
                    send_echo(c, k);
                continue;
            }
            pgd_buf b = PGD_BUF_INIT;
            if (pgd_api_chat_chunk_first(&m, k, c->req.include_usage, &b) == 0)
                sse_write_json(c, &b);
            pgd_buf_free(&b);
        }
    }
    return;
refuse:
    free(outs);
    respond_req_error(c, c->http, &e);
}

/* previous_response_id: the caller's stored response's conversation (api/responses.h). */
static const json_t *stored_conversation(void *ud, const char *id) {
    const pgd_rctx *c = ud;
    return pgd_resp_store_conversation(c->srv->responses, id, pgd_srv_owner(&c->who));
}

/* Parses the body of a completion request into c->req (for /v1/responses, c->rq and its chat
 * request, and c->resp to build the answer). 0, or the error in *e. */
static int parse_body(pgd_rctx *c, bool responses, pgd_api_error *e) {
    pgd_str body = pgd_http_request_body(c->http);
    if (!responses) {
        int rc = pgd_api_request_parse(c->kind, body.ptr, body.len, &c->req, e);
        c->parsed = !rc;
        return rc;
    }
    int rc = pgd_api_resp_request_parse_stored(
        body.ptr, body.len, c->srv->responses ? stored_conversation : NULL, c, &c->rq, e);
    if (rc) return rc;
    if (!c->srv->responses) pgd_api_resp_request_no_store(&c->rq);
    c->req = c->rq.chat; /* moved: c->rq keeps what the response repeats */
    memset(&c->rq.chat, 0, sizeof c->rq.chat);
    c->parsed = true;
    pgd_api_meta m = meta_of(c);
    if (pgd_api_resp_new(&m, &c->rq, c->req.stream, &c->resp))
        return pgd_api_error_set(e, 500, NULL, NULL, "out of memory");
    return 0;
}

void pgd_srv_start_completion(pgd_srv *srv, pgd_http_request *req, pgd_api_kind kind,
                              bool responses, const pgd_caller *who) {
    pgd_rctx *c = calloc(1, sizeof *c);
    if (!c) {
        pgd_http_respond_error(req, 500, "out of memory", NULL, 0);
        return;
    }
    c->srv = srv;
    c->kind = kind;
    c->t_arrival_ns = pgd_now_ns();
    c->created = (int64_t)time(NULL);
    c->finished_reason = -1;
    c->who = *who;
    c->ttft_s = c->e2e_s = -1;
    if (responses)
        pgd_api_format_id(c->id, "resp_", pgd_sampler_random_seed(), pgd_sampler_random_seed());
    else
        pgd_api_new_id(c->id, kind);
    c->next = srv->inflight;
    if (c->next) c->next->prev = c;
    srv->inflight = c;
    srv->n_inflight++;
    c->http = req;
    pgd_http_request_set_on_close(req, on_http_close, c);

    pgd_api_error e;
    if (parse_body(c, responses, &e)) {
        pgd_srv_respond_error(req, &e);
        return;
    }
    if (!pgd_srv_model_ok(srv, c->req.model)) {
        pgd_api_error_model_not_found(&e, c->req.model.ptr, c->req.model.len);
        pgd_srv_respond_error(req, &e);
        return;
    }
    const pgd_chat_template *tmpl = srv->info->tmpl;
    if (tmpl) c->req.tools.format = pgd_chat_template_tool_format(tmpl);
    if (c->req.tools.choice != PGD_TOOL_CHOICE_NONE && tmpl &&
        c->req.tools.format == PGD_CHAT_TOOLS_NONE) {
        pgd_api_error_set(&e, 400, "tools", NULL,
                          "tool calling needs a chat template with a tool format: pagoda renders "
                          "tools for chatml templates (the Hermes <tool_call> format) and Llama "
                          "3.1+ templates (JSON calls); this model's template is %s",
                          pgd_chat_family_name(pgd_chat_template_family(tmpl)));
        respond_req_error(c, req, &e);
        return;
    }
    if (kind == PGD_API_EMBEDDING && !srv->lim.embeddings) {
        pgd_srv_respond_simple_error(req, 400, "input", NULL,
                                     "embeddings are not available on this backend yet (the CPU "
                                     "backend computes them: --device cpu)");
        return;
    }
    if (kind == PGD_API_EMBEDDING && c->req.dimensions > (int64_t)srv->info->cfg.n_embd) {
        pgd_api_error_set(&e, 400, "dimensions", NULL,
                          "dimensions is %lld but this model's embeddings have %u",
                          (long long)c->req.dimensions, srv->info->cfg.n_embd);
        respond_req_error(c, req, &e);
        return;
    }
    if (c->req.n > 1 && c->req.n > (int)PGD_REQUEST_MAX_N) {
        pgd_srv_respond_simple_error(req, 400, "n", NULL, "n is too large");
        return;
    }
    pgd_tenant_live *t = who->kind == PGD_CALLER_TENANT ? who->t : NULL;
    int64_t cap = t ? t->conf.limits.max_tokens : PGD_TENANT_UNLIMITED;
    if (cap != PGD_TENANT_UNLIMITED && c->req.max_tokens > cap) {
        pgd_api_error_set(&e, 400, "max_tokens", NULL,
                          "max_tokens is %lld but this key may ask for at most %lld",
                          (long long)c->req.max_tokens, (long long)cap);
        respond_req_error(c, req, &e);
        return;
    }
    if (pgd_access_admit(srv->access, t, req, &c->grant, &e)) {
        pgd_srv_respond_error(req, &e);
        return;
    }
    c->work.data = c;
    c->working = true;
    if (uv_queue_work(srv->loop, &c->work, tokenize_work, tokenize_done)) {
        c->working = false;
        pgd_srv_respond_simple_error(req, 500, NULL, NULL, "cannot queue the tokenizer job");
    }
}

/* ---- engine events -> responses --------------------------------------------------------- */

static choice_out *choice_of(pgd_rctx *c, const pgd_event *ev, uint32_t *global) {
    size_t p = 0;
    while (p < c->n_submitted && c->eids[p] != ev->id) p++;
    if (p == c->n_submitted) return NULL;
    *global = (uint32_t)(p * c->n_per_prompt + ev->index);
    return &c->ch[*global];
}

/* Text of a token for logprobs (exact bytes), appended to the choice's byte store. */
static lp_ref token_bytes(pgd_rctx *c, choice_out *co, int32_t id) {
    lp_ref r = {co->lp_bytes.len, 0};
    pgd_token_piece(c->srv->info->tok, id, true, &co->lp_bytes);
    r.len = co->lp_bytes.len - r.off;
    return r;
}

/* Builds one token's logprob entry; `tops` is malloc'd [n_top]; texts point into lp_bytes
 * (valid until lp_bytes grows: fix_pointers() re-bases them before use). */
static int add_logprob(pgd_rctx *c, choice_out *co, const pgd_sample_result *s) {
    if (co->n_lp == co->cap_lp) {
        size_t cap = co->cap_lp ? co->cap_lp * 2 : 16;
        pgd_api_token_logprob *p = realloc(co->lp, cap * sizeof *p);
        if (!p) return PGD_ENOMEM;
        co->lp = p;
        co->cap_lp = cap;
    }
    pgd_api_token_logprob *t = &co->lp[co->n_lp++];
    memset(t, 0, sizeof *t);
    lp_ref r = token_bytes(c, co, s->token);
    t->text.ptr = (const char *)(uintptr_t)r.off; /* offset until re-based */
    t->text.len = r.len;
    t->logprob = s->logprob;
    pgd_api_top_logprob *tops = s->n_top ? calloc((size_t)s->n_top, sizeof *tops) : NULL;
    for (int32_t k = 0; tops && k < s->n_top; k++) {
        lp_ref tr = token_bytes(c, co, s->top[k].token);
        tops[k].text.ptr = (const char *)(uintptr_t)tr.off;
        tops[k].text.len = tr.len;
        tops[k].logprob = s->top[k].logprob;
    }
    t->top = tops;
    t->n_top = tops ? (size_t)s->n_top : 0;
    return 0;
}

/* Turn stored offsets into pointers into lp_bytes for entries [from, n_lp). */
static void rebase(choice_out *co, size_t from) {
    const char *base = co->lp_bytes.data ? co->lp_bytes.data : "";
    for (size_t i = from; i < co->n_lp; i++) {
        co->lp[i].text.ptr = base + (uintptr_t)co->lp[i].text.ptr;
        for (size_t k = 0; k < co->lp[i].n_top; k++) {
            pgd_api_top_logprob *tp = (pgd_api_top_logprob *)&co->lp[i].top[k];
            tp->text.ptr = base + (uintptr_t)tp->text.ptr;
        }
    }
}

static void unbase(choice_out *co, size_t from) {
    const char *base = co->lp_bytes.data ? co->lp_bytes.data : "";
    for (size_t i = from; i < co->n_lp; i++) {
        co->lp[i].text.ptr = (const char *)(uintptr_t)(co->lp[i].text.ptr - base);
        for (size_t k = 0; k < co->lp[i].n_top; k++) {
            pgd_api_top_logprob *tp = (pgd_api_top_logprob *)&co->lp[i].top[k];
            tp->text.ptr = (const char *)(uintptr_t)(tp->text.ptr - base);
        }
    }
}

static int64_t utf8_chars(const char *s, size_t n) {
    int64_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

/* Streams: logprob entries from `from` on are sent; they are not needed again. */
static void drop_logprobs(choice_out *co, size_t from) {
    for (size_t i = from; i < co->n_lp; i++) free((void *)co->lp[i].top);
    co->n_lp = from;
    pgd_buf_reset(&co->lp_bytes);
}

/* Chat streams: a chunk of content without logprobs (nothing when text is empty). */
static void send_chat_content(pgd_rctx *c, uint32_t g, pgd_str text) {
    if (!text.len) return;
    pgd_api_meta m = meta_of(c);
    pgd_api_choice ch = {.index = g, .text = text};
    pgd_buf b = PGD_BUF_INIT;
    if (!pgd_api_chat_chunk_content(&m, &ch, c->req.include_usage, &b)) sse_write_json(c, &b);
    pgd_buf_free(&b);
}

/* Streams with tools: content found by the parser before a call of the same feed (no logprobs:
 * the token's go with what follows). */
static void send_content_before(pgd_rctx *c, uint32_t g, pgd_str text, pgd_buf *b) {
    if (c->resp) { /* into b, with the calls' events, in order */
        if (text.len) pgd_api_resp_text(c->resp, text, NULL, 0, b);
        return;
    }
    send_chat_content(c, g, text);
}

/* Chat streams: a chunk of the calls part[0..np) (indexes first, first + 1, ...), unless it is
 * only a continuation that brings nothing. b is left empty. */
static void send_call_chunk(pgd_rctx *c, uint32_t g, const pgd_api_tool_call *part, size_t np,
                            size_t first, pgd_buf *b) {
    if (!np || (np == 1 && !part[0].id[0] && !part[0].arguments.len)) return;
    pgd_api_meta m = meta_of(c);
    if (!pgd_api_chat_chunk_tool_calls(&m, g, part, np, first, c->req.include_usage, b))
        sse_write_json(c, b);
    pgd_buf_reset(b);
}

/* Streams: what the choice's parser found of calls in one feed / end, in the output's order —
 * first the growth of the call open before it (no content comes while a call is open), then
 * for each new call the feed's content before it (*text from the start: sent here) and the
 * call: its id, name and arguments so far. *text becomes the content after the last new call,
 * for the caller to send. Chat: the calls in chunks of tool_calls deltas; a Responses stream:
 * function_call items' events (the logprobs held for the text are dropped). */
static void send_tool_calls(pgd_rctx *c, choice_out *co, uint32_t g, pgd_str *text) {
    size_t n;
    const pgd_api_tool_call *calls = pgd_tool_parser_calls(co->tp, &n);
    size_t from = co->call_open ? co->calls_sent - 1 : co->calls_sent;
    if (n <= from) return;
    /* [n - from] a chat chunk's calls (a Responses stream writes each call's events at once) */
    pgd_api_tool_call *part = c->resp ? NULL : malloc((n - from) * sizeof *part);
    if (!c->resp && !part) return;
    size_t np = 0, first = from, shown = 0;
    int rc = 0;
    pgd_buf b = PGD_BUF_INIT;
    for (size_t k = from; k < n && !rc; k++) {
        pgd_api_tool_call d = calls[k];
        bool cont = k < co->calls_sent; /* begun before: what its arguments grew by */
        if (!cont && d.content_at > shown && d.content_at <= text->len) { /* content first */
            send_call_chunk(c, g, part, np, first, &b); /* chat: the calls before it first */
            np = 0;
            first = k;
            send_content_before(c, g, (pgd_str){text->ptr + shown, d.content_at - shown}, &b);
            shown = d.content_at;
        }
        size_t skip = cont ? co->args_sent : 0;
        d.arguments = (pgd_str){d.arguments.ptr + skip, d.arguments.len - skip};
        if (c->resp) {
            rc = cont ? pgd_api_resp_call_args(c->resp, d.arguments, &b)
                      : pgd_api_resp_call_begin(c->resp, &d, &b);
            if (!rc && !d.open) rc = pgd_api_resp_call_done(c->resp, d.cut, &b);
        } else {
            if (cont) d.id[0] = '\0'; /* a continuation: the index and arguments only */
            part[np++] = d;
        }
        co->args_sent = calls[k].arguments.len;
    }
    co->calls_sent = n;
    co->call_open = calls[n - 1].open;
    *text = (pgd_str){text->ptr + shown, text->len - shown};
    if (c->resp) {
        if (!rc) sse_write_events(c, &b);
        drop_logprobs(co, 0);
    } else {
        send_call_chunk(c, g, part, np, first, &b);
    }
    pgd_buf_free(&b);
    free(part);
}

/* A Responses stream: text shown with the logprobs held so far (every entry of the choice: with
 * tools, a token's text may be held back and its entry waits for it). */
static void send_resp_text(pgd_rctx *c, choice_out *co, pgd_str text) {
    pgd_buf b = PGD_BUF_INIT;
    rebase(co, 0);
    if (!pgd_api_resp_text(c->resp, text, co->lp, co->n_lp, &b)) sse_write_events(c, &b);
    pgd_buf_free(&b);
    drop_logprobs(co, 0);
}

/* The end of a streamed choice with tools: what its parser held back, as content and calls. */
static void end_tool_calls(pgd_rctx *c, choice_out *co, uint32_t g) {
    pgd_buf rest = PGD_BUF_INIT;
    if (pgd_tool_parser_end(co->tp, &rest)) {
        pgd_buf_free(&rest);
        return;
    }
    pgd_str text = {rest.data ? rest.data : "", rest.len};
    send_tool_calls(c, co, g, &text);
    if (c->resp)
        send_resp_text(c, co, text);
    else
        send_chat_content(c, g, text);
    pgd_buf_free(&rest);
}

/* Streams with reasoning: a token's text (end: what the parser held, at the end of the output)
 * split; its reasoning goes out at once in a chunk of its own, with the token's logprobs when
 * *lp (then sent: *lp false); *text becomes its content, for what follows to send. 0 or
 * PGD_ENOMEM. */
static int stream_reasoning(pgd_rctx *c, choice_out *co, uint32_t g, pgd_str *text, bool *lp,
                            size_t lp_from, bool end) {
    pgd_buf_reset(&co->rsn);
    pgd_buf_reset(&co->said);
    int rc = end ? pgd_reasoning_parser_end(co->rp, &co->rsn, &co->said)
                 : pgd_reasoning_parser_feed(co->rp, text->ptr, text->len, &co->rsn, &co->said);
    if (rc) return rc;
    *text = (pgd_str){co->said.data ? co->said.data : "", co->said.len};
    if (!co->rsn.len) return 0;
    if (c->resp) { /* a reasoning item's text (the tokens' logprobs wait for the message's) */
        pgd_buf b = PGD_BUF_INIT;
        rc = pgd_api_resp_reasoning(c->resp, (pgd_str){co->rsn.data, co->rsn.len}, &b);
        if (!rc) sse_write_events(c, &b);
        pgd_buf_free(&b);
        return rc;
    }
    pgd_api_meta m = meta_of(c);
    if (*lp) rebase(co, lp_from);
    pgd_api_choice ch = {.index = g,
                         .logprobs = *lp,
                         .tokens = *lp ? co->lp + lp_from : NULL,
                         .n_tokens = *lp ? co->n_lp - lp_from : 0,
                         .reasoning = {co->rsn.data, co->rsn.len}};
    pgd_buf b = PGD_BUF_INIT;
    if (!pgd_api_chat_chunk_reasoning(&m, &ch, c->req.include_usage, &b)) sse_write_json(c, &b);
    pgd_buf_free(&b);
    if (*lp) drop_logprobs(co, lp_from);
    *lp = false;
    return 0;
}

static bool wants_logprobs(const pgd_rctx *c) {
    return c->kind == PGD_API_CHAT ? c->req.logprobs : c->req.logprobs || c->req.top_logprobs > 0;
}

static void on_token(pgd_rctx *c, const pgd_event *ev) {
    uint32_t g;
    choice_out *co = choice_of(c, ev, &g);
    if (!co) return;
    c->tokens_out++;
    pgd_pagoda_metrics *pm = &c->srv->pm;
    if (!c->t_first_ns) {
        c->t_first_ns = ev->t_ns;
        if (ev->t_ns > c->t_arrival_ns) {
            c->ttft_s = (ev->t_ns - c->t_arrival_ns) * 1e-9;
            pgd_series_observe(pm->ttft, c->ttft_s);
        }
    }
    if (co->t_last_ns && ev->t_ns > co->t_last_ns)
        pgd_series_observe(pm->itl, (ev->t_ns - co->t_last_ns) * 1e-9);
    co->t_last_ns = ev->t_ns;
    bool lp = wants_logprobs(c) && ev->logprobs;
    size_t lp_from = co->n_lp;
    if (lp && add_logprob(c, co, ev->logprobs)) lp = false;
    bool thinking = co->rp && pgd_reasoning_parser_thinking(co->rp);
    if (c->req.stream) {
        pgd_str text = {ev->text, ev->text_len};
        if (co->rp && stream_reasoning(c, co, g, &text, &lp, lp_from, false)) {
            abort_engine(c);
            return;
        }
        co->n_reasoning += co->rp && (thinking || pgd_reasoning_parser_thinking(co->rp));
        if (co->tp) {
            pgd_buf_reset(&co->shown);
            if (pgd_tool_parser_feed(co->tp, text.ptr, text.len, &co->shown)) {
                abort_engine(c);
                return;
            }
            text = (pgd_str){co->shown.data ? co->shown.data : "", co->shown.len};
            send_tool_calls(c, co, g, &text);
        }
        if (c->resp) {
            if (text.len || (!co->tp && !co->rp)) send_resp_text(c, co, text);
            return;
        }
        if (!text.len && !lp) return;
        pgd_api_meta m = meta_of(c);
        rebase(co, lp_from);
        pgd_api_choice ch = {.index = g,
                             .text = text,
                             .finish = PGD_FINISH_NONE,
                             .logprobs = lp,
                             .tokens = lp ? co->lp + lp_from : NULL,
                             .n_tokens = lp ? co->n_lp - lp_from : 0,
                             .text_offset = co->text_chars};
        pgd_buf b = PGD_BUF_INIT;
        int rc = c->kind == PGD_API_CHAT
                     ? pgd_api_chat_chunk_content(&m, &ch, c->req.include_usage, &b)
                     : pgd_api_completion_chunk(&m, &ch, c->req.include_usage, &b);
        if (!rc) sse_write_json(c, &b);
        pgd_buf_free(&b);
        drop_logprobs(co, lp_from);
    } else if (co->rp) { /* reasoning into rsn, content into text, as they are decided */
        if (pgd_reasoning_parser_feed(co->rp, ev->text, ev->text_len, &co->rsn, &co->text)) {
            abort_engine(c);
            return;
        }
        co->n_reasoning += thinking || pgd_reasoning_parser_thinking(co->rp);
    } else if (ev->text_len) {
        pgd_buf_append(&co->text, ev->text, ev->text_len);
    }
    co->text_chars += utf8_chars(ev->text, ev->text_len);
}

/* ---- echo with logprobs ---------------------------------------------------------------------
 * Every choice of a prompt starts with the prompt tokens' logprobs: the first token's (null:
 * nothing comes before it) added at submit, the others from the engine's PROMPT_LOGPROBS
 * events, which come before any token of the prompt. A stream sends the prompt (the echo text
 * with those logprobs) as its first chunk once they are all in. */

static bool wants_prompt_logprobs(const pgd_rctx *c) {
    return c->kind == PGD_API_COMPLETION && c->req.echo && wants_logprobs(c);
}

/* What the engine computes, for echo's logprobs and vLLM's prompt_logprobs: the alternatives of
 * the larger ask (each answer takes its own count). */
static int32_t engine_prompt_logprobs(const pgd_rctx *c) {
    int32_t k = wants_prompt_logprobs(c) ? c->req.top_logprobs : -1;
    return c->req.prompt_logprobs > k ? c->req.prompt_logprobs : k;
}

/* Keeps an event's entries for vLLM's prompt_logprobs. 0 or PGD_ENOMEM. */
static int keep_prompt_logprobs(plp_store *st, const pgd_event *ev) {
    size_t n = st->n + ev->n_lp;
    pgd_sample_result *r = realloc(st->r, n * sizeof *r);
    if (r) st->r = r;
    int32_t *rank = realloc(st->rank, n * sizeof *rank);
    if (rank) st->rank = rank;
    if (!r || !rank) return PGD_ENOMEM;
    memcpy(st->r + st->n, ev->prompt_lp, ev->n_lp * sizeof *r);
    memcpy(st->rank + st->n, ev->prompt_rank, ev->n_lp * sizeof *rank);
    st->n = n;
    return 0;
}

static int add_first_logprobs(pgd_rctx *c) {
    for (uint32_t k = 0; k < c->n_prompts * c->n_per_prompt; k++) {
        pgd_sample_result first = {.token = c->prompts[k / c->n_per_prompt].ids[0], .logprob = NAN};
        if (add_logprob(c, &c->ch[k], &first)) return PGD_ENOMEM;
    }
    return 0;
}

/* Stream: choice g's echo chunk (its prompt's text; its logprobs when asked), once. */
static void send_echo(pgd_rctx *c, uint32_t g) {
    choice_out *co = &c->ch[g];
    const pgd_buf *t = &c->echo[g / c->n_per_prompt];
    bool lp = wants_prompt_logprobs(c);
    if (!t->len && !lp) return;
    pgd_api_meta m = meta_of(c);
    rebase(co, 0);
    pgd_api_choice ch = {.index = g,
                         .text = {t->data ? t->data : "", t->len},
                         .logprobs = lp,
                         .tokens = lp ? co->lp : NULL,
                         .n_tokens = lp ? co->n_lp : 0};
    pgd_buf b = PGD_BUF_INIT;
    if (pgd_api_completion_chunk(&m, &ch, c->req.include_usage, &b) == 0) sse_write_json(c, &b);
    pgd_buf_free(&b);
    for (size_t i = 0; i < co->n_lp; i++) { /* later tokens' offsets continue from here */
        co->text_chars += utf8_chars(co->lp[i].text.ptr, co->lp[i].text.len);
        free((void *)co->lp[i].top);
    }
    co->n_lp = 0;
    pgd_buf_reset(&co->lp_bytes);
}

static void on_error(pgd_rctx *c, const pgd_event *ev);

static void on_prompt_logprobs(pgd_rctx *c, const pgd_event *ev) {
    uint32_t g;
    if (!choice_of(c, ev, &g) || c->errored) return;
    const uint32_t p = g / c->n_per_prompt;
    int rc = c->plp ? keep_prompt_logprobs(&c->plp[p], ev) : 0;
    for (uint32_t k = g; !rc && wants_prompt_logprobs(c) && k < g + c->n_per_prompt; k++)
        for (uint32_t i = 0; !rc && i < ev->n_lp; i++) {
            pgd_sample_result x = ev->prompt_lp[i];
            if (x.n_top > c->req.top_logprobs) x.n_top = c->req.top_logprobs;
            rc = add_logprob(c, &c->ch[k], &x);
        }
    if (rc) {
        pgd_event err = {.kind = PGD_EVENT_ERROR,
                         .error = PGD_ENOMEM,
                         .message = "out of memory for the prompt's logprobs"};
        on_error(c, &err);
        abort_engine(c);
        return;
    }
    if (c->req.stream && wants_prompt_logprobs(c) && ev->lp_first + ev->n_lp == c->prompts[p].n)
        for (uint32_t k = g; k < g + c->n_per_prompt; k++) send_echo(c, k);
}

/* A token's exact bytes, read in the tokenizer's piece table (valid while the model lives). */
static pgd_str piece_of(const pgd_rctx *c, int32_t id) {
    size_t len;
    const char *p = pgd_token_piece_view(c->srv->info->tok, id, true, &len);
    return (pgd_str){p ? p : "", len};
}

/* vLLM's prompt_logprobs of every prompt (whole answers), from the kept entries with
 * prompt_logprobs alternatives each: the prompts' entries one after another in *views, their
 * alternatives in *alts (both owned by the caller; texts point into the tokenizer). 0 or
 * PGD_ENOMEM. */
static int build_prompt_logprobs(const pgd_rctx *c, pgd_api_prompt_logprob **views,
                                 pgd_api_ranked_logprob **alts) {
    size_t n_all = 0, k = (size_t)c->req.prompt_logprobs;
    for (size_t p = 0; p < c->n_prompts; p++) n_all += c->plp[p].n;
    *views = calloc(n_all + 1, sizeof **views);
    *alts = calloc(n_all * k + 1, sizeof **alts);
    if (!*views || !*alts) return PGD_ENOMEM;
    for (size_t p = 0, e = 0; p < c->n_prompts; p++)
        for (size_t i = 0; i < c->plp[p].n; i++, e++) {
            const pgd_sample_result *s = &c->plp[p].r[i];
            pgd_api_prompt_logprob *v = &(*views)[e];
            v->token = (pgd_api_ranked_logprob){.id = s->token,
                                                .text = piece_of(c, s->token),
                                                .logprob = s->logprob,
                                                .rank = c->plp[p].rank[i]};
            v->n_top = (size_t)s->n_top < k ? (size_t)s->n_top : k;
            pgd_api_ranked_logprob *a = &(*alts)[e * k];
            for (size_t j = 0; j < v->n_top; j++)
                a[j] = (pgd_api_ranked_logprob){.id = s->top[j].token,
                                                .text = piece_of(c, s->top[j].token),
                                                .logprob = s->top[j].logprob,
                                                .rank = (int32_t)j + 1};
            v->top = a;
        }
    return 0;
}

/* The end of a streamed choice with reasoning: what its parser held, reasoning and content
 * (through the tool parser when there is one). */
static void end_reasoning(pgd_rctx *c, choice_out *co, uint32_t g) {
    pgd_str rest;
    bool lp = false;
    if (stream_reasoning(c, co, g, &rest, &lp, co->n_lp, true)) return;
    if (co->tp) {
        pgd_buf_reset(&co->shown);
        if (pgd_tool_parser_feed(co->tp, rest.ptr, rest.len, &co->shown)) return;
        rest = (pgd_str){co->shown.data ? co->shown.data : "", co->shown.len};
        send_tool_calls(c, co, g, &rest);
    }
    if (c->resp) { /* without tools, the logprobs that waited go now (else end_tool_calls's) */
        if (rest.len || !co->tp) send_resp_text(c, co, rest);
        return;
    }
    send_chat_content(c, g, rest);
}

static pgd_finish finish_of(pgd_finish_reason r) {
    return r == PGD_REASON_LENGTH ? PGD_FINISH_LENGTH : PGD_FINISH_STOP;
}

static void finalize(pgd_rctx *c, const pgd_usage *u);

static void on_finish(pgd_rctx *c, const pgd_event *ev) {
    uint32_t g;
    choice_out *co = choice_of(c, ev, &g);
    if (!co) return;
    co->finished = true;
    co->finish = finish_of(ev->reason);
    if (ev->embedding && !co->emb && (co->emb = malloc(ev->n_embd * sizeof *co->emb)))
        memcpy(co->emb, ev->embedding, ev->n_embd * sizeof *co->emb);
    if (g == 0) c->finished_reason = (int)ev->reason;
    if (ev->reason == PGD_REASON_ABORT) c->aborted = true;
    if (c->req.stream && ev->reason != PGD_REASON_ABORT) {
        if (co->rp) end_reasoning(c, co, g);
        if (co->tp) {
            end_tool_calls(c, co, g);
            if (co->calls_sent && co->finish == PGD_FINISH_STOP) co->finish = PGD_FINISH_TOOL_CALLS;
        }
        if (c->resp) return; /* its end (with the usage) is written in finalize */
        pgd_api_meta m = meta_of(c);
        pgd_buf b = PGD_BUF_INIT;
        int rc;
        if (c->kind == PGD_API_CHAT) {
            rc = pgd_api_chat_chunk_finish(&m, g, co->finish, c->req.include_usage, &b);
        } else {
            pgd_api_choice ch = {.index = g, .text = {"", 0}, .finish = co->finish};
            rc = pgd_api_completion_chunk(&m, &ch, c->req.include_usage, &b);
        }
        if (!rc) sse_write_json(c, &b);
        pgd_buf_free(&b);
    }
}

static void on_error(pgd_rctx *c, const pgd_event *ev) {
    c->errored = true;
    pgd_api_error e;
    int status = pgd_api_status_for_code(ev->error);
    pgd_api_error_set(&e, status < 500 ? 500 : status, NULL, NULL, "%s",
                      ev->message ? ev->message : pgd_strerror(ev->error));
    if (c->stream && !c->error_sent) {
        pgd_buf b = PGD_BUF_INIT;
        if (c->resp ? pgd_api_resp_fail(c->resp, &e, &b) : pgd_api_error_sse(&e, &b)) b.len = 0;
        sse_write_events(c, &b);
        pgd_buf_free(&b);
        c->error_sent = true;
    } else if (c->http && !c->stream && !c->error_sent) {
        c->error_sent = true;
        pgd_srv_respond_error(c->http, &e);
    }
}

/* A whole answer with reasoning (its tokens fed as they came: on_token): what the parser held,
 * into the reasoning (co->rsn) or the content (co->text). */
static int split_reasoning(choice_out *co) {
    return co->rp ? pgd_reasoning_parser_end(co->rp, &co->rsn, &co->text) : 0;
}

/* A whole answer with tools: its text parsed into content (kept as its text) and calls. */
static int split_tool_calls(choice_out *co) {
    if (!co->tp) return 0;
    pgd_buf content = PGD_BUF_INIT;
    int rc = pgd_tool_parser_feed(co->tp, co->text.data, co->text.len, &content);
    if (!rc) rc = pgd_tool_parser_end(co->tp, &content);
    if (rc) {
        pgd_buf_free(&content);
        return rc;
    }
    pgd_buf_free(&co->text);
    co->text = content;
    return 0;
}

/* A Responses answer that has ended, when it asked to be kept: into the store (before its
 * last bytes go out, so that a request continuing it finds it). whole: the object's text when
 * it was just written whole; NULL: written again here (a stream's last event holds it). */
static void keep_response(pgd_rctx *c, const pgd_buf *whole) {
    if (!c->rq.store || !c->srv->responses) return;
    pgd_buf obj = PGD_BUF_INIT;
    json_t *conv = NULL;
    int rc = whole ? 0 : pgd_api_resp_object(c->resp, &obj);
    if (!whole) whole = &obj;
    if (!rc) rc = pgd_api_resp_conversation(c->resp, &c->rq, &conv);
    if (!rc)
        rc = pgd_resp_store_put(c->srv->responses, c->id, pgd_srv_owner(&c->who),
                                whole->data ? whole->data : "", whole->len, conv);
    if (rc) /* a later GET or previous_response_id finds none: the log says why */
        fprintf(stderr, "pagoda serve: response %s not stored: %s\n", c->id,
                rc == PGD_ENOMEM ? "out of memory" : pgd_error_detail());
    pgd_buf_free(&obj);
}

/* A whole Responses answer from its one choice: reasoning, then the content and the calls in
 * the order the model wrote them (each call where its content_at says; the logprobs with the
 * content before the first call), as a stream gives them. */
static int resp_whole(pgd_rctx *c, const pgd_api_choice *ch, pgd_buf *out) {
    int rc = pgd_api_resp_reasoning(c->resp, ch->reasoning, NULL);
    size_t at = 0;
    for (size_t k = 0; k <= ch->n_calls && !rc; k++) {
        size_t to = k < ch->n_calls && ch->calls[k].content_at < ch->text.len
                        ? ch->calls[k].content_at
                        : ch->text.len;
        if (!k || to > at)
            rc = pgd_api_resp_text(c->resp, (pgd_str){ch->text.ptr + at, to - at},
                                   k ? NULL : ch->tokens, k ? 0 : ch->n_tokens, NULL);
        at = to > at ? to : at;
        if (!rc && k < ch->n_calls) rc = pgd_api_resp_calls(c->resp, &ch->calls[k], 1, NULL);
    }
    if (!rc) rc = pgd_api_resp_end(c->resp, ch->finish, &c->usage, out);
    if (!rc) keep_response(c, out);
    return rc;
}

/* The /v1/embeddings answer, once every input's vector is in. */
static void respond_embeddings(pgd_rctx *c) {
    float **v = calloc(c->n_prompts, sizeof *v);
    bool all = v != NULL;
    for (size_t i = 0; all && i < c->n_prompts; i++) all = (v[i] = c->ch[i].emb) != NULL;
    pgd_buf b = PGD_BUF_INIT;
    if (!all ||
        pgd_srv_embeddings_answer(c->srv, &c->req, v, c->n_prompts, c->usage.prompt_tokens, &b))
        pgd_srv_respond_simple_error(c->http, 500, NULL, NULL, "out of memory");
    else
        pgd_srv_respond_json(c->http, 200, &b, NULL, 0);
    pgd_buf_free(&b);
    free(v);
}

static void finalize(pgd_rctx *c, const pgd_usage *u) {
    pgd_srv *srv = c->srv;
    uint64_t now = pgd_now_ns();
    const char *reason = c->aborted                                ? "abort"
                         : c->finished_reason == PGD_REASON_LENGTH ? "length"
                                                                   : "stop";
    c->e2e_s = (now - c->t_arrival_ns) * 1e-9;
    if (!c->errored) { /* aborted ones too, as finished_reason="abort" (vLLM does the same) */
        c->end_reason = reason;
        pgd_pagoda_metrics_request_done(&srv->pm, reason, c->queue_s, c->e2e_s,
                                        (uint32_t)c->usage.prompt_tokens,
                                        (uint32_t)c->usage.completion_tokens);
    }
    (void)u;
    c->usage.reasoning_tokens = 0;
    for (size_t i = 0; c->ch && i < c->n_prompts * c->n_per_prompt; i++)
        c->usage.reasoning_tokens += c->ch[i].n_reasoning;
    if (!c->http || (c->error_sent && !c->stream)) return;
    if (c->stream) {
        if (c->aborted && !c->errored) { /* aborted by the server (shutdown), not the client */
            pgd_api_error e;
            pgd_api_error_set(&e, 503, NULL, NULL,
                              "the request was aborted: the server is "
                              "shutting down");
            pgd_buf b = PGD_BUF_INIT;
            if (c->resp ? pgd_api_resp_fail(c->resp, &e, &b) : pgd_api_error_sse(&e, &b)) b.len = 0;
            sse_write_events(c, &b);
            pgd_buf_free(&b);
        } else if (!c->errored && c->resp) {
            pgd_buf b = PGD_BUF_INIT;
            if (pgd_api_resp_end(c->resp, c->ch[0].finish, &c->usage, &b))
                b.len = 0;
            else
                keep_response(c, NULL);
            sse_write_events(c, &b);
            pgd_buf_free(&b);
        } else if (!c->errored && c->req.include_usage) {
            pgd_api_meta m = meta_of(c);
            pgd_buf b = PGD_BUF_INIT;
            if (pgd_api_chunk_usage(&m, c->kind, &c->usage, &b) == 0) sse_write_json(c, &b);
            pgd_buf_free(&b);
        }
        sse_end(c);
        return;
    }
    if (c->aborted) {
        pgd_srv_respond_simple_error(c->http, 503, NULL, NULL,
                                     "the request was aborted: the server is shutting down");
        return;
    }
    if (c->kind == PGD_API_EMBEDDING) {
        respond_embeddings(c);
        return;
    }
    size_t n = c->n_prompts * c->n_per_prompt;
    pgd_api_choice *chs = calloc(n, sizeof *chs);
    pgd_api_prompt_logprob *views = NULL;
    pgd_api_ranked_logprob *alts = NULL;
    pgd_buf b = PGD_BUF_INIT;
    int rc = chs ? 0 : PGD_ENOMEM;
    if (!rc && c->plp) rc = build_prompt_logprobs(c, &views, &alts);
    for (size_t i = 0; !rc && i < n; i++) rc = split_reasoning(&c->ch[i]);
    for (size_t i = 0; !rc && i < n; i++) rc = split_tool_calls(&c->ch[i]);
    for (size_t i = 0, first = 0; chs && i < n; i++) {
        choice_out *co = &c->ch[i];
        const plp_store *st = c->plp && views ? &c->plp[i / c->n_per_prompt] : NULL;
        rebase(co, 0);
        chs[i] = (pgd_api_choice){.index = (uint32_t)i,
                                  .text = {co->text.data ? co->text.data : "", co->text.len},
                                  .finish = co->finished ? co->finish : PGD_FINISH_STOP,
                                  .logprobs = wants_logprobs(c),
                                  .tokens = co->lp,
                                  .n_tokens = co->n_lp,
                                  .text_offset = 0,
                                  .prompt_logprobs = st != NULL,
                                  .prompt_lp = st ? views + first : NULL,
                                  .n_prompt_lp = st ? st->n : 0};
        if (st && (i + 1) % c->n_per_prompt == 0) first += st->n; /* the next prompt's */
        if (co->tp) chs[i].calls = pgd_tool_parser_calls(co->tp, &chs[i].n_calls);
        if (co->rp && pgd_reasoning_parser_seen(co->rp)) {
            chs[i].has_reasoning = true;
            chs[i].reasoning = (pgd_str){co->rsn.data ? co->rsn.data : "", co->rsn.len};
        }
        if (chs[i].n_calls && chs[i].finish == PGD_FINISH_STOP)
            chs[i].finish = PGD_FINISH_TOOL_CALLS;
    }
    pgd_api_meta m = meta_of(c);
    if (!rc && c->resp) /* one choice */
        rc = resp_whole(c, &chs[0], &b);
    else if (!rc)
        rc = c->kind == PGD_API_CHAT ? pgd_api_chat_completion(&m, chs, n, &c->usage, &b)
                                     : pgd_api_completion(&m, chs, n, &c->usage, &b);
    for (size_t i = 0; chs && i < n; i++) unbase(&c->ch[i], 0);
    if (rc)
        pgd_srv_respond_simple_error(c->http, 500, NULL, NULL, "out of memory");
    else
        pgd_srv_respond_json(c->http, 200, &b, NULL, 0);
    pgd_buf_free(&b);
    free(views);
    free(alts);
    free(chs);
}

static void on_event(const pgd_event *ev, void *ud) {
    (void)ud;
    pgd_rctx *c = ev->user;
    if (!c) return;
    switch (ev->kind) {
    case PGD_EVENT_TOKEN:
        on_token(c, ev);
        break;
    case PGD_EVENT_FINISH:
        on_finish(c, ev);
        break;
    case PGD_EVENT_ERROR:
        on_error(c, ev);
        break;
    case PGD_EVENT_PROMPT_LOGPROBS:
        on_prompt_logprobs(c, ev);
        break;
    }
    if (!ev->done) return;
    c->n_done++;
    c->usage.prompt_tokens += ev->usage.prompt_tokens;
    c->usage.completion_tokens += ev->usage.completion_tokens;
    c->usage.cached_tokens += ev->usage.cached_tokens;
    double q = ev->usage.queue_ns * 1e-9;
    if (q > c->queue_s) c->queue_s = q;
    if (!engine_open(c)) {
        finalize(c, &ev->usage);
        maybe_free(c);
    }
}

void pgd_srv_drain_events(pgd_srv *srv) {
    if (srv->worker) pgd_worker_drain(srv->worker, on_event, srv);
}

void pgd_srv_abort_all(pgd_srv *srv) {
    for (pgd_rctx *c = srv->inflight; c; c = c->next)
        if (engine_open(c)) abort_engine(c);
}
