/*
 * server/embeddings.c — what POST /v1/embeddings adds to a completion's life (routes.c runs it
 * like a completions request whose prompts are the inputs and which generates nothing): each
 * input's tokens, and the answer from the pooled vectors the engine's FINISH events carry.
 *
 * Threading: pgd_srv_embed_encode runs on libuv's threadpool (it reads only the model info);
 * the answer on the loop thread.
 */
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "api/embeddings.h"
#include "common/error.h"
#include "server/server.h"

int pgd_srv_embed_encode(const pgd_model_info *info, const pgd_api_prompt *in, pgd_tokens *out) {
    if (in->is_tokens) {
        for (size_t j = 0; j < in->n_ids; j++) {
            int rc = pgd_tokens_push(out, in->ids[j]);
            if (rc) return rc;
        }
        return 0;
    }
    int rc = pgd_encode_text(info, in->text.ptr, in->text.len, false, out);
    if (rc) return rc;
    /* A model that wants its inputs closed by EOS (an embedding model pooling the last token
     * usually does: tokenizer.ggml.add_eos_token) gets one. */
    int32_t eos = pgd_tokenizer_eos(info->tok);
    if (pgd_tokenizer_add_eos(info->tok) && eos >= 0 &&
        (out->n == 0 || out->ids[out->n - 1] != eos))
        rc = pgd_tokens_push(out, eos);
    return rc;
}

pgd_pooling pgd_srv_pooling_of(const pgd_model_info *info, pgd_pooling asked, const char **note) {
    *note = NULL;
    if (asked != PGD_POOL_NONE) return asked;
    switch (info->cfg.pooling_type) {
    case 1:
        return PGD_POOL_MEAN;
    case 3:
        return PGD_POOL_LAST;
    case 2:
        *note = "the model asks for CLS pooling (an encoder's); pagoda pools the last token";
        return PGD_POOL_LAST;
    case 4:
        *note = "the model is a reranker (rank pooling); its /v1/embeddings pool the last token";
        return PGD_POOL_LAST;
    default:
        return PGD_POOL_LAST;
    }
}

int pgd_srv_embeddings_answer(const pgd_srv *srv, const pgd_api_request *rq, float *const *pooled,
                              size_t n, int64_t prompt_tokens, pgd_buf *out) {
    const uint32_t E = srv->info->cfg.n_embd;
    const uint32_t dim = rq->dimensions > 0 ? (uint32_t)rq->dimensions : E;
    PGD_ASSERT(dim <= E);
    float *v = malloc(dim * sizeof *v);
    size_t b64_cap = sodium_base64_ENCODED_LEN(dim * sizeof *v, sodium_base64_VARIANT_ORIGINAL);
    char *b64 = rq->base64 ? malloc(b64_cap) : NULL;
    int rc = v && (!rq->base64 || b64) ? pgd_api_embeddings_begin(out) : PGD_ENOMEM;
    for (size_t i = 0; i < n && !rc; i++) {
        PGD_ASSERT(pooled[i]);
        pgd_api_embedding_normalize(pooled[i], dim, v);
        if (!rq->base64) {
            rc = pgd_api_embeddings_item(out, i, v, dim);
            continue;
        }
        /* the float32 values as bytes: little-endian on every machine pagoda builds for */
        sodium_bin2base64(b64, b64_cap, (const unsigned char *)v, dim * sizeof *v,
                          sodium_base64_VARIANT_ORIGINAL);
        rc = pgd_api_embeddings_item_b64(out, i, b64, strlen(b64));
    }
    if (!rc)
        rc = pgd_api_embeddings_end(out, (pgd_str){srv->served_name, strlen(srv->served_name)},
                                    prompt_tokens);
    free(v);
    free(b64);
    return rc;
}
