/*
 * tests/fuzz/fuzz_chat_template.c — libFuzzer target: chat-template detection and rendering of
 * arbitrary messages.
 *
 * Renderers, built once: the seven families by name (bos "<s>", eos "</s>") and every published
 * template of tests/reference/templates/ detected from its source (variants: default system
 * prompt, Gemma-2, Phi-3.5).
 *
 * Input: byte 0 picks a renderer, or (the value after the last renderer) detection mode.
 *   Rendering: byte 1 bit 0 = add_generation_prompt; then up to 8 messages, each a role byte
 *     (system / user / assistant / an arbitrary role read from the input) and up to 3 content
 *     parts of up to 200 bytes. A render either fails with PGD_EINVAL (or PGD_ENOMEM) and a
 *     detail, or gives a NUL-terminated text whose template spans are sorted, non-empty,
 *     inside the text and never touch, and whose bytes outside the spans are message content:
 *     no more of them than the messages hold, and exactly the contents in order for the
 *     families that do not trim (chatml, mistral, zephyr, phi3). The prompt is then tokenized
 *     with its spans, as pgd_encode_chat does, by the synthetic byte-level BPE tokenizer.
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

static void check_prompt(const pgd_chat_template *t, const pgd_chat_msg *msgs, size_t n,
                         const pgd_chat_prompt *p) {
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
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < msgs[i].n_parts; k++)
            FUZZ_CHECK(pgd_buf_append(&content, msgs[i].parts[k].ptr, msgs[i].parts[k].len) == 0);
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

static void render(const pgd_chat_template *t, const pgd_chat_msg *msgs, size_t n, bool gen) {
    pgd_chat_prompt p;
    pgd_error_clear();
    int rc = pgd_chat_render(t, msgs, n, gen, &p);
    if (rc == 0) {
        check_prompt(t, msgs, n, &p);
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
                                            "gemma", "zephyr", "phi3",   "bogus"};
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
        pgd_chat_msg msgs[3] = {{"system", &hi, 1}, {"user", &hi, 1}, {"assistant", &yo, 1}};
        render(t, msgs, 3, true);
        render(t, msgs + 1, 2, false);
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
    bool gen = fuzz_u8(&in) & 1;
    static const char *const roles[] = {"system", "user", "assistant"};
    pgd_chat_msg msgs[MAX_MSGS];
    pgd_str parts[MAX_MSGS][3];
    char *owned[MAX_MSGS * 4];
    size_t n_owned = 0, n = 0;
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
            msgs[n].role = roles[(r & 7) % 3];
        }
        size_t np = (r >> 3) % 4;
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
    render(g_t[which], msgs, n, gen);
    for (size_t i = 0; i < n_owned; i++) free(owned[i]);
    return 0;
}
