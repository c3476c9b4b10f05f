/*
 * cli/template.c — `pagoda template`: render an OpenAI `messages` array (and tools) with a
 * model's chat template (engine/text/chat_template.h), or name the family of a Jinja template
 * file.
 *
 *   pagoda template (--model PATH | --chat-template NAME | --template-file FILE)
 *                   [--chat-template NAME] [--bos-token TEXT] [--eos-token TEXT]
 *                   [--no-generation-prompt] [--spans] MESSAGES_JSON|-
 *   pagoda template --detect FILE
 *
 * MESSAGES_JSON is a messages array, or an object {"messages": [...], "tools": [...],
 * "chat_template_kwargs": {...}} (tools optional: an array of tool objects, each given to the
 * template as Python's json.dumps writes it, compact and with indent=4, as Hugging Face's tojson
 * does; chat_template_kwargs optional, as in a chat request: {"enable_thinking": false} for
 * Qwen3's template).
 *
 * The template source comes from the model's tokenizer.chat_template (--model) or from a Jinja
 * file (--template-file); --chat-template picks the family by name and overrides detection.
 * bos/eos text default to the model's bos/eos tokens with --model and to "" otherwise. The
 * rendered text is printed exactly, with no newline added; --spans prints
 * {"text": ..., "special": [[begin, end], ...]} (byte offsets into the UTF-8 text) instead.
 * Exit status: 0 ok, 1 error (message on stderr), 2 usage error. JSON input needs jansson
 * (PGD_HAVE_JANSSON); without it rendering reports that and exits 1 (--detect still works).
 *
 * Threading: runs once on the main thread.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/text.h"
#include "engine/text/chat_template.h"
#include "engine/model/gguf.h"
#include "cli/cli.h"

#ifdef PGD_HAVE_JANSSON
#include <jansson.h>

#include "api/jsonutil.h"
#include "api/messages.h"
#endif

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: pagoda template (--model PATH | --chat-template NAME | --template-file FILE)\n"
        "                       [--chat-template NAME] [--bos-token TEXT] [--eos-token TEXT]\n"
        "                       [--no-generation-prompt] [--spans] MESSAGES_JSON\n"
        "       pagoda template --detect FILE\n"
        "\n"
        "Render an OpenAI messages array (JSON; '-' reads it from stdin) with a chat\n"
        "template and print the prompt text exactly (no newline added). MESSAGES_JSON may\n"
        "also be an object {\"messages\": [...], \"tools\": [...], \"chat_template_kwargs\":\n"
        "{...}} offering tools (OpenAI tool objects; rendered for chatml, qwen3 and Llama 3.1+\n"
        "templates only) and setting template variables ({\"enable_thinking\": false}).\n"
        "\n"
        "  --model PATH            GGUF model: its tokenizer.chat_template and bos/eos tokens\n"
        "  --template-file FILE    a Jinja chat template file to detect and render\n"
        "  --chat-template NAME    family, overriding detection: %s\n"
        "  --bos-token TEXT        bos_token text (default: the model's, else empty)\n"
        "  --eos-token TEXT        eos_token text (default: the model's, else empty)\n"
        "  --no-generation-prompt  do not end with the assistant header\n"
        "  --spans                 print {\"text\":..., \"special\":[[begin,end],...]}: the byte\n"
        "                          ranges written by the template\n"
        "  --detect FILE           print the family of a Jinja template file\n",
        pgd_chat_family_names());
}

/* Read a whole file ("-": stdin) into a NUL-terminated malloc'd buffer. 0 or -1 (printed). */
static int read_all(const char *path, char **data, size_t *len) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    pgd_buf b = PGD_BUF_INIT;
    char chunk[65536];
    size_t n;
    if (!f) {
        fprintf(stderr, "pagoda template: cannot open %s: ", path);
        perror(NULL);
        return -1;
    }
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (pgd_buf_append(&b, chunk, n)) {
            fprintf(stderr, "pagoda template: out of memory reading %s\n", path);
            goto fail;
        }
    }
    if (ferror(f)) {
        fprintf(stderr, "pagoda template: error reading %s\n", path);
        goto fail;
    }
    if (f != stdin) fclose(f);
    *data = pgd_buf_steal(&b, len);
    if (!*data) {
        fprintf(stderr, "pagoda template: out of memory\n");
        return -1;
    }
    return 0;
fail:
    if (f != stdin) fclose(f);
    pgd_buf_free(&b);
    return -1;
}

static int detect_file(const char *path) {
    char *src = NULL;
    size_t len = 0;
    if (read_all(path, &src, &len)) return 1;
    pgd_chat_template *t = NULL;
    int rc = pgd_chat_template_detect(src, len, NULL, NULL, NULL, &t);
    free(src);
    if (rc) {
        fprintf(stderr, "pagoda template: %s: %s\n", path, pgd_error_detail());
        return 1;
    }
    printf("%s\n", pgd_chat_family_name(pgd_chat_template_family(t)));
    pgd_chat_template_free(t);
    return 0;
}

/* Copy token `key`'s text (tokenizer.ggml.tokens[id]) into *out (malloc'd); leaves *out NULL
 * when the model names no such token. 0 or 1 (printed). */
static int token_text(const pgd_gguf *g, const char *key, char **out) {
    uint32_t id;
    const pgd_gguf_value *tokens;
    pgd_str s;
    *out = NULL;
    if (pgd_gguf_get_u32(g, key, &id)) return 0;
    if (pgd_gguf_get_arr(g, "tokenizer.ggml.tokens", &tokens) || id >= tokens->v.arr.n ||
        pgd_gguf_arr_str(tokens, id, &s)) {
        fprintf(stderr, "pagoda template: %s = %u names no token in tokenizer.ggml.tokens\n", key,
                id);
        return 1;
    }
    *out = malloc((size_t)s.len + 1);
    if (!*out) {
        fprintf(stderr, "pagoda template: out of memory\n");
        return 1;
    }
    if (s.len) memcpy(*out, s.ptr, (size_t)s.len);
    (*out)[s.len] = '\0';
    return 0;
}

#ifdef PGD_HAVE_JANSSON

static int print_spans(const pgd_chat_prompt *p) {
    json_t *obj = json_object(), *spans = json_array();
    json_t *text = json_stringn(p->text.data, p->text.len);
    int rc = 1;
    if (!obj || !spans || !text) {
        fprintf(stderr, "pagoda template: %s\n",
                text ? "out of memory" : "the rendered text is not valid UTF-8");
        goto done;
    }
    for (size_t i = 0; i < p->n_special; i++) {
        json_t *pair =
            json_pack("[II]", (json_int_t)p->special[i].begin, (json_int_t)p->special[i].end);
        if (!pair || json_array_append_new(spans, pair)) goto done;
    }
    if (json_object_set_new(obj, "text", text) || json_object_set_new(obj, "special", spans)) {
        text = spans = NULL;
        goto done;
    }
    text = spans = NULL;
    if (json_dumpf(obj, stdout, JSON_COMPACT) == 0 && fputc('\n', stdout) != EOF) rc = 0;
done:
    json_decref(text);
    json_decref(spans);
    json_decref(obj);
    return rc;
}

/* The input's messages, tools and template variables: `root` is a messages array, or an object
 * with "messages" and optionally "tools" (an array of objects, or null) and
 * "chat_template_kwargs" (into *opts). Each tool's definition text, compact then with indent=4,
 * is appended to *text; defs[0..*n) and defs[*n..2 * *n) view them (malloc'd; NULL when none).
 * 0 or 1 (printed). */
static int split_input(const json_t *root, const json_t **messages, pgd_chat_render_opts *opts,
                       pgd_buf *text, pgd_str **defs, size_t *n) {
    *messages = root;
    *defs = NULL;
    *n = 0;
    if (!json_is_object(root)) return 0;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)root, key, v) {
        if (strcmp(key, "messages") && strcmp(key, "tools") &&
            strcmp(key, "chat_template_kwargs")) {
            fprintf(stderr,
                    "pagoda template: unknown key \"%s\" in the input object (known: "
                    "messages, tools, chat_template_kwargs)\n",
                    key);
            return 1;
        }
    }
    *messages = json_object_get(root, "messages");
    if (!*messages) {
        fprintf(stderr, "pagoda template: the input object has no \"messages\"\n");
        return 1;
    }
    char param[64];
    if (pgd_messages_template_kwargs(json_object_get(root, "chat_template_kwargs"), opts, param,
                                     sizeof param)) {
        fprintf(stderr, "pagoda template: %s\n", pgd_error_detail());
        return 1;
    }
    const json_t *tools = json_object_get(root, "tools");
    if (!tools || json_is_null(tools)) return 0;
    if (!json_is_array(tools)) {
        fprintf(stderr, "pagoda template: \"tools\" must be an array of tool objects\n");
        return 1;
    }
    size_t count = json_array_size(tools);
    if (!count) return 0;
    size_t *len = calloc(2 * count, sizeof *len);
    *defs = calloc(2 * count, sizeof **defs);
    if (!len || !*defs) {
        fprintf(stderr, "pagoda template: out of memory\n");
        goto fail;
    }
    for (size_t i = 0; i < 2 * count; i++) {
        const json_t *tool = json_array_get(tools, i % count);
        if (!json_is_object(tool)) {
            fprintf(stderr, "pagoda template: tools[%zu] must be an object\n", i);
            goto fail;
        }
        size_t before = text->len;
        if (pgd_api_json_dump_py_indent(tool, i < count ? 0 : 4, text)) {
            fprintf(stderr, "pagoda template: out of memory\n");
            goto fail;
        }
        len[i] = text->len - before;
    }
    for (size_t i = 0, off = 0; i < 2 * count; i++) { /* text is complete: point into it */
        (*defs)[i].ptr = text->data + off;
        (*defs)[i].len = len[i];
        off += len[i];
    }
    *n = count;
    free(len);
    return 0;
fail:
    free(len);
    free(*defs);
    *defs = NULL;
    return 1;
}

static int render_json(const pgd_chat_template *t, const char *messages_arg, bool gen, bool spans) {
    char *data = NULL;
    size_t len = 0;
    json_error_t jerr;
    pgd_messages pm;
    pgd_chat_prompt prompt;
    char param[96];
    int status = 1;
    const json_t *messages;
    pgd_buf tools_text = PGD_BUF_INIT;
    pgd_chat_tools tools = {NULL, NULL, 0};
    pgd_chat_render_opts opts = PGD_CHAT_RENDER_OPTS_DEFAULT;
    pgd_str *defs = NULL;
    const char *what = strcmp(messages_arg, "-") ? "MESSAGES_JSON" : "stdin";
    json_t *root;
    if (!strcmp(messages_arg, "-")) {
        if (read_all("-", &data, &len)) return 1;
        root = json_loadb(data, len, JSON_ALLOW_NUL, &jerr);
        free(data);
    } else {
        root = json_loadb(messages_arg, strlen(messages_arg), JSON_ALLOW_NUL, &jerr);
    }
    if (!root) {
        fprintf(stderr, "pagoda template: %s is not valid JSON: line %d column %d: %s\n", what,
                jerr.line, jerr.column, jerr.text);
        return 1;
    }
    if (split_input(root, &messages, &opts, &tools_text, &defs, &tools.n)) goto done;
    tools.defs = defs;
    tools.defs_indent = defs ? defs + tools.n : NULL;
    if (pgd_messages_parse(messages, &pm, param, sizeof param)) {
        fprintf(stderr, "pagoda template: %s\n", pgd_error_detail());
        goto done;
    }
    opts.add_generation_prompt = gen;
    opts.reasoning = pm.reasoning;
    if (pgd_chat_render_with(t, pm.msgs, pm.n, &tools, &opts, &prompt)) {
        fprintf(stderr, "pagoda template: %s\n", pgd_error_detail());
        pgd_messages_free(&pm);
        goto done;
    }
    if (spans) {
        status = print_spans(&prompt);
    } else {
        status = fwrite(prompt.text.data, 1, prompt.text.len, stdout) == prompt.text.len ? 0 : 1;
    }
    if (fflush(stdout)) status = 1;
    pgd_chat_prompt_free(&prompt);
    pgd_messages_free(&pm);
done:
    free(defs);
    pgd_buf_free(&tools_text);
    json_decref(root);
    return status;
}

#else

static int render_json(const pgd_chat_template *t, const char *messages_arg, bool gen, bool spans) {
    (void)t, (void)messages_arg, (void)gen, (void)spans;
    fprintf(stderr, "pagoda template: this pagoda was built without JSON support (jansson), so "
                    "it cannot read MESSAGES_JSON\n");
    return 1;
}

#endif

int pgd_cli_template(int argc, char **argv) {
    const char *model = NULL, *name = NULL, *tfile = NULL, *detect = NULL;
    const char *bos_arg = NULL, *eos_arg = NULL, *messages = NULL;
    bool gen = true, spans = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int m;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if ((m = pgd_cli_flag_value(argc, argv, &i, "--model", &model)) ||
            (m = pgd_cli_flag_value(argc, argv, &i, "--chat-template", &name)) ||
            (m = pgd_cli_flag_value(argc, argv, &i, "--template-file", &tfile)) ||
            (m = pgd_cli_flag_value(argc, argv, &i, "--bos-token", &bos_arg)) ||
            (m = pgd_cli_flag_value(argc, argv, &i, "--eos-token", &eos_arg)) ||
            (m = pgd_cli_flag_value(argc, argv, &i, "--detect", &detect))) {
            if (m < 0) return 2;
            continue;
        }
        if (!strcmp(a, "--no-generation-prompt")) {
            gen = false;
        } else if (!strcmp(a, "--spans")) {
            spans = true;
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "pagoda template: unknown option %s\n\n", a);
            usage(stderr);
            return 2;
        } else if (!messages) {
            messages = a;
        } else {
            fprintf(stderr, "pagoda template: more than one MESSAGES_JSON argument\n\n");
            usage(stderr);
            return 2;
        }
    }

    if (detect) {
        if (model || name || tfile || messages || bos_arg || eos_arg || spans || !gen) {
            fprintf(stderr, "pagoda template: --detect FILE takes no other arguments\n\n");
            usage(stderr);
            return 2;
        }
        return detect_file(detect);
    }
    if ((!model && !name && !tfile) || (model && tfile) || !messages) {
        fprintf(stderr, "pagoda template: %s\n\n",
                !messages        ? "MESSAGES_JSON is missing"
                : model && tfile ? "--model and --template-file are exclusive"
                                 : "one of --model, --chat-template or --template-file is needed");
        usage(stderr);
        return 2;
    }
#ifndef PGD_HAVE_JANSSON
    return render_json(NULL, messages, gen, spans);
#endif

    int status = 1, rc;
    pgd_gguf *g = NULL;
    char *src = NULL, *bos = NULL, *eos = NULL;
    size_t src_len = 0;
    pgd_chat_template *t = NULL;
    if (model) {
        rc = pgd_gguf_open(model, &g);
        if (rc) {
            fprintf(stderr, "pagoda template: %s: %s\n", model, pgd_error_detail());
            goto done;
        }
        if (!bos_arg && token_text(g, "tokenizer.ggml.bos_token_id", &bos)) goto done;
        if (!eos_arg && token_text(g, "tokenizer.ggml.eos_token_id", &eos)) goto done;
        rc = pgd_chat_template_from_gguf(g, name, bos_arg ? bos_arg : bos, eos_arg ? eos_arg : eos,
                                         &t);
    } else {
        if (tfile && read_all(tfile, &src, &src_len)) goto done;
        rc = pgd_chat_template_detect(src, src_len, name, bos_arg, eos_arg, &t);
    }
    if (rc) {
        fprintf(stderr, "pagoda template: %s%s%s\n",
                model   ? model
                : tfile ? tfile
                        : "",
                model || tfile ? ": " : "", pgd_error_detail());
        goto done;
    }
    status = render_json(t, messages, gen, spans);
done:
    pgd_chat_template_free(t);
    pgd_gguf_close(g);
    free(src);
    free(bos);
    free(eos);
    return status;
}
