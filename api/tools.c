/*
 * api/tools.c — tools / tool_choice validated, the forced call's schema, and the output parser
 * (see tools.h).
 */
#include "api/tools.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/json_schema.h"
#include "api/jsonutil.h"
#include "common/error.h"
#include "engine/sampling/json_fsm.h"
#include "engine/sampling/sampler.h"

/* ---- request ----------------------------------------------------------------------------- */

/* A 400 naming `param`: PGD_EINVAL. */
#define bad(e, param, ...) pgd_api_error_set((e), 400, (param), NULL, __VA_ARGS__)

void pgd_api_tools_free(pgd_api_tools *t) {
    if (!t) return;
    free(t->names);
    free(t->defs);
    free(t->defs_indent);
    pgd_buf_free(&t->text);
    memset(t, 0, sizeof *t);
}

static bool name_ok(const char *s, size_t n) {
    if (n == 0 || n > PGD_API_TOOL_NAME_MAX) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-'))
            return false;
    }
    return true;
}

/* tools[i]: checked; its name kept, its definition written as a template's tojson does, and as
 * its tojson(indent=4) does (offsets def_off[2i], def_off[2i + 1] into t->text). */
static int one_tool(const json_t *tool, size_t i, pgd_api_tools *t, size_t *def_off,
                    pgd_api_error *e) {
    char p[96];
    snprintf(p, sizeof p, "tools[%zu]", i);
    if (!json_is_object(tool)) return bad(e, p, "'%s' must be an object", p);
    const json_t *type = json_object_get(tool, "type"), *fn = json_object_get(tool, "function");
    snprintf(p, sizeof p, "tools[%zu].type", i);
    if (!json_is_string(type) || strcmp(json_string_value(type), "function") != 0)
        return bad(e, p, "'%s' must be \"function\" (the only kind of tool)", p);
    snprintf(p, sizeof p, "tools[%zu].function", i);
    if (!json_is_object(fn)) return bad(e, p, "'%s' must be an object", p);
    const json_t *name = json_object_get(fn, "name"), *desc = pgd__api_field(fn, "description");
    const json_t *params = pgd__api_field(fn, "parameters"), *strict = pgd__api_field(fn, "strict");
    snprintf(p, sizeof p, "tools[%zu].function.name", i);
    if (!json_is_string(name) || !name_ok(json_string_value(name), json_string_length(name)))
        return bad(e, p, "'%s' must be a string of 1 to %d letters, digits, '_' or '-'", p,
                   PGD_API_TOOL_NAME_MAX);
    t->names[i].ptr = json_string_value(name);
    t->names[i].len = json_string_length(name);
    for (size_t k = 0; k < i; k++)
        if (t->names[k].len == t->names[i].len &&
            !memcmp(t->names[k].ptr, t->names[i].ptr, t->names[i].len))
            return bad(e, p, "tools[%zu] and tools[%zu] are both named '%s': names must differ", k,
                       i, json_string_value(name));
    snprintf(p, sizeof p, "tools[%zu].function.description", i);
    if (desc && !json_is_string(desc)) return bad(e, p, "'%s' must be a string", p);
    snprintf(p, sizeof p, "tools[%zu].function.parameters", i);
    if (params && !json_is_object(params))
        return bad(e, p, "'%s' must be an object (a JSON Schema)", p);
    snprintf(p, sizeof p, "tools[%zu].function.strict", i);
    if (strict && !json_is_boolean(strict)) return bad(e, p, "'%s' must be a boolean", p);
    def_off[2 * i] = t->text.len;
    if (pgd_api_json_dump_py(tool, &t->text)) return pgd__api_oom(e);
    def_off[2 * i + 1] = t->text.len;
    if (pgd_api_json_dump_py_indent(tool, 4, &t->text)) return pgd__api_oom(e);
    return 0;
}

/* tool_choice: 0 with t->choice / t->named set. */
static int read_choice(const json_t *v, pgd_api_tools *t, pgd_api_error *e) {
    t->choice = t->n ? PGD_TOOL_CHOICE_AUTO : PGD_TOOL_CHOICE_NONE;
    if (!v) return 0;
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        if (!strcmp(s, "none")) {
            t->choice = PGD_TOOL_CHOICE_NONE;
            return 0;
        }
        if (!strcmp(s, "auto")) return 0;
        if (!strcmp(s, "required")) {
            if (!t->n)
                return bad(e, "tool_choice",
                           "'tool_choice' \"required\" needs tools: send at least one in 'tools'");
            t->choice = PGD_TOOL_CHOICE_REQUIRED;
            return 0;
        }
        return bad(e, "tool_choice",
                   "'tool_choice' \"%.64s\" is not one of \"none\", \"auto\", \"required\" or "
                   "{\"type\": \"function\", \"function\": {\"name\": ...}}",
                   s);
    }
    if (!json_is_object(v))
        return bad(e, "tool_choice", "'tool_choice' must be a string or an object");
    const json_t *type = json_object_get(v, "type"), *fn = json_object_get(v, "function");
    const json_t *name = json_object_get(fn, "name");
    if (!json_is_string(type) || strcmp(json_string_value(type), "function") != 0)
        return bad(e, "tool_choice.type", "'tool_choice.type' must be \"function\"");
    if (!json_is_object(fn) || !json_is_string(name))
        return bad(e, "tool_choice.function.name",
                   "'tool_choice.function.name' must be the name of one of the tools");
    for (size_t i = 0; i < t->n; i++) {
        if (t->names[i].len == json_string_length(name) &&
            !memcmp(t->names[i].ptr, json_string_value(name), t->names[i].len)) {
            t->choice = PGD_TOOL_CHOICE_NAMED;
            t->named = i;
            return 0;
        }
    }
    return bad(e, "tool_choice.function.name",
               "'tool_choice' names the function '%.64s', which is not in 'tools'",
               json_string_value(name));
}

/* A copy of a tool's parameters whose local $refs point where it will sit: "#/..." becomes
 * prefix + "/...". */
static int rebase_refs(json_t *v, const char *prefix) {
    if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++)
            if (rebase_refs(json_array_get(v, i), prefix)) return PGD_ENOMEM;
        return 0;
    }
    if (!json_is_object(v)) return 0;
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x) {
        if (!strcmp(k, "$ref") && json_is_string(x) && json_string_value(x)[0] == '#') {
            pgd_buf b = PGD_BUF_INIT;
            const char *ref = json_string_value(x) + 1;
            int rc = pgd_buf_printf(&b, "%s%s", prefix, ref);
            if (!rc) rc = json_string_set(x, b.data) ? PGD_ENOMEM : 0;
            pgd_buf_free(&b);
            if (rc) return rc;
        } else if (rebase_refs(x, prefix)) {
            return PGD_ENOMEM;
        }
    }
    return 0;
}

/* The parameters' schema of tool i (an empty object's when it declares none): new reference. */
static json_t *params_of(const json_t *tools, size_t i) {
    const json_t *p =
        pgd__api_field(json_object_get(json_array_get(tools, i), "function"), "parameters");
    if (p) return json_deep_copy(p);
    return json_pack("{s:s, s:{}, s:b}", "type", "object", "properties", "additionalProperties", 0);
}

static int compile(const json_t *schema, const char *param, const pgd_json_schema **out,
                   pgd_api_error *e) {
    char msg[448];
    int rc = pgd_api_json_schema_compile(schema, out, msg, sizeof msg);
    if (rc == PGD_ENOMEM) return pgd__api_oom(e);
    if (rc) return bad(e, param, "'%s' cannot constrain the output: %s", param, msg);
    return 0;
}

/* "required": [{"name": <const>, "arguments": <its parameters>}, ...], each tool's parameters
 * kept under $defs so that their own local $refs still resolve. */
static json_t *required_schema(const json_t *tools, const pgd_api_tools *t) {
    json_t *defs = json_object(), *branches = json_array(), *s = NULL;
    if (!defs || !branches) goto fail;
    for (size_t i = 0; i < t->n; i++) {
        char key[32], ref[48]; /* ref: where the parameters sit, their local $refs' new root */
        snprintf(key, sizeof key, "pgd_tool_%zu", i);
        snprintf(ref, sizeof ref, "#/$defs/%s", key);
        json_t *p = params_of(tools, i);
        if (!p || rebase_refs(p, ref) || json_object_set_new(defs, key, p)) goto fail;
        json_t *name = json_stringn(t->names[i].ptr, t->names[i].len);
        json_t *b = json_pack("{s:s, s:{s:{s:o}, s:{s:s}}, s:[s,s], s:b}", "type", "object",
                              "properties", "name", "const", name, "arguments", "$ref", ref,
                              "required", "name", "arguments", "additionalProperties", 0);
        if (!b || json_array_append_new(branches, b)) goto fail;
    }
    s = json_pack("{s:s, s:i, s:{s:o}, s:o}", "type", "array", "minItems", 1, "items", "anyOf",
                  branches, "$defs", defs);
    branches = defs = NULL;
    if (s && !t->parallel && json_object_set_new(s, "maxItems", json_integer(1))) goto fail;
    return s;
fail:
    json_decref(defs);
    json_decref(branches);
    json_decref(s);
    return NULL;
}

/* "required" when the tools do not fit a union (more than PGD_JSON_MAX_BRANCHES of them, or
 * parameters a union of objects cannot read): [{"name": <one of the names>, "arguments": <any
 * object>}, ...]. */
static json_t *required_loose(const pgd_api_tools *t) {
    json_t *names = json_array();
    for (size_t i = 0; names && i < t->n; i++)
        if (json_array_append_new(names, json_stringn(t->names[i].ptr, t->names[i].len))) goto fail;
    json_t *s = json_pack("{s:s, s:i, s:{s:s, s:{s:{s:o}, s:{s:s}}, s:[s,s], s:b}}", "type",
                          "array", "minItems", 1, "items", "type", "object", "properties", "name",
                          "enum", names, "arguments", "type", "object", "required", "name",
                          "arguments", "additionalProperties", 0);
    if (s && !t->parallel && json_object_set_new(s, "maxItems", json_integer(1))) {
        json_decref(s);
        return NULL;
    }
    return s;
fail:
    json_decref(names);
    return NULL;
}

static int constrain(const json_t *tools, const pgd_api_tools *t,
                     const pgd_json_schema **constraint, pgd_api_error *e) {
    /* each tool's parameters must work as a constraint alone first: its error names it */
    for (size_t i = 0; i < t->n; i++) {
        if (t->choice == PGD_TOOL_CHOICE_NAMED && i != t->named) continue;
        char p[64];
        snprintf(p, sizeof p, "tools[%zu].function.parameters", i);
        json_t *s = params_of(tools, i);
        if (!s) return pgd__api_oom(e);
        const pgd_json_schema *c = NULL;
        int rc = compile(s, p, &c, e);
        json_decref(s);
        if (rc) return rc;
        if (t->choice == PGD_TOOL_CHOICE_NAMED) {
            *constraint = c;
            return 0;
        }
        pgd_json_schema_unref(c);
    }
    json_t *s;
    if (t->n <= PGD_JSON_MAX_BRANCHES) { /* as many as a union holds */
        if (!(s = required_schema(tools, t))) return pgd__api_oom(e);
        char msg[448];
        int rc = pgd_api_json_schema_compile(s, constraint, msg, sizeof msg);
        json_decref(s);
        if (rc != PGD_EINVAL) return rc == PGD_ENOMEM ? pgd__api_oom(e) : rc;
    }
    if (!(s = required_loose(t))) return pgd__api_oom(e);
    int rc = compile(s, "tool_choice", constraint, e);
    json_decref(s);
    return rc;
}

int pgd_api_tools_parse(const json_t *root, pgd_api_tools *out, const pgd_json_schema **constraint,
                        pgd_api_error *e) {
    memset(out, 0, sizeof *out);
    *constraint = NULL;
    out->parallel = true;
    out->format = PGD_CHAT_TOOLS_HERMES;
    const json_t *tools = pgd__api_field(root, "tools"),
                 *par = pgd__api_field(root, "parallel_tool_calls");
    if (tools && !json_is_array(tools))
        return bad(e, "tools", "'tools' must be an array of {\"type\": \"function\", ...}");
    size_t n = tools ? json_array_size(tools) : 0;
    if (n > PGD_API_MAX_TOOLS)
        return bad(e, "tools", "'tools' holds %zu tools; at most %d are allowed", n,
                   PGD_API_MAX_TOOLS);
    if (par && !json_is_boolean(par))
        return bad(e, "parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
    out->parallel = !par || json_is_true(par);
    size_t *off = NULL;
    int rc = 0;
    if (n) {
        out->names = calloc(n, sizeof *out->names);
        out->defs = calloc(n, sizeof *out->defs);
        out->defs_indent = calloc(n, sizeof *out->defs_indent);
        off = calloc(2 * n, sizeof *off);
        if (!out->names || !out->defs || !out->defs_indent || !off) {
            rc = pgd__api_oom(e);
            goto done;
        }
    }
    for (size_t i = 0; i < n && !rc; i++) {
        out->n = i + 1;
        rc = one_tool(json_array_get(tools, i), i, out, off, e);
    }
    if (rc) goto done;
    for (size_t k = 0; k < 2 * n; k++) { /* compact, indented, compact, ... */
        pgd_str *d = k % 2 ? &out->defs_indent[k / 2] : &out->defs[k / 2];
        d->ptr = out->text.data + off[k];
        d->len = (k + 1 < 2 * n ? off[k + 1] : out->text.len) - off[k];
    }
    if ((rc = read_choice(pgd__api_field(root, "tool_choice"), out, e))) goto done;
    if (out->choice == PGD_TOOL_CHOICE_REQUIRED || out->choice == PGD_TOOL_CHOICE_NAMED)
        rc = constrain(tools, out, constraint, e);
done:
    free(off);
    return rc;
}

/* ---- output ------------------------------------------------------------------------------ */

static const char k_open[] = "<tool_call>", k_close[] = "</tool_call>";
#define OPEN_LEN  (sizeof k_open - 1)
#define CLOSE_LEN (sizeof k_close - 1)

typedef struct {
    char id[PGD_API_TOOL_ID_CAP];
    size_t name_off, name_len, args_off, args_len; /* into store */
    bool open;                                     /* its arguments may still grow */
    bool cut;                                      /* they stop before their JSON ends */
    size_t content_at; /* the length of the content buffer of the feed / end that found it */
} call_rec;

enum { LJ_UNDECIDED, LJ_CALLS, LJ_CONTENT }; /* LLAMA_JSON: what the answer is */

/* Where a Hermes block's body is (in_call), or a named call's output:
 *   B_HEAD    the head {"name": "...", "arguments": may still come (the body is held)
 *   B_WHOLE   it will not: the block is read whole at its closing tag
 *   B_ARGS    the head came: the call is open and its arguments' bytes are taken as they come
 *   B_TAIL    the arguments are whole: what follows up to the closing tag
 *   B_BROKEN  a byte could not continue the arguments: the call ended there */
enum { B_HEAD, B_WHOLE, B_ARGS, B_TAIL, B_BROKEN };

/* Where a list of calls is ("required"'s array; a Llama answer's objects or lists of them,
 * separated by whitespace, ';' or ','):
 *   LS_FIRST  the first call's head may still come (the answer is held)
 *   LS_WHOLE  it will not: the answer is read whole at its end
 *   LS_CALL   a call is open (body B_ARGS)
 *   LS_CLOSE  its arguments are whole: its object's '}' comes
 *   LS_SEP    between calls
 *   LS_HEAD   a later call's head may still come (held from its '{')
 *   LS_ITEM   it did not: that object is read whole when it ends
 *   LS_REST   what came could not continue the list: the rest is content */
enum { LS_FIRST, LS_WHOLE, LS_CALL, LS_CLOSE, LS_SEP, LS_HEAD, LS_ITEM, LS_REST };

struct pgd_tool_parser {
    pgd_tool_choice choice;
    pgd_chat_tool_format format;
    int lj; /* LLAMA_JSON */
    bool parallel, ended, in_call;
    int body;         /* B_*: the block's (Hermes) or the output's (named) state */
    int list;         /* LS_*: "required", and a Llama answer of calls */
    bool in_list;     /* ... inside a '[' */
    size_t item_seen; /* LS_ITEM: bytes of the held object read by the recognizer (p->args) */
    bool skip;    /* B_ARGS..: the open call is one past the first with parallel false (dropped) */
    char *named;  /* NAMED: the tool's name (NUL-terminated) */
    pgd_buf hold; /* undecided text: a possible start of <tool_call>, or a block's body */
    pgd_buf ws;   /* whitespace outside blocks, kept until what follows decides */
    pgd_buf store;
    call_rec *calls;
    size_t n_calls, cap_calls;
    pgd_api_tool_call *views; /* [n_calls], rebuilt by pgd_tool_parser_calls */
    pgd_json_fsm args;        /* B_ARGS: the open call's arguments so far */
    const pgd_buf *out;       /* during a feed / end: its content buffer */
};

int pgd_tool_parser_new(const pgd_api_tools *t, pgd_tool_parser **out) {
    pgd_tool_parser *p = calloc(1, sizeof *p);
    if (!p) return PGD_ENOMEM;
    p->choice = t->choice;
    p->format = t->format;
    p->parallel = t->parallel;
    if (t->choice == PGD_TOOL_CHOICE_NAMED) {
        pgd_str nm = t->names[t->named];
        p->named = malloc(nm.len + 1);
        if (!p->named) {
            free(p);
            return PGD_ENOMEM;
        }
        memcpy(p->named, nm.ptr, nm.len);
        p->named[nm.len] = '\0';
    }
    *out = p;
    return 0;
}

void pgd_tool_parser_free(pgd_tool_parser *p) {
    if (!p) return;
    free(p->named);
    pgd_buf_free(&p->hold);
    pgd_buf_free(&p->ws);
    pgd_buf_free(&p->store);
    free(p->calls);
    free(p->views);
    free(p);
}

static void new_call_id(char id[PGD_API_TOOL_ID_CAP]) {
    uint64_t a = pgd_sampler_random_seed(), b = pgd_sampler_random_seed();
    snprintf(id, PGD_API_TOOL_ID_CAP, "call_%016" PRIx64 "%08" PRIx32, a, (uint32_t)b);
}

/* A new record of a call of `name`, its arguments empty (at the end of p->store, where an open
 * call's grow), or NULL (PGD_ENOMEM; nothing recorded). */
static call_rec *new_call(pgd_tool_parser *p, const char *name, size_t name_len) {
    if (p->n_calls == p->cap_calls) {
        size_t cap = p->cap_calls ? p->cap_calls * 2 : 4;
        call_rec *c = realloc(p->calls, cap * sizeof *c);
        if (!c) return NULL;
        p->calls = c;
        p->cap_calls = cap;
    }
    call_rec *c = &p->calls[p->n_calls];
    *c = (call_rec){
        .name_off = p->store.len, .name_len = name_len, .content_at = p->out ? p->out->len : 0};
    if (pgd_buf_append(&p->store, name, name_len)) return NULL;
    c->args_off = p->store.len;
    new_call_id(c->id);
    p->n_calls++;
    return c;
}

/* Records a call of `name` with arguments `args` (an object; NULL: {}), whole. 0, PGD_ENOMEM. */
static int add_call(pgd_tool_parser *p, const char *name, size_t name_len, const json_t *args) {
    if (!p->parallel && p->n_calls) return 0; /* one call at most: the first */
    size_t mark = p->store.len;
    call_rec *c = new_call(p, name, name_len);
    if (!c || (args ? pgd_api_json_dump_py(args, &p->store) : pgd_buf_append(&p->store, "{}", 2))) {
        p->n_calls -= c != NULL;
        p->store.len = mark;
        return PGD_ENOMEM;
    }
    c->args_len = p->store.len - c->args_off;
    return 0;
}

/* A call's head came: it opens (B_ARGS), its arguments to come byte by byte — dropped when it
 * is one past the first with parallel false. 0 or PGD_ENOMEM. */
static int open_call(pgd_tool_parser *p, const char *name, size_t name_len) {
    pgd_json_fsm_init(&p->args, pgd_json_schema_object());
    p->body = B_ARGS;
    p->skip = !p->parallel && p->n_calls;
    if (p->skip) return 0;
    call_rec *c = new_call(p, name, name_len);
    if (!c) return PGD_ENOMEM;
    c->open = c->cut = true;
    return 0;
}

/* The open call ends: its arguments whole (B_TAIL) or not (B_BROKEN, or the output's end). */
static void close_call(pgd_tool_parser *p, bool whole) {
    p->body = whole ? B_TAIL : B_BROKEN;
    if (p->skip) return;
    call_rec *c = &p->calls[p->n_calls - 1];
    c->open = false;
    c->cut = !whole;
}

/* B_ARGS: the bytes of s[n] that continue the open call's arguments go into them; *used: how
 * many. The call closes at the byte that makes them whole, or before one that cannot continue
 * them. 0 or PGD_ENOMEM. */
static int take_args(pgd_tool_parser *p, const char *s, size_t n, size_t *used) {
    size_t i = 0;
    int end = -1; /* -1: still open; 1: whole; 0: broken */
    while (i < n && end < 0) {
        if (!pgd_json_fsm_feed(&p->args, (const uint8_t *)s + i, 1)) {
            end = 0;
            break;
        }
        i++;
        if (pgd_json_fsm_done(&p->args)) end = 1;
    }
    *used = i;
    if (!p->skip && i) {
        if (pgd_buf_append(&p->store, s, i)) return PGD_ENOMEM;
        p->calls[p->n_calls - 1].args_len += i;
    }
    if (end >= 0) close_call(p, end == 1);
    return 0;
}

/* A call object {"name": "...", "arguments": {...}} ("parameters" is taken for "arguments";
 * none means {}): 1 when recorded, 0 when `o` is not one, PGD_ENOMEM. */
static int take_call(pgd_tool_parser *p, const json_t *o) {
    if (!json_is_object(o)) return 0;
    const json_t *name = json_object_get(o, "name"), *args = json_object_get(o, "arguments");
    if (!args) args = json_object_get(o, "parameters");
    if (json_is_null(args)) args = NULL;
    if (!json_is_string(name) || !json_string_length(name) || (args && !json_is_object(args)))
        return 0;
    int rc = add_call(p, json_string_value(name), json_string_length(name), args);
    return rc ? rc : 1;
}

/* A block's body as a call: 1 taken, 0 not a call, PGD_ENOMEM. */
static int parse_block(pgd_tool_parser *p, const char *s, size_t n) {
    json_t *o = json_loadb(s, n, JSON_DECODE_ANY, NULL);
    if (!o) return 0;
    int rc = take_call(p, o);
    json_decref(o);
    return rc;
}

/* JSON's whitespace (strchr would also take the NUL byte). */
static bool is_ws(char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static bool all_ws(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!is_ws(s[i])) return false;
    return true;
}

/* Content outside blocks: whitespace waits in p->ws until non-space text shows it is part of
 * the content (it is dropped next to a call). */
static int put_content(pgd_tool_parser *p, const char *s, size_t n, pgd_buf *content) {
    if (!n) return 0;
    if (all_ws(s, n)) return pgd_buf_append(&p->ws, s, n);
    size_t end = n; /* trailing whitespace waits too (some byte before it is not space) */
    while (is_ws(s[end - 1])) end--;
    if (pgd_buf_append(content, p->ws.data ? p->ws.data : "", p->ws.len) ||
        pgd_buf_append(content, s, end))
        return PGD_ENOMEM;
    pgd_buf_reset(&p->ws);
    return pgd_buf_append(&p->ws, s + end, n - end);
}

/* The longest suffix of s[n] that is a proper prefix of the opening tag. */
static size_t partial_open(const char *s, size_t n) {
    for (size_t k = n < OPEN_LEN - 1 ? n : OPEN_LEN - 1; k > 0; k--)
        if (!memcmp(s + n - k, k_open, k)) return k;
    return 0;
}

/* ---- a Hermes block's head: {"name": "...", "arguments": { ------------------------------- */

/* A head that does not end within this many bytes is not one: the block is read whole (a name
 * has at most 64 characters). */
#define HEAD_MAX 256

enum { HEAD_NO, HEAD_MORE, HEAD_MATCH };

static size_t skip_ws(const char *s, size_t n, size_t i) {
    while (i < n && is_ws(s[i])) i++;
    return i;
}

/* `lit` at s[*i]: HEAD_MATCH (*i past it), HEAD_MORE (s ends within it) or HEAD_NO. */
static int head_lit(const char *s, size_t n, size_t *i, const char *lit) {
    size_t len = strlen(lit);
    for (size_t k = 0; k < len; k++) {
        if (*i + k == n) return HEAD_MORE;
        if (s[*i + k] != lit[k]) return HEAD_NO;
    }
    *i += len;
    return HEAD_MATCH;
}

/* A JSON string's token at s[*i], quotes included (its text is checked when decoded). */
static int head_str(const char *s, size_t n, size_t *i) {
    if (*i == n) return HEAD_MORE;
    if (s[*i] != '"') return HEAD_NO;
    for (size_t k = *i + 1; k < n; k++) {
        if ((unsigned char)s[k] < 0x20) return HEAD_NO;
        if (s[k] == '\\') {
            k++;
        } else if (s[k] == '"') {
            *i = k + 1;
            return HEAD_MATCH;
        }
    }
    return HEAD_MORE;
}

/* Whether a block's body s[n] begins with a call's head — ws '{' ws "name" ws ':' ws STRING ws
 * ',' ws ("arguments" | "parameters") ws ':' ws '{' — within HEAD_MAX bytes: HEAD_MATCH with
 * the name's token at s[*name_at, *name_end) and the arguments' '{' at s[*args_at]; HEAD_MORE
 * when s may still grow into one; HEAD_NO. */
static int match_head(const char *s, size_t n, size_t *name_at, size_t *name_end, size_t *args_at) {
    bool capped = n > HEAD_MAX;
    if (capped) n = HEAD_MAX;
    size_t i = skip_ws(s, n, 0);
    int r = head_lit(s, n, &i, "{");
    if (r == HEAD_MATCH) i = skip_ws(s, n, i), r = head_lit(s, n, &i, "\"name\"");
    if (r == HEAD_MATCH) i = skip_ws(s, n, i), r = head_lit(s, n, &i, ":");
    if (r == HEAD_MATCH) i = *name_at = skip_ws(s, n, i), r = head_str(s, n, &i);
    if (r == HEAD_MATCH) *name_end = i, i = skip_ws(s, n, i), r = head_lit(s, n, &i, ",");
    if (r == HEAD_MATCH) {
        i = skip_ws(s, n, i);
        r = head_lit(s, n, &i, "\"arguments\"");
        if (r != HEAD_MATCH) {
            int r2 = head_lit(s, n, &i, "\"parameters\"");
            r = r2 == HEAD_MATCH || r == HEAD_NO ? r2 : r;
        }
    }
    if (r == HEAD_MATCH) i = skip_ws(s, n, i), r = head_lit(s, n, &i, ":");
    if (r == HEAD_MATCH) {
        i = skip_ws(s, n, i);
        *args_at = i;
        r = head_lit(s, n, &i, "{");
    }
    return r == HEAD_MORE && capped ? HEAD_NO : r;
}

/* A call's head at s[n] (from its '{'): opens it (*used past the head) when it matches and its
 * name reads; HEAD_MORE: wait; HEAD_NO: it is none. 0 or PGD_ENOMEM in *rc. */
static int open_head(pgd_tool_parser *p, const char *s, size_t n, size_t *used, int *rc) {
    size_t name_at = 0, name_end = 0, args_at = 0;
    int m = match_head(s, n, &name_at, &name_end, &args_at);
    *rc = 0;
    if (m != HEAD_MATCH) return m;
    json_t *name = json_loadb(s + name_at, name_end - name_at, JSON_DECODE_ANY, NULL);
    if (!json_is_string(name) || !json_string_length(name)) {
        json_decref(name);
        return HEAD_NO;
    }
    *rc = open_call(p, json_string_value(name), json_string_length(name));
    json_decref(name);
    *used = args_at;
    return HEAD_MATCH;
}

/* B_HEAD: the body held so far (its closing tag at `close`, or NULL) opens a call (B_ARGS,
 * *used past the head), is read whole (B_WHOLE) or waits (*used 0, state kept). The head is
 * looked for only before the closing tag: a head the tag cuts into is none. 0 or PGD_ENOMEM. */
static int block_head(pgd_tool_parser *p, const char *h, size_t n, const char *close,
                      size_t *used) {
    int rc;
    *used = 0;
    int m = open_head(p, h, close ? (size_t)(close - h) : n, used, &rc);
    if (rc) return rc;
    if (m == HEAD_MATCH)
        pgd_buf_reset(&p->ws); /* whitespace before a call is not content */
    else if (m == HEAD_NO || close)
        p->body = B_WHOLE;
    return 0;
}

/* The text of a block after its call, up to the closing tag or the output's end: content —
 * but after whole arguments, the rest of the call's object ("}", or more keys and "}") is not. */
static int block_rest(pgd_tool_parser *p, const char *s, size_t n, pgd_buf *content) {
    if (p->body == B_TAIL) {
        pgd_buf obj = PGD_BUF_INIT; /* {"": 0 and the text: an object when it is the rest */
        if (pgd_buf_append(&obj, "{\"\": 0", 6) || pgd_buf_append(&obj, s, n)) {
            pgd_buf_free(&obj);
            return PGD_ENOMEM;
        }
        json_t *o = json_loadb(obj.data, obj.len, 0, NULL);
        pgd_buf_free(&obj);
        bool rest = o != NULL;
        json_decref(o);
        if (rest) return 0;
    }
    return put_content(p, s, n, content);
}

/* A block read whole, body s[n]: its call, or content with its tags (`close`: it had one). */
static int block_whole(pgd_tool_parser *p, const char *s, size_t n, bool close, pgd_buf *content) {
    int rc = parse_block(p, s, n);
    if (rc == 1) {
        pgd_buf_reset(&p->ws); /* whitespace before a call is not content */
        return 0;
    }
    if (!rc && !(rc = put_content(p, k_open, OPEN_LEN, content)) &&
        !(rc = put_content(p, s, n, content)) && close)
        rc = put_content(p, k_close, CLOSE_LEN, content);
    return rc;
}

/* In a block: consumes what of p->hold is decided (*used bytes); *wait when the rest waits for
 * more output. */
static int in_block(pgd_tool_parser *p, pgd_buf *content, size_t *used, bool *wait) {
    const char *h = p->hold.data ? p->hold.data : "";
    size_t n = p->hold.len;
    const char *close = memmem(h, n, k_close, CLOSE_LEN);
    size_t body = close ? (size_t)(close - h) : n;
    int rc = 0;
    *used = 0;
    *wait = false;
    switch (p->body) {
    case B_HEAD:
        rc = block_head(p, h, n, close, used);
        *wait = p->body == B_HEAD;
        return rc;
    case B_ARGS:
        rc = take_args(p, h, n, used);
        *wait = p->body == B_ARGS;
        return rc;
    case B_WHOLE:
        if (close) rc = block_whole(p, h, body, true, content);
        break;
    default: /* B_TAIL, B_BROKEN */
        if (close) rc = block_rest(p, h, body, content);
        break;
    }
    if (!close) {
        *wait = true;
        return 0;
    }
    *used = body + CLOSE_LEN;
    p->in_call = false;
    return rc;
}

/* Consumes p->hold as far as it is decided. */
static int scan(pgd_tool_parser *p, pgd_buf *content) {
    for (;;) {
        const char *h = p->hold.data ? p->hold.data : "";
        size_t n = p->hold.len, used;
        bool wait = false;
        int rc;
        if (!p->in_call) {
            const char *at = memmem(h, n, k_open, OPEN_LEN);
            size_t keep = at ? 0 : partial_open(h, n);
            size_t text = at ? (size_t)(at - h) : n - keep;
            if ((rc = put_content(p, h, text, content))) return rc;
            if (!at) {
                memmove(p->hold.data, h + text, keep);
                p->hold.len = keep;
                return 0;
            }
            used = text + OPEN_LEN;
            p->in_call = true;
            p->body = B_HEAD;
        } else if ((rc = in_block(p, content, &used, &wait))) {
            return rc;
        }
        if (n) memmove(p->hold.data, h + used, n - used);
        p->hold.len = n - used;
        if (wait) return 0;
    }
}

/* ---- LLAMA_JSON: the answer is calls or content, told by how it begins ---------------- */

static const char k_python_tag[] = "<|python_tag|>";
#define PYTAG_LEN (sizeof k_python_tag - 1)

/* Where the calls of s[n] begin past whitespace and a <|python_tag|>: *at. 1: they begin with
 * '{' or '[' there; 0: it is content; -1: too early to tell. */
static int lj_begins(const char *s, size_t n, size_t *at) {
    size_t i = 0;
    while (i < n && is_ws(s[i])) i++;
    if (i < n && n - i < PYTAG_LEN && !memcmp(s + i, k_python_tag, n - i)) return -1;
    if (n - i >= PYTAG_LEN && !memcmp(s + i, k_python_tag, PYTAG_LEN)) {
        i += PYTAG_LEN;
        while (i < n && is_ws(s[i])) i++;
    }
    *at = i;
    if (i == n) return -1;
    return s[i] == '{' || s[i] == '[';
}

static int list_scan(pgd_tool_parser *p, pgd_buf *content);

static int lj_feed(pgd_tool_parser *p, pgd_buf *content) {
    size_t at;
    if (p->lj == LJ_CALLS) return list_scan(p, content);
    if (p->lj != LJ_UNDECIDED) return 0;
    int b = lj_begins(p->hold.data, p->hold.len, &at);
    if (b < 0) return 0;
    if (b > 0) {
        p->lj = LJ_CALLS;
        return list_scan(p, content);
    }
    p->lj = LJ_CONTENT;
    int rc = pgd_buf_append(content, p->hold.data, p->hold.len);
    pgd_buf_reset(&p->hold);
    return rc;
}

/* ---- a list of calls, opened from the first one's head on ------------------------------ */

/* LS_ITEM: the object at s[n] (its first *seen bytes read before), no call's head, read whole
 * once the JSON recognizer has seen it end: *m HEAD_MATCH when it is a call (recorded, *used
 * past it), HEAD_NO when not (or when a byte cannot continue it), HEAD_MORE when it has not
 * ended yet. 0 or PGD_ENOMEM. */
static int list_item(pgd_tool_parser *p, const char *s, size_t n, size_t *used, int *m) {
    size_t i = p->item_seen;
    *m = HEAD_MORE;
    if (!i) pgd_json_fsm_init(&p->args, pgd_json_schema_object());
    while (i < n && *m == HEAD_MORE) {
        if (!pgd_json_fsm_feed(&p->args, (const uint8_t *)s + i, 1))
            *m = HEAD_NO;
        else if (pgd_json_fsm_done(&p->args))
            *m = HEAD_MATCH;
        i++;
    }
    p->item_seen = *m == HEAD_MORE ? i : 0;
    if (*m != HEAD_MATCH) return 0;
    json_t *o = json_loadb(s, i, 0, NULL);
    int rc = take_call(p, o);
    json_decref(o);
    *used = i;
    if (rc == 0) *m = HEAD_NO;
    return rc < 0 ? rc : 0;
}

/* LS_FIRST: the answer so far, s[n] (nothing consumed: LS_WHOLE reads it all), against its
 * first call's head — past whitespace ("required": then '['; Llama: a <|python_tag|>, then
 * '[' or not) and the head. */
static int list_first(pgd_tool_parser *p, const char *s, size_t n, size_t *used, int *rc) {
    size_t at = 0;
    *rc = 0;
    if (p->choice == PGD_TOOL_CHOICE_REQUIRED) {
        at = skip_ws(s, n, 0);
        if (at == n) return HEAD_MORE;
        if (s[at] != '[') return HEAD_NO;
    } else if (lj_begins(s, n, &at) != 1) {
        return HEAD_NO; /* (decided already: it begins with '{' or '[') */
    }
    bool list = s[at] == '[';
    if (list && (at = skip_ws(s, n, at + 1)) == n) return HEAD_MORE;
    int m = open_head(p, s + at, n - at, used, rc);
    if (m == HEAD_MATCH) {
        *used += at;
        p->in_list = list;
    }
    return m;
}

/* Consumes p->hold as far as the list is decided (Llama: once it is calls; "required"). */
static int list_scan(pgd_tool_parser *p, pgd_buf *content) {
    for (;;) {
        const char *h = p->hold.data ? p->hold.data : "";
        size_t n = p->hold.len, used = 0, i;
        int rc = 0, m;
        bool wait = false;
        switch (p->list) {
        case LS_FIRST:
        case LS_HEAD:
            m = p->list == LS_FIRST ? list_first(p, h, n, &used, &rc)
                                    : open_head(p, h, n, &used, &rc);
            if (rc) return rc;
            if (m == HEAD_MORE) return 0;
            if (m == HEAD_NO) {
                if (p->list == LS_FIRST) { /* not a streamed list: the whole answer decides */
                    p->list = LS_WHOLE;
                    return 0;
                }
                p->list = LS_ITEM;
            } else {
                p->list = LS_CALL;
            }
            break;
        case LS_WHOLE:
            return 0;
        case LS_ITEM:
            if ((rc = list_item(p, h, n, &used, &m))) return rc;
            if (m == HEAD_MORE) return 0;
            p->list = m == HEAD_MATCH ? LS_SEP : LS_REST;
            break;
        case LS_CALL:
            if ((rc = take_args(p, h, n, &used))) return rc;
            if (p->body == B_ARGS)
                wait = true;
            else
                p->list = p->body == B_TAIL ? LS_CLOSE : LS_REST;
            break;
        case LS_CLOSE: /* the call's object ends */
            used = skip_ws(h, n, 0);
            if (used == n) {
                wait = true;
            } else if (h[used] == '}') {
                used++;
                p->list = LS_SEP;
            } else {
                p->list = LS_REST;
            }
            break;
        case LS_SEP:
            for (i = 0; i < n; i++) {
                if (is_ws(h[i]) || h[i] == ';' || h[i] == ',') continue;
                if (h[i] != '[' && h[i] != ']') break;
                if ((h[i] == '[') == p->in_list) break; /* lists do not nest */
                p->in_list = !p->in_list;
            }
            used = i;
            if (i == n)
                wait = true;
            else
                p->list = h[i] == '{' ? LS_HEAD : LS_REST;
            break;
        default: /* LS_REST */
            rc = pgd_buf_append(content, h, n);
            used = n;
            wait = true;
            break;
        }
        if (n) memmove(p->hold.data, h + used, n - used);
        p->hold.len = n - used;
        if (rc || wait) return rc;
    }
}

/* The end of a list: 1 when it was streamed (what is left settled), 0 when it is read whole,
 * PGD_ENOMEM. */
static int list_end(pgd_tool_parser *p, pgd_buf *content) {
    switch (p->list) {
    case LS_FIRST:
    case LS_WHOLE:
        return 0;
    case LS_CALL:
        close_call(p, false); /* cut inside its arguments */
        return 1;
    case LS_HEAD: /* a call begun, not yet one: content */
    case LS_ITEM:
    case LS_REST:
        return pgd_buf_append(content, p->hold.data ? p->hold.data : "", p->hold.len) ? PGD_ENOMEM
                                                                                      : 1;
    default: /* whitespace and separators */
        return 1;
    }
}

/* The held answer read as calls: objects (or lists of them) separated by whitespace, ';' or
 * ','. 1 when it all reads so (the calls recorded), 0 when not (none recorded), PGD_ENOMEM. */
static int lj_calls(pgd_tool_parser *p) {
    size_t at, n = p->hold.len;
    const char *s = p->hold.data ? p->hold.data : "";
    if (lj_begins(s, n, &at) != 1) return 0;
    size_t before = p->n_calls;
    int ok = 1;
    while (ok == 1) {
        while (at < n && (is_ws(s[at]) || s[at] == ';' || s[at] == ',')) at++;
        if (at == n) break;
        json_error_t err;
        json_t *v = json_loadb(s + at, n - at, JSON_DISABLE_EOF_CHECK | JSON_DECODE_ANY, &err);
        if (!v || (!json_is_object(v) && !json_is_array(v))) {
            json_decref(v);
            ok = 0;
            break;
        }
        at += (size_t)err.position;
        if (json_is_object(v)) {
            ok = take_call(p, v);
        } else {
            for (size_t i = 0; ok == 1 && i < json_array_size(v); i++)
                ok = take_call(p, json_array_get(v, i));
            if (!json_array_size(v)) ok = 0;
        }
        json_decref(v);
    }
    if (ok != 1) p->n_calls = before;
    return ok;
}

/* NAMED: the output is the named tool's arguments (constrained to its parameters): the call
 * opens at the first byte past whitespace and takes them as they come. */
static int named_feed(pgd_tool_parser *p, const char *s, size_t n, pgd_buf *content) {
    size_t i = 0, used;
    int rc = 0;
    if (p->body == B_HEAD) {
        i = skip_ws(s, n, 0);
        if ((rc = pgd_buf_append(&p->ws, s, i))) return rc; /* content if no call comes */
        if (i == n) return 0;
        pgd_buf_reset(&p->ws);
        if ((rc = open_call(p, p->named, strlen(p->named)))) return rc;
    }
    if (p->body == B_ARGS) {
        if ((rc = take_args(p, s + i, n - i, &used))) return rc;
        i += used;
    }
    return i < n ? put_content(p, s + i, n - i, content) : 0; /* past them: whitespace */
}

static int feed(pgd_tool_parser *p, const char *s, size_t n, pgd_buf *content) {
    if (p->ended || !n) return 0;
    if (p->choice == PGD_TOOL_CHOICE_NONE || p->lj == LJ_CONTENT)
        return pgd_buf_append(content, s, n);
    if (p->choice == PGD_TOOL_CHOICE_NAMED) return named_feed(p, s, n, content);
    if (pgd_buf_append(&p->hold, s, n)) return PGD_ENOMEM;
    if (p->choice == PGD_TOOL_CHOICE_REQUIRED) return list_scan(p, content);
    return p->format == PGD_CHAT_TOOLS_LLAMA_JSON ? lj_feed(p, content) : scan(p, content);
}

int pgd_tool_parser_feed(pgd_tool_parser *p, const char *s, size_t n, pgd_buf *content) {
    p->out = content;
    int rc = feed(p, s, n, content);
    p->out = NULL;
    return rc;
}

/* "required": the constrained output, an array of calls, read whole. */
static int end_required(pgd_tool_parser *p, pgd_buf *content) {
    json_t *v = json_loadb(p->hold.data ? p->hold.data : "", p->hold.len, JSON_DECODE_ANY, NULL);
    int rc = 0;
    bool ok = json_is_array(v) && json_array_size(v);
    for (size_t i = 0; ok && i < json_array_size(v) && rc >= 0; i++)
        ok = (rc = take_call(p, json_array_get(v, i))) == 1;
    if (rc == 1) rc = 0;
    if (!ok) p->n_calls = 0;
    json_decref(v);
    if (rc) return rc;
    if (!ok) return pgd_buf_append(content, p->hold.data ? p->hold.data : "", p->hold.len);
    return 0;
}

static int end(pgd_tool_parser *p, pgd_buf *content) {
    if (p->ended) return 0;
    p->ended = true;
    int rc = 0;
    const char *h = p->hold.data ? p->hold.data : "";
    if (p->choice == PGD_TOOL_CHOICE_NONE) return 0;
    bool list = p->choice == PGD_TOOL_CHOICE_REQUIRED ||
                (p->choice == PGD_TOOL_CHOICE_AUTO && p->format == PGD_CHAT_TOOLS_LLAMA_JSON);
    if (list && (rc = list_end(p, content))) {
        if (rc == 1) rc = 0;
    } else if (p->choice == PGD_TOOL_CHOICE_REQUIRED) {
        rc = end_required(p, content);
    } else if (p->choice == PGD_TOOL_CHOICE_NAMED) {
        if (p->body == B_ARGS) close_call(p, false); /* cut inside its arguments */
    } else if (p->format == PGD_CHAT_TOOLS_LLAMA_JSON) {
        rc = lj_calls(p);
        if (rc == 0) rc = pgd_buf_append(content, h, p->hold.len);
        if (rc == 1) rc = 0;
    } else if (!p->in_call) {
        rc = put_content(p, h, p->hold.len, content);
    } else if (p->body == B_HEAD || p->body == B_WHOLE) { /* unterminated: a call if it parses */
        rc = block_whole(p, h, p->hold.len, false, content);
    } else {
        if (p->body == B_ARGS) close_call(p, false); /* cut inside its arguments */
        rc = block_rest(p, h, p->hold.len, content);
    }
    pgd_buf_reset(&p->hold);
    if (!rc && !p->n_calls && p->ws.len) rc = pgd_buf_append(content, p->ws.data, p->ws.len);
    pgd_buf_reset(&p->ws);
    return rc;
}

int pgd_tool_parser_end(pgd_tool_parser *p, pgd_buf *content) {
    p->out = content;
    int rc = end(p, content);
    p->out = NULL;
    return rc;
}

size_t pgd_tool_parser_n_calls(const pgd_tool_parser *p) {
    return p ? p->n_calls : 0;
}

const pgd_api_tool_call *pgd_tool_parser_calls(pgd_tool_parser *p, size_t *n) {
    *n = 0;
    if (!p || !p->n_calls) return NULL;
    pgd_api_tool_call *v = realloc(p->views, p->n_calls * sizeof *v);
    if (!v) return NULL;
    p->views = v;
    for (size_t i = 0; i < p->n_calls; i++) {
        const call_rec *c = &p->calls[i];
        memcpy(v[i].id, c->id, sizeof v[i].id);
        v[i].name = (pgd_str){p->store.data + c->name_off, c->name_len};
        v[i].arguments = (pgd_str){p->store.data + c->args_off, c->args_len};
        v[i].open = c->open;
        v[i].cut = c->cut;
        v[i].content_at = c->content_at;
    }
    *n = p->n_calls;
    return v;
}
