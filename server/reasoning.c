/*
 * server/reasoning.c — --reasoning-parser: whether chat answers' reasoning (api/reasoning.h) is
 * split off into reasoning_content, and where a prompt leaves the model.
 *
 * Threading: parse and resolve on the loop thread before requests are served; afterwards
 * pgd_srv_reasoning_open reads only immutable fields (any thread).
 */
#include <stdio.h>
#include <string.h>

#include "api/reasoning.h"
#include "common/error.h"
#include "server/server.h"

int pgd_srv_reasoning_parse(pgd_srv *srv, const char *name) {
    srv->think_open = srv->think_close = -1;
    if (!name || !strcmp(name, "auto"))
        srv->reasoning = -1;
    else if (!strcmp(name, "think"))
        srv->reasoning = 1;
    else if (!strcmp(name, "none"))
        srv->reasoning = 0;
    else
        return pgd_error_set(PGD_EINVAL, "--reasoning-parser '%s': use auto, think or none", name);
    return 0;
}

void pgd_srv_reasoning_resolve(pgd_srv *srv) {
    const pgd_tokenizer *tk = srv->info->tok;
    srv->think_open = pgd_tokenizer_find(tk, PGD_REASONING_OPEN, strlen(PGD_REASONING_OPEN));
    srv->think_close = pgd_tokenizer_find(tk, PGD_REASONING_CLOSE, strlen(PGD_REASONING_CLOSE));
    bool tags = srv->think_open >= 0 && srv->think_close >= 0;
    if (srv->reasoning < 0) srv->reasoning = tags;
    if (srv->reasoning)
        fprintf(stderr,
                "pagoda serve: chat answers' " PGD_REASONING_OPEN "..." PGD_REASONING_CLOSE
                " goes to reasoning_content (--reasoning-parser none: left in the content)%s\n",
                tags ? "" : "; the vocabulary has no such tokens, the text is read");
}

bool pgd_srv_reasoning_open(const pgd_srv *srv, const int32_t *ids, size_t n) {
    if (srv->think_open < 0 || srv->think_close < 0) return false;
    for (size_t i = n; i-- > 0;) {
        if (ids[i] == srv->think_close) return false;
        if (ids[i] == srv->think_open) return true;
    }
    return false;
}
