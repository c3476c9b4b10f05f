/*
 * server/router.c — the route table and the HTTP handler: every request is identified first
 * (server/access.h: its key, before the route table, so a caller without a valid key learns
 * nothing about routes), then routed, then checked against what its caller may use, then handed
 * to its endpoint (routes.c for the completion endpoints, endpoints.c for the others, the web
 * page here). With --allowed-origins, answers to an allowed origin say so (pgd_srv_head, as the
 * head arrives) and a browser's preflight is answered before anything else (cors_preflight;
 * server/cors.h).
 *
 * Threading: loop thread only.
 */
#include <stdio.h>
#include <string.h>

#include "api/error.h"
#include "common/error.h"
#include "common/text.h"
#include "server/access.h"
#include "server/cors.h"
#include "server/server.h"

extern const unsigned char pgd_web_index_html[];
extern const unsigned long pgd_web_index_html_len;

/* ---- routing ---------------------------------------------------------------------------- */

typedef enum {
    R_CHAT,
    R_COMPLETIONS,
    R_RESPONSES,
    R_EMBEDDINGS,
    R_RESPONSE_GET,
    R_RESPONSE_DELETE,
    R_MODELS,
    R_MODEL,
    R_HEALTH,
    R_METRICS,
    R_TOKENIZE,
    R_DETOKENIZE,
    R_WEB,
    R_ADMIN_TENANTS
} route_id;

/* A route's path is matched whole, or, when it ends in '/', as a prefix followed by at least one
 * character (the rest: the route's argument). Access rules (server/access.h) see `acl`. */
static const struct {
    const char *path;
    const char *method;
    route_id id;
    bool needs_model;
    const char *acl;   /* the path access is checked for; NULL: the route's own */
    const char *label; /* in metrics (pgd_srv_route_label); NULL: the path */
} k_routes[] = {
    {"/v1/chat/completions", "POST", R_CHAT, true, NULL, NULL},
    {"/v1/completions", "POST", R_COMPLETIONS, true, NULL, NULL},
    {"/v1/responses", "POST", R_RESPONSES, true, NULL, NULL},
    {"/v1/embeddings", "POST", R_EMBEDDINGS, true, NULL, NULL},
    {"/v1/responses/", "GET", R_RESPONSE_GET, false, "/v1/responses", "/v1/responses/{id}"},
    {"/v1/responses/", "DELETE", R_RESPONSE_DELETE, false, "/v1/responses", "/v1/responses/{id}"},
    {"/v1/models", "GET", R_MODELS, false, NULL, NULL},
    {"/v1/models/", "GET", R_MODEL, false, "/v1/models",
     "/v1/models/{id}"}, /* whoever may list may retrieve */
    {"/health", "GET", R_HEALTH, false, NULL, NULL},
    {"/metrics", "GET", R_METRICS, false, NULL, NULL},
    {"/tokenize", "POST", R_TOKENIZE, true, NULL, NULL},
    {"/detokenize", "POST", R_DETOKENIZE, true, NULL, NULL},
    {"/", "GET", R_WEB, false, NULL, NULL},
    {"/admin/tenants", "GET", R_ADMIN_TENANTS, false, NULL, NULL},
};

static bool route_matches(const char *route, const char *path) {
    size_t n = strlen(route);
    if (n > 1 && route[n - 1] == '/') return !strncmp(route, path, n) && path[n] != '\0';
    return !strcmp(route, path);
}

/* The index of the route `path` reaches with `method` (HEAD reaches GET routes) — or, when its
 * path has no such method, its first route; PGD_ARRAY_LEN(k_routes) when no path matches. */
static size_t route_of(const char *path, const char *method) {
    size_t first = PGD_ARRAY_LEN(k_routes);
    for (size_t i = 0; i < PGD_ARRAY_LEN(k_routes); i++) {
        if (!route_matches(k_routes[i].path, path)) continue;
        if (first == PGD_ARRAY_LEN(k_routes)) first = i;
        if (method && (!strcmp(method, k_routes[i].method) ||
                       (!strcmp(method, "HEAD") && !strcmp(k_routes[i].method, "GET"))))
            return i;
    }
    return first;
}

/* The Allow header of a path's routes ("GET, DELETE"). */
static void allowed_methods(const char *path, char *out, size_t cap) {
    size_t n = 0;
    out[0] = '\0';
    for (size_t i = 0; i < PGD_ARRAY_LEN(k_routes) && n < cap; i++)
        if (route_matches(k_routes[i].path, path))
            n += (size_t)snprintf(out + n, cap - n, "%s%s", n ? ", " : "", k_routes[i].method);
}

const char *pgd_srv_route_label(const char *path) {
    size_t i = route_of(path, NULL);
    if (i == PGD_ARRAY_LEN(k_routes)) return "other";
    return k_routes[i].label ? k_routes[i].label : k_routes[i].path;
}

/* What a page on another origin may read of an answer besides its body (Retry-After on a 429
 * or a 503, a tenant's x-ratelimit-*: server/access.c; its own X-Request-Id). */
static const char k_cors_expose[] =
    "Retry-After, x-ratelimit-limit-requests, x-ratelimit-remaining-requests, "
    "x-ratelimit-reset-requests, x-ratelimit-limit-tokens, x-ratelimit-remaining-tokens, "
    "x-ratelimit-reset-tokens, X-Request-Id";

/* A client's X-Request-Id (a proxy's or its own trace id: up to 128 printable ASCII characters,
 * no spaces) comes back on the answer, whatever it is, and goes into the access log
 * (request_id=...); any other value is ignored. */
static void request_id(pgd_http_request *req) {
    const char *id = pgd_http_request_header(req, "X-Request-Id");
    size_t n = id ? strlen(id) : 0;
    if (!n || n > 128) return;
    for (size_t i = 0; i < n; i++)
        if (id[i] <= ' ' || id[i] >= 0x7f || id[i] == '"' || id[i] == '\\') return;
    pgd_http_request_set_header(req, "X-Request-Id", id);
    char note[160];
    snprintf(note, sizeof note, "request_id=%s", id);
    pgd_http_request_set_note(req, note);
}

/* CORS (server/cors.h; only with --allowed-origins). As a request's head arrives (the
 * transport's on_head, so that its own errors carry them too): an answer to an allowed origin
 * says so (Access-Control-Allow-Origin) whatever it is — a page reads its errors too — and names
 * the headers the page may read; with "*" every answer carries "*", with a list answers vary
 * with Origin and say so. */
void pgd_srv_head(void *arg, pgd_http_request *req) {
    pgd_srv *srv = arg;
    request_id(req);
    if (!srv->cors) return;
    const char *origin = pgd_http_request_header(req, "Origin");
    const char *allow = pgd_cors_allow_origin(srv->cors, origin);
    bool any = allow && !strcmp(allow, "*");
    if (!any) pgd_http_request_set_header(req, "Vary", "Origin");
    if (any || pgd_cors_allows(srv->cors, origin)) {
        pgd_http_request_set_header(req, "Access-Control-Allow-Origin", allow);
        pgd_http_request_set_header(req, "Access-Control-Expose-Headers", k_cors_expose);
    }
}

/* A browser's preflight (OPTIONS with Origin and Access-Control-Request-Method) is answered
 * before the key is checked — it carries none — for any path: 204 when its origin is allowed
 * (the request that follows meets keys, routes and methods like any other, so a preflight tells
 * nothing of them), 403 when not. True when `req` was one (and is answered). */
static bool cors_preflight(pgd_srv *srv, pgd_http_request *req, const char *method) {
    const char *origin = pgd_http_request_header(req, "Origin");
    if (!origin || strcmp(method, "OPTIONS") ||
        !pgd_http_request_header(req, "Access-Control-Request-Method"))
        return false;
    if (!pgd_cors_allows(srv->cors, origin)) {
        pgd_api_error e;
        pgd_api_error_set(&e, 403, NULL, NULL,
                          "a page of %.200s may not call this server (--allowed-origins does not "
                          "list its origin)",
                          origin);
        pgd_srv_respond_error(req, &e);
        return true;
    }
    const char *want = pgd_http_request_header(req, "Access-Control-Request-Headers");
    pgd_http_header h[3] = {{"Access-Control-Allow-Methods", "GET, HEAD, POST, DELETE"},
                            {"Access-Control-Max-Age", "600"},
                            {"Access-Control-Allow-Headers", want}};
    size_t nh = want && *want && pgd_cors_header_list_ok(want) ? 3 : 2;
    pgd_http_respond(req, 204, NULL, "", 0, h, nh);
    return true;
}

/* 401 before anything else; the web page's 401 also offers Basic, so a browser asks for the
 * key (as the password). */
static void respond_unauthorized(pgd_http_request *req, const char *path) {
    pgd_api_error e;
    pgd_api_error_unauthorized(&e);
    pgd_http_header h = {"WWW-Authenticate", "Bearer"};
    if (!strcmp(path, "/")) h.value = "Bearer, Basic realm=\"pagoda\", charset=\"UTF-8\"";
    pgd_buf b = PGD_BUF_INIT;
    pgd_api_error_body(&e, &b);
    pgd_srv_respond_json(req, 401, &b, &h, 1);
    pgd_buf_free(&b);
}

void pgd_srv_handle(void *arg, pgd_http_request *req) {
    pgd_srv *srv = arg;
    const char *path = pgd_http_request_path(req), *method = pgd_http_request_method(req);
    if (srv->cors && cors_preflight(srv, req, method)) return;
    pgd_caller who;
    pgd_access_identify(srv->access, req, &who);
    if (who.kind == PGD_CALLER_NONE) {
        respond_unauthorized(req, path);
        return;
    }
    size_t i = route_of(path, method);
    pgd_api_error e;
    if (i == PGD_ARRAY_LEN(k_routes)) {
        pgd_api_error_route_not_found(&e, method, path);
        pgd_srv_respond_error(req, &e);
        return;
    }
    bool head = !strcmp(method, "HEAD") && !strcmp(k_routes[i].method, "GET");
    if (strcmp(method, k_routes[i].method) && !head) {
        pgd_api_error_method_not_allowed(&e, method, path);
        char methods[64];
        allowed_methods(path, methods, sizeof methods);
        pgd_http_header allow = {"Allow", methods};
        pgd_buf b = PGD_BUF_INIT;
        pgd_api_error_body(&e, &b);
        pgd_srv_respond_json(req, 405, &b, &allow, 1);
        pgd_buf_free(&b);
        return;
    }
    if (!pgd_access_permits(srv->access, &who, k_routes[i].acl ? k_routes[i].acl : path, &e)) {
        pgd_srv_respond_error(req, &e);
        return;
    }
    if (k_routes[i].needs_model && srv->state != PGD_SRV_READY) {
        /* Loading ends by itself: say when to come back (shutting down does not). */
        if (srv->state == PGD_SRV_LOADING)
            pgd_http_request_set_header(req, "Retry-After", PGD_SRV_LOADING_RETRY_S);
        pgd_srv_respond_simple_error(req, 503, NULL, NULL,
                                     srv->state == PGD_SRV_LOADING ? "the model is still loading"
                                                                   : "the server is shutting down");
        return;
    }
    switch (k_routes[i].id) {
    case R_CHAT:
        pgd_srv_start_completion(srv, req, PGD_API_CHAT, false, &who);
        break;
    case R_COMPLETIONS:
        pgd_srv_start_completion(srv, req, PGD_API_COMPLETION, false, &who);
        break;
    case R_RESPONSES:
        pgd_srv_start_completion(srv, req, PGD_API_CHAT, true, &who);
        break;
    case R_EMBEDDINGS:
        pgd_srv_start_completion(srv, req, PGD_API_EMBEDDING, false, &who);
        break;
    case R_RESPONSE_GET:
    case R_RESPONSE_DELETE:
        pgd_srv_stored_response(srv, req, path + strlen(k_routes[i].path), &who,
                                k_routes[i].id == R_RESPONSE_DELETE);
        break;
    case R_MODELS:
        pgd_srv_models(srv, req, NULL);
        break;
    case R_MODEL:
        pgd_srv_models(srv, req, path + strlen(k_routes[i].path));
        break;
    case R_HEALTH:
        pgd_srv_health(srv, req);
        break;
    case R_METRICS:
        pgd_srv_metrics(srv, req);
        break;
    case R_TOKENIZE:
        pgd_srv_tokenize(srv, req, false);
        break;
    case R_DETOKENIZE:
        pgd_srv_tokenize(srv, req, true);
        break;
    case R_WEB:
        pgd_http_respond(req, 200, "text/html; charset=utf-8", pgd_web_index_html,
                         pgd_web_index_html_len, NULL, 0);
        break;
    case R_ADMIN_TENANTS:
        pgd_srv_admin_tenants(srv, req);
        break;
    }
}
