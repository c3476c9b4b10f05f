/*
 * server/endpoints.c — the endpoints other than completions: GET /v1/models[/{id}], GET
 * /health, GET /metrics, GET /admin/tenants, POST /tokenize and POST /detokenize; and the
 * answers every route builds (JSON bodies, OpenAI-shaped errors).
 *
 * Threading: loop thread only, except tok_work() which runs on libuv's threadpool and reads only
 * the model info (immutable) and its own job.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/error.h"
#include "api/request.h"
#include "api/response.h"
#include "common/error.h"
#include "server/server.h"

#define JSON_TYPE "application/json"

/* ---- answers ------------------------------------------------------------------------------ */

void pgd_srv_respond_json(pgd_http_request *req, int status, const pgd_buf *b,
                          const pgd_http_header *h, size_t nh) {
    pgd_http_respond(req, status, JSON_TYPE, b->data ? b->data : "", b->len, h, nh);
}

/* Headers decided earlier (Retry-After, x-ratelimit-*) are on the request already. */
void pgd_srv_respond_error(pgd_http_request *req, pgd_api_error *e) {
    pgd_buf b = PGD_BUF_INIT;
    if (pgd_api_error_body(e, &b) == 0)
        pgd_srv_respond_json(req, e->status, &b, NULL, 0);
    else
        pgd_http_respond_error(req, 500, "out of memory", NULL, 0);
    pgd_buf_free(&b);
}

void pgd_srv_respond_simple_error(pgd_http_request *req, int status, const char *param,
                                  const char *code, const char *msg) {
    pgd_api_error e;
    pgd_api_error_set(&e, status, param, code, "%s", msg);
    pgd_srv_respond_error(req, &e);
}

bool pgd_srv_model_ok(pgd_srv *srv, pgd_str model) {
    return model.len == 0 || pgd_str_eq(model, srv->served_name);
}

/* ---- POST /tokenize, POST /detokenize ------------------------------------------------------ */

typedef struct tok_job {
    uv_work_t work;
    pgd_srv *srv;
    pgd_http_request *http;
    bool detok;
    pgd_api_tokenize_request treq;
    pgd_api_detokenize_request dreq;
    pgd_tokens ids;
    pgd_buf text;
    int rc;
    char err[512];
} tok_job;

static void tok_job_close(pgd_http_request *req, pgd_http_close_reason reason, void *arg) {
    (void)req, (void)reason;
    tok_job *j = arg;
    j->http = NULL;
}

static void tok_work(uv_work_t *w) {
    tok_job *j = w->data;
    const pgd_model_info *info = j->srv->info;
    if (j->detok) {
        for (size_t i = 0; i < j->dreq.n_tokens; i++)
            if (j->dreq.tokens[i] < 0 || (uint32_t)j->dreq.tokens[i] >= info->n_vocab) {
                j->rc = PGD_EINVAL;
                snprintf(j->err, sizeof j->err, "token id %d is out of range [0, %u)",
                         j->dreq.tokens[i], info->n_vocab);
                return;
            }
        j->rc = pgd_detokenize(info->tok, j->dreq.tokens, j->dreq.n_tokens, false, &j->text);
    } else if (j->treq.chat) {
        const pgd_api_tools *t = &j->treq.tools;
        pgd_chat_tools ct = {t->defs, t->defs_indent, t->choice == PGD_TOOL_CHOICE_NONE ? 0 : t->n};
        pgd_chat_render_opts o = {.add_generation_prompt = j->treq.add_generation_prompt,
                                  .enable_thinking = j->treq.enable_thinking,
                                  .reasoning = j->treq.messages.reasoning};
        j->rc =
            pgd_encode_chat_with(info, j->treq.messages.msgs, j->treq.messages.n, &ct, &o, &j->ids);
    } else {
        /* add_special_tokens: the BOS the model asks for, as completions prompts get it. */
        j->rc =
            j->treq.add_special_tokens
                ? pgd_encode_text(info, j->treq.prompt.ptr, j->treq.prompt.len, false, &j->ids)
                : pgd_tokenize(info->tok, j->treq.prompt.ptr, j->treq.prompt.len, NULL, 0, &j->ids);
    }
    if (j->rc && !j->err[0]) snprintf(j->err, sizeof j->err, "%s", pgd_error_detail());
}

static void tok_done(uv_work_t *w, int status) {
    tok_job *j = w->data;
    if (j->http && status == 0) {
        pgd_buf b = PGD_BUF_INIT;
        if (j->rc) {
            pgd_srv_respond_simple_error(j->http, 400,
                                         j->detok       ? "tokens"
                                         : j->treq.chat ? "messages"
                                                        : "prompt",
                                         NULL, j->err);
        } else {
            int rc =
                j->detok
                    ? pgd_api_detokenize_response(j->text.data ? j->text.data : "", j->text.len, &b)
                    : pgd_api_tokenize_response(j->ids.ids, j->ids.n, j->srv->lim.n_ctx, &b);
            if (rc)
                pgd_srv_respond_simple_error(j->http, 500, NULL, NULL, "out of memory");
            else
                pgd_srv_respond_json(j->http, 200, &b, NULL, 0);
        }
        pgd_buf_free(&b);
    }
    if (j->http) pgd_http_request_set_on_close(j->http, NULL, NULL);
    pgd_api_tokenize_free(&j->treq);
    pgd_api_detokenize_free(&j->dreq);
    pgd_tokens_free(&j->ids);
    pgd_buf_free(&j->text);
    free(j);
}

void pgd_srv_tokenize(pgd_srv *srv, pgd_http_request *req, bool detok) {
    tok_job *j = calloc(1, sizeof *j);
    if (!j) {
        pgd_http_respond_error(req, 500, "out of memory", NULL, 0);
        return;
    }
    j->srv = srv;
    j->http = req;
    j->detok = detok;
    pgd_api_error e;
    pgd_str body = pgd_http_request_body(req);
    int rc = detok ? pgd_api_detokenize_parse(body.ptr, body.len, &j->dreq, &e)
                   : pgd_api_tokenize_parse(body.ptr, body.len, &j->treq, &e);
    pgd_str model = detok ? j->dreq.model : j->treq.model;
    if (!rc && !pgd_srv_model_ok(srv, model)) {
        pgd_api_error_model_not_found(&e, model.ptr, model.len);
        rc = -1;
    }
    if (rc) {
        pgd_srv_respond_error(req, &e);
        pgd_api_tokenize_free(&j->treq);
        pgd_api_detokenize_free(&j->dreq);
        free(j);
        return;
    }
    pgd_http_request_set_on_close(req, tok_job_close, j);
    j->work.data = j;
    if (uv_queue_work(srv->loop, &j->work, tok_work, tok_done)) {
        pgd_http_request_set_on_close(req, NULL, NULL);
        pgd_srv_respond_simple_error(req, 500, NULL, NULL, "cannot queue the tokenizer job");
        pgd_api_tokenize_free(&j->treq);
        pgd_api_detokenize_free(&j->dreq);
        free(j);
    }
}

/* GET /v1/models (id NULL: the list) or GET /v1/models/{id} (the served model's object, or 404
 * model_not_found for any other id, as OpenAI answers). */
void pgd_srv_models(pgd_srv *srv, pgd_http_request *req, const char *id) {
    pgd_api_model_info mi = {.id = srv->served_name,
                             .created = srv->created,
                             .owned_by = "pagoda",
                             .max_model_len = srv->info ? srv->lim.n_ctx : 0};
    if (id && strcmp(id, srv->served_name) != 0) {
        pgd_api_error e;
        pgd_api_error_model_not_found(&e, id, strlen(id));
        pgd_srv_respond_error(req, &e);
        return;
    }
    pgd_buf b = PGD_BUF_INIT;
    if (id ? pgd_api_model_object(&mi, &b) : pgd_api_models_list(&mi, 1, &b))
        pgd_http_respond_error(req, 500, "out of memory", NULL, 0);
    else
        pgd_srv_respond_json(req, 200, &b, NULL, 0);
    pgd_buf_free(&b);
}

void pgd_srv_metrics(pgd_srv *srv, pgd_http_request *req) {
    if (!srv->metrics_ready) {
        pgd_http_respond(req, 503, "text/plain", "metrics are not ready\n", 22, NULL, 0);
        return;
    }
    if (srv->worker) {
        pgd_sched_stats st;
        pgd_worker_get_stats(srv->worker, &st);
        pgd_pagoda_metrics_apply_stats(&srv->pm, &st);
        pgd_access_apply_stats(srv->access, &st);
    }
    pgd_series_set(srv->pm.stored,
                   srv->responses ? (double)pgd_resp_store_count(srv->responses) : 0);
    pgd_series_set(srv->pm.stored_bytes,
                   srv->responses ? (double)pgd_resp_store_bytes(srv->responses) : 0);
    pgd_buf b = PGD_BUF_INIT;
    if (pgd_metrics_render(srv->registry, &b))
        pgd_http_respond_error(req, 500, "out of memory", NULL, 0);
    else
        pgd_http_respond(req, 200, PGD_METRICS_CONTENT_TYPE, b.data ? b.data : "", b.len, NULL, 0);
    pgd_buf_free(&b);
}

void pgd_srv_admin_tenants(pgd_srv *srv, pgd_http_request *req) {
    pgd_sched_stats st;
    if (srv->worker) pgd_worker_get_stats(srv->worker, &st);
    pgd_buf b = PGD_BUF_INIT;
    if (pgd_access_admin_json(srv->access, srv->worker ? &st : NULL, &b))
        pgd_http_respond_error(req, 500, "out of memory", NULL, 0);
    else
        pgd_srv_respond_json(req, 200, &b, NULL, 0);
    pgd_buf_free(&b);
}

void pgd_srv_health(pgd_srv *srv, pgd_http_request *req) {
    static const char *const k_state[] = {"loading", "ready", "draining", "failed"};
    char body[64];
    int n = snprintf(body, sizeof body, "{\"status\":\"%s\"}", k_state[srv->state]);
    pgd_http_header retry = {"Retry-After", PGD_SRV_LOADING_RETRY_S};
    bool loading = srv->state == PGD_SRV_LOADING;
    pgd_http_respond(req, srv->state == PGD_SRV_READY ? 200 : 503, JSON_TYPE, body, (size_t)n,
                     loading ? &retry : NULL, loading ? 1 : 0);
}

/* ---- GET / DELETE /v1/responses/{id} --------------------------------------------------------- */

uint64_t pgd_srv_owner(const pgd_caller *who) {
    return who->kind == PGD_CALLER_TENANT && who->t ? who->t->id : 0;
}

void pgd_srv_stored_response(pgd_srv *srv, pgd_http_request *req, const char *id,
                             const pgd_caller *who, bool del) {
    uint64_t owner = pgd_srv_owner(who);
    pgd_str obj;
    int rc = !srv->responses ? PGD_ENOTFOUND
             : del           ? pgd_resp_store_delete(srv->responses, id, owner)
                             : pgd_resp_store_object(srv->responses, id, owner, &obj);
    if (rc) {
        pgd_api_error e;
        pgd_api_error_set(&e, 404, NULL, "not_found", "No response found with id '%.64s'%s", id,
                          srv->responses ? "" : " (this server keeps no responses)");
        pgd_srv_respond_error(req, &e);
        return;
    }
    if (!del) {
        pgd_http_respond(req, 200, JSON_TYPE, obj.ptr, obj.len, NULL, 0);
        return;
    }
    json_t *o = json_pack("{s:s,s:s,s:b}", "id", id, "object", "response", "deleted", 1);
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    if (text)
        pgd_http_respond(req, 200, JSON_TYPE, text, strlen(text), NULL, 0);
    else
        pgd_http_respond_error(req, 500, "out of memory", NULL, 0);
    free(text);
    json_decref(o);
}
