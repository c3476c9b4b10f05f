/*
 * tests/unit/test_api_responses.c — api/responses, the request side: a Responses body read into
 * the chat request it asks for, compared with pgd_api_request_parse of the equivalent
 * hand-written chat body (messages, tool calls and results, tools, tool_choice, text formats
 * walked by the JSON recognizer, sampling, logprobs); every refusal the spec lists with its
 * status and param; the chat parameter names mapped back to Responses names. The answer side is
 * tests/unit/test_api_responses_out.c.
 *
 * Request bodies are written with ' for " (turned back by dq()) to keep them readable.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/jsonutil.h"
#include "api/request.h"
#include "api/response.h"
#include "api/responses.h"
#include "api/tools.h"
#include "common/error.h"
#include "engine/sampling/json_fsm.h"
#include "testutil.h"

/* ---- helpers ------------------------------------------------------------------------------- */

/* The text with every ' turned into "; the caller frees it. */
static char *dq(const char *s) {
    size_t n = strlen(s);
    char *o = malloc(n + 1);
    if (!o) abort();
    for (size_t i = 0; i <= n; i++) o[i] = s[i] == '\'' ? '"' : s[i];
    return o;
}

static int rparse(const char *body_q, pgd_api_resp_request *r) {
    char *b = dq(body_q);
    pgd_api_error e;
    memset(&e, 0, sizeof e);
    int rc = pgd_api_resp_request_parse(b, strlen(b), r, &e);
    if (rc) fprintf(stderr, "  responses parse of %s: %s (param '%s')\n", b, e.message, e.param);
    free(b);
    return rc;
}

static int cparse(const char *body_q, pgd_api_request *r) {
    char *b = dq(body_q);
    pgd_api_error e;
    memset(&e, 0, sizeof e);
    int rc = pgd_api_request_parse(PGD_API_CHAT, b, strlen(b), r, &e);
    if (rc) fprintf(stderr, "  chat parse of %s: %s (param '%s')\n", b, e.message, e.param);
    free(b);
    return rc;
}

static bool str_same(pgd_str a, pgd_str b) {
    if (!a.ptr || !b.ptr) return !a.ptr && !b.ptr;
    return a.len == b.len && !memcmp(a.ptr, b.ptr, a.len);
}

/* Whether the recognizer of `sc` takes `text` as one whole document. */
static bool allows(const pgd_json_schema *sc, const char *text) {
    pgd_json_fsm f;
    pgd_json_fsm_init(&f, sc);
    return pgd_json_fsm_feed(&f, (const uint8_t *)text, strlen(text)) && pgd_json_fsm_done(&f);
}

/* A message's content: its parts back to back. */
static void content_of(const pgd_chat_msg *m, pgd_buf *b) {
    pgd_buf_reset(b);
    pgd_buf_puts(b, "");
    for (size_t i = 0; i < m->n_parts; i++) pgd_buf_append(b, m->parts[i].ptr, m->parts[i].len);
}

/* The translated messages equal the reference chat's: role, content, tool calls. */
static void same_messages(int line, const pgd_messages *got, const pgd_messages *want) {
    if (got->n != want->n) {
        fprintf(stderr, "  line %d: %zu messages, want %zu\n", line, got->n, want->n);
        CHECK(false);
        return;
    }
    pgd_buf a = PGD_BUF_INIT, b = PGD_BUF_INIT;
    for (size_t i = 0; i < got->n; i++) {
        const pgd_chat_msg *g = &got->msgs[i], *w = &want->msgs[i];
        if (!g->role || strcmp(g->role, w->role) != 0) {
            fprintf(stderr, "  line %d: messages[%zu].role '%s', want '%s'\n", line, i,
                    g->role ? g->role : "(null)", w->role);
            CHECK(false);
        }
        pgd_str gr = got->reasoning ? got->reasoning[i] : (pgd_str){NULL, 0};
        pgd_str wr = want->reasoning ? want->reasoning[i] : (pgd_str){NULL, 0};
        if (!gr.ptr != !wr.ptr || (gr.ptr && !str_same(gr, wr))) {
            fprintf(stderr, "  line %d: messages[%zu] reasoning '%.*s', want '%.*s'\n", line, i,
                    (int)gr.len, gr.ptr ? gr.ptr : "(none)", (int)wr.len,
                    wr.ptr ? wr.ptr : "(none)");
            CHECK(false);
        }
        content_of(g, &a);
        content_of(w, &b);
        if (a.len != b.len || memcmp(a.data, b.data, a.len) != 0) {
            fprintf(stderr, "  line %d: messages[%zu] content '%s', want '%s'\n", line, i, a.data,
                    b.data);
            CHECK(false);
        }
        if (g->n_calls != w->n_calls) {
            fprintf(stderr, "  line %d: messages[%zu] has %zu calls, want %zu\n", line, i,
                    g->n_calls, w->n_calls);
            CHECK(false);
            continue;
        }
        for (size_t k = 0; k < g->n_calls; k++) {
            if (!str_same(g->calls[k].name, w->calls[k].name) ||
                !str_same(g->calls[k].arguments, w->calls[k].arguments)) {
                fprintf(stderr,
                        "  line %d: messages[%zu] call %zu is %.*s(%.*s), want %.*s(%.*s)\n", line,
                        i, k, (int)g->calls[k].name.len, g->calls[k].name.ptr,
                        (int)g->calls[k].arguments.len, g->calls[k].arguments.ptr,
                        (int)w->calls[k].name.len, w->calls[k].name.ptr,
                        (int)w->calls[k].arguments.len, w->calls[k].arguments.ptr);
                CHECK(false);
            }
        }
    }
    pgd_buf_free(&a);
    pgd_buf_free(&b);
}

/* The translated tools equal the reference chat's. */
static void same_tools(const pgd_api_tools *g, const pgd_api_tools *w) {
    CHECK_EQ_INT(g->n, w->n);
    CHECK_EQ_INT(g->choice, w->choice);
    if (w->choice == PGD_TOOL_CHOICE_NAMED) CHECK_EQ_INT(g->named, w->named);
    CHECK_EQ_INT(g->parallel, w->parallel);
    for (size_t i = 0; i < g->n && i < w->n; i++) {
        CHECK(str_same(g->names[i], w->names[i]));
        if (!str_same(g->defs[i], w->defs[i])) {
            fprintf(stderr, "  tools[%zu] def\n    got:  %.*s\n    want: %.*s\n", i,
                    (int)g->defs[i].len, g->defs[i].ptr, (int)w->defs[i].len, w->defs[i].ptr);
            CHECK(false);
        }
        CHECK(str_same(g->defs_indent[i], w->defs_indent[i]));
    }
}

/* Everything the engine reads from a request, equal. */
static void same_generation(const pgd_api_request *g, const pgd_api_request *w) {
    CHECK_EQ_INT(g->kind, PGD_API_CHAT);
    CHECK(g->root != NULL);
    CHECK(str_same(g->model, w->model));
    CHECK_EQ_INT(g->max_tokens, w->max_tokens);
    CHECK_NEAR(g->temperature, w->temperature, 0);
    CHECK_NEAR(g->top_p, w->top_p, 0);
    CHECK_EQ_INT(g->top_k, w->top_k);
    CHECK_NEAR(g->min_p, w->min_p, 0);
    CHECK_NEAR(g->presence_penalty, w->presence_penalty, 0);
    CHECK_NEAR(g->frequency_penalty, w->frequency_penalty, 0);
    CHECK_NEAR(g->repetition_penalty, w->repetition_penalty, 0);
    CHECK_EQ_INT(g->has_seed, w->has_seed);
    if (w->has_seed) CHECK_EQ_INT(g->seed, w->seed);
    CHECK_EQ_INT(g->n_stop, w->n_stop);
    for (int i = 0; i < g->n_stop && i < w->n_stop; i++) CHECK(str_same(g->stop[i], w->stop[i]));
    CHECK_EQ_INT(g->n, w->n);
    CHECK_EQ_INT(g->logprobs, w->logprobs);
    CHECK_EQ_INT(g->top_logprobs, w->top_logprobs);
    CHECK_EQ_INT(g->prompt_logprobs, w->prompt_logprobs);
    CHECK_EQ_INT(g->n_logit_bias, w->n_logit_bias);
    for (size_t i = 0; i < g->n_logit_bias && i < w->n_logit_bias; i++) {
        CHECK_EQ_INT(g->logit_bias[i].token, w->logit_bias[i].token);
        CHECK_NEAR(g->logit_bias[i].bias, w->logit_bias[i].bias, 0);
    }
    CHECK_EQ_INT(g->ignore_eos, w->ignore_eos);
    CHECK_EQ_INT(g->min_tokens, w->min_tokens);
    CHECK_EQ_INT(g->include_stop, w->include_stop);
    CHECK_EQ_INT(g->n_stop_ids, w->n_stop_ids);
    for (int i = 0; i < g->n_stop_ids && i < w->n_stop_ids; i++)
        CHECK_EQ_INT(g->stop_ids[i], w->stop_ids[i]);
    CHECK_EQ_INT(g->priority, w->priority);
    CHECK_EQ_INT(g->stream, w->stream);
    CHECK_EQ_INT(g->include_usage, w->include_usage);
    CHECK(str_same(g->user, w->user));
    CHECK(str_same(g->cache_salt, w->cache_salt));
    CHECK_EQ_INT(g->json != NULL, w->json != NULL);
}

/* A Responses body (the same with a chat body) and the reference chat body: the translation
 * equals the reference in messages, tools and generation. */
static void same_as_chat(int line, const char *resp_q, const char *chat_q) {
    pgd_api_resp_request r;
    pgd_api_request c;
    memset(&r, 0, sizeof r);
    memset(&c, 0, sizeof c);
    int rr = rparse(resp_q, &r), rc = cparse(chat_q, &c);
    if (rr || rc) {
        fprintf(stderr, "  line %d: parse failed (responses %d, chat %d)\n", line, rr, rc);
        CHECK(false);
    } else {
        int before = tu_failed_checks;
        same_messages(line, &r.chat.messages, &c.messages);
        same_tools(&r.chat.tools, &c.tools);
        same_generation(&r.chat, &c);
        if (tu_failed_checks != before) fprintf(stderr, "  (the case at line %d)\n", line);
    }
    pgd_api_resp_request_free(&r);
    pgd_api_request_free(&c);
}
#define SAME_AS_CHAT(r, c) same_as_chat(__LINE__, r, c)

/* ---- request: messages --------------------------------------------------------------------- */

#define WEATHER_R                                                                                  \
    "{'type':'function','name':'get_weather','description':'Weather now','parameters':{'type':"    \
    "'object','properties':{'city':{'type':'string'},'unit':{'enum':['c','f']}},'required':["      \
    "'city','unit']},'strict':true}"
#define WEATHER_C                                                                                  \
    "{'type':'function','function':{'name':'get_weather','description':'Weather now',"             \
    "'parameters':{'type':'object','properties':{'city':{'type':'string'},'unit':{'enum':['c',"    \
    "'f']}},'required':['city','unit']},'strict':true}}"
#define PING_R "{'type':'function','name':'ping','parameters':{'type':'object','properties':{}}}"
#define PING_C                                                                                     \
    "{'type':'function','function':{'name':'ping','parameters':{'type':'object','properties':{}}"  \
    "}}"

/* The long conversation: instructions, a developer message, parts, calls joining an assistant
 * message, results as tool messages, a call after a result (an assistant message of its own). */
#define CONV_R                                                                                     \
    "'instructions':'You are terse.','input':["                                                    \
    "{'role':'developer','content':'Be brief.'},"                                                  \
    "{'type':'message','role':'user','content':[{'type':'input_text','text':'Weather in '},"       \
    "{'type':'input_text','text':'Paris?'}]},"                                                     \
    "{'type':'message','role':'assistant','content':[{'type':'output_text','text':'Let me "        \
    "check.'}]},"                                                                                  \
    "{'type':'function_call','call_id':'call_1','name':'get_weather','arguments':'{\\'city\\':"    \
    "\\'Paris\\',\\'unit\\':\\'c\\'}','id':'fc_1','status':'completed'},"                          \
    "{'type':'function_call','call_id':'call_2','name':'ping','arguments':'{}'},"                  \
    "{'type':'function_call_output','call_id':'call_1','output':'18C'},"                           \
    "{'type':'function_call_output','call_id':'call_2','output':[{'type':'input_text','text':"     \
    "'po'},{'type':'input_text','text':'ng'}]},"                                                   \
    "{'type':'function_call','call_id':'call_3','name':'ping','arguments':'{ }'},"                 \
    "{'type':'function_call_output','call_id':'call_3','output':'pong'},"                          \
    "{'role':'assistant','content':'Done.'},"                                                      \
    "{'role':'user','content':'Thanks'}]"
#define CONV_C                                                                                     \
    "'messages':["                                                                                 \
    "{'role':'system','content':'You are terse.'},"                                                \
    "{'role':'developer','content':'Be brief.'},"                                                  \
    "{'role':'user','content':[{'type':'text','text':'Weather in '},{'type':'text','text':"        \
    "'Paris?'}]},"                                                                                 \
    "{'role':'assistant','content':'Let me check.','tool_calls':["                                 \
    "{'id':'call_1','type':'function','function':{'name':'get_weather','arguments':'{\\'city\\'"   \
    ":\\'Paris\\',\\'unit\\':\\'c\\'}'}},"                                                         \
    "{'id':'call_2','type':'function','function':{'name':'ping','arguments':'{}'}}]},"             \
    "{'role':'tool','tool_call_id':'call_1','content':'18C'},"                                     \
    "{'role':'tool','tool_call_id':'call_2','content':'pong'},"                                    \
    "{'role':'assistant','content':null,'tool_calls':[{'id':'call_3','type':'function',"           \
    "'function':{'name':'ping','arguments':'{ }'}}]},"                                             \
    "{'role':'tool','tool_call_id':'call_3','content':'pong'},"                                    \
    "{'role':'assistant','content':'Done.'},"                                                      \
    "{'role':'user','content':'Thanks'}]"

static void test_request_messages(void) {
    /* a string: one user message */
    SAME_AS_CHAT("{'input':'Hello there'}",
                 "{'messages':[{'role':'user','content':'Hello there'}]}");
    /* instructions first, as a system message */
    SAME_AS_CHAT("{'input':'Hi','instructions':'Be nice.'}",
                 "{'messages':[{'role':'system','content':'Be nice.'},{'role':'user','content':"
                 "'Hi'}]}");
    /* message items: "type" optional, parts input_text / output_text, every role */
    SAME_AS_CHAT("{'input':[{'role':'system','content':'S'},{'type':'message','role':'user',"
                 "'content':[{'type':'input_text','text':'a'},{'type':'input_text','text':'b'}]},"
                 "{'role':'assistant','content':[{'type':'output_text','text':'c'}]},{'role':"
                 "'developer','content':[{'type':'input_text','text':'d'}]},{'role':'user',"
                 "'content':[{'type':'output_text','text':'e'}]}]}",
                 "{'messages':[{'role':'system','content':'S'},{'role':'user','content':'ab'},"
                 "{'role':'assistant','content':'c'},{'role':'developer','content':'d'},{'role':"
                 "'user','content':'e'}]}");
    /* a reasoning item: the reasoning_content of the assistant message or call after it (its
     * reasoning_text parts joined; summary and encrypted_content not read); none follows:
     * dropped */
    SAME_AS_CHAT("{'input':[{'role':'user','content':'q'},{'type':'reasoning','id':'rs_1',"
                 "'summary':[{'type':'summary_text','text':'S'}],'encrypted_content':null,"
                 "'content':[{'type':'reasoning_text','text':'a'},{'type':'reasoning_text',"
                 "'text':'b'}]},{'role':'assistant','content':'c'},{'type':'reasoning',"
                 "'summary':[]},{'type':'function_call','call_id':'c1','name':'f','arguments':"
                 "'{}'},{'type':'function_call_output','call_id':'c1','output':'1'},{'type':"
                 "'reasoning','content':[{'type':'reasoning_text','text':'lost'}]},{'role':"
                 "'user','content':'u'}]}",
                 "{'messages':[{'role':'user','content':'q'},{'role':'assistant','content':'c',"
                 "'reasoning_content':'ab'},{'role':'assistant','content':null,"
                 "'reasoning_content':'','tool_calls':[{'id':'c1','type':'function','function':"
                 "{'name':'f','arguments':'{}'}}]},{'role':'tool','tool_call_id':'c1',"
                 "'content':'1'},{'role':'user','content':'u'}]}");
    /* null counts as absent */
    SAME_AS_CHAT("{'input':'x','instructions':null,'max_output_tokens':null,'tools':null,"
                 "'temperature':null}",
                 "{'messages':[{'role':'user','content':'x'}]}");
    /* a function_call with no assistant message before it: an assistant message of its own */
    SAME_AS_CHAT("{'input':[{'role':'user','content':'q'},{'type':'function_call','call_id':'c1',"
                 "'name':'f','arguments':'{\\'a\\': [1, 2]}'},{'type':'function_call','call_id':"
                 "'c2','name':'g','arguments':'{}'},{'type':'function_call_output','call_id':'c1',"
                 "'output':'r1'}]}",
                 "{'messages':[{'role':'user','content':'q'},{'role':'assistant','content':null,"
                 "'tool_calls':[{'id':'c1','type':'function','function':{'name':'f','arguments':"
                 "'{\\'a\\': [1, 2]}'}},{'id':'c2','type':'function','function':{'name':'g',"
                 "'arguments':'{}'}}]},{'role':'tool','tool_call_id':'c1','content':'r1'}]}");
    SAME_AS_CHAT("{" CONV_R "}", "{" CONV_C "}");

    /* the item each message came from */
    pgd_api_resp_request r;
    memset(&r, 0, sizeof r);
    REQUIRE(rparse("{" CONV_R "}", &r) == 0);
    CHECK_EQ_INT(r.n_input, 11);
    CHECK(!r.input_string);
    static const size_t want_item[] = {SIZE_MAX, 0, 1, 2, 5, 6, 7, 8, 9, 10};
    static const size_t want_call[] = {SIZE_MAX, SIZE_MAX, SIZE_MAX, 3,        SIZE_MAX,
                                       SIZE_MAX, 7,        SIZE_MAX, SIZE_MAX, SIZE_MAX};
    REQUIRE(r.chat.messages.n == PGD_ARRAY_LEN(want_item));
    CHECK_EQ_INT(r.n_msgs, r.chat.messages.n);
    REQUIRE(r.msg_src != NULL && r.n_msgs == r.chat.messages.n);
    for (size_t k = 0; k < PGD_ARRAY_LEN(want_item); k++) {
        if (r.msg_src[k].item != want_item[k] || r.msg_src[k].first_call != want_call[k]) {
            fprintf(stderr, "  msg_src[%zu] = {%zu, %zu}, want {%zu, %zu}\n", k, r.msg_src[k].item,
                    r.msg_src[k].first_call, want_item[k], want_call[k]);
            CHECK(false);
        }
    }
    CHECK(!r.logprobs);
    CHECK(r.echo != NULL && json_is_object(r.echo));
    pgd_api_resp_request_free(&r);
    pgd_api_resp_request_free(&r); /* back to empty: again is fine */
    pgd_api_resp_request_free(NULL);

    REQUIRE(rparse("{'input':'one'}", &r) == 0);
    CHECK_EQ_INT(r.n_input, 1);
    CHECK(r.input_string);
    REQUIRE(r.chat.messages.n == 1 && r.n_msgs == 1 && r.msg_src != NULL);
    CHECK_EQ_INT(r.msg_src[0].item, 0);
    CHECK(r.msg_src[0].first_call == SIZE_MAX);
    pgd_api_resp_request_free(&r);

    /* an assistant's refusal part is accepted */
    REQUIRE(rparse("{'input':[{'role':'user','content':'q'},{'role':'assistant','content':[{"
                   "'type':'refusal','refusal':'No.'}]},{'role':'user','content':'why'}]}",
                   &r) == 0);
    CHECK_EQ_INT(r.chat.messages.n, 3);
    CHECK_EQ_INT(r.n_input, 3);
    pgd_api_resp_request_free(&r);
}

/* ---- request: generation, tools, formats ---------------------------------------------------- */

static void test_request_generation(void) {
    SAME_AS_CHAT("{'model':'smol','input':'x','max_output_tokens':77,'temperature':0.25,"
                 "'top_p':0.5}",
                 "{'model':'smol','messages':[{'role':'user','content':'x'}],"
                 "'max_completion_tokens':77,'temperature':0.25,'top_p':0.5}");
    /* the sampling extras, as on chat */
    SAME_AS_CHAT("{'input':'x','seed':42,'stop':['\\n\\n','END'],'top_k':40,'min_p':0.05,"
                 "'presence_penalty':0.5,'frequency_penalty':-0.5,'repetition_penalty':1.1,"
                 "'logit_bias':{'15':-100,'7':5},'ignore_eos':true,'priority':3,'cache_salt':"
                 "'salt','user':'u1','stream':true,'stop_token_ids':[9,4],'min_tokens':2,'include_"
                 "stop_str_in_output':true}",
                 "{'messages':[{'role':'user','content':'x'}],'seed':42,'stop':['\\n\\n','END'],"
                 "'top_k':40,'min_p':0.05,'presence_penalty':0.5,'frequency_penalty':-0.5,"
                 "'repetition_penalty':1.1,'logit_bias':{'15':-100,'7':5},'ignore_eos':true,"
                 "'priority':3,'cache_salt':'salt','user':'u1','stream':true,'stop_token_ids':"
                 "[9,4],'min_tokens':2,'include_stop_str_in_output':true}");
    SAME_AS_CHAT("{'input':'x','stop':'##','seed':-3,'stream':false}",
                 "{'messages':[{'role':'user','content':'x'}],'stop':'##','seed':-3}");
    /* chat's own fields are unknown here: ignored, not carried into the chat request */
    SAME_AS_CHAT("{'input':'a','n':2,'max_tokens':5,'logprobs':true,'response_format':{'type':"
                 "'json_object'},'messages':[{'role':'user','content':'zzz'}],"
                 "'max_completion_tokens':9,'prompt_logprobs':2,'echo':true,'stream_options':{"
                 "'include_usage':true},'functions':[]}",
                 "{'messages':[{'role':'user','content':'a'}]}");
    SAME_AS_CHAT("{'input':'a','stream':true,'stream_options':{'include_usage':true}}",
                 "{'messages':[{'role':'user','content':'a'}],'stream':true}");
    /* stream_options is accepted and ignored (even without stream) */
    pgd_api_resp_request r;
    memset(&r, 0, sizeof r);
    CHECK(rparse("{'input':'x','stream_options':{'include_obfuscation':false}}", &r) == 0);
    CHECK(!r.chat.stream);
    pgd_api_resp_request_free(&r);

    /* logprobs: include asks, top_logprobs alternatives each */
    SAME_AS_CHAT("{'input':'x','include':['message.output_text.logprobs'],'top_logprobs':3}",
                 "{'messages':[{'role':'user','content':'x'}],'logprobs':true,'top_logprobs':3}");
    REQUIRE(rparse("{'input':'x','include':['message.output_text.logprobs'],'top_logprobs':3}",
                   &r) == 0);
    CHECK(r.logprobs);
    CHECK(r.chat.logprobs);
    CHECK_EQ_INT(r.chat.top_logprobs, 3);
    pgd_api_resp_request_free(&r);
    REQUIRE(rparse("{'input':'x','include':['message.output_text.logprobs']}", &r) == 0);
    CHECK(r.logprobs);
    CHECK(r.chat.logprobs);
    CHECK_EQ_INT(r.chat.top_logprobs, 0);
    pgd_api_resp_request_free(&r);
    /* top_logprobs without include: accepted (chat would refuse it), no logprobs */
    REQUIRE(rparse("{'input':'x','top_logprobs':5}", &r) == 0);
    CHECK(!r.logprobs);
    CHECK(!r.chat.logprobs);
    pgd_api_resp_request_free(&r);
    /* the other include values OpenAI defines are accepted, and ask for nothing */
    REQUIRE(rparse("{'input':'x','include':['reasoning.encrypted_content',"
                   "'file_search_call.results','message.input_image.image_url']}",
                   &r) == 0);
    CHECK(!r.logprobs);
    CHECK(!r.chat.logprobs);
    pgd_api_resp_request_free(&r);
    REQUIRE(rparse("{'input':'x','include':[]}", &r) == 0);
    CHECK(!r.logprobs);
    pgd_api_resp_request_free(&r);
}

static void test_request_tools(void) {
    /* flattened tools: the same definitions as chat's (the template's text) */
    SAME_AS_CHAT("{'input':'x','tools':[" WEATHER_R "," PING_R "]}",
                 "{'messages':[{'role':'user','content':'x'}],'tools':[" WEATHER_C "," PING_C "]}");
    SAME_AS_CHAT("{'input':'x','tools':[" WEATHER_R "," PING_R "],'tool_choice':'auto',"
                 "'parallel_tool_calls':false}",
                 "{'messages':[{'role':'user','content':'x'}],'tools':[" WEATHER_C "," PING_C
                 "],'tool_choice':'auto','parallel_tool_calls':false}");
    SAME_AS_CHAT("{'input':'x','tools':[" WEATHER_R "],'tool_choice':'none'}",
                 "{'messages':[{'role':'user','content':'x'}],'tools':[" WEATHER_C
                 "],'tool_choice':'none'}");
    SAME_AS_CHAT("{'input':'x','tools':[" WEATHER_R "," PING_R "],'tool_choice':'required'}",
                 "{'messages':[{'role':'user','content':'x'}],'tools':[" WEATHER_C "," PING_C
                 "],'tool_choice':'required'}");
    SAME_AS_CHAT("{'input':'x','tools':[" PING_R "," WEATHER_R "],'tool_choice':{'type':"
                 "'function','name':'get_weather'}}",
                 "{'messages':[{'role':'user','content':'x'}],'tools':[" PING_C "," WEATHER_C
                 "],'tool_choice':{'type':'function','function':{'name':'get_weather'}}}");
    SAME_AS_CHAT("{'input':'x','tools':[]}", "{'messages':[{'role':'user','content':'x'}]}");

    /* the forced call's constraint: what it allows, as chat's does */
    pgd_api_resp_request r;
    pgd_api_request c;
    memset(&r, 0, sizeof r);
    memset(&c, 0, sizeof c);
    REQUIRE(rparse("{'input':'x','tools':[" PING_R "," WEATHER_R "],'tool_choice':{'type':"
                   "'function','name':'get_weather'}}",
                   &r) == 0);
    CHECK_EQ_INT(r.chat.tools.choice, PGD_TOOL_CHOICE_NAMED);
    CHECK_EQ_INT(r.chat.tools.named, 1);
    REQUIRE(r.chat.json != NULL);
    CHECK(allows(r.chat.json, "{\"city\": \"Paris\", \"unit\": \"c\"}"));
    CHECK(!allows(r.chat.json, "{\"city\": \"Paris\"}"));
    CHECK(!allows(r.chat.json, "{\"city\": \"Paris\", \"unit\": \"k\"}"));
    pgd_api_resp_request_free(&r);

    REQUIRE(rparse("{'input':'x','tools':[" PING_R "," WEATHER_R "],'tool_choice':'required',"
                   "'parallel_tool_calls':false}",
                   &r) == 0);
    REQUIRE(cparse("{'messages':[{'role':'user','content':'x'}],'tools':[" PING_C "," WEATHER_C
                   "],'tool_choice':'required','parallel_tool_calls':false}",
                   &c) == 0);
    REQUIRE(r.chat.json != NULL && c.json != NULL);
    static const char *const docs[] = {
        "[{\"name\": \"ping\", \"arguments\": {}}]",
        "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"unit\": \"f\"}}]",
        "[{\"name\": \"ping\", \"arguments\": {}}, {\"name\": \"ping\", \"arguments\": {}}]",
        "[{\"name\": \"nope\", \"arguments\": {}}]",
        "[]",
        "{}",
    };
    for (size_t i = 0; i < PGD_ARRAY_LEN(docs); i++)
        CHECK_EQ_INT(allows(r.chat.json, docs[i]), allows(c.json, docs[i]));
    CHECK(allows(r.chat.json, docs[0]));
    CHECK(!allows(r.chat.json, docs[2]));
    pgd_api_resp_request_free(&r);
    pgd_api_request_free(&c);
}

static void test_request_text_format(void) {
    SAME_AS_CHAT("{'input':'x','text':{'format':{'type':'text'}}}",
                 "{'messages':[{'role':'user','content':'x'}],'response_format':{'type':'text'}}");
    SAME_AS_CHAT("{'input':'x','text':{'format':{'type':'json_object'},'verbosity':'medium'}}",
                 "{'messages':[{'role':'user','content':'x'}],'response_format':{'type':"
                 "'json_object'}}");
#define SCHEMA                                                                                     \
    "{'type':'object','properties':{'x':{'type':'integer'},'tag':{'enum':['a','b']}},'required':"  \
    "['x','tag']}"
    SAME_AS_CHAT("{'input':'x','text':{'format':{'type':'json_schema','name':'pt','schema':" SCHEMA
                 ",'strict':true,'description':'a point'}}}",
                 "{'messages':[{'role':'user','content':'x'}],'response_format':{'type':"
                 "'json_schema','json_schema':{'name':'pt','schema':" SCHEMA
                 ",'strict':true,'description':'a point'}}}");

    pgd_api_resp_request r;
    pgd_api_request c;
    memset(&r, 0, sizeof r);
    memset(&c, 0, sizeof c);
    REQUIRE(
        rparse("{'input':'x','text':{'format':{'type':'json_schema','name':'pt','schema':" SCHEMA
               "}}}",
               &r) == 0);
    REQUIRE(cparse("{'messages':[{'role':'user','content':'x'}],'response_format':{'type':"
                   "'json_schema','json_schema':{'name':'pt','schema':" SCHEMA "}}}",
                   &c) == 0);
#undef SCHEMA
    REQUIRE(r.chat.json != NULL && c.json != NULL);
    static const char *const docs[] = {
        "{\"x\": 1, \"tag\": \"a\"}",
        "{\"x\": \"1\", \"tag\": \"a\"}",
        "{\"x\": 1}",
        "{\"x\": 1, \"tag\": \"c\"}",
        "[1]",
    };
    for (size_t i = 0; i < PGD_ARRAY_LEN(docs); i++)
        CHECK_EQ_INT(allows(r.chat.json, docs[i]), allows(c.json, docs[i]));
    CHECK(allows(r.chat.json, docs[0]));
    CHECK(!allows(r.chat.json, docs[1]));
    CHECK(!allows(r.chat.json, docs[2]));
    pgd_api_resp_request_free(&r);
    pgd_api_request_free(&c);

    REQUIRE(rparse("{'input':'x','text':{'format':{'type':'json_object'}}}", &r) == 0);
    REQUIRE(r.chat.json != NULL);
    CHECK(allows(r.chat.json, "{\"a\": [1, {\"b\": null}]}"));
    CHECK(!allows(r.chat.json, "[1]"));
    CHECK(!allows(r.chat.json, "hello"));
    pgd_api_resp_request_free(&r);

    REQUIRE(rparse("{'input':'x','text':{'verbosity':'medium'}}", &r) == 0);
    CHECK(r.chat.json == NULL);
    pgd_api_resp_request_free(&r);
}

/* What the spec accepts. */
static void test_request_accepted(void) {
    static const char *const ok[] = {
        "{'input':'x','reasoning':{'effort':null,'summary':null}}",
        "{'input':'x','reasoning':{}}",
        "{'input':'x','reasoning':null}",
        "{'input':'x','store':true}",
        "{'input':'x','store':false}",
        "{'input':'x','background':false}",
        "{'input':'x','truncation':'disabled'}",
        "{'input':'x','previous_response_id':null,'conversation':null,'prompt':null}",
        "{'input':'x','top_logprobs':20}",
        "{'input':'x','top_logprobs':0}",
        "{'input':'x','max_tool_calls':0}",
        "{'input':'x','service_tier':'auto'}",
        "{'input':'x','safety_identifier':'s','prompt_cache_key':'k','user':'u'}",
        "{'input':'x','metadata':{}}",
        "{'input':'x','unknown_field':{'a':[1]}}",
        "{'input':'x','parallel_tool_calls':true}",
        "{'input':'x','max_output_tokens':1}",
        "{'input':[{'type':'function_call_output','call_id':'c','output':'r'}]}",
    };
    for (size_t i = 0; i < PGD_ARRAY_LEN(ok); i++) {
        pgd_api_resp_request r;
        memset(&r, 0, sizeof r);
        if (rparse(ok[i], &r) != 0) {
            fprintf(stderr, "  refused: %s\n", ok[i]);
            CHECK(false);
        }
        pgd_api_resp_request_free(&r);
    }

    /* chat_template_kwargs as on chat: Qwen3's enable_thinking (default true), errors named */
    for (int off = 0; off < 2; off++) {
        pgd_api_resp_request r;
        memset(&r, 0, sizeof r);
        REQUIRE(rparse(off ? "{'input':'x','chat_template_kwargs':{'enable_thinking':false}}"
                           : "{'input':'x'}",
                       &r) == 0);
        CHECK_EQ_INT(r.chat.enable_thinking, !off);
        pgd_api_resp_request_free(&r);
    }

    /* metadata at its limits: 16 keys of 64 bytes, values of 512 */
    pgd_buf b = PGD_BUF_INIT;
    char key[65], val[513];
    memset(val, 'v', 512);
    val[512] = 0;
    pgd_buf_puts(&b, "{'input':'x','metadata':{");
    for (int i = 0; i < 16; i++) {
        memset(key, 'k', 64);
        key[64] = 0;
        key[0] = (char)('a' + i);
        pgd_buf_printf(&b, "%s'%s':'%s'", i ? "," : "", key, val);
    }
    pgd_buf_puts(&b, "}}");
    pgd_api_resp_request r;
    memset(&r, 0, sizeof r);
    CHECK(rparse(b.data, &r) == 0);
    pgd_api_resp_request_free(&r);
    /* the limits count characters: 64 and 512 two-byte ones pass, one more does not */
    pgd_buf_reset(&b);
    pgd_buf_puts(&b, "{'input':'x','metadata':{'");
    for (int i = 0; i < 64; i++) pgd_buf_puts(&b, "\xc3\xa9");
    pgd_buf_puts(&b, "':'");
    for (int i = 0; i < 512; i++) pgd_buf_puts(&b, "\xc3\xa9");
    pgd_buf_puts(&b, "'}}");
    CHECK(rparse(b.data, &r) == 0);
    pgd_api_resp_request_free(&r);
    b.len -= 3;
    pgd_buf_puts(&b, "\xc3\xa9'}}");
    pgd_api_error e;
    char *body = dq(b.data);
    CHECK_EQ_INT(pgd_api_resp_request_parse(body, strlen(body), &r, &e), PGD_EINVAL);
    CHECK_EQ_STR(e.param, "metadata");
    free(body);
    pgd_buf_free(&b);
}

/* ---- request: refusals --------------------------------------------------------------------- */

/* `body` (raw bytes, len) is refused: PGD_EINVAL, 400, param exactly `param` ("" for null), or
 * beginning with it when `prefix`. The request is freed after (it was garbage before). */
static void expect_err_raw(int line, const char *body, size_t len, const char *param, bool prefix) {
    pgd_api_resp_request r;
    memset(&r, 0xA5, sizeof r);
    pgd_api_error e;
    memset(&e, 0, sizeof e);
    int rc = pgd_api_resp_request_parse(body, len, &r, &e);
    bool ok = rc == PGD_EINVAL && e.status == 400 &&
              (prefix ? !strncmp(e.param, param, strlen(param)) : !strcmp(e.param, param));
    if (!ok) {
        fprintf(stderr,
                "  line %d: %.*s\n    got rc %d status %d param '%s' (%s)\n    want EINVAL 400 "
                "param %s'%s'\n",
                line, (int)len, body, rc, e.status, rc ? e.param : "", rc ? e.message : "",
                prefix ? "beginning " : "", param);
        CHECK(false);
    }
    if (rc == PGD_EINVAL) {
        CHECK(e.message[0] != 0);
        /* the message quotes Responses names, not the chat request's */
        static const char *const chat_names[] = {"max_completion_tokens", "response_format",
                                                 "messages[", "].function.",
                                                 "tool_choice.function"};
        for (size_t i = 0; i < PGD_ARRAY_LEN(chat_names); i++) {
            if (strstr(e.message, chat_names[i])) {
                fprintf(stderr, "  line %d: the message quotes '%s': %s\n", line, chat_names[i],
                        e.message);
                CHECK(false);
            }
        }
    }
    pgd_api_resp_request_free(&r);
}

static void expect_err(int line, const char *body_q, const char *param, bool prefix) {
    char *b = dq(body_q);
    expect_err_raw(line, b, strlen(b), param, prefix);
    free(b);
}
#define ERR(body, param)        expect_err(__LINE__, body, param, false)
#define ERR_PREFIX(body, param) expect_err(__LINE__, body, param, true)

static void test_request_errors(void) {
    /* not a JSON object */
    expect_err_raw(__LINE__, "{\"input\":", 9, "", false);
    expect_err_raw(__LINE__, "[1]", 3, "", false);
    expect_err_raw(__LINE__, "\"input\"", 7, "", false);
    expect_err_raw(__LINE__, "", 0, "", false);
    expect_err_raw(__LINE__, "{\"input\":\"\xff\"}", 12, "", false);

    /* input */
    ERR("{'model':'m'}", "input");
    ERR("{'input':null}", "input");
    ERR("{'input':[]}", "input");
    ERR("{'input':5}", "input");
    ERR("{'input':{'role':'user','content':'x'}}", "input");
    ERR("{'input':'x','chat_template_kwargs':{'enable_thinking':1}}",
        "chat_template_kwargs.enable_thinking");
    ERR("{'input':[{'type':'reasoning','content':{}}]}", "input[0].content");
    ERR("{'input':[{'type':'reasoning','content':[{'type':'summary_text','text':'a'}]}]}",
        "input[0].content[0]");
    ERR("{'input':[{'type':'reasoning','content':[{'type':'reasoning_text'}]}]}",
        "input[0].content[0]");
    ERR("{'input':[{'role':'user','content':'a'},{'type':'item_reference','id':'msg_1'}]}",
        "input[1].type");
    ERR("{'input':[{'type':'web_search_call','id':'ws_1','status':'completed'}]}", "input[0].type");
    ERR("{'input':[{'role':'user','content':'a'},{'type':'file_search_call','id':'f'}]}",
        "input[1].type");
    ERR_PREFIX("{'input':[{'role':'user','content':[{'type':'input_text','text':'a'},{'type':"
               "'input_image','image_url':'https://x/y.png'}]}]}",
               "input[0].content[1]");
    ERR_PREFIX("{'input':[{'role':'user','content':'a'},{'role':'user','content':[{'type':"
               "'input_file','file_id':'file_1'}]}]}",
               "input[1].content[0]");
    ERR_PREFIX("{'input':[{'role':'user','content':[{'type':'input_audio','input_audio':{'data':"
               "'','format':'wav'}}]}]}",
               "input[0].content[0]");
    ERR_PREFIX("{'input':[{'role':'user','content':'a'},{'role':'user','content':5}]}", "input[1]");
    ERR_PREFIX("{'input':[{'role':'user','content':'a'},7]}", "input[1]");

    /* a refusal part only in an assistant's; chat's "text" part, other roles, no call_id */
    ERR("{'input':[{'role':'user','content':[{'type':'refusal','refusal':'x'}]}]}",
        "input[0].content[0].type");
    ERR_PREFIX("{'input':[{'role':'user','content':[{'type':'text','text':'x'}]}]}",
               "input[0].content[0]");
    ERR_PREFIX("{'input':[{'role':'tool','content':'x'}]}", "input[0]");
    ERR_PREFIX("{'input':[{'role':'user','content':'q'},{'type':'function_call','name':'f',"
               "'arguments':'{}'}]}",
               "input[1]");
    ERR_PREFIX("{'input':[{'type':'function_call_output','output':'x'}]}", "input[0]");
    ERR_PREFIX("{'input':[{'type':'function_call','call_id':'c','name':'f','arguments':'[1]'}]}",
               "input[0]");
    /* tools, tool_choice */
    ERR("{'input':'a','tools':[" PING_R ",{'type':'web_search'}]}", "tools[1].type");
    ERR("{'input':'a','tools':[{'type':'file_search','vector_store_ids':['v']}]}", "tools[0].type");
    ERR("{'input':'a','tools':[{'type':'mcp','server_label':'s','server_url':'https://x'}]}",
        "tools[0].type");
    ERR("{'input':'a','tools':[{'type':'function','name':'f','parameters':5}]}",
        "tools[0].parameters");
    ERR("{'input':'a','tools':[" PING_R ",{'type':'function','name':'bad name!'}]}",
        "tools[1].name");
    ERR("{'input':'a','tools':[" PING_R "," PING_R "]}", "tools[1].name");
    ERR_PREFIX("{'input':'a','tools':[" PING_R "],'tool_choice':{'type':'web_search'}}",
               "tool_choice");
    ERR_PREFIX("{'input':'a','tools':[" PING_R "],'tool_choice':{'type':'file_search'}}",
               "tool_choice");
    ERR("{'input':'a','tools':[" PING_R "],'tool_choice':{'type':'function','name':'nope'}}",
        "tool_choice.name");
    ERR("{'input':'a','tools':[" PING_R "],'tool_choice':'sometimes'}", "tool_choice");
    ERR("{'input':'a','tool_choice':'required'}", "tool_choice");
    ERR("{'input':'a','parallel_tool_calls':'yes'}", "parallel_tool_calls");

    /* numbers */
    ERR("{'input':'a','max_output_tokens':0}", "max_output_tokens");
    ERR("{'input':'a','max_output_tokens':-5}", "max_output_tokens");
    ERR("{'input':'a','max_output_tokens':'9'}", "max_output_tokens");
    ERR("{'input':'a','temperature':3}", "temperature");
    ERR("{'input':'a','top_p':0}", "top_p");
    ERR("{'input':'a','top_logprobs':21}", "top_logprobs");
    ERR("{'input':'a','top_logprobs':-1}", "top_logprobs");
    ERR("{'input':'a','include':['message.output_text.logprobs'],'top_logprobs':21}",
        "top_logprobs");
    ERR("{'input':'a','max_tool_calls':-1}", "max_tool_calls");
    ERR("{'input':'a','top_k':-2}", "top_k");
    ERR("{'input':'a','seed':'x'}", "seed");
    ERR("{'input':'a','stop':['a','b','c','d','e','f','g','h','i','j','k','l','m','n','o','p',"
        "'q']}",
        "stop");
    ERR("{'input':'a','stream':'yes'}", "stream");
    ERR("{'input':'a','instructions':5}", "instructions");
    ERR("{'input':'a','user':5}", "user");
    ERR("{'input':'a','safety_identifier':5}", "safety_identifier");
    ERR("{'input':'a','prompt_cache_key':[]}", "prompt_cache_key");
    ERR("{'input':'a','service_tier':5}", "service_tier");
    ERR("{'input':'a','store':'yes'}", "store");
    ERR_PREFIX("{'input':'a','text':'json'}", "text");

    /* text */
    ERR("{'input':'a','text':{'format':{'type':'json_schema','name':'s','schema':{'type':"
        "'string','pattern':'^a'}}}}",
        "text.format.schema");
    ERR("{'input':'a','text':{'format':{'type':'json_schema','name':'s'}}}", "text.format.schema");
    ERR_PREFIX("{'input':'a','text':{'format':{'type':'yaml'}}}", "text.format");
    ERR_PREFIX("{'input':'a','tools':[" PING_R "],'tool_choice':'required','text':{'format':{"
               "'type':'json_object'}}}",
               "text.format");
    ERR("{'input':'a','text':{'verbosity':'high'}}", "text.verbosity");
    ERR("{'input':'a','text':{'verbosity':'low'}}", "text.verbosity");

    /* what this server does not do */
    ERR("{'input':'a','previous_response_id':'resp_1'}", "previous_response_id");
    ERR("{'input':'a','conversation':'conv_1'}", "conversation");
    ERR("{'input':'a','conversation':{'id':'conv_1'}}", "conversation");
    ERR("{'input':'a','background':true}", "background");
    ERR("{'input':'a','prompt':{'id':'pmpt_1'}}", "prompt");
    ERR("{'input':'a','truncation':'auto'}", "truncation");
    ERR_PREFIX("{'input':'a','reasoning':{'effort':'low'}}", "reasoning");
    ERR_PREFIX("{'input':'a','reasoning':{'summary':'auto'}}", "reasoning");
    ERR_PREFIX("{'input':'a','include':['bogus']}", "include");
    ERR_PREFIX("{'input':'a','include':['message.output_text.logprobs','nope.nope']}", "include");
    ERR_PREFIX("{'input':'a','include':'message.output_text.logprobs'}", "include");

    /* metadata: 17 keys; a 513-byte value; a 65-byte key; a value not a string */
    pgd_buf b = PGD_BUF_INIT;
    pgd_buf_puts(&b, "{'input':'x','metadata':{");
    for (int i = 0; i < 17; i++) pgd_buf_printf(&b, "%s'k%d':'v'", i ? "," : "", i);
    pgd_buf_puts(&b, "}}");
    ERR_PREFIX(b.data, "metadata");
    char big[514];
    memset(big, 'v', 513);
    big[513] = 0;
    pgd_buf_reset(&b);
    pgd_buf_printf(&b, "{'input':'x','metadata':{'k':'%s'}}", big);
    ERR_PREFIX(b.data, "metadata");
    big[65] = 0;
    pgd_buf_reset(&b);
    pgd_buf_printf(&b, "{'input':'x','metadata':{'%s':'v'}}", big);
    ERR_PREFIX(b.data, "metadata");
    ERR_PREFIX("{'input':'x','metadata':{'k':5}}", "metadata");
    ERR_PREFIX("{'input':'x','metadata':['k']}", "metadata");
    pgd_buf_free(&b);
}

/* ---- chat parameter names -> Responses names ------------------------------------------------ */

static void map_is(int line, const pgd_api_resp_request *r, const char *chat, const char *want,
                   bool prefix) {
    char out[128];
    memset(out, 0, sizeof out);
    const char *got = pgd_api_resp_param(r, chat, out, sizeof out);
    bool ok = got == out && (prefix ? !strncmp(got, want, strlen(want)) : !strcmp(got, want));
    if (!ok) {
        fprintf(stderr, "  line %d: '%s' -> '%s', want %s'%s'\n", line, chat, got ? got : "(null)",
                prefix ? "beginning " : "", want);
        CHECK(false);
    }
}
#define MAP(chat, want)        map_is(__LINE__, &r, chat, want, false)
#define MAP_PREFIX(chat, want) map_is(__LINE__, &r, chat, want, true)

static void test_param_map(void) {
    pgd_api_resp_request r;
    memset(&r, 0, sizeof r);
    REQUIRE(rparse("{" CONV_R ",'tools':[" PING_R "," WEATHER_R "]}", &r) == 0);
    char out[128];
    CHECK(pgd_api_resp_param(&r, NULL, out, sizeof out) == NULL);
    MAP("temperature", "temperature");
    MAP("top_logprobs", "top_logprobs");
    MAP("stop", "stop");
    MAP("seed", "seed");
    MAP("max_completion_tokens", "max_output_tokens");
    MAP("logprobs", "include");
    MAP("response_format", "text.format");
    MAP("response_format.type", "text.format.type");
    MAP("response_format.json_schema.schema", "text.format.schema");
    MAP("response_format.json_schema.name", "text.format.name");
    MAP("response_format.json_schema.strict", "text.format.strict");
    MAP("tools[1].function.parameters", "tools[1].parameters");
    MAP("tools[0].function.name", "tools[0].name");
    MAP("tools[12].function.strict", "tools[12].strict");
    MAP("tools[1].type", "tools[1].type");
    MAP("tool_choice.function.name", "tool_choice.name");
    MAP("tool_choice", "tool_choice");
    MAP("parallel_tool_calls", "parallel_tool_calls");
    /* messages[k]: the input item it came from (message 0 is the instructions) */
    MAP("messages[0].content", "instructions");
    MAP("messages[0]", "instructions");
    MAP("messages[1]", "input[0]");
    MAP("messages[1].content", "input[0].content");
    MAP("messages[2].content", "input[1].content");
    MAP_PREFIX("messages[2].content[1].text", "input[1].content");
    MAP("messages[9]", "input[10]");
    MAP("messages[9].content", "input[10].content");
    MAP("messages[4].content", "input[5].content"); /* a tool message: its output */
    MAP("messages[5]", "input[6]");
    /* calls joined to a message: each its own item */
    MAP("messages[3].tool_calls[0].function.arguments", "input[3].arguments");
    MAP("messages[3].tool_calls[1].function.arguments", "input[4].arguments");
    MAP("messages[6].tool_calls[0].function.arguments", "input[7].arguments");
    MAP("messages[3].content", "input[2].content");
    pgd_api_resp_request_free(&r);

    /* without instructions, message 0 is input[0] */
    REQUIRE(rparse("{'input':[{'role':'user','content':'a'},{'role':'user','content':'b'}]}", &r) ==
            0);
    MAP("messages[1].content", "input[1].content");
    MAP("messages[0]", "input[0]");
    pgd_api_resp_request_free(&r);

    /* an input string is "input" */
    REQUIRE(rparse("{'input':'x','instructions':'i'}", &r) == 0);
    MAP("messages[0].content", "instructions");
    MAP_PREFIX("messages[1].content", "input");
    MAP_PREFIX("messages[1]", "input");
    {
        const char *p = pgd_api_resp_param(&r, "messages[1].content", out, sizeof out);
        CHECK(p && strncmp(p, "input[", 6) != 0);
    }
    pgd_api_resp_request_free(&r);
    REQUIRE(rparse("{'input':'x'}", &r) == 0);
    MAP_PREFIX("messages[0].content", "input");
    pgd_api_resp_request_free(&r);
}

/* An error about the chat request told in Responses terms: param and the names quoted. */
static void test_error_rename(void) {
    pgd_api_resp_request r;
    memset(&r, 0, sizeof r);
    REQUIRE(rparse("{'input':'x'}", &r) == 0);
    pgd_api_error e;
    memset(&e, 0, sizeof e);
    (void)pgd_api_error_set(&e, 400, "max_completion_tokens", NULL,
                            "'max_completion_tokens' must be an integer >= 1, got 0");
    pgd_api_resp_error(&r, &e);
    CHECK_EQ_INT(e.status, 400);
    CHECK_EQ_STR(e.param, "max_output_tokens");
    CHECK(strstr(e.message, "max_completion_tokens") == NULL);
    CHECK(strstr(e.message, "'max_output_tokens' must be an integer >= 1, got 0") != NULL);
    if (strstr(e.message, "max_completion_tokens")) fprintf(stderr, "  %s\n", e.message);

    memset(&e, 0, sizeof e);
    (void)pgd_api_error_set(&e, 400, "response_format.json_schema.schema", NULL,
                            "response_format schema: 'pattern' is not supported");
    pgd_api_resp_error(&r, &e);
    CHECK_EQ_STR(e.param, "text.format.schema");
    CHECK(strstr(e.message, "response_format") == NULL);
    CHECK(strstr(e.message, "'pattern' is not supported") != NULL);

    memset(&e, 0, sizeof e);
    (void)pgd_api_error_set(&e, 400, "temperature", NULL, "'temperature' must be at most 2");
    pgd_api_resp_error(&r, &e);
    CHECK_EQ_STR(e.param, "temperature");
    CHECK_EQ_STR(e.message, "'temperature' must be at most 2");

    memset(&e, 0, sizeof e);
    (void)pgd_api_error_set(&e, 400, NULL, NULL, "the body is not JSON");
    pgd_api_resp_error(&r, &e);
    CHECK_EQ_STR(e.param, "");
    CHECK_EQ_STR(e.message, "the body is not JSON");
    pgd_api_resp_request_free(&r);

    REQUIRE(rparse("{" CONV_R ",'tools':[" PING_R "]}", &r) == 0);
    memset(&e, 0, sizeof e);
    (void)pgd_api_error_set(&e, 400, "messages[3].tool_calls[1].function.arguments", NULL,
                            "'messages[3].tool_calls[1].function.arguments' must hold an object");
    pgd_api_resp_error(&r, &e);
    CHECK_EQ_STR(e.param, "input[4].arguments");
    CHECK(strstr(e.message, "messages[") == NULL);
    CHECK(strstr(e.message, "input[4].arguments") != NULL);
    memset(&e, 0, sizeof e);
    (void)pgd_api_error_set(&e, 400, "tools[0].function.parameters", NULL,
                            "'tools[0].function.parameters' must be an object");
    pgd_api_resp_error(&r, &e);
    CHECK_EQ_STR(e.param, "tools[0].parameters");
    CHECK(strstr(e.message, "'tools[0].parameters' must be an object") != NULL);
    pgd_api_resp_request_free(&r);
}

/* ---- previous_response_id ------------------------------------------------------------------ */

/* A lookup over one stored conversation, "resp_prev": a user turn and an assistant call. */
static const json_t *lookup_one(void *ud, const char *id) {
    return strcmp(id, "resp_prev") ? NULL : (const json_t *)ud;
}

static void test_previous_response(void) {
    char *conv_s = dq("[{'role':'user','content':'weather?'},{'role':'assistant','content':null,"
                      "'tool_calls':[{'id':'c1','type':'function','function':{'name':'get_weather',"
                      "'arguments':'{}'}}]}]");
    json_t *conv = json_loads(conv_s, 0, NULL);
    free(conv_s);
    REQUIRE(conv != NULL);
    json_t *before = json_deep_copy(conv);
    /* the stored turns come after the instructions and before the input, as the equivalent chat
     * request has them; a call of the new input starts a message of its own (the stored ones
     * are not changed) */
    const char *body_q = "{'instructions':'Be brief.','previous_response_id':'resp_prev',"
                         "'input':[{'type':'function_call_output','call_id':'c1','output':'18C'},"
                         "{'type':'function_call','call_id':'c2','name':'get_weather',"
                         "'arguments':'{}'}]}";
    char *body = dq(body_q);
    pgd_api_resp_request r;
    pgd_api_error e;
    int rc = pgd_api_resp_request_parse_stored(body, strlen(body), lookup_one, conv, &r, &e);
    free(body);
    REQUIRE(rc == 0);
    pgd_api_request c;
    memset(&c, 0, sizeof c);
    REQUIRE(cparse("{'messages':[{'role':'system','content':'Be brief.'},{'role':'user','content':"
                   "'weather?'},{'role':'assistant','content':null,'tool_calls':[{'id':'c1',"
                   "'type':'function','function':{'name':'get_weather','arguments':'{}'}}]},"
                   "{'role':'tool','tool_call_id':'c1','content':'18C'},{'role':'assistant',"
                   "'content':null,'tool_calls':[{'id':'c2','type':'function','function':{"
                   "'name':'get_weather','arguments':'{}'}}]}]}",
                   &c) == 0);
    same_messages(__LINE__, &r.chat.messages, &c.messages);
    pgd_api_request_free(&c);
    CHECK(json_equal(conv, before));
    CHECK_EQ_STR(json_string_value(json_object_get(r.echo, "previous_response_id")), "resp_prev");
    CHECK(r.store);
    /* the history: everything but the instructions */
    CHECK_EQ_INT((int)json_array_size(r.history), 4);
    CHECK_EQ_STR(json_string_value(json_object_get(json_array_get(r.history, 0), "content")),
                 "weather?");
    /* where each message came from, and the names errors use */
    REQUIRE(r.n_msgs == 5);
    CHECK(r.msg_src[0].item == SIZE_MAX && r.msg_src[1].item == PGD_API_RESP_PREVIOUS &&
          r.msg_src[2].item == PGD_API_RESP_PREVIOUS && r.msg_src[3].item == 0 &&
          r.msg_src[4].item == 1 && r.msg_src[4].first_call == 1);
    char p[64];
    CHECK_EQ_STR(
        pgd_api_resp_param(&r, "messages[2].tool_calls[0].function.arguments", p, sizeof p),
        "previous_response_id");
    CHECK_EQ_STR(
        pgd_api_resp_param(&r, "messages[4].tool_calls[0].function.arguments", p, sizeof p),
        "input[1].arguments");
    pgd_api_resp_request_no_store(&r);
    CHECK(!r.store && json_is_false(json_object_get(r.echo, "store")));
    pgd_api_resp_request_free(&r);

    /* an id the lookup does not find; no lookup at all; store false */
    body = dq("{'input':'x','previous_response_id':'resp_other'}");
    CHECK_EQ_INT(pgd_api_resp_request_parse_stored(body, strlen(body), lookup_one, conv, &r, &e),
                 PGD_EINVAL);
    CHECK_EQ_STR(e.param, "previous_response_id");
    CHECK_EQ_STR(e.code, "previous_response_not_found");
    CHECK_EQ_INT(pgd_api_resp_request_parse(body, strlen(body), &r, &e), PGD_EINVAL);
    CHECK_EQ_STR(e.param, "previous_response_id");
    CHECK_EQ_STR(e.code, "");
    free(body);
    CHECK_EQ_INT(rparse("{'input':'x','store':false}", &r), 0);
    CHECK(!r.store && json_is_false(json_object_get(r.echo, "store")));
    CHECK(json_is_null(json_object_get(r.echo, "previous_response_id")));
    pgd_api_resp_request_free(&r);
    json_decref(before);
    json_decref(conv);
}

int main(void) {
    RUN(test_request_messages);
    RUN(test_request_generation);
    RUN(test_request_tools);
    RUN(test_request_text_format);
    RUN(test_request_accepted);
    RUN(test_request_errors);
    RUN(test_param_map);
    RUN(test_error_rename);
    RUN(test_previous_response);
    return test_summary();
}
