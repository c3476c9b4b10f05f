/*
 * engine/text/stop.h — when a generation ends: stop strings over the detokenized text stream
 * (pgd_stop_matcher) and token-level limits (EOS/EOT ids, max_tokens, the context length).
 *
 * Stop strings (OpenAI `stop`): the matcher is fed successive text deltas and returns the text
 * that is safe to emit now. It holds back the longest tail that is still a proper prefix of some
 * stop string, so text that may begin a stop string is never emitted early; held text is
 * released as soon as it can no longer begin a match. When a stop string completes (possibly
 * across many deltas), the text before it is emitted, the stop string itself is not (unless
 * include_stop, vLLM's include_stop_str_in_output) and everything after it is dropped; the
 * matcher is then finished. pgd_stop_flush (finish by length/EOS) releases what is held back.
 *
 * Which stop wins: the one that completes first in the byte stream; among those completing at
 * the same byte, the longest (it starts earliest). So the result never depends on how the text
 * was cut into deltas. Matching is byte-wise; with valid UTF-8 deltas and stop strings, matches
 * and held-back tails start on character boundaries, so emitted text is whole characters.
 *
 * Invariants: after a feed, held text is shorter than the longest stop string; the concatenation
 * of everything emitted plus the held text is a prefix of the fed text (the whole of it until a
 * match).
 *
 * Threading: a matcher belongs to one thread (the scheduler thread).
 */
#ifndef PGD_ENGINE_STOP_H
#define PGD_ENGINE_STOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/text.h"

#define PGD_STOP_MAX_STRINGS 16
#define PGD_STOP_MAX_LEN     1024 /* bytes per stop string */

typedef struct pgd_stop_matcher {
    int n;                           /* stop strings */
    bool include_stop;               /* emit the matched stop string too */
    bool done;                       /* matched or flushed: further feeds emit nothing */
    int matched;                     /* index of the stop string that matched, -1 if none */
    char *str[PGD_STOP_MAX_STRINGS]; /* [len[i]] copies, owned */
    uint32_t len[PGD_STOP_MAX_STRINGS];
    uint32_t *fail[PGD_STOP_MAX_STRINGS]; /* [len[i]] KMP failure function, owned */
    uint32_t state[PGD_STOP_MAX_STRINGS]; /* bytes of str[i] matched by the held tail */
    pgd_buf held;                         /* text fed but not yet emitted */
} pgd_stop_matcher;

/* Copies the n (<= 16) stop strings, each 1..1024 bytes. n = 0 gives a matcher that passes
 * everything through. PGD_EINVAL (detail names the bad string) or PGD_ENOMEM; on failure the
 * matcher needs no pgd_stop_free. */
int pgd_stop_init(pgd_stop_matcher *m, const pgd_str *stops /* [n] */, int n, bool include_stop);
void pgd_stop_free(pgd_stop_matcher *m);

/* Feeds `len` bytes of text and appends to `emit` what may be sent now. *matched is set to the
 * index of the stop string that completed in this delta (the sequence finishes with "stop"),
 * or -1. After the matcher is done, feeds append nothing. PGD_ENOMEM (emit may then hold part
 * of the text; the sequence should fail). */
int pgd_stop_feed(pgd_stop_matcher *m, const char *delta, size_t len, pgd_buf *emit, int *matched);

/* End of generation without a stop string: appends the held-back text to `emit`; the matcher
 * is done. */
int pgd_stop_flush(pgd_stop_matcher *m, pgd_buf *emit);

/* Bytes currently held back. */
size_t pgd_stop_held(const pgd_stop_matcher *m);

/* ---- token-level finish ------------------------------------------------------------------- */

typedef enum pgd_finish {
    PGD_FINISH_NONE = 0,   /* keep generating */
    PGD_FINISH_STOP,       /* EOS/EOT id or stop string: "stop" */
    PGD_FINISH_LENGTH,     /* max_tokens or the context length: "length" */
    PGD_FINISH_TOOL_CALLS, /* API only: a chat answer that ended in tool calls: "tool_calls" */
} pgd_finish;

/* "stop", "length", "tool_calls", or NULL for PGD_FINISH_NONE. */
const char *pgd_finish_str(pgd_finish f);

#define PGD_FINISH_MAX_EOS 32

typedef struct pgd_finish_rule {
    int32_t eos[PGD_FINISH_MAX_EOS]; /* [n_eos] end ids (EOS, EOT, stop_token_ids), sorted */
    int n_eos;
    bool ignore_eos;     /* the end ids do not stop the sequence */
    int64_t max_tokens;  /* output tokens allowed; <= 0: no limit */
    int64_t max_context; /* prompt + output tokens allowed (the model's context); <= 0: none */
} pgd_finish_rule;

/* Copies and sorts the end ids (duplicates dropped). PGD_EINVAL for more than
 * PGD_FINISH_MAX_EOS distinct ids or a negative id. */
int pgd_finish_rule_init(pgd_finish_rule *r, const int32_t *eos /* [n_eos] */, int n_eos,
                         bool ignore_eos, int64_t max_tokens, int64_t max_context);

bool pgd_finish_is_eos(const pgd_finish_rule *r, int32_t token);

/* Decides after a token was sampled and appended: n_output counts it, n_prompt is the prompt
 * length. An end id gives STOP (and its text should not be emitted); otherwise reaching
 * max_tokens or n_prompt + n_output >= max_context gives LENGTH; an end id on the last allowed
 * token is STOP. */
pgd_finish pgd_finish_check(const pgd_finish_rule *r, int32_t token, int64_t n_prompt,
                            int64_t n_output);

#endif
