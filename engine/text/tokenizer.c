/*
 * engine/text/tokenizer.c — the pgd_tokenizer itself: building it (from GGUF metadata or plain
 * arrays), its special ids and end-of-generation set, the property getters, and pgd_tokenize:
 * splitting the text into special-token and raw fragments, then handing each raw fragment to
 * the model's encoder. The decoding calls of tokenizer.h are forwarded to tokenizer_detok.c.
 *
 * Owns: the pgd_tokenizer layout (below; no other file sees it), its names, special ids,
 * end-of-generation and special-token lists. The parts it embeds are owned by their own files:
 * the vocabulary (tokenizer_vocab.h), the BPE or SPM encoder (tokenizer_bpe.h,
 * tokenizer_spm.h) and the piece table (tokenizer_detok.h). Dependencies run one way: this
 * file calls those; they call only the vocabulary, the scratch (tokenizer_scratch.h) and the
 * merge heap (merge_heap.h), never this file.
 * Invariants once built: every special id is -1 or < vocab.n; eog is sorted without
 * duplicates; special_ids are the control and user-defined tokens with text, longest first
 * (ties: lower id first); nothing changes afterwards.
 * Threading: build once on one thread; afterwards immutable. pgd_tokenize allocates its own
 * scratch memory per call, so concurrent calls share nothing writable.
 */
#include "engine/text/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/text/tokenizer_bpe.h"
#include "engine/text/tokenizer_detok.h"
#include "engine/text/tokenizer_scratch.h"
#include "engine/text/tokenizer_spm.h"
#include "engine/text/tokenizer_vocab.h"

struct pgd_tokenizer {
    pgd_tokenizer_kind kind;
    char *model_name, *pre_name; /* owned, NUL-terminated */

    pgd__vocab vocab;
    pgd__bpe bpe; /* set up when kind is PGD_TOKENIZER_BPE, zeroed otherwise */
    pgd__spm spm; /* set up when kind is PGD_TOKENIZER_SPM, zeroed otherwise */
    pgd__detok_table detok;

    int32_t bos, eos, eot, eom, unk, pad;
    bool add_bos, add_eos, add_space_prefix;
    int32_t *eog; /* sorted */
    size_t n_eog;

    int32_t *special_ids; /* control + user-defined tokens with text, longest text first */
    size_t n_special_ids;
};

/* ---------------------------------------------------------------------------------------- */
/* Source arrays, common to GGUF and desc construction.                                      */

typedef struct {
    const char *model;
    size_t model_len;
    const char *pre;
    size_t pre_len;
    size_t n_vocab;
    const pgd_str *tokens;
    const int32_t *types; /* or NULL */
    const float *scores;  /* or NULL */
    const pgd_str *merges;
    size_t n_merges;
    int32_t bos, eos, eot, eom, unk, pad; /* -1 absent, -2 absent and look up a default */
    int add_bos, add_eos, add_space_prefix;
} tk_source;

static char *dup_n(const char *s, size_t n) {
    char *p = malloc(n + 1);
    if (!p) return NULL;
    if (n) memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

static int32_t find_cstr(const pgd_tokenizer *tk, const char *s) {
    return pgd__vocab_lookup(&tk->vocab, s, strlen(s));
}

static int32_t check_id(const pgd_tokenizer *tk, int32_t id) {
    return (id >= 0 && (size_t)id < tk->vocab.n) ? id : -1;
}

/* Control tokens whose text marks an end of turn (llama.cpp's list, plus eom). */
static const char *const k_eot_names[] = {
    "<|eot_id|>", "<|im_end|>",      "<|end|>", "<end_of_turn>",         "<|endoftext|>",
    "<EOT>",      "<|end_of_text|>", "_<EOT>",  "<｜end▁of▁sentence｜>", "<end_of_utterance>",
};

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

typedef struct {
    uint32_t len;
    int32_t id;
} special_len;

static int cmp_special_len(const void *a_, const void *b_) {
    const special_len *a = a_, *b = b_;
    if (a->len != b->len) return a->len > b->len ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

static int build_specials(pgd_tokenizer *tk, const tk_source *src) {
    tk->bos = check_id(tk, src->bos);
    tk->eos = check_id(tk, src->eos);
    tk->eot = check_id(tk, src->eot);
    tk->eom = check_id(tk, src->eom);
    tk->unk = check_id(tk, src->unk);
    tk->pad = check_id(tk, src->pad);
    /* Absent from the metadata: SPM vocabularies name them <s>, </s>, <unk>. */
    if (tk->kind == PGD_TOKENIZER_SPM) {
        if (src->bos == -2) tk->bos = find_cstr(tk, "<s>");
        if (src->eos == -2) tk->eos = find_cstr(tk, "</s>");
        if (src->unk == -2) tk->unk = find_cstr(tk, "<unk>");
    }
    if (tk->eot < 0) {
        for (size_t k = 0; k < PGD_ARRAY_LEN(k_eot_names) && tk->eot < 0; k++) {
            int32_t id = find_cstr(tk, k_eot_names[k]);
            if (id >= 0 && tk->vocab.types[id] == PGD_TOKEN_CONTROL) tk->eot = id;
        }
    }
    if (tk->eom < 0) {
        int32_t id = find_cstr(tk, "<|eom_id|>");
        if (id >= 0 && tk->vocab.types[id] == PGD_TOKEN_CONTROL) tk->eom = id;
    }
    bool spm = tk->kind == PGD_TOKENIZER_SPM;
    tk->add_bos = src->add_bos >= 0 ? src->add_bos != 0 : spm;
    tk->add_eos = src->add_eos >= 0 ? src->add_eos != 0 : false;
    tk->add_space_prefix = src->add_space_prefix >= 0 ? src->add_space_prefix != 0 : spm;

    /* End of generation: eos, eot, eom and control tokens named like an end of turn. */
    size_t cap = 3 + PGD_ARRAY_LEN(k_eot_names) + 1;
    tk->eog = malloc(cap * sizeof *tk->eog);
    if (!tk->eog) return PGD_ENOMEM;
    size_t n = 0;
    int32_t fixed[3] = {tk->eos, tk->eot, tk->eom};
    for (int k = 0; k < 3; k++)
        if (fixed[k] >= 0) tk->eog[n++] = fixed[k];
    for (size_t k = 0; k < PGD_ARRAY_LEN(k_eot_names); k++) {
        int32_t id = find_cstr(tk, k_eot_names[k]);
        if (id >= 0 && tk->vocab.types[id] == PGD_TOKEN_CONTROL) tk->eog[n++] = id;
    }
    int32_t id = find_cstr(tk, "<|eom_id|>");
    if (id >= 0 && tk->vocab.types[id] == PGD_TOKEN_CONTROL) tk->eog[n++] = id;
    qsort(tk->eog, n, sizeof *tk->eog, cmp_i32);
    size_t m = 0;
    for (size_t k = 0; k < n; k++)
        if (m == 0 || tk->eog[m - 1] != tk->eog[k]) tk->eog[m++] = tk->eog[k];
    tk->n_eog = m;

    /* Tokens recognised inside special spans, longest text first (ties: lower id first). */
    const pgd__vocab *v = &tk->vocab;
    size_t ns = 0;
    for (size_t i = 0; i < v->n; i++)
        if ((v->types[i] == PGD_TOKEN_CONTROL || v->types[i] == PGD_TOKEN_USER_DEFINED) &&
            v->text_off[i + 1] > v->text_off[i])
            ns++;
    tk->special_ids = malloc((ns ? ns : 1) * sizeof *tk->special_ids);
    if (!tk->special_ids) return PGD_ENOMEM;
    ns = 0;
    for (size_t i = 0; i < v->n; i++)
        if ((v->types[i] == PGD_TOKEN_CONTROL || v->types[i] == PGD_TOKEN_USER_DEFINED) &&
            v->text_off[i + 1] > v->text_off[i])
            tk->special_ids[ns++] = (int32_t)i;
    /* Longest first, ids ascending among equal lengths (a vocabulary may hold 100k+ of them:
     * an O(n log n) sort, not an insertion sort). */
    special_len *sl = malloc((ns ? ns : 1) * sizeof *sl);
    if (!sl) return PGD_ENOMEM;
    for (size_t i = 0; i < ns; i++) {
        int32_t id = tk->special_ids[i];
        sl[i] = (special_len){v->text_off[id + 1] - v->text_off[id], id};
    }
    qsort(sl, ns, sizeof *sl, cmp_special_len);
    for (size_t i = 0; i < ns; i++) tk->special_ids[i] = sl[i].id;
    free(sl);
    tk->n_special_ids = ns;
    return 0;
}

static int build(const tk_source *src, pgd_tokenizer **out) {
    *out = NULL;
    int rc;
    pgd_tokenizer *tk = calloc(1, sizeof *tk);
    if (!tk) return PGD_ENOMEM;
    if (src->model_len == 4 && !memcmp(src->model, "gpt2", 4)) {
        tk->kind = PGD_TOKENIZER_BPE;
    } else if (src->model_len == 5 && !memcmp(src->model, "llama", 5)) {
        tk->kind = PGD_TOKENIZER_SPM;
    } else {
        rc = pgd_error_set(PGD_EUNSUPPORTED,
                           "tokenizer: model '%.*s' is not supported (gpt2 and llama are)",
                           (int)(src->model_len > 64 ? 64 : src->model_len), src->model);
        goto fail;
    }
    if (src->n_vocab == 0 || src->n_vocab >= INT32_MAX) {
        rc = pgd_error_set(PGD_EFORMAT, "tokenizer: bad vocabulary size %zu", src->n_vocab);
        goto fail;
    }
    tk->model_name = dup_n(src->model, src->model_len);
    tk->pre_name = src->pre ? dup_n(src->pre, src->pre_len) : dup_n("default", 7);
    if (!tk->model_name || !tk->pre_name) {
        rc = PGD_ENOMEM;
        goto fail;
    }
    if ((rc = pgd__vocab_build(&tk->vocab, src->n_vocab, src->tokens, src->types, src->scores)))
        goto fail;
    if ((rc = build_specials(tk, src))) goto fail;
    if (tk->kind == PGD_TOKENIZER_SPM)
        pgd__spm_init(&tk->spm, &tk->vocab, tk->unk);
    else if ((rc = pgd__bpe_init(&tk->bpe, &tk->vocab, tk->pre_name, src->merges, src->n_merges)))
        goto fail;
    if ((rc = pgd__detok_build(&tk->detok, &tk->vocab, tk->kind == PGD_TOKENIZER_SPM,
                               tk->kind == PGD_TOKENIZER_SPM && tk->add_space_prefix)))
        goto fail;
    *out = tk;
    return 0;
fail:
    if (rc == PGD_ENOMEM) pgd_error_set(PGD_ENOMEM, "tokenizer: out of memory");
    pgd_tokenizer_free(tk);
    return rc;
}

void pgd_tokenizer_free(pgd_tokenizer *tk) {
    if (!tk) return;
    free(tk->model_name);
    free(tk->pre_name);
    pgd__vocab_free(&tk->vocab);
    pgd__bpe_free(&tk->bpe); /* pgd__spm allocates nothing */
    pgd__detok_free(&tk->detok);
    free(tk->eog);
    free(tk->special_ids);
    free(tk);
}

/* ---------------------------------------------------------------------------------------- */
/* From GGUF metadata.                                                                       */

/* A special id key: -2 when absent (look up a default), the id, or -1 when out of range. */
static int32_t gguf_id(const pgd_gguf *g, const char *key) {
    uint32_t v;
    if (pgd_gguf_get_u32(g, key, &v) != 0) return -2;
    return v > INT32_MAX ? -1 : (int32_t)v;
}

static int gguf_flag(const pgd_gguf *g, const char *key) {
    bool b;
    if (pgd_gguf_get_bool(g, key, &b) != 0) return -1;
    return b ? 1 : 0;
}

int pgd_tokenizer_load(const pgd_gguf *g, pgd_tokenizer **out) {
    *out = NULL;
    tk_source src;
    memset(&src, 0, sizeof src);
    int32_t *types = NULL;
    float *scores = NULL;
    int rc;
    pgd_str model, pre;
    const pgd_gguf_value *toks = NULL, *tt = NULL, *sc = NULL, *mg = NULL;

    if (pgd_gguf_get_str(g, "tokenizer.ggml.model", &model) != 0)
        return pgd_error_set(PGD_ENOTFOUND, "tokenizer: the model has no tokenizer.ggml.model");
    if (pgd_gguf_get_arr(g, "tokenizer.ggml.tokens", &toks) != 0 ||
        toks->v.arr.elem_type != PGD_GGUF_STRING || !toks->v.arr.strs)
        return pgd_error_set(PGD_ENOTFOUND,
                             "tokenizer: the model has no tokenizer.ggml.tokens string array");
    size_t n = (size_t)toks->v.arr.n;
    src.model = model.ptr;
    src.model_len = (size_t)model.len;
    if (pgd_gguf_get_str(g, "tokenizer.ggml.pre", &pre) == 0) {
        src.pre = pre.ptr;
        src.pre_len = (size_t)pre.len;
    }
    src.n_vocab = n;
    src.tokens = toks->v.arr.strs;

    if (pgd_gguf_get_arr(g, "tokenizer.ggml.token_type", &tt) == 0) {
        if (tt->v.arr.n != n) {
            rc = pgd_error_set(PGD_EFORMAT, "tokenizer: %llu token types for %zu tokens",
                               (unsigned long long)tt->v.arr.n, n);
            goto fail;
        }
        types = malloc((n ? n : 1) * sizeof *types);
        if (!types) {
            rc = PGD_ENOMEM;
            goto fail;
        }
        if (tt->v.arr.elem_type == PGD_GGUF_INT32 && tt->v.arr.raw) {
            memcpy(types, tt->v.arr.raw, n * sizeof *types); /* little-endian host */
        } else {
            for (size_t i = 0; i < n; i++) {
                int64_t v;
                if (pgd_gguf_arr_i64(tt, i, &v) != 0) {
                    rc = pgd_error_set(PGD_EFORMAT, "tokenizer: token_type is not an integer "
                                                    "array");
                    goto fail;
                }
                types[i] = (int32_t)v;
            }
        }
        src.types = types;
    }
    if (pgd_gguf_get_arr(g, "tokenizer.ggml.scores", &sc) == 0) {
        if (sc->v.arr.n != n) {
            rc = pgd_error_set(PGD_EFORMAT, "tokenizer: %llu scores for %zu tokens",
                               (unsigned long long)sc->v.arr.n, n);
            goto fail;
        }
        scores = malloc((n ? n : 1) * sizeof *scores);
        if (!scores) {
            rc = PGD_ENOMEM;
            goto fail;
        }
        if (sc->v.arr.elem_type == PGD_GGUF_FLOAT32 && sc->v.arr.raw) {
            memcpy(scores, sc->v.arr.raw, n * sizeof *scores);
        } else {
            for (size_t i = 0; i < n; i++) {
                double v;
                if (pgd_gguf_arr_f64(sc, i, &v) != 0) {
                    rc = pgd_error_set(PGD_EFORMAT, "tokenizer: scores is not a number array");
                    goto fail;
                }
                scores[i] = (float)v;
            }
        }
        src.scores = scores;
    }
    if (pgd_gguf_get_arr(g, "tokenizer.ggml.merges", &mg) == 0) {
        if (mg->v.arr.elem_type != PGD_GGUF_STRING || !mg->v.arr.strs) {
            rc = pgd_error_set(PGD_EFORMAT, "tokenizer: merges is not a string array");
            goto fail;
        }
        src.merges = mg->v.arr.strs;
        src.n_merges = (size_t)mg->v.arr.n;
    } else if (src.model_len == 4 && !memcmp(src.model, "gpt2", 4)) {
        rc = pgd_error_set(PGD_ENOTFOUND, "tokenizer: a gpt2 tokenizer needs "
                                          "tokenizer.ggml.merges");
        goto fail;
    }
    src.bos = gguf_id(g, "tokenizer.ggml.bos_token_id");
    src.eos = gguf_id(g, "tokenizer.ggml.eos_token_id");
    src.eot = gguf_id(g, "tokenizer.ggml.eot_token_id");
    src.eom = gguf_id(g, "tokenizer.ggml.eom_token_id");
    src.unk = gguf_id(g, "tokenizer.ggml.unknown_token_id");
    src.pad = gguf_id(g, "tokenizer.ggml.padding_token_id");
    src.add_bos = gguf_flag(g, "tokenizer.ggml.add_bos_token");
    src.add_eos = gguf_flag(g, "tokenizer.ggml.add_eos_token");
    src.add_space_prefix = gguf_flag(g, "tokenizer.ggml.add_space_prefix");
    rc = build(&src, out);
    free(types);
    free(scores);
    return rc;
fail:
    if (rc == PGD_ENOMEM) pgd_error_set(PGD_ENOMEM, "tokenizer: out of memory");
    free(types);
    free(scores);
    return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* From plain arrays.                                                                        */

void pgd_tokenizer_desc_init(pgd_tokenizer_desc *d) {
    memset(d, 0, sizeof *d);
    d->bos = d->eos = d->eot = d->eom = d->unk = d->pad = -1;
    d->add_bos = d->add_eos = d->add_space_prefix = -1;
}

int pgd_tokenizer_create(const pgd_tokenizer_desc *d, pgd_tokenizer **out) {
    *out = NULL;
    if (!d || !d->model || !d->tokens || d->n_vocab == 0 || (d->n_merges && !d->merges))
        return pgd_error_set(PGD_EINVAL, "tokenizer: desc needs a model name and tokens");
    const int32_t ids[6] = {d->bos, d->eos, d->eot, d->eom, d->unk, d->pad};
    for (int k = 0; k < 6; k++)
        if (ids[k] < -1 || (ids[k] >= 0 && (size_t)ids[k] >= d->n_vocab))
            return pgd_error_set(PGD_EINVAL, "tokenizer: special id %d out of range", ids[k]);
    pgd_str *toks = malloc(d->n_vocab * sizeof *toks);
    pgd_str *merges = malloc((d->n_merges ? d->n_merges : 1) * sizeof *merges);
    int rc;
    if (!toks || !merges) {
        rc = pgd_error_set(PGD_ENOMEM, "tokenizer: out of memory");
        goto done;
    }
    for (size_t i = 0; i < d->n_vocab; i++) {
        if (!d->tokens[i]) {
            rc = pgd_error_set(PGD_EINVAL, "tokenizer: token %zu is NULL", i);
            goto done;
        }
        toks[i].ptr = d->tokens[i];
        toks[i].len = d->token_lens ? d->token_lens[i] : strlen(d->tokens[i]);
    }
    for (size_t i = 0; i < d->n_merges; i++) {
        if (!d->merges[i]) {
            rc = pgd_error_set(PGD_EINVAL, "tokenizer: merge %zu is NULL", i);
            goto done;
        }
        merges[i].ptr = d->merges[i];
        merges[i].len = strlen(d->merges[i]);
    }
    tk_source src = {
        .model = d->model,
        .model_len = strlen(d->model),
        .pre = d->pre,
        .pre_len = d->pre ? strlen(d->pre) : 0,
        .n_vocab = d->n_vocab,
        .tokens = toks,
        .types = d->types,
        .scores = d->scores,
        .merges = merges,
        .n_merges = d->n_merges,
        .bos = d->bos,
        .eos = d->eos,
        .eot = d->eot,
        .eom = d->eom,
        .unk = d->unk,
        .pad = d->pad,
        .add_bos = d->add_bos,
        .add_eos = d->add_eos,
        .add_space_prefix = d->add_space_prefix,
    };
    rc = build(&src, out);
done:
    free(toks);
    free(merges);
    return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* Properties.                                                                               */

pgd_tokenizer_kind pgd_tokenizer_kind_of(const pgd_tokenizer *tk) {
    return tk->kind;
}
const char *pgd_tokenizer_model(const pgd_tokenizer *tk) {
    return tk->model_name;
}
const char *pgd_tokenizer_pre(const pgd_tokenizer *tk) {
    return tk->pre_name;
}
size_t pgd_tokenizer_n_vocab(const pgd_tokenizer *tk) {
    return tk->vocab.n;
}
int32_t pgd_tokenizer_bos(const pgd_tokenizer *tk) {
    return tk->bos;
}
int32_t pgd_tokenizer_eos(const pgd_tokenizer *tk) {
    return tk->eos;
}
int32_t pgd_tokenizer_eot(const pgd_tokenizer *tk) {
    return tk->eot;
}
int32_t pgd_tokenizer_eom(const pgd_tokenizer *tk) {
    return tk->eom;
}
int32_t pgd_tokenizer_unk(const pgd_tokenizer *tk) {
    return tk->unk;
}
int32_t pgd_tokenizer_pad(const pgd_tokenizer *tk) {
    return tk->pad;
}
bool pgd_tokenizer_add_bos(const pgd_tokenizer *tk) {
    return tk->add_bos;
}
bool pgd_tokenizer_add_eos(const pgd_tokenizer *tk) {
    return tk->add_eos;
}
bool pgd_tokenizer_add_space_prefix(const pgd_tokenizer *tk) {
    return tk->add_space_prefix;
}

size_t pgd_tokenizer_eog_ids(const pgd_tokenizer *tk, const int32_t **ids) {
    *ids = tk->eog;
    return tk->n_eog;
}

bool pgd_tokenizer_is_eog(const pgd_tokenizer *tk, int32_t id) {
    for (size_t i = 0; i < tk->n_eog; i++)
        if (tk->eog[i] == id) return true;
    return false;
}

pgd_str pgd_tokenizer_token_text(const pgd_tokenizer *tk, int32_t id) {
    pgd_str s = {NULL, 0};
    if (id < 0 || (size_t)id >= tk->vocab.n) return s;
    size_t len;
    s.ptr = pgd__vocab_text(&tk->vocab, id, &len);
    s.len = len;
    return s;
}

int pgd_tokenizer_token_type(const pgd_tokenizer *tk, int32_t id) {
    if (id < 0 || (size_t)id >= tk->vocab.n) return PGD_EINVAL;
    return tk->vocab.types[id];
}

float pgd_tokenizer_token_score(const pgd_tokenizer *tk, int32_t id) {
    if (id < 0 || (size_t)id >= tk->vocab.n) return 0.0f;
    return tk->vocab.scores[id];
}

int32_t pgd_tokenizer_find(const pgd_tokenizer *tk, const char *text, size_t len) {
    return pgd__vocab_lookup(&tk->vocab, text, len);
}

/* ---------------------------------------------------------------------------------------- */
/* Encoding.                                                                                 */

/* A piece of the text: raw bytes [b, e) when id < 0, else the special token id. */
typedef struct {
    size_t b, e;
    int32_t id;
} fragment;

static int cmp_span(const void *a, const void *b) {
    const pgd_span *x = a, *y = b;
    return (x->begin > y->begin) - (x->begin < y->begin);
}

/* Earliest occurrence of s[0..slen) inside fragment [fb, fe) that also lies inside one span
 * (spans sorted by begin); SIZE_MAX if none. */
static size_t find_in_spans(const char *text, size_t fb, size_t fe, const pgd_span *spans,
                            size_t n_spans, const char *s, size_t slen) {
    size_t best = SIZE_MAX;
    for (size_t j = 0; j < n_spans; j++) {
        if (spans[j].begin >= fe) break;
        size_t lo = spans[j].begin > fb ? spans[j].begin : fb;
        size_t hi = spans[j].end < fe ? spans[j].end : fe;
        if (lo >= best) break;
        if (hi <= lo || hi - lo < slen) continue;
        const char *p = memmem(text + lo, hi - lo, s, slen);
        if (p && (size_t)(p - text) < best) best = (size_t)(p - text);
    }
    return best;
}

/* Split [0, len) into raw and special-token fragments, llama.cpp style: for each special token,
 * longest first, every raw fragment is searched left to right for it (inside the spans). */
static int partition(const pgd_tokenizer *tk, const char *text, size_t len, const pgd_span *spans,
                     size_t n_spans, fragment **out, size_t *n_out) {
    size_t cap = 16, n = 1;
    fragment *fr = malloc(cap * sizeof *fr), *nf = NULL;
    size_t ncap = 0;
    if (!fr) return PGD_ENOMEM;
    fr[0] = (fragment){0, len, -1};
    for (size_t k = 0; k < tk->n_special_ids; k++) {
        size_t slen;
        const char *s = pgd__vocab_text(&tk->vocab, tk->special_ids[k], &slen);
        /* Fast check: does it occur at all in a raw fragment? Most tokens do not. */
        bool any = false;
        for (size_t i = 0; i < n && !any; i++)
            if (fr[i].id < 0 &&
                find_in_spans(text, fr[i].b, fr[i].e, spans, n_spans, s, slen) != SIZE_MAX)
                any = true;
        if (!any) continue;
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
            fragment f = fr[i];
            for (;;) {
                size_t at =
                    f.id < 0 ? find_in_spans(text, f.b, f.e, spans, n_spans, s, slen) : SIZE_MAX;
                if (pgd__tok_grow((void **)&nf, &ncap, m + 3, sizeof *nf)) goto oom;
                if (at == SIZE_MAX) {
                    nf[m++] = f;
                    break;
                }
                if (at > f.b) nf[m++] = (fragment){f.b, at, -1};
                nf[m++] = (fragment){at, at + slen, tk->special_ids[k]};
                if (at + slen == f.e) break;
                f.b = at + slen;
            }
        }
        fragment *t = fr;
        fr = nf;
        nf = t;
        size_t tc = cap;
        cap = ncap;
        ncap = tc;
        n = m;
    }
    free(nf);
    *out = fr;
    *n_out = n;
    return 0;
oom:
    free(fr);
    free(nf);
    return PGD_ENOMEM;
}

int pgd_tokenize(const pgd_tokenizer *tk, const char *text, size_t len, const pgd_span *special,
                 size_t n_special, pgd_tokens *out) {
    size_t n0 = out->n;
    pgd_span *spans = NULL;
    fragment *fr = NULL, one = {0, len, -1};
    size_t n_fr = 1;
    pgd__tok_scratch s;   /* the encoders' buffers, reused across fragments */
    pgd__bpe_match bpe_m; /* BPE only: PCRE2 match state */
    memset(&s, 0, sizeof s);
    memset(&bpe_m, 0, sizeof bpe_m);
    int rc = 0;

    if (len && !text) return pgd_error_set(PGD_EINVAL, "tokenize: NULL text");
    if (n_special && !special) return pgd_error_set(PGD_EINVAL, "tokenize: NULL spans");
    for (size_t i = 0; i < n_special; i++)
        if (special[i].begin > special[i].end || special[i].end > len)
            return pgd_error_set(PGD_EINVAL,
                                 "tokenize: special span %zu [%zu, %zu) outside the "
                                 "text (%zu bytes)",
                                 i, special[i].begin, special[i].end, len);
    if (len == 0) return 0;

    if (n_special && tk->n_special_ids) {
        spans = malloc(n_special * sizeof *spans);
        if (!spans) {
            rc = PGD_ENOMEM;
            goto fail;
        }
        memcpy(spans, special, n_special * sizeof *spans);
        qsort(spans, n_special, sizeof *spans, cmp_span);
        if ((rc = partition(tk, text, len, spans, n_special, &fr, &n_fr))) goto fail;
    }
    const fragment *frags = fr ? fr : &one;
    bool prev_special = true; /* SPM prefixes a space at the start and after a special token */
    for (size_t i = 0; i < n_fr; i++) {
        const fragment *f = &frags[i];
        if (f->id >= 0) {
            if ((rc = pgd_tokens_push(out, f->id))) goto fail;
            prev_special = true;
            continue;
        }
        if (tk->kind == PGD_TOKENIZER_BPE)
            rc = pgd__bpe_encode(&tk->bpe, &tk->vocab, text + f->b, f->e - f->b, &s, &bpe_m, out);
        else
            rc = pgd__spm_encode(&tk->spm, &tk->vocab, text + f->b, f->e - f->b,
                                 tk->add_space_prefix && prev_special, &s, out);
        if (rc) goto fail;
        prev_special = false;
    }
    free(spans);
    free(fr);
    pgd__tok_scratch_free(&s);
    pgd__bpe_match_free(&bpe_m);
    return 0;
fail:
    if (rc == PGD_ENOMEM) pgd_error_set(PGD_ENOMEM, "tokenize: out of memory");
    out->n = n0;
    free(spans);
    free(fr);
    pgd__tok_scratch_free(&s);
    pgd__bpe_match_free(&bpe_m);
    return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* Decoding (tokenizer_detok.c).                                                             */

int pgd_token_piece(const pgd_tokenizer *tk, int32_t id, bool special, pgd_buf *out) {
    return pgd__detok_piece(&tk->detok, &tk->vocab, id, special, out);
}

const char *pgd_token_piece_view(const pgd_tokenizer *tk, int32_t id, bool special, size_t *len) {
    return pgd__detok_view(&tk->detok, &tk->vocab, id, special, len);
}

int pgd_detokenize(const pgd_tokenizer *tk, const int32_t *ids, size_t n, bool special,
                   pgd_buf *out) {
    return pgd__detok_ids(&tk->detok, &tk->vocab, ids, n, special, out);
}

void pgd_detok_init(pgd_detok *d, const pgd_tokenizer *tk, bool special) {
    pgd__detok_init(d, &tk->detok, special);
    d->tk = tk;
}

int pgd_detok_push(pgd_detok *d, int32_t id, pgd_buf *out) {
    return pgd__detok_push(d, &d->tk->detok, &d->tk->vocab, id, out);
}
