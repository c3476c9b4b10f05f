/*
 * tests/unit/test_api_embeddings.c — api/ for POST /v1/embeddings: the request read by
 * pgd_api_request_parse(PGD_API_EMBEDDING) (the input shapes, encoding_format, dimensions, every
 * refusal with its param), the vectors' normalization against a double-precision reference, and
 * the answer read back with jansson (the JSON numbers decode to the very float32 values written).
 */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/embeddings.h"
#include "api/request.h"
#include "common/error.h"
#include "testutil.h"

static int eparse(const char *body, pgd_api_request *r, pgd_api_error *e) {
    memset(e, 0, sizeof *e);
    int rc = pgd_api_request_parse(PGD_API_EMBEDDING, body, strlen(body), r, e);
    return rc;
}

static void test_inputs(void) {
    pgd_api_request r;
    pgd_api_error e;
    REQUIRE(eparse("{\"input\":\"hello\"}", &r, &e) == 0);
    CHECK_EQ_INT(r.n_prompts, 1);
    CHECK(!r.prompts[0].is_tokens && r.prompts[0].text.len == 5 &&
          !memcmp(r.prompts[0].text.ptr, "hello", 5));
    CHECK(!r.base64 && r.dimensions == 0 && !r.stream);
    CHECK_EQ_INT(pgd_api_request_n_choices(&r), 1);
    pgd_api_request_free(&r);

    REQUIRE(eparse("{\"input\":[\"a\",\"bc\",\"\"],\"model\":\"m\",\"encoding_format\":\"base64\","
                   "\"dimensions\":3,\"user\":\"u\",\"priority\":-2,\"unknown\":[1]}",
                   &r, &e) == 0);
    CHECK_EQ_INT(r.n_prompts, 3);
    CHECK(r.prompts[1].text.len == 2 && r.prompts[2].text.len == 0);
    CHECK(r.base64 && r.dimensions == 3 && r.priority == -2);
    CHECK(r.model.len == 1 && r.user.len == 1);
    CHECK_EQ_INT(pgd_api_request_n_choices(&r), 3);
    pgd_api_request_free(&r);

    REQUIRE(eparse("{\"input\":[5,6,7]}", &r, &e) == 0);
    CHECK(r.n_prompts == 1 && r.prompts[0].is_tokens && r.prompts[0].n_ids == 3 &&
          r.prompts[0].ids[2] == 7);
    pgd_api_request_free(&r);

    REQUIRE(eparse("{\"input\":[[1],[2,3]],\"encoding_format\":\"float\",\"dimensions\":null}", &r,
                   &e) == 0);
    CHECK(r.n_prompts == 2 && r.prompts[1].n_ids == 2 && r.prompts[1].ids[1] == 3);
    CHECK(!r.base64 && r.dimensions == 0);
    pgd_api_request_free(&r);
}

static void test_refusals(void) {
    static const struct {
        const char *body, *param, *says;
    } bad[] = {
        {"{}", "input", "required"},
        {"{\"input\":null}", "input", "required"},
        {"{\"input\":[]}", "input", "empty"},
        {"{\"input\":7}", "input", "string"},
        {"{\"input\":[\"a\",1]}", "input[1]", "string"},
        {"{\"input\":[[1],[]]}", "input[1]", "empty"},
        {"{\"input\":[[1],[2,-1]]}", "input[1][1]", ""},
        {"{\"input\":[{}]}", "input[0]", ""},
        {"{\"input\":\"x\",\"encoding_format\":\"int8\"}", "encoding_format", "base64"},
        {"{\"input\":\"x\",\"encoding_format\":1}", "encoding_format", ""},
        {"{\"input\":\"x\",\"dimensions\":0}", "dimensions", ">= 1"},
        {"{\"input\":\"x\",\"dimensions\":1.5}", "dimensions", ""},
        {"{\"input\":\"x\",\"dimensions\":\"8\"}", "dimensions", ""},
        {"{\"input\":\"x\",\"model\":3}", "model", ""},
        {"{\"input\":\"x\",\"user\":false}", "user", ""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pgd_api_request r;
        pgd_api_error e;
        CHECK_EQ_INT(eparse(bad[i].body, &r, &e), PGD_EINVAL);
        CHECK_EQ_INT(e.status, 400);
        CHECK_EQ_STR(e.param, bad[i].param);
        if (!strstr(e.message, bad[i].says))
            fprintf(stderr, "  %s: message '%s' lacks '%s'\n", bad[i].body, e.message, bad[i].says),
                tu_failed_checks++;
        pgd_api_request_free(&r);
    }
    /* more inputs than allowed: one too many is refused, the limit is not */
    for (int extra = 0; extra <= 1; extra++) {
        size_t n = PGD_API_MAX_INPUTS + (size_t)extra;
        char *body = malloc(n * 4 + 32);
        REQUIRE(body);
        size_t k = (size_t)sprintf(body, "{\"input\":[");
        for (size_t i = 0; i < n; i++) k += (size_t)sprintf(body + k, "%s\"x\"", i ? "," : "");
        sprintf(body + k, "]}");
        pgd_api_request r;
        pgd_api_error e;
        int rc = eparse(body, &r, &e);
        CHECK_EQ_INT(rc, extra ? PGD_EINVAL : 0);
        if (extra) CHECK_EQ_STR(e.param, "input");
        pgd_api_request_free(&r);
        free(body);
    }
    pgd_api_request r;
    pgd_api_error e;
    CHECK_EQ_INT(eparse("not json", &r, &e), PGD_EINVAL);
    CHECK_EQ_INT(e.status, 400);
    pgd_api_request_free(&r);
}

/* A small deterministic generator (xorshift) for vectors of any sign and scale. */
static float rnd(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return (float)((double)(*s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void test_normalize(void) {
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    float in[300], out[300];
    for (uint32_t dim = 1; dim <= 300; dim += 37) {
        double scale = dim % 2 ? 1e-20 : 1e15; /* far from 1 both ways */
        for (uint32_t i = 0; i < 300; i++) in[i] = (float)(rnd(&seed) * scale);
        pgd_api_embedding_normalize(in, dim, out);
        long double ss = 0, n2 = 0;
        for (uint32_t i = 0; i < dim; i++) ss += (long double)in[i] * in[i];
        for (uint32_t i = 0; i < dim; i++) {
            double want = (double)(in[i] / sqrtl(ss));
            CHECK_NEAR(out[i], want, 2e-7 * fabs(want) + 1e-30);
            n2 += (long double)out[i] * out[i];
        }
        CHECK_NEAR((double)n2, 1.0, 1e-6);
    }
    /* only the first dim values count */
    float a[4] = {3, 4, 100, -100}, o[2];
    pgd_api_embedding_normalize(a, 2, o);
    CHECK_NEAR(o[0], 0.6, 1e-7);
    CHECK_NEAR(o[1], 0.8, 1e-7);
    /* a zero vector stays zero (no NaN) */
    float z[3] = {0, 0, 0}, zo[3] = {1, 1, 1};
    pgd_api_embedding_normalize(z, 3, zo);
    CHECK(zo[0] == 0 && zo[1] == 0 && zo[2] == 0);
}

static void test_answer(void) {
    uint64_t seed = 42;
    enum { N = 3, DIM = 64 };
    float v[N][DIM];
    for (int i = 0; i < N; i++)
        for (int j = 0; j < DIM; j++) v[i][j] = rnd(&seed) * (j % 5 == 0 ? 1e-30f : 1.0f);
    v[1][7] = -0.0f;
    pgd_buf b = PGD_BUF_INIT;
    REQUIRE(pgd_api_embeddings_begin(&b) == 0);
    for (int i = 0; i < N - 1; i++) REQUIRE(pgd_api_embeddings_item(&b, (size_t)i, v[i], DIM) == 0);
    REQUIRE(pgd_api_embeddings_item_b64(&b, N - 1, "AACAPw==", 8) == 0);
    const char name[] = "m\"o\\del\n";
    REQUIRE(pgd_api_embeddings_end(&b, (pgd_str){name, sizeof name - 1}, 17) == 0);
    json_error_t err;
    json_t *root = json_loadb(b.data, b.len, JSON_REJECT_DUPLICATES, &err);
    if (!root) fprintf(stderr, "  not JSON: %s: %.200s\n", err.text, b.data);
    REQUIRE(root);
    CHECK_EQ_STR(json_string_value(json_object_get(root, "object")), "list");
    CHECK_EQ_STR(json_string_value(json_object_get(root, "model")), name);
    json_t *u = json_object_get(root, "usage");
    CHECK_EQ_INT(json_integer_value(json_object_get(u, "prompt_tokens")), 17);
    CHECK_EQ_INT(json_integer_value(json_object_get(u, "total_tokens")), 17);
    json_t *data = json_object_get(root, "data");
    REQUIRE(json_array_size(data) == N);
    for (int i = 0; i < N; i++) {
        json_t *it = json_array_get(data, (size_t)i);
        CHECK_EQ_STR(json_string_value(json_object_get(it, "object")), "embedding");
        CHECK_EQ_INT(json_integer_value(json_object_get(it, "index")), i);
        json_t *emb = json_object_get(it, "embedding");
        if (i == N - 1) {
            CHECK_EQ_STR(json_string_value(emb), "AACAPw==");
            continue;
        }
        REQUIRE(json_array_size(emb) == DIM);
        for (int j = 0; j < DIM; j++) { /* each number reads back as the float written */
            float got = (float)json_number_value(json_array_get(emb, (size_t)j));
            if (memcmp(&got, &v[i][j], sizeof got) && !(got == 0 && v[i][j] == 0)) {
                fprintf(stderr, "  [%d][%d]: %.9g read back as %.9g\n", i, j, v[i][j], got);
                tu_failed_checks++;
            }
        }
    }
    json_decref(root);
    pgd_buf_free(&b);
    /* whole values are still written as JSON reals */
    const float w[4] = {1.0f, 0.0f, -0.5f, -2.0f};
    REQUIRE(pgd_api_embeddings_item(&b, 0, w, 4) == 0);
    CHECK(b.data && strstr(b.data, "[1.0,0.0,-0.5,-2.0]") != NULL);
    pgd_buf_free(&b);
}

int main(void) {
    RUN(test_inputs);
    RUN(test_refusals);
    RUN(test_normalize);
    RUN(test_answer);
    return test_summary();
}
