/*
 * tests/fuzz/fuzz_chat_template.c — libFuzzer target: chat-template detection and rendering of
 * arbitrary messages.
 *
 * Renderers, built once: the eight families by name (bos "<s>", eos "</s>") and every published
 * template of tests/reference/templates/ detected from its source (variants: default system
 * prompt, tools block braces, Gemma-2, Phi-3.5, Llama 3.2 with its tool format).
 *
 * Input: byte 0 picks a renderer, or (the value after the last renderer) detection mode.
 *   Rendering: byte 1 bit 0 = add_generation_prompt, bit 1 = offer tools (then two tool
 *     definitions of up to 64 bytes follow, given as both the compact and the indented text);
 *     then up to 8 messages, each a role byte (system /
 *     user / assistant / tool / an arbitrary role read from the input; bit 6 adds one or two
 *     tool calls, a name and arguments of up to 32 bytes each, whatever the role) and up to 3
 *     content parts of up to 200 bytes. A render either fails with PGD_EINVAL (or PGD_ENOMEM)
 *     and a detail, or gives a NUL-terminated text whose template spans are sorted, non-empty,
 *     inside the text and never touch, and whose bytes outside the spans are content (message
 *     content, tool definitions, call names and arguments; Llama 3.1+ tool results as JSON
 *     strings): no more of them than the input holds, and exactly that content in render order
 *     for the families that do not trim (chatml, mistral, zephyr, phi3). The prompt is then
 * tokenized with its spans, as pgd_encode_chat does, by the synthetic byte-level BPE tokenizer.
 *   Detection: byte 1 picks an override name (or none); the rest is a template source. Any
 *     outcome but a crash is fine; a detected template then renders a fixed conversation.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/text/chat_template.h"
#include "engine/text/tokenizer.h"
#include "fuzz_util.h"

#define MAX_TMPL 24
#define MAX_MSGS 8

static pgd_chat_template *g_t[MAX_TMPL];
static int g_n;
static pgd_tokenizer *g_tok;

static void load_reference_templates(void) {
#ifdef PGD_SOURCE_DIR
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/reference/templates", PGD_SOURCE_DIR);
    DIR *dir = opendir(path);
    if (!dir) return;
    struct dirent *de;
    while ((de = readdir(dir)) && g_n < MAX_TMPL) {
        size_t l = strlen(de->d_name);
        if (l < 6 || strcmp(de->d_name + l - 6, ".jinja")) continue;
        char file[4352];
        snprintf(file, sizeof file, "%s/%s", path, de->d_name);
        FILE *f = fopen(file, "rb");
        if (!f) continue;
        pgd_buf src = PGD_BUF_INIT;
        char buf[4096];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, f)) > 0)
            FUZZ_CHECK(pgd_buf_append(&src, buf, n) == 0);
        fclose(f);
        pgd_chat_template *t = NULL;
        if (pgd_chat_template_detect(src.data, src.len, NULL, "<s>", "</s>", &t) == 0)
            g_t[g_n++] = t;
        else
            fprintf(stderr, "fuzz_chat_template: %s: %s\n", de->d_name, pgd_error_detail());
        pgd_buf_free(&src);
    }
    closedir(dir);
#endif
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    for (int f = 0; f < PGD_CHAT_FAMILY_COUNT; f++) {
        pgd_chat_template *t = NULL;
        FUZZ_CHECK(pgd_chat_template_detect(NULL, 0, pgd_chat_family_name((pgd_chat_family)f),
                                            "<s>", "</s>", &t) == 0);
        g_t[g_n++] = t;
    }
    load_reference_templates();
    FUZZ_CHECK(fuzz_bpe_tokenizer("gpt2", &g_tok) == 0);
    return 0;
}

static void append_content(pgd_buf *b, const pgd_chat_msg *m) {
    for (size_t k = 0; k < m->n_parts; k++)
        FUZZ_CHECK(pgd_buf_append(b, m->parts[k].ptr, m->parts[k].len) == 0);
    for (size_t c = 0; c < m->n_calls; c++) {
        FUZZ_CHECK(pgd_buf_append(b, m->calls[c].name.ptr, m->calls[c].name.len) == 0);
        FUZZ_CHECK(pgd_buf_append(b, m->calls[c].arguments.ptr, m->calls[c].arguments.len) == 0);
    }
}

static void check_prompt(const pgd_chat_template *t, const pgd_chat_msg *msgs, size_t n,
                         const pgd_chat_tools *tools, const pgd_chat_prompt *p) {
    FUZZ_CHECK(p->text.data != NULL && p->text.data[p->text.len] == '\0');
    size_t special = 0;
    for (size_t i = 0; i < p->n_special; i++) {
        const pgd_span *s = &p->special[i];
        FUZZ_CHECK(s->begin < s->end && s->end <= p->text.len);
        if (i) FUZZ_CHECK(s->begin > p->special[i - 1].end); /* sorted, never touching */
        special += s->end - s->begin;
    }
    /* the bytes outside the spans, in order */
    pgd_buf outside = PGD_BUF_INIT, content = PGD_BUF_INIT;
    size_t at = 0;
    for (size_t i = 0; i <= p->n_special; i++) {
        size_t end = i < p->n_special ? p->special[i].begin : p->text.len;
        FUZZ_CHECK(pgd_buf_append(&outside, p->text.data + at, end - at) == 0);
        if (i < p->n_special) at = p->special[i].end;
    }
    FUZZ_CHECK(outside.len == p->text.len - special);
    /* content in render order: with tools, a leading system message's content and the
     * definitions come first (chatml; Llama 3.1+, which also quotes tool results, is only
     * bounded: it trims) */
    size_t first = 0;
    bool llama = pgd_chat_template_tool_format(t) == PGD_CHAT_TOOLS_LLAMA_JSON;
    if (tools && tools->n) {
        FUZZ_CHECK(pgd_chat_template_renders_tools(t));
        const pgd_str *defs = llama ? tools->defs_indent : tools->defs;
        if (!strcmp(msgs[0].role, "system")) append_content(&content, &msgs[first++]);
        for (size_t k = 0; k < tools->n; k++)
            FUZZ_CHECK(pgd_buf_append(&content, defs[k].ptr, defs[k].len) == 0);
    }
    for (size_t i = first; i < n; i++) {
        if (llama && !strcmp(msgs[i].role, "tool")) {
            pgd_buf joined = PGD_BUF_INIT;
            append_content(&joined, &msgs[i]);
            FUZZ_CHECK(pgd_json_quote_py(joined.data ? joined.data : "", joined.len, &content) ==
                       0);
            pgd_buf_free(&joined);
        } else {
            append_content(&content, &msgs[i]);
        }
    }
    FUZZ_CHECK(outside.len <= content.len);
    pgd_chat_family f = pgd_chat_template_family(t);
    if (f == PGD_CHAT_CHATML || f == PGD_CHAT_MISTRAL || f == PGD_CHAT_ZEPHYR ||
        f == PGD_CHAT_PHI3) {
        if (outside.len != content.len ||
            (content.len && memcmp(outside.data, content.data, content.len))) {
            fprintf(stderr, "%s: %zu bytes outside the template spans, %zu bytes of content\n",
                    pgd_chat_family_name(f), outside.len, content.len);
            abort();
        }
    }
    pgd_buf_free(&outside);
    pgd_buf_free(&content);

    pgd_tokens ids = PGD_TOKENS_INIT;
    FUZZ_CHECK(pgd_tokenize(g_tok, p->text.data, p->text.len, p->special, p->n_special, &ids) == 0);
    pgd_tokens_free(&ids);
}

static void render(const pgd_chat_template *t, const pgd_chat_msg *msgs, size_t n,
                   const pgd_chat_tools *tools, bool gen) {
    pgd_chat_prompt p;
    pgd_error_clear();
    int rc = tools ? pgd_chat_render_tools(t, msgs, n, tools, gen, &p)
                   : pgd_chat_render(t, msgs, n, gen, &p);
    if (rc == 0) {
        check_prompt(t, msgs, n, tools, &p);
        pgd_chat_prompt_free(&p);
        pgd_chat_prompt_free(&p);
    } else {
        FUZZ_CHECK(rc == PGD_EINVAL || rc == PGD_ENOMEM);
        FUZZ_CHECK(pgd_error_detail()[0] != '\0');
        FUZZ_CHECK(p.text.data == NULL && p.special == NULL && p.n_special == 0);
    }
}

static void fuzz_detect(fuzz_in *in) {
    static const char *const overrides[] = {NULL,    "chatml", "llama2", "llama3", "mistral",
                                            "gemma", "zephyr", "phi3",   "qwen3",  "bogus"};
    const char *ov = overrides[fuzz_u8(in) % PGD_ARRAY_LEN(overrides)];
    size_t len = in->n;
    char *src = malloc(len ? len : 1);
    FUZZ_CHECK(src);
    if (len) memcpy(src, in->p, len);
    pgd_chat_template *t = NULL;
    pgd_error_clear();
    int rc = pgd_chat_template_detect(len ? src : NULL, len, ov, "<s>", "</s>", &t);
    if (rc == 0) {
        FUZZ_CHECK(t != NULL);
        pgd_str sys = pgd_chat_template_default_system(t);
        volatile unsigned sink = 0;
        for (uint64_t i = 0; sys.ptr && i < sys.len; i++) sink += (unsigned char)sys.ptr[i];
        (void)sink;
        static const pgd_str hi = {"Hello", 5}, yo = {" Hi there ", 10};
        static const pgd_chat_tool_call call = {{"f", 1}, {"{}", 2}};
        static const pgd_str def = {"{\"type\": \"function\"}", 20};
        static const pgd_chat_tools tools = {&def, &def, 1};
        pgd_chat_msg msgs[5] = {{"system", &hi, 1, NULL, 0},
                                {"user", &hi, 1, NULL, 0},
                                {"assistant", &yo, 1, NULL, 0},
                                {"assistant", &yo, 1, &call, 1},
                                {"tool", &hi, 1, NULL, 0}};
        render(t, msgs, 3, NULL, true);
        render(t, msgs + 1, 2, NULL, false);
        render(t, msgs, 5, &tools, true); /* refused without a tool format */
        pgd_chat_template_free(t);
    } else {
        FUZZ_CHECK(t == NULL);
        FUZZ_CHECK(rc == PGD_EINVAL || rc == PGD_ENOTFOUND || rc == PGD_EUNSUPPORTED ||
                   rc == PGD_ENOMEM);
        FUZZ_CHECK(pgd_error_detail()[0] != '\0');
    }
    free(src);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    fuzz_in in = {data, size};
    int which = fuzz_u8(&in) % (g_n + 1);
    if (which == g_n) {
        fuzz_detect(&in);
        return 0;
    }
    uint8_t flags = fuzz_u8(&in);
    bool gen = flags & 1;
    static const char *const roles[] = {"system", "user", "assistant", "tool"};
    pgd_chat_msg msgs[MAX_MSGS];
    pgd_str parts[MAX_MSGS][3], defs[2];
    pgd_chat_tool_call calls[MAX_MSGS][2];
    char *owned[MAX_MSGS * 8 + 2];
    size_t n_owned = 0, n = 0;
    pgd_chat_tools tools = {defs, defs, 0};
    if (flags & 2) {
        for (; tools.n < 2; tools.n++) {
            fuzz_in s = fuzz_take(&in, 64);
            char *c = malloc(s.n ? s.n : 1);
            FUZZ_CHECK(c);
            if (s.n) memcpy(c, s.p, s.n);
            owned[n_owned++] = c;
            defs[tools.n] = (pgd_str){c, s.n};
        }
    }
    while (in.n && n < MAX_MSGS) {
        uint8_t r = fuzz_u8(&in);
        if ((r & 7) == 7) { /* an arbitrary role, NUL-terminated */
            fuzz_in s = fuzz_take(&in, 16);
            char *role = malloc(s.n + 1);
            FUZZ_CHECK(role);
            memcpy(role, s.p, s.n);
            role[s.n] = '\0';
            owned[n_owned++] = role;
            msgs[n].role = role;
        } else {
            msgs[n].role = roles[(r & 7) % 4];
        }
        msgs[n].calls = NULL;
        msgs[n].n_calls = 0;
        if (r & 64) {
            size_t nc = 1 + ((r >> 7) & 1);
            for (size_t c = 0; c < nc; c++) {
                fuzz_in a = fuzz_take(&in, 32), b = fuzz_take(&in, 32);
                char *name = malloc(a.n ? a.n : 1), *args = malloc(b.n ? b.n : 1);
                FUZZ_CHECK(name && args);
                if (a.n) memcpy(name, a.p, a.n);
                if (b.n) memcpy(args, b.p, b.n);
                owned[n_owned++] = name;
                owned[n_owned++] = args;
                calls[n][c] = (pgd_chat_tool_call){{name, a.n}, {args, b.n}};
            }
            msgs[n].calls = calls[n];
            msgs[n].n_calls = nc;
        }
        size_t np = (r >> 3) & 3;
        for (size_t k = 0; k < np; k++) {
            fuzz_in s = fuzz_take(&in, 200);
            char *c = malloc(s.n ? s.n : 1); /* exact size */
            FUZZ_CHECK(c);
            if (s.n) memcpy(c, s.p, s.n);
            owned[n_owned++] = c;
            parts[n][k] = (pgd_str){c, s.n};
        }
        msgs[n].parts = parts[n];
        msgs[n].n_parts = np;
        n++;
    }
    render(g_t[which], msgs, n, flags & 2 ? &tools : NULL, gen);
    for (size_t i = 0; i < n_owned; i++) free(owned[i]);
    return 0;
}
