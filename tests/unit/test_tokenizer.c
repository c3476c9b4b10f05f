/*
 * tests/unit/test_tokenizer.c — tokenizers and detokenizer on small synthetic vocabularies
 * (no model file). Every expected id list below is worked out by hand in the comment beside
 * it; the byte-unicode alphabet is rebuilt here with GPT-2's original algorithm
 * (bytes_to_unicode), not with pagoda's closed form.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/text.h"
#include "engine/model/gguf.h"
#include "engine/text/tokenizer.h"
#include "testutil.h"

/* ---- helpers ---------------------------------------------------------------------------- */

static size_t put_utf8(uint32_t cp, char *o) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    o[0] = (char)(0xE0 | (cp >> 12));
    o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
}

/* GPT-2's bytes_to_unicode(): bs = printable ranges, then the rest get 256 + n in order. */
static uint32_t g_b2u[256];
static void build_b2u(void) {
    int in_bs[256] = {0};
    for (int b = '!'; b <= '~'; b++) in_bs[b] = 1;
    for (int b = 0xA1; b <= 0xAC; b++) in_bs[b] = 1;
    for (int b = 0xAE; b <= 0xFF; b++) in_bs[b] = 1;
    uint32_t n = 0;
    for (int b = 0; b < 256; b++) g_b2u[b] = in_bs[b] ? (uint32_t)b : 256 + n++;
}

static int ids_eq(const pgd_tokens *t, const int32_t *want, size_t n) {
    if (t->n != n) {
        fprintf(stderr, "    got %zu ids, want %zu:", t->n, n);
        for (size_t i = 0; i < t->n && i < 40; i++) fprintf(stderr, " %d", t->ids[i]);
        fprintf(stderr, "\n");
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        if (t->ids[i] != want[i]) {
            fprintf(stderr, "    id[%zu] = %d, want %d\n", i, t->ids[i], want[i]);
            return 0;
        }
    return 1;
}

/* Tokenize a C string (len given for embedded bytes) with optional spans; compare. */
static int tok_check(const pgd_tokenizer *tk, const char *text, size_t len, const pgd_span *sp,
                     size_t nsp, const int32_t *want, size_t n) {
    pgd_tokens t = PGD_TOKENS_INIT;
    int rc = pgd_tokenize(tk, text, len, sp, nsp, &t);
    if (rc) fprintf(stderr, "    tokenize failed: %d %s\n", rc, pgd_error_detail());
    int ok = rc == 0 && ids_eq(&t, want, n);
    pgd_tokens_free(&t);
    return ok;
}

#define TOK(tk, s, ...)                                                                            \
    do {                                                                                           \
        static const int32_t want_[] = {__VA_ARGS__};                                              \
        CHECK(tok_check(tk, s, sizeof(s) - 1, NULL, 0, want_, PGD_ARRAY_LEN(want_)));              \
    } while (0)

#define TOK_SP(tk, s, sp, nsp, ...)                                                                \
    do {                                                                                           \
        static const int32_t want_[] = {__VA_ARGS__};                                              \
        CHECK(tok_check(tk, s, sizeof(s) - 1, sp, nsp, want_, PGD_ARRAY_LEN(want_)));              \
    } while (0)

/* ---- a tiny byte-level BPE ---------------------------------------------------------------
 * ids 0..255: the byte-unicode character of byte b has id b (so a byte's id is its value);
 * ids 256.. : merge results, in merge order; then special tokens. */

enum {
    T_GT = 256,  /* "Ġt"    r0 Ġ + t   */
    T_HE,        /* "he"    r1 h + e   */
    T_LL,        /* "ll"    r2 l + l   */
    T_GTHE,      /* "Ġthe"  r3 Ġt + he */
    T_HELL,      /* "hell"  r4 he + ll */
    T_HELLO,     /* "hello" r5 hell + o */
    T_LO,        /* "lo"    r6 l + o   */
    T_GHELLO,    /* "Ġhello" r7 Ġ + hello */
    T_12,        /* "12"    r8 1 + 2   */
    T_APOS_S,    /* "'s"    r9 ' + s   */
    T_GG,        /* "ĠĠ"    r10 Ġ + Ġ  */
    T_EACUTE,    /* "Ã©" (é = C3 A9) r11 */
    T_AA,        /* "aa"    r12 a + a  */
    T_AAAA,      /* "aaaa"  r13 aa + aa */
    T_IM_END,    /* "<|im_end|>"   control */
    T_IM_START,  /* "<|im_start|>" control */
    T_TOOL,      /* "<tool>"       user-defined */
    T_IM_PREFIX, /* "<|im"         user-defined (shorter than <|im_end|>) */
    T_UNUSED,    /* "zz" unused */
    T_GWORLD,    /* "Ġworld" normal, unreachable by merges */
    N_BPE
};

/* Merge rank = index. The last one, "x y", names no token ("xy"): it must be ignored. */
static const char *const k_merges[] = {
    "Ġ t", "h e", "l l", "Ġt he", "he ll", "hell o", "l o", "Ġ hello", //
    "1 2", "' s", "Ġ Ġ", "Ã ©",   "a a",   "aa aa",  "x y",            //
};

static char g_bytes_text[256][4];
static const char *g_bpe_tokens[N_BPE];
static int32_t g_bpe_types[N_BPE];

static pgd_tokenizer *make_bpe(const char *pre) {
    build_b2u();
    for (int b = 0; b < 256; b++) {
        size_t n = put_utf8(g_b2u[b], g_bytes_text[b]);
        g_bytes_text[b][n] = '\0';
        g_bpe_tokens[b] = g_bytes_text[b];
        g_bpe_types[b] = PGD_TOKEN_NORMAL;
    }
    static const char *const extra[] = {
        "Ġt", "he", "ll", "Ġthe", "hell",       "hello",        "lo",     "Ġhello", "12", "'s",
        "ĠĠ", "Ã©", "aa", "aaaa", "<|im_end|>", "<|im_start|>", "<tool>", "<|im",   "zz", "Ġworld",
    };
    for (int i = T_GT; i < N_BPE; i++) {
        g_bpe_tokens[i] = extra[i - T_GT];
        g_bpe_types[i] = PGD_TOKEN_NORMAL;
    }
    g_bpe_types[T_IM_END] = g_bpe_types[T_IM_START] = PGD_TOKEN_CONTROL;
    g_bpe_types[T_TOOL] = g_bpe_types[T_IM_PREFIX] = PGD_TOKEN_USER_DEFINED;
    g_bpe_types[T_UNUSED] = PGD_TOKEN_UNUSED;
    pgd_tokenizer_desc d;
    pgd_tokenizer_desc_init(&d);
    d.model = "gpt2";
    d.pre = pre;
    d.n_vocab = N_BPE;
    d.tokens = g_bpe_tokens;
    d.types = g_bpe_types;
    d.merges = k_merges;
    d.n_merges = PGD_ARRAY_LEN(k_merges);
    d.bos = T_IM_START;
    d.eos = T_IM_END;
    pgd_tokenizer *tk = NULL;
    int rc = pgd_tokenizer_create(&d, &tk);
    if (rc) fprintf(stderr, "    create failed: %s\n", pgd_error_detail());
    return tk;
}

static void test_byte_unicode_alphabet(void) {
    build_b2u();
    CHECK_EQ_INT(g_b2u[' '], 0x120);  /* Ġ */
    CHECK_EQ_INT(g_b2u['\n'], 0x10A); /* Ċ */
    CHECK_EQ_INT(g_b2u['A'], 'A');
    CHECK_EQ_INT(g_b2u[0x7F], 0x121);
    CHECK_EQ_INT(g_b2u[0xAD], 0x143);
    pgd_tokenizer *tk = make_bpe("gpt2");
    REQUIRE(tk);
    /* Each single byte tokenizes to its own id, and its piece is the byte again. */
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        pgd_tokens t = PGD_TOKENS_INIT;
        CHECK(pgd_tokenize(tk, &c, 1, NULL, 0, &t) == 0);
        CHECK(t.n == 1 && t.ids[0] == b);
        pgd_tokens_free(&t);
        pgd_buf out = PGD_BUF_INIT;
        CHECK(pgd_token_piece(tk, b, false, &out) == 0);
        CHECK(out.len == 1 && (unsigned char)out.data[0] == b);
        pgd_buf_free(&out);
    }
    pgd_tokenizer_free(tk);
}

static void test_bpe_merges(void) {
    pgd_tokenizer *tk = make_bpe("gpt2");
    REQUIRE(tk);
    CHECK_EQ_INT(pgd_tokenizer_kind_of(tk), PGD_TOKENIZER_BPE);
    CHECK_EQ_INT(pgd_tokenizer_n_vocab(tk), N_BPE);
    /* h e l l o: he(r1) ll(r2) lo(r6) -> he first, then ll, then he+ll(r4), then hell+o(r5). */
    TOK(tk, "hello", T_HELLO);
    /* " the": Ġt(r0) then he(r1) then Ġt+he(r3); " hello" ends as Ġ+hello(r7). */
    TOK(tk, " the hello", T_GTHE, T_GHELLO);
    /* l l o: ll(r2) beats lo(r6); ll+o has no merge. */
    TOK(tk, "llo", T_LL, 'o');
    /* l l l: two equal-rank pairs, the leftmost merges first. */
    TOK(tk, "lll", T_LL, 'l');
    /* GPT-2 regex keeps digit runs together: "123" is one piece, 1+2 merges. */
    TOK(tk, "123", T_12, '3');
    /* Contraction piece "'s". */
    TOK(tk, "it's", 'i', 't', T_APOS_S);
    /* "a  b" -> "a", " " (\s+(?!\S) leaves the last space), " b". */
    TOK(tk, "a  b", 'a', ' ', ' ', 'b');
    /* Trailing spaces are one piece: Ġ Ġ Ġ -> ĠĠ(leftmost) Ġ. */
    TOK(tk, "x   ", 'x', T_GG, ' ');
    /* é is C3 A9: "Ã" + "©" merge (r11). */
    TOK(tk, "caf\xC3\xA9", 'c', 'a', 'f', T_EACUTE);
    /* Invalid UTF-8 is still encoded byte by byte. */
    TOK(tk,
        "a\xFF"
        "b\xC3",
        'a', 0xFF, 'b', 0xC3);
    /* NUL is an ordinary byte. */
    TOK(tk, "a\0b", 'a', 0, 'b');
    /* "x y" is in the merge list but "xy" is not a token: no merge. */
    TOK(tk, "xy", 'x', 'y');
    /* "Ġworld" is a token but no merge leads to it (GPT-2 has no ignore_merges). */
    TOK(tk, " world", ' ', 'w', 'o', 'r', 'l', 'd');
    pgd_tokenizer_free(tk);
}

static void test_bpe_pretokenizers(void) {
    pgd_tokenizer *sm = make_bpe("smollm");
    REQUIRE(sm);
    /* smollm splits every digit first: no 1+2 merge. */
    TOK(sm, "123", '1', '2', '3');
    TOK(sm, " the hello", T_GTHE, T_GHELLO);
    /* "a1b": \p{N} split gives "a", "1", "b". */
    TOK(sm, "a1b", 'a', '1', 'b');
    pgd_tokenizer_free(sm);

    pgd_tokenizer *l3 = make_bpe("llama3");
    REQUIRE(l3);
    /* llama3: \p{N}{1,3} groups digits by three: "1212" -> "121" + "2" -> 12 1 2. */
    TOK(l3, "1212", T_12, '1', '2');
    /* ignore_merges: a whole piece in the vocabulary is taken directly ("Ġhello"). */
    TOK(l3, " hello", T_GHELLO);
    /* ... and "Ġworld" has no merge path: only ignore_merges finds it. */
    TOK(l3, " world", T_GWORLD);
    TOK(l3, "it's", 'i', 't', T_APOS_S);
    pgd_tokenizer_free(l3);

    pgd_tokenizer *q2 = make_bpe("qwen2");
    REQUIRE(q2);
    TOK(q2, "123", '1', '2', '3'); /* single digits */
    pgd_tokenizer_free(q2);

    /* An unknown pre-tokenizer falls back to GPT-2's (with a warning on stderr). */
    fprintf(stderr, "  (a warning about 'no-such-pre' is expected next)\n");
    pgd_tokenizer *unk = make_bpe("no-such-pre");
    REQUIRE(unk);
    TOK(unk, "123", T_12, '3');
    CHECK_EQ_STR(pgd_tokenizer_pre(unk), "no-such-pre");
    pgd_tokenizer_free(unk);
}

static void test_bpe_long_word(void) {
    /* 100,000 'a': aa (r12) pairs from the left -> 50,000 aa; aa+aa (r13) -> 25,000 aaaa.
     * A quadratic merge would take minutes here. */
    pgd_tokenizer *tk = make_bpe("gpt2");
    REQUIRE(tk);
    size_t n = 100000;
    char *s = malloc(n);
    REQUIRE(s);
    memset(s, 'a', n);
    pgd_tokens t = PGD_TOKENS_INIT;
    CHECK(pgd_tokenize(tk, s, n, NULL, 0, &t) == 0);
    CHECK_EQ_INT(t.n, 25000);
    size_t bad = 0;
    for (size_t i = 0; i < t.n; i++) bad += t.ids[i] != T_AAAA;
    CHECK_EQ_INT(bad, 0);
    /* 100,001: the odd one out is the last 'a'. */
    pgd_tokens_free(&t);
    s = realloc(s, n + 1);
    REQUIRE(s);
    s[n] = 'a';
    CHECK(pgd_tokenize(tk, s, n + 1, NULL, 0, &t) == 0);
    CHECK_EQ_INT(t.n, 25001);
    CHECK(t.n == 25001 && t.ids[25000] == 'a' && t.ids[24999] == T_AAAA);
    pgd_tokens_free(&t);
    free(s);
    pgd_tokenizer_free(tk);
}

static void test_special_spans(void) {
    pgd_tokenizer *tk = make_bpe("gpt2");
    REQUIRE(tk);
    static const char txt[] = "hi<|im_end|>there"; /* <|im_end|> is bytes [2, 12) */
    size_t len = sizeof txt - 1;
    /* Plain: "hi" "<|" "im" "_" "end" "|>" "there"; only h+e merges inside "there". */
    TOK(tk, txt, 'h', 'i', '<', '|', 'i', 'm', '_', 'e', 'n', 'd', '|', '>', 't', T_HE, 'r', 'e');
    pgd_span all = {0, len};
    TOK_SP(tk, txt, &all, 1, 'h', 'i', T_IM_END, 't', T_HE, 'r', 'e');
    pgd_span exact = {2, 12};
    TOK_SP(tk, txt, &exact, 1, 'h', 'i', T_IM_END, 't', T_HE, 'r', 'e');
    /* A span covering only part of the token (not its '<'): plain text. */
    pgd_span part = {3, 17};
    TOK_SP(tk, txt, &part, 1, 'h', 'i', '<', '|', 'i', 'm', '_', 'e', 'n', 'd', '|', '>', 't', T_HE,
           'r', 'e');
    /* Two adjacent spans that together cover it: not inside ONE span, so plain ... except
     * that the shorter user-defined "<|im" lies inside the first one. */
    pgd_span two[2] = {{7, 17}, {0, 7}}; /* unsorted on purpose */
    TOK_SP(tk, txt, two, 2, 'h', 'i', T_IM_PREFIX, '_', 'e', 'n', 'd', '|', '>', 't', T_HE, 'r',
           'e');
    /* Longest first: inside a span, <|im_end|> wins over its prefix <|im. */
    TOK_SP(tk, "<|im_end|><|im_x", (&(pgd_span){0, 16}), 1, T_IM_END, T_IM_PREFIX, '_', 'x');
    /* Adjacent special tokens, user-defined tokens, text between them. */
    TOK_SP(tk, "<|im_start|><tool> hello<|im_end|>", (&(pgd_span){0, 34}), 1, T_IM_START, T_TOOL,
           T_GHELLO, T_IM_END);
    /* Outside a span the user-defined token is plain text too. */
    TOK(tk, "<tool>", '<', 't', 'o', 'o', 'l', '>');
    /* A span boundary alone never splits the text: " hello" stays one piece. */
    TOK_SP(tk, " hello", (&(pgd_span){0, 3}), 1, T_GHELLO);
    TOK_SP(tk, " the hello", ((pgd_span[]){{0, 2}, {2, 7}}), 2, T_GTHE, T_GHELLO);
    /* Empty spans and an empty text are fine. */
    TOK_SP(tk, "hello", (&(pgd_span){3, 3}), 1, T_HELLO);
    pgd_tokens t = PGD_TOKENS_INIT;
    CHECK(pgd_tokenize(tk, "", 0, NULL, 0, &t) == 0 && t.n == 0);
    /* A span outside the text is refused and leaves out as it was. */
    CHECK(pgd_tokens_push(&t, 7) == 0);
    CHECK_EQ_INT(pgd_tokenize(tk, "hello", 5, &(pgd_span){2, 6}, 1, &t), PGD_EINVAL);
    CHECK_EQ_INT(pgd_tokenize(tk, "hello", 5, &(pgd_span){3, 2}, 1, &t), PGD_EINVAL);
    CHECK(t.n == 1 && t.ids[0] == 7);
    /* Appends after existing ids. */
    CHECK(pgd_tokenize(tk, "hello", 5, NULL, 0, &t) == 0);
    CHECK(t.n == 2 && t.ids[0] == 7 && t.ids[1] == T_HELLO);
    pgd_tokens_free(&t);
    pgd_tokenizer_free(tk);
}

static void test_properties(void) {
    pgd_tokenizer *tk = make_bpe("gpt2");
    REQUIRE(tk);
    CHECK_EQ_STR(pgd_tokenizer_model(tk), "gpt2");
    CHECK_EQ_INT(pgd_tokenizer_bos(tk), T_IM_START);
    CHECK_EQ_INT(pgd_tokenizer_eos(tk), T_IM_END);
    CHECK_EQ_INT(pgd_tokenizer_eot(tk), T_IM_END); /* found by name */
    CHECK_EQ_INT(pgd_tokenizer_unk(tk), -1);
    CHECK_EQ_INT(pgd_tokenizer_pad(tk), -1);
    CHECK(!pgd_tokenizer_add_bos(tk)); /* BPE default */
    CHECK(pgd_tokenizer_is_eog(tk, T_IM_END));
    CHECK(!pgd_tokenizer_is_eog(tk, T_IM_START));
    CHECK(!pgd_tokenizer_is_eog(tk, 'a'));
    const int32_t *eog;
    CHECK_EQ_INT(pgd_tokenizer_eog_ids(tk, &eog), 1);
    CHECK_EQ_INT(pgd_tokenizer_find(tk, "Ġhello", strlen("Ġhello")), T_GHELLO);
    CHECK_EQ_INT(pgd_tokenizer_find(tk, "nope", 4), -1);
    pgd_str s = pgd_tokenizer_token_text(tk, T_GTHE);
    CHECK(s.len == strlen("Ġthe") && !memcmp(s.ptr, "Ġthe", s.len));
    CHECK(pgd_tokenizer_token_text(tk, N_BPE).ptr == NULL);
    CHECK(pgd_tokenizer_token_text(tk, -1).ptr == NULL);
    CHECK_EQ_INT(pgd_tokenizer_token_type(tk, T_IM_END), PGD_TOKEN_CONTROL);
    CHECK_EQ_INT(pgd_tokenizer_token_type(tk, T_TOOL), PGD_TOKEN_USER_DEFINED);
    CHECK_EQ_INT(pgd_tokenizer_token_type(tk, N_BPE), PGD_EINVAL);
    pgd_tokenizer_free(tk);

    /* Bad descs. */
    pgd_tokenizer_desc d;
    pgd_tokenizer_desc_init(&d);
    pgd_tokenizer *t2 = (pgd_tokenizer *)&d; /* must be reset to NULL */
    static const char *const toks[] = {"a", "b"};
    d.model = "bert";
    d.n_vocab = 2;
    d.tokens = toks;
    CHECK_EQ_INT(pgd_tokenizer_create(&d, &t2), PGD_EUNSUPPORTED);
    CHECK(t2 == NULL);
    d.model = "gpt2";
    d.eos = 2;
    CHECK_EQ_INT(pgd_tokenizer_create(&d, &t2), PGD_EINVAL);
    d.eos = -1;
    d.n_vocab = 0;
    CHECK_EQ_INT(pgd_tokenizer_create(&d, &t2), PGD_EINVAL);
}

/* ---- detokenizing ------------------------------------------------------------------------- */

static void test_pieces_and_detokenize(void) {
    pgd_tokenizer *tk = make_bpe("gpt2");
    REQUIRE(tk);
    pgd_buf b = PGD_BUF_INIT;
    CHECK(pgd_token_piece(tk, T_GHELLO, false, &b) == 0);
    CHECK_EQ_STR(b.data, " hello");
    pgd_buf_reset(&b);
    CHECK(pgd_token_piece(tk, T_IM_END, false, &b) == 0);
    CHECK_EQ_INT(b.len, 0);
    CHECK(pgd_token_piece(tk, T_IM_END, true, &b) == 0);
    CHECK_EQ_STR(b.data, "<|im_end|>");
    pgd_buf_reset(&b);
    CHECK(pgd_token_piece(tk, T_TOOL, false, &b) == 0); /* user-defined: always its text */
    CHECK_EQ_STR(b.data, "<tool>");
    pgd_buf_reset(&b);
    CHECK(pgd_token_piece(tk, T_UNUSED, true, &b) == 0);
    CHECK_EQ_INT(b.len, 0);
    CHECK(pgd_token_piece(tk, T_EACUTE, false, &b) == 0);
    CHECK_EQ_STR(b.data, "\xC3\xA9");
    pgd_buf_reset(&b);

    static const int32_t ids[] = {T_IM_START, 'c',  'a',  'f',     T_EACUTE,
                                  T_GTHE,     T_GG, '\n', T_IM_END};
    CHECK(pgd_detokenize(tk, ids, PGD_ARRAY_LEN(ids), false, &b) == 0);
    CHECK_EQ_STR(b.data, "caf\xC3\xA9 the  \n");
    pgd_buf_reset(&b);
    CHECK(pgd_detokenize(tk, ids, PGD_ARRAY_LEN(ids), true, &b) == 0);
    CHECK_EQ_STR(b.data, "<|im_start|>caf\xC3\xA9 the  \n<|im_end|>");

    /* Out-of-range ids: PGD_EINVAL, output untouched. */
    size_t before = b.len;
    static const int32_t bad1[] = {'a', N_BPE};
    static const int32_t bad2[] = {-1};
    CHECK_EQ_INT(pgd_detokenize(tk, bad1, 2, false, &b), PGD_EINVAL);
    CHECK_EQ_INT(pgd_detokenize(tk, bad2, 1, false, &b), PGD_EINVAL);
    CHECK_EQ_INT(pgd_token_piece(tk, N_BPE, false, &b), PGD_EINVAL);
    CHECK_EQ_INT(pgd_token_piece(tk, -5, true, &b), PGD_EINVAL);
    CHECK_EQ_INT(pgd_token_piece(tk, INT32_MAX, true, &b), PGD_EINVAL);
    CHECK_EQ_INT(b.len, before);
    pgd_buf_free(&b);

    /* Round trip of every byte string we can think of quickly: tokenize then detokenize. */
    static const char rt[] = "The  h\xC3\xA9llo\t\r\n 12345 it's \xF0\x9F\x8E\x89 \xFF\xFE end  ";
    pgd_tokens t = PGD_TOKENS_INIT;
    CHECK(pgd_tokenize(tk, rt, sizeof rt - 1, NULL, 0, &t) == 0);
    CHECK(pgd_detokenize(tk, t.ids, t.n, false, &b) == 0);
    CHECK(b.len == sizeof rt - 1 && !memcmp(b.data, rt, b.len));
    pgd_tokens_free(&t);
    pgd_buf_free(&b);
    pgd_tokenizer_free(tk);
}

/* Push the byte tokens of s one by one; after every push the output must be valid UTF-8 and
 * the concatenation must equal `want` after the flush. */
static int utf8_valid(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t l = c < 0x80                   ? 1
                   : (c >= 0xC2 && c <= 0xDF) ? 2
                   : (c >= 0xE0 && c <= 0xEF) ? 3
                   : (c >= 0xF0 && c <= 0xF4) ? 4
                                              : 0;
        if (!l || i + l > n) return 0;
        for (size_t k = 1; k < l; k++)
            if (((unsigned char)s[i + k] & 0xC0) != 0x80) return 0;
        i += l;
    }
    return 1;
}

static int stream_check(const pgd_tokenizer *tk, const char *in, size_t n, const char *want) {
    pgd_detok d;
    pgd_detok_init(&d, tk, false);
    pgd_buf out = PGD_BUF_INIT;
    int ok = 1;
    for (size_t i = 0; i < n; i++) {
        if (pgd_detok_push(&d, (unsigned char)in[i], &out)) ok = 0;
        if (out.len && !utf8_valid(out.data, out.len)) {
            fprintf(stderr, "    invalid UTF-8 emitted after byte %zu\n", i);
            ok = 0;
        }
        if (pgd_detok_pending(&d) > 3) ok = 0;
    }
    if (pgd_detok_flush(&d, &out)) ok = 0;
    if (pgd_detok_pending(&d) != 0) ok = 0;
    size_t wl = strlen(want);
    if (out.len != wl || (wl && memcmp(out.data, want, wl))) {
        fprintf(stderr, "    stream output \"%s\" != \"%s\"\n", out.data ? out.data : "", want);
        ok = 0;
    }
    pgd_buf_free(&out);
    return ok;
}

#define FFFD "\xEF\xBF\xBD"

static void test_incremental_detok(void) {
    pgd_tokenizer *tk = make_bpe("gpt2");
    REQUIRE(tk);
    pgd_detok d;
    pgd_detok_init(&d, tk, false);
    pgd_buf out = PGD_BUF_INIT;
    /* 日 = E6 97 A5 fed one byte token at a time: nothing until the last byte. */
    CHECK(pgd_detok_push(&d, 'a', &out) == 0);
    CHECK_EQ_INT(out.len, 1);
    CHECK(pgd_detok_push(&d, 0xE6, &out) == 0);
    CHECK_EQ_INT(out.len, 1);
    CHECK_EQ_INT(pgd_detok_pending(&d), 1);
    CHECK(pgd_detok_push(&d, 0x97, &out) == 0);
    CHECK_EQ_INT(out.len, 1);
    CHECK_EQ_INT(pgd_detok_pending(&d), 2);
    /* An out-of-range id in the middle changes nothing. */
    CHECK_EQ_INT(pgd_detok_push(&d, N_BPE, &out), PGD_EINVAL);
    CHECK_EQ_INT(pgd_detok_push(&d, -1, &out), PGD_EINVAL);
    CHECK_EQ_INT(pgd_detok_pending(&d), 2);
    CHECK_EQ_INT(out.len, 1);
    CHECK(pgd_detok_push(&d, 0xA5, &out) == 0);
    CHECK_EQ_STR(out.data, "a\xE6\x97\xA5");
    CHECK_EQ_INT(pgd_detok_pending(&d), 0);
    /* A control token gives nothing without special, and does not disturb a held tail. */
    CHECK(pgd_detok_push(&d, 0xF0, &out) == 0);
    CHECK(pgd_detok_push(&d, T_IM_END, &out) == 0);
    CHECK(pgd_detok_push(&d, 0x9F, &out) == 0);
    CHECK(pgd_detok_push(&d, 0x8E, &out) == 0);
    CHECK_EQ_STR(out.data, "a\xE6\x97\xA5");
    CHECK(pgd_detok_push(&d, 0x89, &out) == 0);
    CHECK_EQ_STR(out.data, "a\xE6\x97\xA5\xF0\x9F\x8E\x89");
    /* A merged multi-byte token (é) after a held lead byte: the lead is invalid there. */
    CHECK(pgd_detok_push(&d, 0xC3, &out) == 0);
    CHECK(pgd_detok_push(&d, T_EACUTE, &out) == 0);
    CHECK_EQ_STR(out.data, "a\xE6\x97\xA5\xF0\x9F\x8E\x89" FFFD "\xC3\xA9");
    pgd_buf_free(&out);

    /* Byte streams and what Python's bytes.decode("utf-8", "replace") gives for them. */
    CHECK(stream_check(tk, "h\xC3\xA9llo", 6, "h\xC3\xA9llo"));
    CHECK(stream_check(tk, "\xF0\x9F\x8E\x89!", 5, "\xF0\x9F\x8E\x89!"));
    CHECK(stream_check(tk, "\xFF", 1, FFFD));
    CHECK(stream_check(tk,
                       "a\xFF"
                       "b",
                       3, "a" FFFD "b"));
    CHECK(stream_check(tk,
                       "\xE6\x97"
                       "a",
                       3, FFFD "a"));                                    /* truncated 3-byte char */
    CHECK(stream_check(tk, "\xE6\x97", 2, FFFD));                        /* flushed at the end */
    CHECK(stream_check(tk, "\xED\xA0\x80", 3, FFFD FFFD FFFD));          /* a surrogate */
    CHECK(stream_check(tk, "\xC0\xAF", 2, FFFD FFFD));                   /* overlong */
    CHECK(stream_check(tk, "\xE0\x80\x80", 3, FFFD FFFD FFFD));          /* overlong 3-byte */
    CHECK(stream_check(tk, "\xF4\x90\x80\x80", 4, FFFD FFFD FFFD FFFD)); /* > U+10FFFF */
    CHECK(stream_check(tk,
                       "\xF0\x9F\x8E"
                       "a",
                       4, FFFD "a"));
    CHECK(stream_check(tk, "\x80\x80", 2, FFFD FFFD)); /* stray continuations */
    CHECK(stream_check(tk, "\xC3\xC3\xA9", 3, FFFD "\xC3\xA9"));
    CHECK(stream_check(tk, "\xF5", 1, FFFD));
    pgd_tokenizer_free(tk);
}

/* ---- SentencePiece-style BPE -------------------------------------------------------------- */

enum {
    S_UNK = 0,
    S_BOS = 1,
    S_EOS = 2,
    S_BYTE0 = 3, /* <0x00> .. <0xFF>: 3 .. 258 */
    S_SP = 259,  /* "▁"     -10 */
    S_H,         /* "h"     -10 */
    S_E,         /* "e"     -10 */
    S_L,         /* "l"     -10 */
    S_O,         /* "o"     -10 */
    S_I,         /* "i"     -10 */
    S_HI,        /* "hi"    -8  */
    S_HE,        /* "he"    -3  */
    S_LL,        /* "ll"    -2  */
    S_LO,        /* "lo"    -1  */
    S_HELL,      /* "hell"  -4  */
    S_SPHELL,    /* "▁hell" -6  */
    S_SPHI,      /* "▁hi"   -5  */
    S_SPSP,      /* "▁▁"    -7  */
    S_AB,        /* "ab"    0, a control token: never produced by merging */
    N_SPM
};

static char g_byte_names[256][8];
static const char *g_spm_tokens[N_SPM];
static int32_t g_spm_types[N_SPM];
static float g_spm_scores[N_SPM];

static pgd_tokenizer *make_spm(bool byte_tokens) {
    static const char hex[] = "0123456789ABCDEF";
    g_spm_tokens[S_UNK] = "<unk>";
    g_spm_tokens[S_BOS] = "<s>";
    g_spm_tokens[S_EOS] = "</s>";
    g_spm_types[S_UNK] = PGD_TOKEN_UNKNOWN;
    g_spm_types[S_BOS] = g_spm_types[S_EOS] = PGD_TOKEN_CONTROL;
    for (int b = 0; b < 256; b++) {
        snprintf(g_byte_names[b], sizeof g_byte_names[b], "<0x%c%c>", hex[b >> 4], hex[b & 15]);
        /* Without byte tokens the slots hold names that can never match anything. */
        if (!byte_tokens) g_byte_names[b][1] = '#';
        g_spm_tokens[S_BYTE0 + b] = g_byte_names[b];
        g_spm_types[S_BYTE0 + b] = byte_tokens ? PGD_TOKEN_BYTE : PGD_TOKEN_UNUSED;
    }
    static const struct {
        const char *t;
        float s;
    } normal[] = {{"▁", -10},   {"h", -10},    {"e", -10},  {"l", -10}, {"o", -10},
                  {"i", -10},   {"hi", -8},    {"he", -3},  {"ll", -2}, {"lo", -1},
                  {"hell", -4}, {"▁hell", -6}, {"▁hi", -5}, {"▁▁", -7}, {"ab", 0}};
    for (int i = S_SP; i < N_SPM; i++) {
        g_spm_tokens[i] = normal[i - S_SP].t;
        g_spm_scores[i] = normal[i - S_SP].s;
        g_spm_types[i] = PGD_TOKEN_NORMAL;
    }
    g_spm_types[S_AB] = PGD_TOKEN_CONTROL;
    pgd_tokenizer_desc d;
    pgd_tokenizer_desc_init(&d);
    d.model = "llama";
    d.n_vocab = N_SPM;
    d.tokens = g_spm_tokens;
    d.types = g_spm_types;
    d.scores = g_spm_scores;
    d.bos = S_BOS;
    d.eos = S_EOS;
    d.unk = S_UNK;
    pgd_tokenizer *tk = NULL;
    if (pgd_tokenizer_create(&d, &tk)) fprintf(stderr, "    %s\n", pgd_error_detail());
    return tk;
}

#define B(x) (S_BYTE0 + (x))

static void test_spm(void) {
    pgd_tokenizer *tk = make_spm(true);
    REQUIRE(tk);
    CHECK_EQ_INT(pgd_tokenizer_kind_of(tk), PGD_TOKENIZER_SPM);
    CHECK(pgd_tokenizer_add_bos(tk));          /* SPM default */
    CHECK(pgd_tokenizer_add_space_prefix(tk)); /* SPM default */
    /* "hello" -> "▁hello": pairs he(-3) ll(-2) lo(-1); lo wins (highest score) although ll is
     * further left; then he; ll is gone; nothing else is in the vocabulary: ▁ he l lo. */
    TOK(tk, "hello", S_SP, S_HE, S_L, S_LO);
    /* "hell" -> "▁hell": ll(-2), he(-3), he+ll = hell(-4), ▁+hell = ▁hell(-6). */
    TOK(tk, "hell", S_SPHELL);
    /* Spaces become ▁: "hi  hell" -> symbols ▁ h i ▁ ▁ h e l l; pairs hi(-8) ▁▁(-7) he(-3)
     * ll(-2). Merges in score order: ll, he, he+ll = hell(-4), ▁+hell = ▁hell(-6) (which makes
     * the ▁▁ pair stale), hi(-8), then ▁+hi = ▁hi(-5): ▁hi ▁ ▁hell. */
    TOK(tk, "hi  hell", S_SPHI, S_SP, S_SPHELL);
    /* Unknown characters: byte fallback (é = C3 A9, x = 78). */
    TOK(tk, "x\xC3\xA9", S_SP, B(0x78), B(0xC3), B(0xA9));
    /* A lead byte without its continuation is a character of its own: it must not swallow the
     * escaped space after it (C3 + the first byte of U+2581), which would lose the space. */
    TOK(tk, "\xC3 hi", S_SP, B(0xC3), S_SPHI);
    TOK(tk, "\xE4\xB8 hi", S_SP, B(0xE4), B(0xB8), S_SPHI);
    /* The control token's text "ab" is never produced by merging. */
    TOK(tk, "ab", S_SP, B('a'), B('b'));
    /* Typed byte-token names are plain text: "<0x41>" -> ▁ < 0 x 4 1 > as bytes. */
    TOK(tk, "<0x41>", S_SP, B('<'), B('0'), B('x'), B('4'), B('1'), B('>'));
    /* Special tokens inside a span; after one, a space is prefixed again (llama.cpp). */
    TOK_SP(tk, "hi</s>hell", (&(pgd_span){0, 10}), 1, S_SPHI, S_EOS, S_SPHELL);
    TOK(tk, "hi</s>", S_SPHI, B('<'), B('/'), B('s'), B('>'));
    /* Empty text: nothing at all (no lone ▁). */
    pgd_tokens t = PGD_TOKENS_INIT;
    CHECK(pgd_tokenize(tk, "", 0, NULL, 0, &t) == 0 && t.n == 0);
    pgd_tokens_free(&t);

    /* Detokenizing: ▁ -> space, byte tokens -> bytes, the prefixed space dropped. */
    pgd_buf b = PGD_BUF_INIT;
    static const int32_t ids[] = {S_BOS, S_SPHELL, S_SP, B(0xC3), B(0xA9), S_EOS};
    CHECK(pgd_detokenize(tk, ids, PGD_ARRAY_LEN(ids), false, &b) == 0);
    CHECK_EQ_STR(b.data, "hell \xC3\xA9");
    pgd_buf_reset(&b);
    CHECK(pgd_detokenize(tk, ids, PGD_ARRAY_LEN(ids), true, &b) == 0);
    CHECK_EQ_STR(b.data, "<s> hell \xC3\xA9</s>");
    pgd_buf_reset(&b);
    CHECK(pgd_token_piece(tk, S_SPHELL, false, &b) == 0);
    CHECK_EQ_STR(b.data, " hell");
    pgd_buf_reset(&b);
    /* Incremental: same text; the byte tokens of é come out together. */
    pgd_detok d;
    pgd_detok_init(&d, tk, false);
    CHECK(d.strip_leading_space);
    for (size_t i = 0; i < PGD_ARRAY_LEN(ids); i++) {
        CHECK(pgd_detok_push(&d, ids[i], &b) == 0);
        if (ids[i] == B(0xC3)) CHECK_EQ_STR(b.data, "hell ");
    }
    CHECK(pgd_detok_flush(&d, &b) == 0);
    CHECK_EQ_STR(b.data, "hell \xC3\xA9");
    pgd_buf_reset(&b);
    /* Round trips through the encoder. */
    static const char *const rts[] = {"hello world", "  two lead", "tail  ",
                                      "h\xC3\xA9 \xE6\x97\xA5", "a\tb\nc"};
    for (size_t i = 0; i < PGD_ARRAY_LEN(rts); i++) {
        CHECK(pgd_tokenize(tk, rts[i], strlen(rts[i]), NULL, 0, &t) == 0);
        CHECK(pgd_detokenize(tk, t.ids, t.n, false, &b) == 0);
        CHECK_EQ_STR(b.data, rts[i]);
        pgd_buf_reset(&b);
        t.n = 0;
    }
    pgd_tokens_free(&t);
    pgd_buf_free(&b);
    pgd_tokenizer_free(tk);

    /* Without byte tokens an unknown character is one unk. */
    tk = make_spm(false);
    REQUIRE(tk);
    TOK(tk, "hx\xC3\xA9", S_SP, S_H, S_UNK, S_UNK);
    pgd_tokenizer_free(tk);
}

/* ---- loading from GGUF metadata (an image built here) ------------------------------------- */

typedef struct {
    unsigned char *p;
    size_t n, cap;
} wbuf;

static void wput(wbuf *w, const void *d, size_t n) {
    if (w->n + n > w->cap) {
        w->cap = (w->n + n) * 2;
        w->p = realloc(w->p, w->cap);
    }
    memcpy(w->p + w->n, d, n);
    w->n += n;
}
static void w32(wbuf *w, uint32_t v) {
    wput(w, &v, 4);
}
static void w64(wbuf *w, uint64_t v) {
    wput(w, &v, 8);
}
static void wstr(wbuf *w, const char *s) {
    w64(w, strlen(s));
    wput(w, s, strlen(s));
}
static void wkey(wbuf *w, const char *k, uint32_t type) {
    wstr(w, k);
    w32(w, type);
}

static void test_load_from_gguf(void) {
    /* A SmolLM-like vocabulary: bytes, a few merges, a control token. */
    pgd_tokenizer *ref = make_bpe("smollm"); /* builds g_bpe_tokens / types */
    REQUIRE(ref);
    wbuf w = {0};
    wput(&w, "GGUF", 4);
    w32(&w, 3);
    w64(&w, 0); /* tensors */
    w64(&w, 9); /* kvs */
    wkey(&w, "tokenizer.ggml.model", PGD_GGUF_STRING);
    wstr(&w, "gpt2");
    wkey(&w, "tokenizer.ggml.pre", PGD_GGUF_STRING);
    wstr(&w, "smollm");
    wkey(&w, "tokenizer.ggml.tokens", PGD_GGUF_ARRAY);
    w32(&w, PGD_GGUF_STRING);
    w64(&w, N_BPE);
    for (int i = 0; i < N_BPE; i++) wstr(&w, g_bpe_tokens[i]);
    wkey(&w, "tokenizer.ggml.token_type", PGD_GGUF_ARRAY);
    w32(&w, PGD_GGUF_INT32);
    w64(&w, N_BPE);
    for (int i = 0; i < N_BPE; i++) w32(&w, (uint32_t)g_bpe_types[i]);
    wkey(&w, "tokenizer.ggml.merges", PGD_GGUF_ARRAY);
    w32(&w, PGD_GGUF_STRING);
    w64(&w, PGD_ARRAY_LEN(k_merges));
    for (size_t i = 0; i < PGD_ARRAY_LEN(k_merges); i++) wstr(&w, k_merges[i]);
    wkey(&w, "tokenizer.ggml.bos_token_id", PGD_GGUF_UINT32);
    w32(&w, T_IM_START);
    wkey(&w, "tokenizer.ggml.eos_token_id", PGD_GGUF_UINT32);
    w32(&w, T_IM_END);
    wkey(&w, "tokenizer.ggml.padding_token_id", PGD_GGUF_UINT32);
    w32(&w, 100000); /* out of range: treated as absent */
    wkey(&w, "tokenizer.ggml.add_bos_token", PGD_GGUF_BOOL);
    wput(&w, "\1", 1);

    pgd_gguf *g = NULL;
    int rc = pgd_gguf_open_memory(w.p, w.n, &g);
    if (rc) fprintf(stderr, "    gguf: %s\n", pgd_error_detail());
    REQUIRE(rc == 0);
    pgd_tokenizer *tk = NULL;
    rc = pgd_tokenizer_load(g, &tk);
    if (rc) fprintf(stderr, "    load: %s\n", pgd_error_detail());
    pgd_gguf_close(g); /* the tokenizer must not need it any more */
    memset(w.p, 0, w.n);
    free(w.p);
    REQUIRE(rc == 0 && tk);
    CHECK_EQ_STR(pgd_tokenizer_model(tk), "gpt2");
    CHECK_EQ_STR(pgd_tokenizer_pre(tk), "smollm");
    CHECK_EQ_INT(pgd_tokenizer_n_vocab(tk), N_BPE);
    CHECK_EQ_INT(pgd_tokenizer_bos(tk), T_IM_START);
    CHECK_EQ_INT(pgd_tokenizer_eos(tk), T_IM_END);
    CHECK_EQ_INT(pgd_tokenizer_pad(tk), -1);
    CHECK(pgd_tokenizer_add_bos(tk));
    TOK(tk, "123 the hello", '1', '2', '3', T_GTHE, T_GHELLO);
    TOK_SP(tk, "hi<|im_end|>", (&(pgd_span){0, 12}), 1, 'h', 'i', T_IM_END);
    pgd_buf b = PGD_BUF_INIT;
    CHECK(pgd_token_piece(tk, T_GHELLO, false, &b) == 0);
    CHECK_EQ_STR(b.data, " hello");
    pgd_buf_free(&b);
    pgd_tokenizer_free(tk);
    pgd_tokenizer_free(ref);

    /* No tokenizer metadata at all. */
    wbuf e = {0};
    wput(&e, "GGUF", 4);
    w32(&e, 3);
    w64(&e, 0);
    w64(&e, 0);
    REQUIRE(pgd_gguf_open_memory(e.p, e.n, &g) == 0);
    tk = (pgd_tokenizer *)&e;
    CHECK_EQ_INT(pgd_tokenizer_load(g, &tk), PGD_ENOTFOUND);
    CHECK(tk == NULL);
    pgd_gguf_close(g);
    free(e.p);
}

/* ---- concurrent use ----------------------------------------------------------------------- */

typedef struct {
    const pgd_tokenizer *tk;
    int bad;
} thread_arg;

static const char *const k_thread_texts[] = {
    " the hello world 123",
    "hi<|im_end|>there",
    "caf\xC3\xA9 it's  x   ",
    "lll llo \xFF\xFE",
};

static void *thread_main(void *p) {
    thread_arg *a = p;
    for (int round = 0; round < 200; round++) {
        for (size_t k = 0; k < PGD_ARRAY_LEN(k_thread_texts); k++) {
            const char *t = k_thread_texts[k];
            size_t len = strlen(t);
            pgd_span all = {0, len};
            pgd_tokens ids = PGD_TOKENS_INIT;
            pgd_buf out = PGD_BUF_INIT;
            if (pgd_tokenize(a->tk, t, len, &all, 1, &ids) ||
                pgd_detokenize(a->tk, ids.ids, ids.n, true, &out) || out.len != len ||
                memcmp(out.data, t, len) != 0)
                a->bad++;
            pgd_tokens_free(&ids);
            pgd_buf_free(&out);
        }
    }
    return NULL;
}

static void test_concurrent_use(void) {
    /* One tokenizer, four threads, each round trip must come back exact (special on). */
    pgd_tokenizer *tk = make_bpe("smollm");
    REQUIRE(tk);
    pthread_t th[4];
    thread_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (thread_arg){tk, 0};
        REQUIRE(pthread_create(&th[i], NULL, thread_main, &args[i]) == 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ_INT(args[i].bad, 0);
    }
    pgd_tokenizer_free(tk);
}

int main(void) {
    RUN(test_byte_unicode_alphabet);
    RUN(test_bpe_merges);
    RUN(test_bpe_pretokenizers);
    RUN(test_bpe_long_word);
    RUN(test_special_spans);
    RUN(test_properties);
    RUN(test_pieces_and_detokenize);
    RUN(test_incremental_detok);
    RUN(test_spm);
    RUN(test_load_from_gguf);
    RUN(test_concurrent_use);
    return test_summary();
}
