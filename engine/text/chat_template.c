/*
 * engine/text/chat_template.c — chat template detection and native rendering (see chat_template.h).
 *
 * Owns: pgd_chat_template (family, copies of the bos/eos text, the variant details read from the
 * template source) and the prompts it renders.
 *
 * Detection looks for each family's markers in the Jinja source (never evaluates it), then for
 * the few published variants whose rendering differs: a variant we render identically is
 * accepted (with its details recorded: default system prompt, whether bos_token appears, Gemma-2
 * refusing system messages, Phi-3.5 dropping empty system messages, the braces of Qwen2.5's
 * tools block, Meta's Llama 3.1+ template and its date, Qwen's reasoning templates — in
 * chat_template_qwen.c); one we would render
 * differently is refused with a message that names it, so a prompt is never silently wrong.
 *
 * Rendering mirrors the published templates statement by statement (comments quote them). Every
 * byte goes through put(): template text extends the `special` span list, message content (and
 * tool names, call arguments, tool definitions, quoted tool results) does not, so no span can
 * cover content. Tools render for ChatML in Qwen2.5's Hermes format (render_chatml, and
 * chat_template_qwen.c's renderers with the same pieces) and for Llama 3.1+ in Meta's JSON format
 * (render_llama3_dated); the texts of tool definitions and call arguments arrive already
 * formatted as the template's tojson would print them (the caller's job: api/jsonutil.h), so
 * rendering needs no JSON beyond quoting a tool result (pgd_json_quote_py). Llama 3.2's date is
 * read from the clock at each render. Python's str.strip() (Jinja's |trim and .strip()) is
 * reproduced exactly: it strips the code points for which str.isspace() is true; Qwen3's
 * .strip('\n') / .lstrip('\n') / .rstrip('\n') strip newlines only.
 *
 * Invariants: a rendered text is NUL-terminated; spans are sorted, non-empty and never touch.
 * Threading: a template is immutable once created; renders use only their own memory.
 */
#include "engine/text/chat_template.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/error.h"
#include "engine/text/chat_template_impl.h"

static const char *const k_family_names[PGD_CHAT_FAMILY_COUNT] = {
    "chatml", "llama2", "llama3", "mistral", "gemma", "zephyr", "phi3", "qwen3", "qwq"};

static const char k_names_list[] =
    "chatml, llama2, llama3, mistral, gemma, zephyr, phi3, qwen3, qwq";

static const char k_alternate[] =
    "Conversation roles must alternate user/assistant/user/assistant/...";

const char *pgd_chat_family_name(pgd_chat_family f) {
    if ((unsigned)f >= PGD_CHAT_FAMILY_COUNT) return "?";
    return k_family_names[f];
}

const char *pgd_chat_family_names(void) {
    return k_names_list;
}

int pgd_chat_family_from_name(const char *name, pgd_chat_family *out) {
    for (int i = 0; name && i < PGD_CHAT_FAMILY_COUNT; i++) {
        if (!strcmp(name, k_family_names[i])) {
            *out = (pgd_chat_family)i;
            return 0;
        }
    }
    return pgd_error_set(PGD_EINVAL, "unknown chat template name '%s' (known: %s)",
                         name ? name : "(null)", k_names_list);
}

/* ---- detection --------------------------------------------------------------------------- */

/* The first 80 characters of a source, printable (newlines as \n, other controls as \xNN),
 * cut on a UTF-8 character boundary, "..." when cut. dst holds QUOTE_CAP bytes. */
#define QUOTE_CHARS 80
#define QUOTE_CAP   (QUOTE_CHARS * 4 + 4)
static void quote_start(const char *src, size_t len, char *dst) {
    static const char hex[] = "0123456789abcdef";
    size_t o = 0, i = 0;
    for (int chars = 0; i < len && chars < QUOTE_CHARS; chars++) {
        unsigned char c = (unsigned char)src[i];
        if (c == '\n' || c == '\t' || c == '\r') {
            dst[o++] = '\\';
            dst[o++] = c == '\n' ? 'n' : c == '\t' ? 't' : 'r';
            i++;
        } else if (c < 0x20 || c == 0x7f) {
            dst[o++] = '\\';
            dst[o++] = 'x';
            dst[o++] = hex[c >> 4];
            dst[o++] = hex[c & 15];
            i++;
        } else {
            size_t n = c < 0x80 ? 1 : (size_t)pgd_utf8_seq_len(c);
            if (n == 0 || i + n > len) n = 1; /* a stray byte is copied as it is */
            memcpy(dst + o, src + i, n);
            o += n;
            i += n;
        }
    }
    if (i < len) {
        memcpy(dst + o, "...", 3);
        o += 3;
    }
    dst[o] = '\0';
}

static void put_utf8(char *dst, size_t *o, uint32_t cp) {
    if (cp < 0x80) {
        dst[(*o)++] = (char)cp;
    } else if (cp < 0x800) {
        dst[(*o)++] = (char)(0xC0 | (cp >> 6));
        dst[(*o)++] = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        dst[(*o)++] = (char)(0xE0 | (cp >> 12));
        dst[(*o)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        dst[(*o)++] = (char)(0x80 | (cp & 0x3F));
    } else {
        dst[(*o)++] = (char)(0xF0 | (cp >> 18));
        dst[(*o)++] = (char)(0x80 | ((cp >> 12) & 0x3F));
        dst[(*o)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        dst[(*o)++] = (char)(0x80 | (cp & 0x3F));
    }
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Decode the body of a Jinja string literal (s[0..n) between the quotes) the way Jinja does:
 * newlines normalised, then Python's unicode-escape (\n \t \r \\ \' \" \a \b \f \v \ooo \xhh
 * \uXXXX \UXXXXXXXX; any other backslash stays). dst holds at least n bytes + 1; returns the
 * decoded length. */
static size_t unescape_literal(const char *s, size_t n, char *dst) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        char c = s[i];
        if (c == '\r') { /* \r\n and \r become \n */
            dst[o++] = '\n';
            i += (i + 1 < n && s[i + 1] == '\n') ? 2 : 1;
            continue;
        }
        if (c != '\\' || i + 1 >= n) {
            dst[o++] = c;
            i++;
            continue;
        }
        char e = s[i + 1];
        const char *simple = strchr("ntr\\'\"abfv", e);
        if (e && simple) {
            static const char repl[] = "\n\t\r\\'\"\a\b\f\v";
            dst[o++] = repl[simple - "ntr\\'\"abfv"];
            i += 2;
        } else if (e >= '0' && e <= '7') {
            uint32_t v = 0;
            size_t k = i + 1;
            while (k < n && k < i + 4 && s[k] >= '0' && s[k] <= '7')
                v = v * 8 + (uint32_t)(s[k++] - '0');
            put_utf8(dst, &o, v); /* at most 0777: 2 bytes, fewer than the 2..4 consumed */
            i = k;
        } else if (e == 'x' || e == 'u' || e == 'U') {
            size_t digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            uint32_t v = 0;
            bool ok = i + 2 + digits <= n;
            for (size_t k = 0; ok && k < digits; k++) {
                int h = hexval(s[i + 2 + k]);
                if (h < 0)
                    ok = false;
                else
                    v = v * 16 + (uint32_t)h;
            }
            if (ok && v <= 0x10FFFF) {
                put_utf8(dst, &o, v); /* <= 4 bytes out of >= 4 consumed */
                i += 2 + digits;
            } else {
                dst[o++] = c;
                i++;
            }
        } else {
            dst[o++] = c;
            i++;
        }
    }
    dst[o] = '\0';
    return o;
}

/* ChatML default system prompt: a string literal (inside a {{ }} or {% %} tag) whose value is
 * "<|im_start|>system\n" TEXT "<|im_end|>\n". Returns 0 (v->default_system set or left NULL)
 * or PGD_ENOMEM. */
int pgd_ct_find_default_system(const char *src, size_t len, variant *v) {
    static const char head[] = "<|im_start|>system\n", tail[] = "<|im_end|>\n";
    const size_t hl = sizeof head - 1, tl = sizeof tail - 1;
    size_t i = 0;
    while (i + 1 < len) {
        if (src[i] != '{' || (src[i + 1] != '{' && src[i + 1] != '%' && src[i + 1] != '#')) {
            i++;
            continue;
        }
        char kind = src[i + 1];
        i += 2;
        if (kind == '#') { /* comment: skip to #} */
            const char *e = memmem(src + i, len - i, "#}", 2);
            i = e ? (size_t)(e - src) + 2 : len;
            continue;
        }
        char close = kind == '{' ? '}' : '%';
        while (i < len) {
            char c = src[i];
            if (c == close && i + 1 < len && src[i + 1] == '}') {
                i += 2;
                break;
            }
            if (c != '\'' && c != '"') {
                i++;
                continue;
            }
            size_t b = ++i; /* literal body starts here */
            while (i < len && src[i] != c) i += (src[i] == '\\' && i + 1 < len) ? 2 : 1;
            size_t blen = (i < len ? i : len) - b;
            if (i < len) i++; /* closing quote */
            if (blen < hl + tl) continue;
            char *val = malloc(blen + 1);
            if (!val) return PGD_ENOMEM;
            size_t n = unescape_literal(src + b, blen, val);
            if (n >= hl + tl && !memcmp(val, head, hl) && !memcmp(val + n - tl, tail, tl)) {
                memmove(val, val + hl, n - hl - tl);
                val[n - hl - tl] = '\0';
                v->default_system = val;
                v->default_system_len = n - hl - tl;
                return 0;
            }
            free(val);
        }
    }
    return 0;
}

int pgd_ct_unsupported_variant(const char *what, pgd_chat_family f) {
    return pgd_error_set(PGD_EUNSUPPORTED,
                         "chat template looks like %s, which pagoda does not render; choose "
                         "--chat-template %s to use the %s format anyway",
                         what, pgd_chat_family_name(f), pgd_chat_family_name(f));
}

/* The markers of Meta's published Llama 3.1 / 3.2 / 3.3 template (3.1 and 3.3 add lines for
 * builtin_tools, which the OpenAI API never defines): a dated template must hold them all. */
static const char *const k_llama31_markers[] = {
    "tools_in_user_message",
    "Cutting Knowledge Date: December 2023\\n",
    "\"Today Date: \" + date_string + \"\\n\\n\"",
    "Environment: ipython\\n",
    "Given the following functions, please respond with a JSON for a function call ",
    "with its proper arguments that best answers the given prompt.\\n\\n",
    ("Respond in the format {\"name\": function name, \"parameters\": dictionary of "
     "argument name and its value}."), /* one marker, split to fit the line */
    "Do not use variables.\\n\\n",
    "t | tojson(indent=4)",
    "messages[0]['content']|trim",
    "'<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>'",
    "This model only supports single tool-calls at once!",
    "Cannot put tools in the first user message when there's no first user message!",
    "{\"name\": \"' + tool_call.name + '\", ",
    "'\"parameters\": '",
    "tool_call.arguments | tojson",
    "<|start_header_id|>ipython<|end_header_id|>\\n\\n",
    "message.content | tojson",
};

/* The fixed date of a dated Llama template: the first string literal assigned to date_string
 * ({%- set date_string = "26 Jul 2024" %}), else "26 Jul 2024". */
static void fixed_date(const char *src, size_t len, char *date) {
    static const char key[] = "date_string = ";
    const char *p = src, *end = src + len;
    snprintf(date, DATE_CAP, "26 Jul 2024");
    while ((p = memmem(p, (size_t)(end - p), key, sizeof key - 1))) {
        p += sizeof key - 1;
        if (p >= end || (*p != '"' && *p != '\'')) continue;
        const char *b = p + 1, *e = b;
        while (e < end && *e != *p && *e != '\\' && e - b < DATE_CAP - 1 &&
               (unsigned char)*e >= 0x20 && (unsigned char)*e < 0x7f)
            e++;
        if (e < end && *e == *p) {
            snprintf(date, DATE_CAP, "%.*s", (int)(e - b), b);
            return;
        }
    }
}

/* A Llama 3 template with a dated system header: Meta's Llama 3.1+ template (all its markers;
 * a date from strftime_now("%d %b %Y") or a fixed one), else a variant we do not render. */
static int classify_llama3_dated(const char *src, size_t len, variant *v) {
    for (size_t i = 0; i < PGD_ARRAY_LEN(k_llama31_markers); i++)
        if (!has(src, len, k_llama31_markers[i]))
            return pgd_ct_unsupported_variant(
                "a Llama-3.1 or later variant (a dated system header) "
                "other than Meta's published template",
                v->family);
    if (has(src, len, "<|image|>"))
        return pgd_ct_unsupported_variant("a Llama-3.2 Vision template (images)", v->family);
    if (has(src, len, "strftime_now")) {
        if (!has(src, len, "strftime_now(\"%d %b %Y\")") &&
            !has(src, len, "strftime_now('%d %b %Y')"))
            return pgd_ct_unsupported_variant(
                "a Llama-3.1 or later variant with another date format", v->family);
        v->date_today = true;
    } else {
        fixed_date(src, len, v->date);
    }
    v->dated = true;
    return 0;
}

/* Recognise a family (and its variant) from markers in the source. 0, PGD_EUNSUPPORTED (no
 * family, or a variant that renders differently; with a detail) or PGD_ENOMEM. */
static int classify(const char *src, size_t len, variant *v) {
    memset(v, 0, sizeof *v);
    bool bos = has(src, len, "bos_token");
    if (has(src, len, "<|im_start|>")) {
        v->family = PGD_CHAT_CHATML;
        /* Qwen2.5's GGUF copy writes the call format with doubled braces inside a Jinja string
         * literal (printed as written); other revisions, and templates without a tool branch,
         * get single braces */
        v->double_brace = has(src, len, "{{\\\"name\\\": <function-name>") ||
                          has(src, len, "{{\"name\": <function-name>");
        if (has(src, len, "<|im_sep|>"))
            return pgd_ct_unsupported_variant("Phi-4's <|im_sep|> format", v->family);
        if (has(src, len, "<think>") || has(src, len, "</think>") ||
            has(src, len, "last_query_index"))
            return pgd_ct_classify_qwen(src, len, v);
        return pgd_ct_find_default_system(src, len, v);
    }
    if (has(src, len, "<|start_header_id|>") && has(src, len, "<|eot_id|>")) {
        v->family = PGD_CHAT_LLAMA3;
        v->use_bos = bos;
        if (has(src, len, "Cutting Knowledge Date") || has(src, len, "date_string"))
            return classify_llama3_dated(src, len, v);
        if (has(src, len, "tools_in_user_message"))
            return pgd_ct_unsupported_variant("a Llama-3.1-style template without its dated system "
                                              "header",
                                              v->family);
        return 0;
    }
    if (has(src, len, "<start_of_turn>")) {
        v->family = PGD_CHAT_GEMMA;
        v->use_bos = bos;
        v->refuse_system = has(src, len, "System role not supported");
        return 0;
    }
    if (has(src, len, "[INST]")) {
        if (has(src, len, "<<SYS>>")) {
            v->family = PGD_CHAT_LLAMA2;
            if (!has(src, len, "strip()") || has(src, len, "DEFAULT_SYSTEM") ||
                has(src, len, "USE_DEFAULT_PROMPT"))
                return pgd_ct_unsupported_variant("a Llama-2 variant (default system prompt or no "
                                                  ".strip() of content)",
                                                  v->family);
        } else {
            v->family = PGD_CHAT_MISTRAL;
            if (has(src, len, "system") || !has(src, len, " [/INST]"))
                return pgd_ct_unsupported_variant("a later Mistral [INST] variant (system prompt, "
                                                  "tools or spacing of v0.3+)",
                                                  v->family);
        }
        v->use_bos = bos;
        return 0;
    }
    if (has(src, len, "<|end|>") && has(src, len, "<|assistant|>")) {
        v->family = PGD_CHAT_PHI3;
        if (!has(src, len, "add_generation_prompt") || has(src, len, "messages[-1]") ||
            has(src, len, "tools"))
            return pgd_ct_unsupported_variant(
                "a Phi-3 variant that places <|assistant|> differently "
                "(original Phi-3-mini/medium, vision, Phi-4-mini)",
                v->family);
        v->use_bos = bos;
        v->skip_empty_system = has(src, len, "'system' and message['content']") ||
                               has(src, len, "\"system\" and message[\"content\"]");
        return 0;
    }
    if (has(src, len, "<|user|>") && has(src, len, "<|assistant|>")) {
        v->family = PGD_CHAT_ZEPHYR;
        if (!has(src, len, "eos_token }}\n"))
            return pgd_ct_unsupported_variant(
                "a Zephyr variant without eos + newline after each turn", v->family);
        return 0;
    }
    char start[QUOTE_CAP];
    quote_start(src, len, start);
    return pgd_error_set(PGD_EUNSUPPORTED,
                         "chat template not recognised (it starts \"%s\"); known templates: %s; "
                         "choose one with --chat-template NAME",
                         start, k_names_list);
}

static bool blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!strchr(" \t\r\n\v\f", s[i])) return false;
    return true;
}

static char *dup_text(const char *s, size_t *len) {
    size_t n = s ? strlen(s) : 0;
    char *p = malloc(n + 1);
    if (!p) return NULL;
    if (n) memcpy(p, s, n);
    p[n] = '\0';
    *len = n;
    return p;
}

int pgd_chat_template_detect(const char *jinja_src, size_t len, const char *override_name,
                             const char *bos_text, const char *eos_text, pgd_chat_template **out) {
    *out = NULL;
    variant v = {0};
    int rc;
    bool have_src = jinja_src && !blank(jinja_src, len);
    if (override_name) {
        pgd_chat_family f;
        rc = pgd_chat_family_from_name(override_name, &f);
        if (rc) return rc;
        /* the source still supplies variant details when it is of the same family */
        if (have_src) {
            rc = classify(jinja_src, len, &v);
            if (rc == PGD_ENOMEM) return pgd_error_set(rc, "out of memory reading a template");
            if (rc || v.family != f) {
                free(v.default_system);
                memset(&v, 0, sizeof v);
                have_src = false;
            }
        }
        v.family = f;
        pgd_error_clear();
    } else {
        if (!have_src)
            return pgd_error_set(PGD_ENOTFOUND,
                                 "no chat template given (none, or only whitespace); choose "
                                 "one with --chat-template NAME (known: %s)",
                                 k_names_list);
        rc = classify(jinja_src, len, &v);
        if (rc == PGD_ENOMEM) pgd_error_set(rc, "out of memory reading a template");
        if (rc) goto fail;
    }
    if (!have_src) { /* the published template's behaviour */
        v.use_bos = v.family == PGD_CHAT_LLAMA2 || v.family == PGD_CHAT_LLAMA3 ||
                    v.family == PGD_CHAT_MISTRAL || v.family == PGD_CHAT_GEMMA;
    }

    pgd_chat_template *t = calloc(1, sizeof *t);
    if (!t) {
        rc = pgd_error_set(PGD_ENOMEM, "out of memory");
        goto fail;
    }
    t->family = v.family;
    t->default_system = v.default_system;
    t->default_system_len = v.default_system_len;
    v.default_system = NULL;
    t->use_bos = v.use_bos;
    t->refuse_system = v.refuse_system;
    t->skip_empty_system = v.skip_empty_system;
    t->double_brace = v.double_brace;
    t->dated = v.dated;
    t->date_today = v.date_today;
    t->think_always = v.think_always;
    memcpy(t->date, v.date, sizeof t->date);
    t->bos = dup_text(bos_text, &t->bos_len);
    t->eos = dup_text(eos_text, &t->eos_len);
    if (!t->bos || !t->eos) {
        pgd_chat_template_free(t);
        rc = pgd_error_set(PGD_ENOMEM, "out of memory");
        goto fail;
    }
    *out = t;
    return 0;
fail:
    free(v.default_system);
    return rc;
}

int pgd_chat_template_from_gguf(const pgd_gguf *g, const char *override_name, const char *bos_text,
                                const char *eos_text, pgd_chat_template **out) {
    *out = NULL;
    pgd_str s = {NULL, 0};
    int rc = pgd_gguf_get_str(g, "tokenizer.chat_template", &s);
    if (rc == PGD_ENOTFOUND) {
        s.ptr = NULL;
        s.len = 0;
    } else if (rc) {
        return pgd_error_set(PGD_EFORMAT, "tokenizer.chat_template is not a string");
    }
    if (!override_name && (!s.ptr || blank(s.ptr, (size_t)s.len)))
        return pgd_error_set(PGD_ENOTFOUND,
                             "the model has no chat template (tokenizer.chat_template); choose "
                             "one with --chat-template NAME (known: %s)",
                             k_names_list);
    return pgd_chat_template_detect(s.ptr, (size_t)s.len, override_name, bos_text, eos_text, out);
}

void pgd_chat_template_free(pgd_chat_template *t) {
    if (!t) return;
    free(t->bos);
    free(t->eos);
    free(t->default_system);
    free(t);
}

pgd_chat_family pgd_chat_template_family(const pgd_chat_template *t) {
    return t->family;
}

pgd_str pgd_chat_template_default_system(const pgd_chat_template *t) {
    pgd_str s = {t->default_system, t->default_system ? t->default_system_len : 0};
    return s;
}

/* ---- Python str.strip() ------------------------------------------------------------------ */

/* Byte length of the whitespace character at s[0..n) (str.isspace() code points: \t \n \v \f
 * \r, U+001C..U+001F, space, U+0085, U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029, U+202F,
 * U+205F, U+3000), or 0. */
static size_t ws_at(const unsigned char *s, size_t n) {
    if (n == 0) return 0;
    unsigned char c = s[0];
    if ((c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20)) return 1;
    if (c == 0xC2 && n >= 2 && (s[1] == 0x85 || s[1] == 0xA0)) return 2;
    if (n < 3) return 0;
    if (c == 0xE1 && s[1] == 0x9A && s[2] == 0x80) return 3;
    if (c == 0xE2 && s[1] == 0x80 &&
        ((s[2] >= 0x80 && s[2] <= 0x8A) || s[2] == 0xA8 || s[2] == 0xA9 || s[2] == 0xAF))
        return 3;
    if (c == 0xE2 && s[1] == 0x81 && s[2] == 0x9F) return 3;
    if (c == 0xE3 && s[1] == 0x80 && s[2] == 0x80) return 3;
    return 0;
}

/* Byte length of the whitespace character that ends s[0..n), or 0. */
static size_t ws_before(const unsigned char *s, size_t n) {
    if (n >= 1 && ws_at(s + n - 1, 1) == 1) return 1;
    if (n >= 2 && ws_at(s + n - 2, 2) == 2) return 2;
    if (n >= 3 && ws_at(s + n - 3, 3) == 3) return 3;
    return 0;
}

/* str.strip() over the concatenation of pc[0..k) (pieces shrink; whitespace never straddles
 * two pieces because every piece is whole UTF-8). */
static void strip_pieces(piece *pc, size_t k) {
    size_t w;
    for (size_t i = 0; i < k; i++) {
        while ((w = ws_at((const unsigned char *)pc[i].p, pc[i].n))) {
            pc[i].p += w;
            pc[i].n -= w;
        }
        if (pc[i].n) break;
    }
    for (size_t i = k; i-- > 0;) {
        while ((w = ws_before((const unsigned char *)pc[i].p, pc[i].n))) pc[i].n -= w;
        if (pc[i].n) break;
    }
}

/* ---- rendering --------------------------------------------------------------------------- */

static const char *const k_roles[] = {"system", "user", "assistant", "tool"};

static int put_pieces(render *r, const piece *pc, size_t k) {
    for (size_t i = 0; i < k; i++) {
        int rc = put(r, pc[i].p, pc[i].n, pc[i].tmpl);
        if (rc) return rc;
    }
    return 0;
}

static piece stripped(const render *r, size_t i) {
    piece p = content_of(r, i);
    strip_pieces(&p, 1);
    return p;
}

static int alternate_error(const render *r, size_t i) {
    return pgd_error_set(PGD_EINVAL, "%s (message %zu is '%s')", k_alternate, i,
                         k_roles[r->role[i]]);
}

/* Qwen2.5's tools block, around the definitions ("\n" + tojson(tool) each). The first string
 * starts with the "\n\n" that follows the system text. The second is written with single or
 * double braces around the call format: Qwen2.5's GGUF copy has "{{\"name\": ...}}" inside a
 * Jinja string literal, so both braces are printed; other revisions have one. */
static const char k_tools_head[] =
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are "
    "provided with function signatures within <tools></tools> XML tags:\n<tools>";
static const char k_tools_tail_a[] =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\n<tool_call>\n";
static const char k_tools_tail_b[] = "\"name\": <function-name>, \"arguments\": <args-json-object>";
static const char k_tools_tail_c[] = "\n</tool_call><|im_end|>\n";

/* The system turn of ChatML (SmolLM2 / Qwen2.5, and Qwen3's):
 *   {%- if tools %} '<|im_start|>system\n' + (messages[0] content if it is a system message,
 *   else DEFAULT) + TOOLS_HEAD + ('\n' + tool|tojson for each tool) + TOOLS_TAIL (braces as the
 *   source writes them)
 *   {%- else %} messages[0] is system ? '<|im_start|>system\n' + content + '<|im_end|>\n'
 *   : '<|im_start|>system\nDEFAULT<|im_end|>\n' {%- endif %}
 * A template without a default system prompt (plain ChatML, Qwen3) writes no system turn when
 * messages[0] is not a system message; offered tools then open a system turn of their own,
 * '<|im_start|>system\n# Tools...' (the tools block without its leading "\n\n", as there is no
 * system text to separate it from). *first: the first message the loop renders (a leading
 * system message is written here and skipped by the loop). */
int pgd_ct_chatml_system(const pgd_chat_template *t, render *r, size_t *first) {
    bool sys0 = r->role[0] == ROLE_SYSTEM;
    *first = sys0 ? 1 : 0;
    if (r->tools) {
        TRY(tmpl(r, "<|im_start|>system\n"));
        if (sys0)
            TRY(put_content(r, content_of(r, 0)));
        else
            TRY(put(r, t->default_system, t->default_system_len, true));
        TRY(tmpl(r, sys0 || t->default_system_len || t->family == PGD_CHAT_QWQ ? k_tools_head
                                                                               : k_tools_head + 2));
        for (size_t k = 0; k < r->tools->n; k++) {
            TRY(tmpl(r, "\n"));
            TRY(put(r, r->tools->defs[k].ptr, (size_t)r->tools->defs[k].len, false));
        }
        TRY(tmpl(r, k_tools_tail_a));
        TRY(tmpl(r, t->double_brace ? "{{" : "{"));
        TRY(tmpl(r, k_tools_tail_b));
        TRY(tmpl(r, t->double_brace ? "}}" : "}"));
        return tmpl(r, k_tools_tail_c);
    }
    if (sys0) {
        TRY(tmpl(r, "<|im_start|>system\n"));
        TRY(put_content(r, content_of(r, 0)));
        return tmpl(r, "<|im_end|>\n");
    }
    if (!t->default_system) return 0;
    TRY(tmpl(r, "<|im_start|>system\n"));
    TRY(put(r, t->default_system, t->default_system_len, true));
    return tmpl(r, "<|im_end|>\n");
}

/* A plain turn: '<|im_start|>' + role + '\n' + content + '<|im_end|>\n'. */
int pgd_ct_chatml_turn(render *r, size_t i) {
    TRY(tmpl(r, "<|im_start|>"));
    TRY(tmpl(r, k_roles[r->role[i]]));
    TRY(tmpl(r, "\n"));
    TRY(put_content(r, content_of(r, i)));
    return tmpl(r, "<|im_end|>\n");
}

/* A tool's result: '<|im_start|>user' unless the previous message is a tool's too,
 * '\n<tool_response>\n' + content + '\n</tool_response>', '<|im_end|>\n' unless the next
 * message is a tool's too. */
int pgd_ct_chatml_tool_result(render *r, size_t i) {
    if (i == 0 || r->role[i - 1] != ROLE_TOOL) TRY(tmpl(r, "<|im_start|>user"));
    TRY(tmpl(r, "\n<tool_response>\n"));
    TRY(put_content(r, content_of(r, i)));
    TRY(tmpl(r, "\n</tool_response>"));
    if (i + 1 == r->n || r->role[i + 1] != ROLE_TOOL) TRY(tmpl(r, "<|im_end|>\n"));
    return 0;
}

/* One call: '<tool_call>\n{"name": "' + name + '", "arguments": ' + arguments|tojson +
 * '}\n</tool_call>'. */
int pgd_ct_hermes_call(render *r, const pgd_chat_tool_call *c) {
    TRY(tmpl(r, "<tool_call>\n{\"name\": \""));
    TRY(put(r, c->name.ptr, (size_t)c->name.len, false));
    TRY(tmpl(r, "\", \"arguments\": "));
    TRY(put(r, c->arguments.ptr, (size_t)c->arguments.len, false));
    return tmpl(r, "}\n</tool_call>");
}

/* ChatML (SmolLM2 / Qwen2.5), as Qwen2.5-Instruct's template renders it (SmolLM2's renders the
 * same without tools; with tools, this Hermes format is what pagoda gives every ChatML model):
 * the system turn (pgd_ct_chatml_system), then each message but a leading system one:
 *   user, later system, assistant without tool_calls: a plain turn (pgd_ct_chatml_turn);
 *   assistant with tool_calls: '<|im_start|>assistant' + ('\n' + content if content) + for each
 *     call '\n' + the call (pgd_ct_hermes_call), then '<|im_end|>\n';
 *   tool: pgd_ct_chatml_tool_result;
 *   {% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}. */
static int render_chatml(const pgd_chat_template *t, render *r, bool gen) {
    size_t first;
    TRY(pgd_ct_chatml_system(t, r, &first));
    for (size_t i = first; i < r->n; i++) {
        const pgd_chat_msg *m = &r->msgs[i];
        if (r->role[i] == ROLE_TOOL) {
            TRY(pgd_ct_chatml_tool_result(r, i));
        } else if (m->n_calls) { /* an assistant's (checked before rendering) */
            TRY(tmpl(r, "<|im_start|>assistant"));
            if (r->off[i + 1] > r->off[i]) {
                TRY(tmpl(r, "\n"));
                TRY(put_content(r, content_of(r, i)));
            }
            for (size_t c = 0; c < m->n_calls; c++) {
                TRY(tmpl(r, "\n"));
                TRY(pgd_ct_hermes_call(r, &m->calls[c]));
            }
            TRY(tmpl(r, "<|im_end|>\n"));
        } else {
            TRY(pgd_ct_chatml_turn(r, i));
        }
    }
    if (gen) TRY(tmpl(r, "<|im_start|>assistant\n"));
    return 0;
}

/* Llama-2-chat: a leading system message becomes '<<SYS>>\n' + system + '\n<</SYS>>\n\n' in
 * front of the first turn's content; roles alternate user/assistant after it; the content
 * (prefix included) is .strip()ped; user: bos + '[INST] ' + content + ' [/INST]'; assistant:
 * ' ' + content + ' ' + eos; anything else renders nothing. No generation prompt. */
static int render_llama2(const pgd_chat_template *t, render *r) {
    size_t start = r->role[0] == ROLE_SYSTEM ? 1 : 0;
    for (size_t i = start; i < r->n; i++) {
        size_t idx = i - start;
        if ((r->role[i] == ROLE_USER) != (idx % 2 == 0)) return alternate_error(r, i);
        piece pc[4];
        size_t k = 0;
        if (idx == 0 && start) {
            pc[k++] = (piece){"<<SYS>>\n", 8, true};
            pc[k++] = content_of(r, 0);
            pc[k++] = (piece){"\n<</SYS>>\n\n", 11, true};
        }
        pc[k++] = content_of(r, i);
        strip_pieces(pc, k);
        if (r->role[i] == ROLE_USER) {
            if (t->use_bos) TRY(put(r, t->bos, t->bos_len, true));
            TRY(tmpl(r, "[INST] "));
            TRY(put_pieces(r, pc, k));
            TRY(tmpl(r, " [/INST]"));
        } else if (r->role[i] == ROLE_ASSISTANT) {
            TRY(tmpl(r, " "));
            TRY(put_pieces(r, pc, k));
            TRY(tmpl(r, " "));
            TRY(put(r, t->eos, t->eos_len, true));
        }
    }
    return 0;
}

/* Meta-Llama-3-Instruct: '<|start_header_id|>' + role + '<|end_header_id|>\n\n' +
 * content|trim + '<|eot_id|>', bos before the first; generation prompt
 * '<|start_header_id|>assistant<|end_header_id|>\n\n'. */
/* One Llama 3 turn: '<|start_header_id|>' + role + '<|end_header_id|>\n\n' + content|trim +
 * '<|eot_id|>'. */
static int llama3_turn(render *r, size_t i) {
    TRY(tmpl(r, "<|start_header_id|>"));
    TRY(tmpl(r, k_roles[r->role[i]]));
    TRY(tmpl(r, "<|end_header_id|>\n\n"));
    TRY(put_content(r, stripped(r, i)));
    return tmpl(r, "<|eot_id|>");
}

static int render_llama3(const pgd_chat_template *t, render *r, bool gen) {
    for (size_t i = 0; i < r->n; i++) {
        if (i == 0 && t->use_bos) TRY(put(r, t->bos, t->bos_len, true));
        TRY(llama3_turn(r, i));
    }
    if (gen) TRY(tmpl(r, "<|start_header_id|>assistant<|end_header_id|>\n\n"));
    return 0;
}

/* Today's local date as strftime("%d %b %Y") writes it in the C locale ("02 Dec 2026"): what
 * Hugging Face's strftime_now gives the template (datetime.now().strftime). */
static void today(char *date) {
    static const char *const months[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                         "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    time_t now = time(NULL);
    struct tm tm;
    if (!localtime_r(&now, &tm) || tm.tm_mon < 0 || tm.tm_mon > 11) memset(&tm, 0, sizeof tm);
    snprintf(date, DATE_CAP, "%02d %s %04d", tm.tm_mday, months[tm.tm_mon], tm.tm_year + 1900);
}

static const char k_llama31_tools_head[] =
    "<|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please respond "
    "with a JSON for a function call with its proper arguments that best answers the given "
    "prompt.\n\nRespond in the format {\"name\": function name, \"parameters\": dictionary of "
    "argument name and its value}.Do not use variables.\n\n";

/* Meta's Llama 3.1 / 3.2 / 3.3 template (builtin_tools never defined, tools_in_user_message
 * true), statement by statement:
 *   bos_token; a leading system message is taken out, its content|trim the system text;
 *   '<|start_header_id|>system<|end_header_id|>\n\n' + ('Environment: ipython\n' if tools) +
 *   'Cutting Knowledge Date: December 2023\n' + 'Today Date: ' + date_string + '\n\n' + system
 *   text + '<|eot_id|>';
 *   with tools, the first remaining message (whatever its role) is taken out too — none left
 *   raises "Cannot put tools in the first user message when there's no first user message!" —
 *   and written as '<|start_header_id|>user<|end_header_id|>\n\n' + the instructions + (each
 *   tool|tojson(indent=4) + '\n\n') + its content|trim + '<|eot_id|>';
 *   then each message: a tool's: '<|start_header_id|>ipython<|end_header_id|>\n\n' +
 *   content|tojson (a string is iterable: always quoted) + '<|eot_id|>'; one with tool_calls
 *   (exactly one, else "This model only supports single tool-calls at once!"; its content is not
 *   written): '<|start_header_id|>assistant<|end_header_id|>\n\n{"name": "' + name + '", ' +
 *   '"parameters": ' + arguments|tojson + '}<|eot_id|>'; any other: '<|start_header_id|>' + role
 *   + '<|end_header_id|>\n\n' + content|trim + '<|eot_id|>';
 *   {% if add_generation_prompt %} '<|start_header_id|>assistant<|end_header_id|>\n\n'.
 * date_string is today's date when the source calls strftime_now, else its fixed date. The date
 * is template text; the quoted tool result (quotes and escapes included, like every tojson text)
 * is content. */
static int render_llama3_dated(const pgd_chat_template *t, render *r, bool gen) {
    char date[DATE_CAP];
    if (t->date_today)
        today(date);
    else
        memcpy(date, t->date, sizeof date);
    if (t->use_bos) TRY(put(r, t->bos, t->bos_len, true));
    size_t i = 0;
    piece sys = {"", 0, false};
    if (r->role[0] == ROLE_SYSTEM) sys = stripped(r, i++);
    TRY(tmpl(r, "<|start_header_id|>system<|end_header_id|>\n\n"));
    if (r->tools) TRY(tmpl(r, "Environment: ipython\n"));
    TRY(tmpl(r, "Cutting Knowledge Date: December 2023\nToday Date: "));
    TRY(tmpl(r, date));
    TRY(tmpl(r, "\n\n"));
    TRY(put_content(r, sys));
    TRY(tmpl(r, "<|eot_id|>"));
    if (r->tools) {
        if (i == r->n)
            return pgd_error_set(PGD_EINVAL, "Cannot put tools in the first user message when "
                                             "there's no first user message!");
        TRY(tmpl(r, k_llama31_tools_head));
        for (size_t k = 0; k < r->tools->n; k++) {
            TRY(put(r, r->tools->defs_indent[k].ptr, (size_t)r->tools->defs_indent[k].len, false));
            TRY(tmpl(r, "\n\n"));
        }
        TRY(put_content(r, stripped(r, i++)));
        TRY(tmpl(r, "<|eot_id|>"));
    }
    for (; i < r->n; i++) {
        const pgd_chat_msg *m = &r->msgs[i];
        if (r->role[i] == ROLE_TOOL) {
            TRY(tmpl(r, "<|start_header_id|>ipython<|end_header_id|>\n\n"));
            TRY(pgd_json_quote_py(r->content + r->off[i], r->off[i + 1] - r->off[i], &r->text));
            TRY(tmpl(r, "<|eot_id|>"));
        } else if (m->n_calls) { /* an assistant's (checked before rendering) */
            if (m->n_calls != 1)
                return pgd_error_set(PGD_EINVAL,
                                     "This model only supports single tool-calls at once! "
                                     "(message %zu has %zu)",
                                     i, m->n_calls);
            TRY(tmpl(r, "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \""));
            TRY(put(r, m->calls[0].name.ptr, (size_t)m->calls[0].name.len, false));
            TRY(tmpl(r, "\", \"parameters\": "));
            TRY(put(r, m->calls[0].arguments.ptr, (size_t)m->calls[0].arguments.len, false));
            TRY(tmpl(r, "}<|eot_id|>"));
        } else {
            TRY(llama3_turn(r, i));
        }
    }
    if (gen) TRY(tmpl(r, "<|start_header_id|>assistant<|end_header_id|>\n\n"));
    return 0;
}

/* Mistral-7B-Instruct-v0.2 (original): bos; roles alternate user/assistant (checked first);
 * user: '[INST] ' + content + ' [/INST]'; assistant: content + eos; any other role raises
 * 'Only user and assistant roles are supported!'. No generation prompt. */
static int render_mistral(const pgd_chat_template *t, render *r) {
    if (t->use_bos) TRY(put(r, t->bos, t->bos_len, true));
    for (size_t i = 0; i < r->n; i++) {
        if ((r->role[i] == ROLE_USER) != (i % 2 == 0)) return alternate_error(r, i);
        if (r->role[i] == ROLE_USER) {
            TRY(tmpl(r, "[INST] "));
            TRY(put_content(r, content_of(r, i)));
            TRY(tmpl(r, " [/INST]"));
        } else if (r->role[i] == ROLE_ASSISTANT) {
            TRY(put_content(r, content_of(r, i)));
            TRY(put(r, t->eos, t->eos_len, true));
        } else {
            return pgd_error_set(PGD_EINVAL,
                                 "Only user and assistant roles are supported! (message %zu is "
                                 "'%s')",
                                 i, k_roles[r->role[i]]);
        }
    }
    return 0;
}

/* Gemma-3-it: bos; a leading system message becomes first_user_prefix = system + '\n\n'
 * (Gemma-1/2 raise 'System role not supported' instead); the other messages alternate
 * user/assistant; '<start_of_turn>' + (assistant -> 'model', else the role) + '\n' + (prefix on
 * the first) + content|trim + '<end_of_turn>\n'; generation prompt '<start_of_turn>model\n'. */
static int render_gemma(const pgd_chat_template *t, render *r, bool gen) {
    if (t->use_bos) TRY(put(r, t->bos, t->bos_len, true));
    size_t start = 0;
    if (r->role[0] == ROLE_SYSTEM) {
        if (t->refuse_system)
            return pgd_error_set(PGD_EINVAL, "System role not supported (message 0 is 'system')");
        start = 1;
    }
    for (size_t i = start; i < r->n; i++) {
        size_t idx = i - start;
        if ((r->role[i] == ROLE_USER) != (idx % 2 == 0)) return alternate_error(r, i);
        TRY(tmpl(r, "<start_of_turn>"));
        TRY(tmpl(r, r->role[i] == ROLE_ASSISTANT ? "model" : k_roles[r->role[i]]));
        TRY(tmpl(r, "\n"));
        if (idx == 0 && start) {
            TRY(put_content(r, content_of(r, 0)));
            TRY(tmpl(r, "\n\n"));
        }
        TRY(put_content(r, stripped(r, i)));
        TRY(tmpl(r, "<end_of_turn>\n"));
    }
    if (gen) TRY(tmpl(r, "<start_of_turn>model\n"));
    return 0;
}

/* zephyr-7b-beta: '<|ROLE|>\n' + content + eos, then the newline that follows the expression
 * in the source; after the last message, '<|assistant|>' + newline for the generation prompt. */
static int render_zephyr(const pgd_chat_template *t, render *r, bool gen) {
    for (size_t i = 0; i < r->n; i++) {
        TRY(tmpl(r, "<|"));
        TRY(tmpl(r, k_roles[r->role[i]]));
        TRY(tmpl(r, "|>\n"));
        TRY(put_content(r, content_of(r, i)));
        TRY(put(r, t->eos, t->eos_len, true));
        TRY(tmpl(r, "\n"));
    }
    if (gen) TRY(tmpl(r, "<|assistant|>\n"));
    return 0;
}

/* Phi-3-mini-instruct: '<|ROLE|>\n' + content + '<|end|>\n' (Phi-3.5 skips a system message
 * with empty content); then '<|assistant|>\n' for the generation prompt, else eos. */
static int render_phi3(const pgd_chat_template *t, render *r, bool gen) {
    if (t->use_bos) TRY(put(r, t->bos, t->bos_len, true));
    for (size_t i = 0; i < r->n; i++) {
        if (r->role[i] == ROLE_SYSTEM && t->skip_empty_system && r->off[i + 1] == r->off[i])
            continue;
        TRY(tmpl(r, "<|"));
        TRY(tmpl(r, k_roles[r->role[i]]));
        TRY(tmpl(r, "|>\n"));
        TRY(put_content(r, content_of(r, i)));
        TRY(tmpl(r, "<|end|>\n"));
    }
    if (gen)
        TRY(tmpl(r, "<|assistant|>\n"));
    else
        TRY(put(r, t->eos, t->eos_len, true));
    return 0;
}

/* Role index of a name, or -1. */
static int role_of(const char *name) {
    for (int i = 0; i < (int)PGD_ARRAY_LEN(k_roles); i++)
        if (!strcmp(name, k_roles[i])) return i;
    return -1;
}

pgd_chat_tool_format pgd_chat_template_tool_format(const pgd_chat_template *t) {
    if (t->family == PGD_CHAT_CHATML || t->family == PGD_CHAT_QWEN3 || t->family == PGD_CHAT_QWQ)
        return PGD_CHAT_TOOLS_HERMES;
    if (t->family == PGD_CHAT_LLAMA3 && t->dated) return PGD_CHAT_TOOLS_LLAMA_JSON;
    return PGD_CHAT_TOOLS_NONE;
}

bool pgd_chat_template_renders_tools(const pgd_chat_template *t) {
    return pgd_chat_template_tool_format(t) != PGD_CHAT_TOOLS_NONE;
}

/* PGD_EINVAL for tool calling (`why`) with a template that has no tool format. */
static int no_tools(const pgd_chat_template *t, const char *why) {
    return pgd_error_set(
        PGD_EINVAL,
        "tool calling needs a chat template with a tool format: pagoda renders "
        "tools for chatml, qwen3 and qwq (Hermes <tool_call>) and Meta's Llama 3.1+ "
        "templates (JSON calls) only; this model's template is %s (%s%s)",
        pgd_chat_family_name(t->family),
        t->family == PGD_CHAT_LLAMA3 ? "Llama 3.0's, without tools; " : "", why);
}

/* 0, or PGD_EINVAL when message i's tool calls cannot render: not an assistant's, a template
 * without a tool format, a call without its text. */
static int check_calls(const pgd_chat_template *t, const pgd_chat_msg *m, int role, size_t i) {
    char why[64];
    if (!m->n_calls) return 0;
    if (role != ROLE_ASSISTANT)
        return pgd_error_set(PGD_EINVAL,
                             "only assistant messages carry tool calls (message %zu is '%s')", i,
                             k_roles[role]);
    if (!pgd_chat_template_renders_tools(t)) {
        snprintf(why, sizeof why, "message %zu has tool calls", i);
        return no_tools(t, why);
    }
    if (!m->calls) return pgd_error_set(PGD_EINVAL, "message %zu has no tool calls", i);
    for (size_t c = 0; c < m->n_calls; c++) {
        if ((m->calls[c].name.len && !m->calls[c].name.ptr) ||
            (m->calls[c].arguments.len && !m->calls[c].arguments.ptr))
            return pgd_error_set(PGD_EINVAL, "message %zu tool call %zu has no text", i, c);
    }
    return 0;
}

int pgd_chat_render(const pgd_chat_template *t, const pgd_chat_msg *msgs, size_t n,
                    bool add_generation_prompt, pgd_chat_prompt *out) {
    return pgd_chat_render_tools(t, msgs, n, NULL, add_generation_prompt, out);
}

int pgd_chat_render_tools(const pgd_chat_template *t, const pgd_chat_msg *msgs, size_t n,
                          const pgd_chat_tools *tools, bool add_generation_prompt,
                          pgd_chat_prompt *out) {
    pgd_chat_render_opts opts = PGD_CHAT_RENDER_OPTS_DEFAULT;
    opts.add_generation_prompt = add_generation_prompt;
    return pgd_chat_render_with(t, msgs, n, tools, &opts, out);
}

int pgd_chat_render_with(const pgd_chat_template *t, const pgd_chat_msg *msgs, size_t n,
                         const pgd_chat_tools *tools, const pgd_chat_render_opts *opts,
                         pgd_chat_prompt *out) {
    memset(out, 0, sizeof *out);
    const pgd_chat_render_opts o = opts ? *opts : PGD_CHAT_RENDER_OPTS_DEFAULT;
    bool add_generation_prompt = o.add_generation_prompt;
    render r = {.text = PGD_BUF_INIT, .n = n, .msgs = msgs, .thinking = o.enable_thinking};
    pgd_buf joined = PGD_BUF_INIT;
    int rc = 0;
    bool with_tools = pgd_chat_template_renders_tools(t);
    if (tools && tools->n) {
        if (!with_tools) return no_tools(t, "tools were offered");
        /* the texts the template prints: compact for chatml, indented for Llama 3.1+ */
        bool indent = pgd_chat_template_tool_format(t) == PGD_CHAT_TOOLS_LLAMA_JSON;
        const pgd_str *defs = indent ? tools->defs_indent : tools->defs;
        if (!defs)
            return pgd_error_set(PGD_EINVAL, "tools without %sdefinitions",
                                 indent ? "indented " : "");
        for (size_t k = 0; k < tools->n; k++)
            if (defs[k].len && !defs[k].ptr)
                return pgd_error_set(PGD_EINVAL, "tool %zu has no definition text", k);
        r.tools = tools;
    }
    if (n == 0) return pgd_error_set(PGD_EINVAL, "messages must not be empty");
    if (n > SIZE_MAX / sizeof(size_t) - 1) return pgd_error_set(PGD_EINVAL, "too many messages");
    r.off = malloc((n + 1) * sizeof *r.off);
    r.role = malloc(n * sizeof *r.role);
    if (!r.off || !r.role) goto nomem;
    r.off[0] = 0;
    for (size_t i = 0; i < n; i++) {
        const char *role = msgs[i].role;
        if (!role) {
            rc = pgd_error_set(PGD_EINVAL, "message %zu has no role", i);
            goto fail;
        }
        r.role[i] = role_of(role);
        if (r.role[i] == ROLE_TOOL && !with_tools) {
            char why[64];
            snprintf(why, sizeof why, "message %zu is 'tool'", i);
            rc = no_tools(t, why);
            goto fail;
        }
        if (r.role[i] < 0) {
            rc = pgd_error_set(
                PGD_EINVAL, "unknown role '%.64s' in message %zu (known: %s)", role, i,
                with_tools ? "system, user, assistant, tool" : "system, user, assistant");
            goto fail;
        }
        if ((rc = check_calls(t, &msgs[i], r.role[i], i))) goto fail;
        if (o.reasoning && !o.reasoning[i].ptr && o.reasoning[i].len) {
            rc = pgd_error_set(PGD_EINVAL, "message %zu has a reasoning without its text", i);
            goto fail;
        }
        for (size_t p = 0; p < msgs[i].n_parts; p++) {
            const pgd_str *s = &msgs[i].parts[p];
            if (s->len && !s->ptr) {
                rc = pgd_error_set(PGD_EINVAL, "message %zu part %zu has no text", i, p);
                goto fail;
            }
            if (s->len > SIZE_MAX / 2) goto nomem;
            if (pgd_buf_append(&joined, s->ptr, (size_t)s->len)) goto nomem;
        }
        r.off[i + 1] = joined.len;
    }
    if (pgd_buf_append(&joined, "", 0)) goto nomem; /* data is never NULL */
    r.content = joined.data;
    r.reasoning = o.reasoning;

    switch (t->family) {
    case PGD_CHAT_CHATML:
        rc = render_chatml(t, &r, add_generation_prompt);
        break;
    case PGD_CHAT_LLAMA2:
        rc = render_llama2(t, &r);
        break;
    case PGD_CHAT_LLAMA3:
        rc = t->dated ? render_llama3_dated(t, &r, add_generation_prompt)
                      : render_llama3(t, &r, add_generation_prompt);
        break;
    case PGD_CHAT_MISTRAL:
        rc = render_mistral(t, &r);
        break;
    case PGD_CHAT_GEMMA:
        rc = render_gemma(t, &r, add_generation_prompt);
        break;
    case PGD_CHAT_ZEPHYR:
        rc = render_zephyr(t, &r, add_generation_prompt);
        break;
    case PGD_CHAT_PHI3:
        rc = render_phi3(t, &r, add_generation_prompt);
        break;
    case PGD_CHAT_QWEN3:
        rc = pgd_ct_render_qwen3(t, &r, add_generation_prompt);
        break;
    case PGD_CHAT_QWQ:
        rc = pgd_ct_render_qwq(t, &r, add_generation_prompt);
        break;
    default:
        rc = pgd_error_set(PGD_EINVAL, "bad chat template family %d", (int)t->family);
    }
    if (rc == PGD_ENOMEM) goto nomem;
    if (rc) goto fail;
    if (pgd_buf_append(&r.text, "", 0)) goto nomem; /* NUL-terminated even when empty */

    out->text = r.text;
    out->special = r.sp;
    out->n_special = r.n_sp;
    free(r.off);
    free(r.role);
    pgd_buf_free(&joined);
    return 0;
nomem:
    rc = pgd_error_set(PGD_ENOMEM, "out of memory rendering a chat prompt");
fail:
    pgd_buf_free(&r.text);
    free(r.sp);
    free(r.off);
    free(r.role);
    pgd_buf_free(&joined);
    return rc;
}

void pgd_chat_prompt_free(pgd_chat_prompt *p) {
    if (!p) return;
    pgd_buf_free(&p->text);
    free(p->special);
    p->special = NULL;
    p->n_special = 0;
}
