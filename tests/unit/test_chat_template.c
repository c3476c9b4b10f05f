/*
 * tests/unit/test_chat_template.c — chat template detection and rendering
 * (engine/text/chat_template.h): the family names, detection of every family and its refusals,
 * rendering of ChatML, Llama 2/3 (and 3.1+ dated), Mistral, Gemma, Zephyr and Phi-3, tools and
 * tool calls, errors, template spans, and GGUF input. Qwen3 and Qwen's later templates
 * (Thinking-2507, QwQ, Instruct-2507) are in test_chat_template_qwen.c; the helpers both use
 * are in chat_template_test_util.h.
 *
 * Expected prompts are written out by hand from the published templates (see
 * tests/reference/templates/), never produced by the code under test; the Jinja-rendered
 * comparison lives in tests/reference/test_chat_template.py. No model file needed: the GGUF
 * path uses a GGUF image built in memory.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat_template_test_util.h"
#include "common/error.h"
#include "engine/model/gguf.h"
#include "engine/text/chat_template.h"
#include "testutil.h"

/* ---- published templates (verbatim, as C strings) ---- */

static const char SMOLLM2[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
    "'<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|im_start|>assistant\n' }}{% endif %}";

static const char CHATML_PLAIN[] =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|im_start|>assistant\\n' }}{% endif %}";

static const char LLAMA2[] =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set "
    "system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set "
    "system_message = false %}{% endif %}{% for message in loop_messages %}{% if "
    "(message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation "
    "roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == "
    "0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
    "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] "
    "%}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + "
    "' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + "
    "eos_token }}{% endif %}{% endfor %}";

static const char LLAMA3[] =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | "
    "trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% "
    "endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";

static const char LLAMA31_SNIPPET[] =
    "{{- bos_token }}\n{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}\n{{- "
    "\"Cutting Knowledge Date: December 2023\\n\" }}{{- \"<|eot_id|>\" }}";

/* Meta's Llama-3.2-Instruct template (tests/reference/templates/llama-3.2-instruct.jinja) */
static const char LLAMA32[] =
    "{{- bos_token }}\n"
    "{%- if custom_tools is defined %}\n"
    "    {%- set tools = custom_tools %}\n"
    "{%- endif %}\n"
    "{%- if not tools_in_user_message is defined %}\n"
    "    {%- set tools_in_user_message = true %}\n"
    "{%- endif %}\n"
    "{%- if not date_string is defined %}\n"
    "    {%- if strftime_now is defined %}\n"
    "        {%- set date_string = strftime_now(\"%d %b %Y\") %}\n"
    "    {%- else %}\n"
    "        {%- set date_string = \"26 Jul 2024\" %}\n"
    "    {%- endif %}\n"
    "{%- endif %}\n"
    "{%- if not tools is defined %}\n"
    "    {%- set tools = none %}\n"
    "{%- endif %}\n"
    "\n"
    "{#- This block extracts the system message, so we can slot it into the right place. #}\n"
    "{%- if messages[0]['role'] == 'system' %}\n"
    "    {%- set system_message = messages[0]['content']|trim %}\n"
    "    {%- set messages = messages[1:] %}\n"
    "{%- else %}\n"
    "    {%- set system_message = \"\" %}\n"
    "{%- endif %}\n"
    "\n"
    "{#- System message #}\n"
    "{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}\n"
    "{%- if tools is not none %}\n"
    "    {{- \"Environment: ipython\\n\" }}\n"
    "{%- endif %}\n"
    "{{- \"Cutting Knowledge Date: December 2023\\n\" }}\n"
    "{{- \"Today Date: \" + date_string + \"\\n\\n\" }}\n"
    "{%- if tools is not none and not tools_in_user_message %}\n"
    "    {{- \"You have access to the following functions. To call a function, please respond with "
    "JSON for a function call.\" }}\n"
    "    {{- 'Respond in the format {\"name\": function name, \"parameters\": dictionary of "
    "argument name and its value}.' }}\n"
    "    {{- \"Do not use variables.\\n\\n\" }}\n"
    "    {%- for t in tools %}\n"
    "        {{- t | tojson(indent=4) }}\n"
    "        {{- \"\\n\\n\" }}\n"
    "    {%- endfor %}\n"
    "{%- endif %}\n"
    "{{- system_message }}\n"
    "{{- \"<|eot_id|>\" }}\n"
    "\n"
    "{#- Custom tools are passed in a user message with some extra guidance #}\n"
    "{%- if tools_in_user_message and not tools is none %}\n"
    "    {#- Extract the first user message so we can plug it in here #}\n"
    "    {%- if messages | length != 0 %}\n"
    "        {%- set first_user_message = messages[0]['content']|trim %}\n"
    "        {%- set messages = messages[1:] %}\n"
    "    {%- else %}\n"
    "        {{- raise_exception(\"Cannot put tools in the first user message when there's no "
    "first user message!\") }}\n"
    "{%- endif %}\n"
    "    {{- '<|start_header_id|>user<|end_header_id|>\\n\\n' -}}\n"
    "    {{- \"Given the following functions, please respond with a JSON for a function call \" "
    "}}\n"
    "    {{- \"with its proper arguments that best answers the given prompt.\\n\\n\" }}\n"
    "    {{- 'Respond in the format {\"name\": function name, \"parameters\": dictionary of "
    "argument name and its value}.' }}\n"
    "    {{- \"Do not use variables.\\n\\n\" }}\n"
    "    {%- for t in tools %}\n"
    "        {{- t | tojson(indent=4) }}\n"
    "        {{- \"\\n\\n\" }}\n"
    "    {%- endfor %}\n"
    "    {{- first_user_message + \"<|eot_id|>\"}}\n"
    "{%- endif %}\n"
    "\n"
    "{%- for message in messages %}\n"
    "    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in "
    "message) %}\n"
    "        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ "
    "message['content'] | trim + '<|eot_id|>' }}\n"
    "    {%- elif 'tool_calls' in message %}\n"
    "        {%- if not message.tool_calls|length == 1 %}\n"
    "            {{- raise_exception(\"This model only supports single tool-calls at once!\") }}\n"
    "        {%- endif %}\n"
    "        {%- set tool_call = message.tool_calls[0].function %}\n"
    "        {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}\n"
    "        {{- '{\"name\": \"' + tool_call.name + '\", ' }}\n"
    "        {{- '\"parameters\": ' }}\n"
    "        {{- tool_call.arguments | tojson }}\n"
    "        {{- \"}\" }}\n"
    "        {{- \"<|eot_id|>\" }}\n"
    "    {%- elif message.role == \"tool\" or message.role == \"ipython\" %}\n"
    "        {{- \"<|start_header_id|>ipython<|end_header_id|>\\n\\n\" }}\n"
    "        {%- if message.content is mapping or message.content is iterable %}\n"
    "            {{- message.content | tojson }}\n"
    "        {%- else %}\n"
    "            {{- message.content }}\n"
    "        {%- endif %}\n"
    "        {{- \"<|eot_id|>\" }}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n"
    "{%- endif %}\n";

/* The call-format line of Qwen2.5's tools block: double braces (its GGUF copy) or single ones
 * (other revisions), inside a Jinja string literal */
#define QWEN_TOOLS_LINE(open, close)                                                               \
    "{%- if tools %}{{- '<|im_start|>system\\n' }}{{- \"\\n</tools>\\n\\nFor each function call, " \
    "return a json object with function name and arguments within <tool_call></tool_call> XML "    \
    "tags:\\n<tool_call>\\n" open "\\\"name\\\": <function-name>, \\\"arguments\\\": "             \
    "<args-json-object>" close "\\n</tool_call><|im_end|>\\n\" }}{%- endif %}"
static const char QWEN_TOOLS2[] = QWEN_TOOLS_LINE("{{", "}}");
static const char QWEN_TOOLS1[] = QWEN_TOOLS_LINE("{", "}");

static const char MISTRAL[] =
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
    "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
    "user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ "
    "'[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ "
    "message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles "
    "are supported!') }}{% endif %}{% endfor %}";

static const char GEMMA3_SNIPPET[] =
    "{{ bos_token }}\n{%- if messages[0]['role'] == 'system' -%}\n    {%- if "
    "messages[0]['content'] is string -%}\n        {%- set first_user_prefix = "
    "messages[0]['content'] + '\n\n' -%}\n{%- endif -%}\n    {{ '<start_of_turn>' + role + '\n' "
    "+ (first_user_prefix if loop.first else \"\") }}";

static const char GEMMA2[] =
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not "
    "supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != "
    "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
    "user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}{% "
    "set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ "
    "'<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% "
    "endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}";

static const char ZEPHYR[] =
    "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + "
    "message['content'] + eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' "
    "+ message['content'] + eos_token }}\n{% elif message['role'] == 'assistant' %}\n{{ "
    "'<|assistant|>\n'  + message['content'] + eos_token }}\n{% endif %}\n{% if loop.last and "
    "add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}";

static const char PHI3[] =
    "{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\n' + "
    "message['content'] + '<|end|>\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\n' + "
    "message['content'] + '<|end|>\n'}}{% elif message['role'] == 'assistant' "
    "%}{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}{% endfor %}{% if "
    "add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}";

static const char PHI35[] =
    "{% for message in messages %}{% if message['role'] == 'system' and message['content'] "
    "%}{{'<|system|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'user' "
    "%}{{'<|user|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == "
    "'assistant' %}{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}{% endfor "
    "%}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}";

static const char VICUNA[] =
    "{%- for message in messages %}{%- if message['role'] == 'system' -%}{{- '' + "
    "message['content'] + '\n\n' -}}{%- else -%}{%- if message['role'] == 'user' -%}{{-'USER: ' "
    "+ message['content'] + '\n'-}}{%- else -%}{{-'ASSISTANT: ' + message['content'] + '</s>\n' "
    "-}}{%- endif -%}{%- endif -%}{%- endfor -%}{%- if add_generation_prompt "
    "-%}{{-'ASSISTANT:'-}}{%- endif -%}";

/* ---- tests ---- */

static void test_family_names(void) {
    for (int i = 0; i < PGD_CHAT_FAMILY_COUNT; i++) {
        pgd_chat_family f = PGD_CHAT_PHI3;
        CHECK_EQ_INT(pgd_chat_family_from_name(pgd_chat_family_name((pgd_chat_family)i), &f), 0);
        CHECK_EQ_INT(f, i);
    }
    CHECK_EQ_STR(pgd_chat_family_name(PGD_CHAT_CHATML), "chatml");
    CHECK_EQ_STR(pgd_chat_family_name(PGD_CHAT_LLAMA2), "llama2");
    CHECK_EQ_STR(pgd_chat_family_name(PGD_CHAT_LLAMA3), "llama3");
    CHECK_EQ_STR(pgd_chat_family_name(PGD_CHAT_MISTRAL), "mistral");
    CHECK_EQ_STR(pgd_chat_family_name(PGD_CHAT_GEMMA), "gemma");
    CHECK_EQ_STR(pgd_chat_family_name(PGD_CHAT_ZEPHYR), "zephyr");
    CHECK_EQ_STR(pgd_chat_family_name(PGD_CHAT_PHI3), "phi3");
    CHECK_EQ_STR(pgd_chat_family_name(PGD_CHAT_QWEN3), "qwen3");
    CHECK_EQ_STR(pgd_chat_family_name(PGD_CHAT_QWQ), "qwq");
    CHECK_EQ_STR(pgd_chat_family_name((pgd_chat_family)99), "?");
    pgd_chat_family f;
    CHECK_EQ_INT(pgd_chat_family_from_name("ChatML", &f), PGD_EINVAL);
    CHECK(strstr(pgd_error_detail(), "ChatML") != NULL);
    CHECK(strstr(pgd_error_detail(),
                 "chatml, llama2, llama3, mistral, gemma, zephyr, phi3, qwen3, qwq"));
}

static void test_detect_each_family(void) {
    struct {
        const char *src;
        pgd_chat_family want;
    } cases[] = {
        {SMOLLM2, PGD_CHAT_CHATML},       {QWEN25_SNIPPET, PGD_CHAT_CHATML},
        {CHATML_PLAIN, PGD_CHAT_CHATML},  {LLAMA2, PGD_CHAT_LLAMA2},
        {LLAMA3, PGD_CHAT_LLAMA3},        {MISTRAL, PGD_CHAT_MISTRAL},
        {GEMMA3_SNIPPET, PGD_CHAT_GEMMA}, {GEMMA2, PGD_CHAT_GEMMA},
        {ZEPHYR, PGD_CHAT_ZEPHYR},        {PHI3, PGD_CHAT_PHI3},
        {PHI35, PGD_CHAT_PHI3},
    };
    for (size_t i = 0; i < PGD_ARRAY_LEN(cases); i++) {
        pgd_chat_template *t = make(cases[i].src, NULL, "<s>", "</s>");
        CHECK(t != NULL);
        if (!t) continue;
        if (pgd_chat_template_family(t) != cases[i].want)
            fprintf(stderr, "  case %zu: got %s\n", i,
                    pgd_chat_family_name(pgd_chat_template_family(t)));
        CHECK_EQ_INT(pgd_chat_template_family(t), cases[i].want);
        pgd_chat_template_free(t);
    }
}

static void test_default_system_extraction(void) {
    pgd_chat_template *t = make(SMOLLM2, NULL, NULL, NULL);
    REQUIRE(t);
    pgd_str s = pgd_chat_template_default_system(t);
    const char *want = "You are a helpful AI assistant named SmolLM, trained by Hugging Face";
    CHECK(s.len == strlen(want) && !memcmp(s.ptr, want, s.len));
    pgd_chat_template_free(t);

    t = make(QWEN25_SNIPPET, NULL, NULL, NULL); /* escaped \n in the literal */
    REQUIRE(t);
    s = pgd_chat_template_default_system(t);
    want = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
    CHECK(s.len == strlen(want) && !memcmp(s.ptr, want, s.len));
    pgd_chat_template_free(t);

    t = make(CHATML_PLAIN, NULL, NULL, NULL);
    REQUIRE(t);
    CHECK(pgd_chat_template_default_system(t).ptr == NULL);
    CHECK(pgd_chat_template_default_system(t).len == 0);
    pgd_chat_template_free(t);

    /* a literal in plain text (outside any tag) is not template code */
    t = make("<|im_start|>'<|im_start|>system\nX<|im_end|>\n'", NULL, NULL, NULL);
    REQUIRE(t);
    CHECK(pgd_chat_template_default_system(t).ptr == NULL);
    pgd_chat_template_free(t);

    /* escapes the way Jinja decodes them: \t, \x41, \u00e9, \' */
    t = make("{{ '<|im_start|>system\\nA\\tB\\x41\\u00e9\\'<|im_end|>\\n' }}", NULL, NULL, NULL);
    REQUIRE(t);
    s = pgd_chat_template_default_system(t);
    want = "A\tBA\xc3\xa9'";
    CHECK(s.len == strlen(want) && !memcmp(s.ptr, want, s.len));
    pgd_chat_template_free(t);

    /* the override keeps the same family's default system prompt, drops another family's */
    t = make(SMOLLM2, "chatml", NULL, NULL);
    REQUIRE(t);
    CHECK(pgd_chat_template_default_system(t).len > 0);
    pgd_chat_template_free(t);
    t = make(SMOLLM2, "llama3", NULL, NULL);
    REQUIRE(t);
    CHECK_EQ_INT(pgd_chat_template_family(t), PGD_CHAT_LLAMA3);
    CHECK(pgd_chat_template_default_system(t).len == 0);
    pgd_chat_template_free(t);
}

static void test_unknown_template(void) {
    pgd_chat_template *t = (pgd_chat_template *)1;
    int rc = pgd_chat_template_detect(VICUNA, strlen(VICUNA), NULL, "<s>", "</s>", &t);
    CHECK_EQ_INT(rc, PGD_EUNSUPPORTED);
    CHECK(t == NULL);
    const char *d = pgd_error_detail();
    /* the first ~80 characters, newlines shown as \n, then "..." */
    CHECK(strstr(d, "{%- for message in messages %}{%- if message['role'] == 'system' -%}") !=
          NULL);
    CHECK(strstr(d, "...") != NULL);
    CHECK(strstr(d, "USER:") == NULL); /* cut well before the end */
    CHECK(strstr(d, "chatml, llama2, llama3, mistral, gemma, zephyr, phi3, qwen3") != NULL);

    const char *shortsrc = "{{ messages }}\n";
    rc = pgd_chat_template_detect(shortsrc, strlen(shortsrc), NULL, NULL, NULL, &t);
    CHECK_EQ_INT(rc, PGD_EUNSUPPORTED);
    CHECK(strstr(pgd_error_detail(), "\"{{ messages }}\\n\"") != NULL);

    /* no template, blank template: not found, unless overridden */
    rc = pgd_chat_template_detect(NULL, 0, NULL, NULL, NULL, &t);
    CHECK_EQ_INT(rc, PGD_ENOTFOUND);
    CHECK(strstr(pgd_error_detail(), "--chat-template") != NULL);
    rc = pgd_chat_template_detect(" \n\t", 3, NULL, NULL, NULL, &t);
    CHECK_EQ_INT(rc, PGD_ENOTFOUND);
    rc = pgd_chat_template_detect(NULL, 0, "zephyr", NULL, NULL, &t);
    CHECK_EQ_INT(rc, 0);
    REQUIRE(t);
    CHECK_EQ_INT(pgd_chat_template_family(t), PGD_CHAT_ZEPHYR);
    pgd_chat_template_free(t);
    /* an unknown template with an override is fine; an unknown override name is not */
    rc = pgd_chat_template_detect(VICUNA, strlen(VICUNA), "mistral", NULL, NULL, &t);
    CHECK_EQ_INT(rc, 0);
    REQUIRE(t);
    CHECK_EQ_INT(pgd_chat_template_family(t), PGD_CHAT_MISTRAL);
    pgd_chat_template_free(t);
    rc = pgd_chat_template_detect(SMOLLM2, strlen(SMOLLM2), "vicuna", NULL, NULL, &t);
    CHECK_EQ_INT(rc, PGD_EINVAL);
    CHECK(strstr(pgd_error_detail(), "vicuna") != NULL);
}

static void test_unsupported_variants(void) {
    pgd_chat_template *t = NULL;
    int rc =
        pgd_chat_template_detect(LLAMA31_SNIPPET, strlen(LLAMA31_SNIPPET), NULL, NULL, NULL, &t);
    CHECK_EQ_INT(rc, PGD_EUNSUPPORTED);
    CHECK(strstr(pgd_error_detail(), "--chat-template llama3") != NULL);
    /* forcing the family works */
    t = make(LLAMA31_SNIPPET, "llama3", "B", "E");
    REQUIRE(t);
    conv c = {0};
    add(&c, "user", "hi");
    CHECK(renders_as(t, &c, true,
                     "B<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
                     "<|start_header_id|>assistant<|end_header_id|>\n\n"));
    pgd_chat_template_free(t);

    const char *mistral_sys = "{%- if messages[0]['role'] == 'system' %}{{ ' [INST] ' + "
                              "system_message + ' [/INST]' }}{%- endif %}";
    rc = pgd_chat_template_detect(mistral_sys, strlen(mistral_sys), NULL, NULL, NULL, &t);
    CHECK_EQ_INT(rc, PGD_EUNSUPPORTED);
    CHECK(strstr(pgd_error_detail(), "mistral") != NULL);
}

static void test_render_chatml(void) {
    pgd_chat_template *t = make(SMOLLM2, NULL, "<|im_start|>", "<|im_end|>");
    REQUIRE(t);
    conv c = {0};
    add(&c, "user", "Hi");
    CHECK(renders_as(t, &c, true,
                     "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
                     "Hugging Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                     "<|im_start|>assistant\n"));
    conv d = {0};
    add(&d, "system", "S");
    add(&d, "user", "U");
    add(&d, "assistant", "A");
    add(&d, "system", "S2"); /* a later system message is a plain turn */
    CHECK(renders_as(t, &d, false,
                     "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
                     "<|im_start|>assistant\nA<|im_end|>\n<|im_start|>system\nS2<|im_end|>\n"));
    pgd_chat_template_free(t);
}

static void test_render_llama2(void) {
    pgd_chat_template *t = make(LLAMA2, NULL, "<s>", "</s>");
    REQUIRE(t);
    conv c = {0};
    add(&c, "system", " S ");
    add(&c, "user", " Hi ");
    add(&c, "assistant", "  Yo\n");
    add(&c, "user", "Q");
    /* no generation prompt in this template: the flag changes nothing. .strip() applies to
     * '<<SYS>>\n' + system + '\n<</SYS>>\n\n' + content as a whole, so " Hi" keeps its
     * leading space while the system text keeps both of its spaces. */
    CHECK(renders_as(t, &c, true,
                     "<s>[INST] <<SYS>>\n S \n<</SYS>>\n\n Hi [/INST] Yo </s><s>[INST] Q [/INST]"));
    CHECK(renders_as(t, &c, false,
                     "<s>[INST] <<SYS>>\n S \n<</SYS>>\n\n Hi [/INST] Yo </s><s>[INST] Q [/INST]"));
    /* .strip() runs over the whole content, <<SYS>> block included */
    conv d = {0};
    add(&d, "system", "S");
    add(&d, "user", " \n ");
    CHECK(renders_as(t, &d, true, "<s>[INST] <<SYS>>\nS\n<</SYS>> [/INST]"));
    /* only a system message: nothing to render */
    conv e = {0};
    add(&e, "system", "S");
    CHECK(renders_as(t, &e, true, ""));
    pgd_chat_template_free(t);
}

static void test_render_llama3(void) {
    pgd_chat_template *t = make(LLAMA3, NULL, "<|begin_of_text|>", "<|eot_id|>");
    REQUIRE(t);
    conv c = {0};
    add(&c, "system", "\tS\n");
    add(&c, "user", "U");
    add(&c, "assistant", "  ");
    CHECK(renders_as(t, &c, true,
                     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
                     "<|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|>"
                     "<|start_header_id|>assistant<|end_header_id|>\n\n<|eot_id|>"
                     "<|start_header_id|>assistant<|end_header_id|>\n\n"));
    pgd_chat_template_free(t);
}

static void test_render_mistral(void) {
    pgd_chat_template *t = make(MISTRAL, NULL, "<s>", "</s>");
    REQUIRE(t);
    conv c = {0};
    add(&c, "user", " Hi ");
    add(&c, "assistant", "Yo");
    add(&c, "user", "Q");
    CHECK(renders_as(t, &c, true, "<s>[INST]  Hi  [/INST]Yo</s>[INST] Q [/INST]"));
    pgd_chat_template_free(t);
}

static void test_render_gemma(void) {
    pgd_chat_template *t = make(GEMMA3_SNIPPET, NULL, "<bos>", "<eos>");
    REQUIRE(t);
    conv c = {0};
    add(&c, "system", " Be brief ");
    add(&c, "user", " Hi ");
    add(&c, "assistant", "Yo\n");
    add(&c, "user", "Q");
    CHECK(renders_as(t, &c, true,
                     "<bos><start_of_turn>user\n Be brief \n\nHi<end_of_turn>\n"
                     "<start_of_turn>model\nYo<end_of_turn>\n<start_of_turn>user\nQ<end_of_turn>\n"
                     "<start_of_turn>model\n"));
    CHECK(
        renders_as(t, &c, false,
                   "<bos><start_of_turn>user\n Be brief \n\nHi<end_of_turn>\n"
                   "<start_of_turn>model\nYo<end_of_turn>\n<start_of_turn>user\nQ<end_of_turn>\n"));
    pgd_chat_template_free(t);

    /* Gemma-2's template refuses a system message */
    t = make(GEMMA2, NULL, "<bos>", "<eos>");
    REQUIRE(t);
    pgd_chat_prompt p;
    CHECK_EQ_INT(pgd_chat_render(t, c.m, c.n, true, &p), PGD_EINVAL);
    CHECK(strstr(pgd_error_detail(), "System role not supported") != NULL);
    CHECK(p.text.data == NULL && p.special == NULL);
    conv d = {0};
    add(&d, "user", "Hi");
    CHECK(renders_as(t, &d, true,
                     "<bos><start_of_turn>user\nHi<end_of_turn>\n"
                     "<start_of_turn>model\n"));
    pgd_chat_template_free(t);
}

static void test_render_zephyr_phi3(void) {
    pgd_chat_template *t = make(ZEPHYR, NULL, "<s>", "</s>");
    REQUIRE(t);
    conv c = {0};
    add(&c, "system", "S");
    add(&c, "user", "U");
    CHECK(renders_as(t, &c, true, "<|system|>\nS</s>\n<|user|>\nU</s>\n<|assistant|>\n"));
    CHECK(renders_as(t, &c, false, "<|system|>\nS</s>\n<|user|>\nU</s>\n"));
    pgd_chat_template_free(t);

    t = make(PHI3, NULL, "<s>", "<|endoftext|>");
    REQUIRE(t);
    conv d = {0};
    add(&d, "system", "");
    add(&d, "user", "U");
    CHECK(renders_as(t, &d, true, "<|system|>\n<|end|>\n<|user|>\nU<|end|>\n<|assistant|>\n"));
    CHECK(renders_as(t, &d, false, "<|system|>\n<|end|>\n<|user|>\nU<|end|>\n<|endoftext|>"));
    pgd_chat_template_free(t);

    t = make(PHI35, NULL, "<s>", "<|endoftext|>"); /* Phi-3.5 drops the empty system message */
    REQUIRE(t);
    CHECK(renders_as(t, &d, true, "<|user|>\nU<|end|>\n<|assistant|>\n"));
    pgd_chat_template_free(t);
}

#define QWEN_SYSTEM "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

/* The conversation of test_render_tools_chatml after its system turn, by hand. */
#define TOOL_CONV_BODY                                                                             \
    "<|im_start|>user\nWeather?<|im_end|>\n"                                                       \
    "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "              \
    "{\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": "       \
    "{}}\n</tool_call><|im_end|>\n"                                                                \
    "<|im_start|>user\n<tool_response>\n22C\n</tool_response>\n<tool_response>\nnoon\n"            \
    "</tool_response><|im_end|>\n"                                                                 \
    "<|im_start|>assistant\nIt is 22C.\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n"     \
    "</tool_call><|im_end|>\n"                                                                     \
    "<|im_start|>user\n<tool_response>\nlate\n</tool_response><|im_end|>\n"

static void test_render_tools_chatml(void) {
    pgd_chat_template *t = make(QWEN25_SNIPPET, NULL, "", "<|im_end|>");
    REQUIRE(t);
    CHECK(pgd_chat_template_renders_tools(t));
    conv c = {0};
    add(&c, "user", "Weather?");
    add(&c, "assistant", "");
    with_calls(&c, k_calls, 2);
    add(&c, "tool", "22C");
    add(&c, "tool", "noon");
    add(&c, "assistant", "It is 22C.");
    with_calls(&c, k_calls + 1, 1);
    add(&c, "tool", "late");
    /* no system message: the default system prompt, then the tools block */
    CHECK(renders_tools_as(t, &c, &k_tools, true,
                           "<|im_start|>system\n" QWEN_SYSTEM
                           "\n\n" TOOLS_HEAD TOOL_DEFS TOOLS_TAIL TOOL_CONV_BODY
                           "<|im_start|>assistant\n"));
    /* no tools (NULL or none): tool calls and results still render, after the usual system turn */
    pgd_chat_tools none = {NULL, NULL, 0};
    CHECK(renders_tools_as(t, &c, NULL, false,
                           "<|im_start|>system\n" QWEN_SYSTEM "<|im_end|>\n" TOOL_CONV_BODY));
    CHECK(renders_tools_as(t, &c, &none, false,
                           "<|im_start|>system\n" QWEN_SYSTEM "<|im_end|>\n" TOOL_CONV_BODY));
    CHECK(
        renders_as(t, &c, false, "<|im_start|>system\n" QWEN_SYSTEM "<|im_end|>\n" TOOL_CONV_BODY));

    /* a system message: its content replaces the default, and is not rendered again */
    conv d = {0};
    add(&d, "system", "Be brief.");
    add(&d, "user", "Weather?");
    CHECK(renders_tools_as(t, &d, &k_tools, false,
                           "<|im_start|>system\nBe brief.\n\n" TOOLS_HEAD TOOL_DEFS TOOLS_TAIL
                           "<|im_start|>user\nWeather?<|im_end|>\n"));
    /* a tool result first, and last after a tool: one user turn */
    conv e = {0};
    add(&e, "tool", "r1");
    add(&e, "tool", "r2");
    CHECK(
        renders_as(t, &e, true,
                   "<|im_start|>system\n" QWEN_SYSTEM "<|im_end|>\n"
                   "<|im_start|>user\n<tool_response>\nr1\n</tool_response>\n<tool_response>\nr2\n"
                   "</tool_response><|im_end|>\n<|im_start|>assistant\n"));
    pgd_chat_template_free(t);

    /* plain ChatML has no default system prompt: the tools open a system turn of their own,
     * without the blank line that would follow a system text; an empty system message keeps
     * it */
    t = make(CHATML_PLAIN, NULL, NULL, NULL);
    REQUIRE(t);
    conv f = {0};
    add(&f, "user", "Hi");
    CHECK(renders_tools_as(t, &f, &k_tools, true,
                           "<|im_start|>system\n" TOOLS_HEAD TOOL_DEFS TOOLS_TAIL
                           "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"));
    conv g = {0};
    add(&g, "system", "");
    add(&g, "user", "Hi");
    CHECK(renders_tools_as(t, &g, &k_tools, false,
                           "<|im_start|>system\n\n\n" TOOLS_HEAD TOOL_DEFS TOOLS_TAIL
                           "<|im_start|>user\nHi<|im_end|>\n"));
    pgd_chat_template_free(t);

    /* SmolLM2 (no tool branch in its template) gets the same format with its own default */
    t = make(SMOLLM2, NULL, "<|im_start|>", "<|im_end|>");
    REQUIRE(t);
    CHECK(
        renders_tools_as(t, &f, &k_tools, true,
                         "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained "
                         "by Hugging Face\n\n" TOOLS_HEAD TOOL_DEFS TOOLS_TAIL
                         "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"));
    pgd_chat_template_free(t);
}

/* The tools block's braces follow the source: double only where it writes them. */
static void test_chatml_tool_braces(void) {
    conv f = {0};
    add(&f, "user", "Hi");
    pgd_chat_template *t = make(QWEN_TOOLS2, NULL, NULL, NULL);
    REQUIRE(t);
    CHECK(renders_tools_as(t, &f, &k_tools, true,
                           "<|im_start|>system\n" TOOLS_HEAD TOOL_DEFS TOOLS_TAIL2
                           "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"));
    pgd_chat_template_free(t);
    t = make(QWEN_TOOLS1, NULL, NULL, NULL);
    REQUIRE(t);
    CHECK(renders_tools_as(t, &f, &k_tools, true,
                           "<|im_start|>system\n" TOOLS_HEAD TOOL_DEFS TOOLS_TAIL
                           "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"));
    pgd_chat_template_free(t);
    /* the override keeps the source's braces; the family alone has single ones */
    t = make(QWEN_TOOLS2, "chatml", NULL, NULL);
    REQUIRE(t);
    CHECK(renders_tools_as(t, &f, &k_tools, false,
                           "<|im_start|>system\n" TOOLS_HEAD TOOL_DEFS TOOLS_TAIL2
                           "<|im_start|>user\nHi<|im_end|>\n"));
    pgd_chat_template_free(t);
    t = make(NULL, "chatml", NULL, NULL);
    REQUIRE(t);
    CHECK(pgd_chat_template_tool_format(t) == PGD_CHAT_TOOLS_HERMES);
    CHECK(renders_tools_as(t, &f, &k_tools, false,
                           "<|im_start|>system\n" TOOLS_HEAD TOOL_DEFS TOOLS_TAIL
                           "<|im_start|>user\nHi<|im_end|>\n"));
    pgd_chat_template_free(t);
}

/* ---- Llama 3.1+ (dated) ---- */

/* Llama 3.2's date block, and Llama 3.1's (a fixed date, no strftime_now) */
#define DATE_32                                                                                    \
    "{%- if not date_string is defined %}\n    {%- if strftime_now is defined %}\n        {%- "    \
    "set date_string = strftime_now(\"%d %b %Y\") %}\n    {%- else %}\n        {%- set "           \
    "date_string = \"26 Jul 2024\" %}\n    {%- endif %}\n{%- endif %}"
#define DATE_31                                                                                    \
    "{%- if not date_string is defined %}\n    {%- set date_string = \"26 Jul 2024\" %}\n{%- "     \
    "endif %}"

#define L3_SYS                                                                                     \
    "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
#define L3_SYS_TOOLS                                                                               \
    "<|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\nCutting Knowledge Date: " \
    "December 2023\n"
#define L3_TOOLS_HEAD                                                                              \
    "<|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please respond "   \
    "with a JSON for a function call with its proper arguments that best answers the given "       \
    "prompt.\n\nRespond in the format {\"name\": function name, \"parameters\": dictionary of "    \
    "argument name and its value}.Do not use variables.\n\n"
#define L3_GEN "<|start_header_id|>assistant<|end_header_id|>\n\n"

static const pgd_str k_defs_indent[2] = {
    S("{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"get_weather\"\n    "
      "}\n}"),
    S("{\n    \"type\": \"function\",\n    \"function\": {}\n}"),
};
static const pgd_chat_tools k_tools_both = {k_defs, k_defs_indent, 2};

static void test_detect_llama3_dated(void) {
    pgd_chat_template *t = make(LLAMA32, NULL, "<|begin_of_text|>", "<|eot_id|>");
    REQUIRE(t);
    CHECK_EQ_INT(pgd_chat_template_family(t), PGD_CHAT_LLAMA3);
    CHECK_EQ_INT(pgd_chat_template_tool_format(t), PGD_CHAT_TOOLS_LLAMA_JSON);
    CHECK(pgd_chat_template_renders_tools(t));
    pgd_chat_template_free(t);
    /* the same family forced keeps the variant; the family alone is Llama 3.0's, no tools */
    t = make(LLAMA32, "llama3", NULL, NULL);
    REQUIRE(t);
    CHECK_EQ_INT(pgd_chat_template_tool_format(t), PGD_CHAT_TOOLS_LLAMA_JSON);
    pgd_chat_template_free(t);
    t = make(NULL, "llama3", NULL, NULL);
    REQUIRE(t);
    CHECK_EQ_INT(pgd_chat_template_tool_format(t), PGD_CHAT_TOOLS_NONE);
    CHECK(!pgd_chat_template_renders_tools(t));
    pgd_chat_template_free(t);
    t = make(LLAMA3, NULL, NULL, NULL);
    REQUIRE(t);
    CHECK_EQ_INT(pgd_chat_template_tool_format(t), PGD_CHAT_TOOLS_NONE);
    pgd_chat_template_free(t);
    t = make(SMOLLM2, NULL, NULL, NULL);
    REQUIRE(t);
    CHECK_EQ_INT(pgd_chat_template_tool_format(t), PGD_CHAT_TOOLS_HERMES);
    pgd_chat_template_free(t);
    for (int f = 0; f < PGD_CHAT_FAMILY_COUNT; f++) {
        if (f == PGD_CHAT_CHATML || f == PGD_CHAT_QWEN3 || f == PGD_CHAT_QWQ) continue;
        t = make(NULL, pgd_chat_family_name((pgd_chat_family)f), NULL, NULL);
        REQUIRE(t);
        CHECK_EQ_INT(pgd_chat_template_tool_format(t), PGD_CHAT_TOOLS_NONE);
        pgd_chat_template_free(t);
    }

    /* Llama 3.1's date block (no strftime_now) is accepted too */
    char *l31 = replaced(LLAMA32, DATE_32, DATE_31);
    REQUIRE(l31);
    t = make(l31, NULL, NULL, NULL);
    CHECK(t != NULL);
    if (t) CHECK_EQ_INT(pgd_chat_template_tool_format(t), PGD_CHAT_TOOLS_LLAMA_JSON);
    pgd_chat_template_free(t);
    free(l31);

    /* dated templates other than Meta's are refused, naming the override */
    struct {
        const char *from, *to, *why;
    } bad[] = {
        {"This model only supports single tool-calls at once!", "One call at a time!",
         "other than Meta's published template"},
        {"message['content'] | trim", "message['content']", "other than Meta's published"},
        {"Given the following functions", "Given these functions", "other than Meta's"},
        {"<|start_header_id|>ipython", "<|start_header_id|>tool", "other than Meta's"},
        {"Cutting Knowledge Date: December 2023", "Cutting Knowledge Date: June 2024",
         "other than Meta's"},
        {"%d %b %Y", "%d %B %Y", "another date format"},
        {"{{- bos_token }}", "{{- bos_token }}{{ '<|image|>' }}", "Vision"},
    };
    for (size_t i = 0; i < PGD_ARRAY_LEN(bad); i++) {
        char *src = replaced(LLAMA32, bad[i].from, bad[i].to);
        REQUIRE(src);
        pgd_chat_template *u = (pgd_chat_template *)1;
        CHECK_EQ_INT(pgd_chat_template_detect(src, strlen(src), NULL, NULL, NULL, &u),
                     PGD_EUNSUPPORTED);
        if (u) fprintf(stderr, "  case %zu accepted\n", i);
        CHECK(u == NULL);
        pgd_chat_template_free(u);
        CHECK(strstr(pgd_error_detail(), bad[i].why) != NULL);
        CHECK(strstr(pgd_error_detail(), "--chat-template llama3") != NULL);
        free(src);
    }
    /* Meta's template without its date lines is not Llama 3.0's either */
    char *undated = replaced(LLAMA32, "{{- \"Cutting Knowledge Date: December 2023\\n\" }}", "");
    REQUIRE(undated);
    char *undated2 = replaced(undated, DATE_32, "");
    REQUIRE(undated2);
    char *undated3 = replaced(undated2, "{{- \"Today Date: \" + date_string + \"\\n\\n\" }}", "");
    REQUIRE(undated3);
    CHECK(strstr(undated3, "date_string") == NULL && strstr(undated3, "Cutting") == NULL);
    CHECK_EQ_INT(pgd_chat_template_detect(undated3, strlen(undated3), NULL, NULL, NULL, &t),
                 PGD_EUNSUPPORTED);
    free(undated);
    free(undated2);
    free(undated3);
}

static void test_render_llama3_dated(void) {
    char *l31 = replaced(LLAMA32, DATE_32, DATE_31);
    REQUIRE(l31);
    pgd_chat_template *t = make(l31, NULL, "<|begin_of_text|>", "<|eot_id|>");
    free(l31);
    REQUIRE(t);
    conv c = {0};
    add(&c, "system", " Be brief \n");
    add(&c, "user", "\tHi ");
    add(&c, "assistant", " Yo ");
    add(&c, "system", " late ");
    CHECK(renders_as(t, &c, true,
                     "<|begin_of_text|>" L3_SYS "Today Date: 26 Jul 2024\n\nBe brief<|eot_id|>"
                     "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                     "<|start_header_id|>assistant<|end_header_id|>\n\nYo<|eot_id|>"
                     "<|start_header_id|>system<|end_header_id|>\n\nlate<|eot_id|>" L3_GEN));
    /* no system message: the system turn is written all the same, empty */
    conv d = {0};
    add(&d, "user", "Hi");
    CHECK(renders_as(t, &d, false,
                     "<|begin_of_text|>" L3_SYS "Today Date: 26 Jul 2024\n\n<|eot_id|>"
                     "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"));
    conv e = {0};
    add(&e, "system", "S");
    CHECK(renders_as(t, &e, true,
                     "<|begin_of_text|>" L3_SYS "Today Date: 26 Jul 2024\n\nS<|eot_id|>" L3_GEN));

    /* tools, a call, a result: the definitions indented in the first user turn, the call's
     * content not written, the result as a JSON string */
    conv f = {0};
    add(&f, "user", " Weather? ");
    add(&f, "assistant", "not written");
    with_calls(&f, k_calls, 1);
    add(&f, "tool", "22\"C\n\x01\xc3\xa9");
    add(&f, "assistant", "It is 22C.");
    add(&f, "tool", "");
    const char *tool_body =
        "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"get_weather\", "
        "\"parameters\": {\"city\": \"Paris\"}}<|eot_id|>"
        "<|start_header_id|>ipython<|end_header_id|>\n\n\"22\\\"C\\n\\u0001\xc3\xa9\"<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nIt is 22C.<|eot_id|>"
        "<|start_header_id|>ipython<|end_header_id|>\n\n\"\"<|eot_id|>";
    char want[2048];
    snprintf(want, sizeof want,
             "<|begin_of_text|>" L3_SYS_TOOLS "Today Date: 26 Jul 2024\n\n<|eot_id|>" L3_TOOLS_HEAD
             "%.*s\n\n%.*s\n\nWeather?<|eot_id|>%s" L3_GEN,
             (int)k_defs_indent[0].len, k_defs_indent[0].ptr, (int)k_defs_indent[1].len,
             k_defs_indent[1].ptr, tool_body);
    CHECK(renders_tools_as(t, &f, &k_tools_both, true, want));
    /* without tools: the same calls and results, after a plain system turn */
    snprintf(want, sizeof want,
             "<|begin_of_text|>" L3_SYS "Today Date: 26 Jul 2024\n\n<|eot_id|>"
             "<|start_header_id|>user<|end_header_id|>\n\nWeather?<|eot_id|>%s",
             tool_body);
    CHECK(renders_as(t, &f, false, want));
    /* a system message and tools: the system text, then the first message after it */
    conv g = {0};
    add(&g, "system", "S ");
    add(&g, "tool", " first ");
    add(&g, "user", "U");
    snprintf(want, sizeof want,
             "<|begin_of_text|>" L3_SYS_TOOLS "Today Date: 26 Jul 2024\n\nS<|eot_id|>" L3_TOOLS_HEAD
             "%.*s\n\n%.*s\n\nfirst<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nU"
             "<|eot_id|>",
             (int)k_defs_indent[0].len, k_defs_indent[0].ptr, (int)k_defs_indent[1].len,
             k_defs_indent[1].ptr);
    CHECK(renders_tools_as(t, &g, &k_tools_both, false, want));

    /* the template's refusals */
    pgd_chat_prompt p;
    conv two = {0};
    add(&two, "user", "u");
    add(&two, "assistant", "");
    with_calls(&two, k_calls, 2);
    CHECK_EQ_INT(pgd_chat_render(t, two.m, two.n, true, &p), PGD_EINVAL);
    CHECK(strstr(pgd_error_detail(), "This model only supports single tool-calls at once!"));
    CHECK(p.text.data == NULL && p.special == NULL && p.n_special == 0);
    CHECK_EQ_INT(pgd_chat_render_tools(t, e.m, e.n, &k_tools_both, true, &p), PGD_EINVAL);
    CHECK(strstr(pgd_error_detail(), "Cannot put tools in the first user message when there's no "
                                     "first user message!"));
    /* the indented definitions are the ones read */
    const pgd_chat_tools compact_only = {k_defs, NULL, 2};
    CHECK_EQ_INT(pgd_chat_render_tools(t, d.m, d.n, &compact_only, true, &p), PGD_EINVAL);
    CHECK(strstr(pgd_error_detail(), "indented"));
    pgd_chat_template_free(t);

    /* the date: a fixed date is taken from the source */
    char *other = replaced(LLAMA32, DATE_32,
                           "{%- if not date_string is defined %}\n    {%- set date_string = "
                           "'01 Jan 2025' %}\n{%- endif %}");
    REQUIRE(other);
    t = make(other, NULL, "", "");
    free(other);
    REQUIRE(t);
    CHECK(renders_as(t, &d, false,
                     L3_SYS "Today Date: 01 Jan 2025\n\n<|eot_id|>"
                            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"));
    pgd_chat_template_free(t);
}

/* Llama 3.2 calls strftime_now: today's local date, as strftime("%d %b %Y") in the C locale. */
static void test_llama3_today(void) {
    pgd_chat_template *t = make(LLAMA32, NULL, "B", "E");
    REQUIRE(t);
    conv d = {0};
    add(&d, "user", "Hi");
    for (int attempt = 0; attempt < 2; attempt++) { /* a render across midnight: once more */
        char date[64], want[512];
        time_t now = time(NULL);
        struct tm tm;
        REQUIRE(localtime_r(&now, &tm) != NULL);
        REQUIRE(strftime(date, sizeof date, "%d %b %Y", &tm) > 0);
        snprintf(want, sizeof want,
                 "B" L3_SYS "Today Date: %s\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>"
                 "\n\nHi<|eot_id|>" L3_GEN,
                 date);
        pgd_chat_prompt p;
        REQUIRE(pgd_chat_render(t, d.m, d.n, true, &p) == 0);
        int same = !strcmp(p.text.data, want);
        if (!same && attempt) fprintf(stderr, "  got \"%s\"\n  want \"%s\"\n", p.text.data, want);
        /* the date is template text */
        size_t at = strlen("B" L3_SYS "Today Date: ");
        CHECK(in_span(&p, at) && in_span(&p, at + strlen(date) - 1));
        pgd_chat_prompt_free(&p);
        if (same) break;
        CHECK(attempt == 0);
    }
    pgd_chat_template_free(t);
}

/* The bytes outside p's spans, in order, are exactly `want` (want_len bytes). */
static int outside_is(const pgd_chat_prompt *p, const char *want, size_t want_len) {
    char buf[2048];
    size_t o = 0, at = 0;
    for (size_t i = 0; i <= p->n_special; i++) {
        size_t end = i < p->n_special ? p->special[i].begin : p->text.len;
        if (o + end - at > sizeof buf) return 0;
        memcpy(buf + o, p->text.data + at, end - at);
        o += end - at;
        if (i < p->n_special) at = p->special[i].end;
    }
    int ok = o == want_len && !memcmp(buf, want, o);
    if (!ok) fprintf(stderr, "  outside the spans: \"%.*s\"\n", (int)o, buf);
    return ok;
}

/* Llama 3.1+ spans: exactly the content (system text, definitions, first message, call names
 * and arguments, quoted results) lies outside them. */
static void test_llama3_dated_spans(void) {
    pgd_chat_template *t = make(LLAMA32, NULL, "<|begin_of_text|>", "<|eot_id|>");
    REQUIRE(t);
    static const pgd_str defs[1] = {S("<|eot_id|>{\n    \"a\": 1\n}")};
    static const pgd_chat_tool_call call = {S("<|python_tag|>"), S("{\"x\": \"<|eot_id|>\"}")};
    const pgd_chat_tools tools = {defs, defs, 1};
    conv c = {0};
    add(&c, "system", " <|eot_id|>sys ");
    add(&c, "user", "<|start_header_id|>");
    add(&c, "assistant", "dropped");
    with_calls(&c, &call, 1);
    add(&c, "tool", "<|eot_id|>\"r\"");
    add(&c, "user", "<|end_header_id|>");
    pgd_chat_prompt p;
    REQUIRE(pgd_chat_render_tools(t, c.m, c.n, &tools, true, &p) == 0);
    CHECK(spans_well_formed(&p));
    static const char want[] = "<|eot_id|>sys"
                               "<|eot_id|>{\n    \"a\": 1\n}"
                               "<|start_header_id|>"
                               "<|python_tag|>{\"x\": \"<|eot_id|>\"}"
                               "\"<|eot_id|>\\\"r\\\"\""
                               "<|end_header_id|>";
    CHECK(outside_is(&p, want, sizeof want - 1));
    pgd_chat_prompt_free(&p);
    pgd_chat_template_free(t);
    /* without tools: test_spans_never_cover_content */
}

/* Every template without a tool format refuses tools, "tool" messages and tool calls, saying
 * why. */
static void test_tools_refused(void) {
    static const char *const srcs[] = {LLAMA2, LLAMA3, MISTRAL, GEMMA3_SNIPPET,
                                       GEMMA2, ZEPHYR, PHI3,    PHI35};
    conv plain = {0}, tool = {0}, calls = {0};
    add(&plain, "user", "u");
    add(&tool, "user", "u");
    add(&tool, "tool", "r");
    add(&calls, "user", "u");
    add(&calls, "assistant", "");
    with_calls(&calls, k_calls, 1);
    for (size_t i = 0; i < PGD_ARRAY_LEN(srcs); i++) {
        pgd_chat_template *t = make(srcs[i], NULL, "<s>", "</s>");
        CHECK(t != NULL);
        if (!t) continue;
        const char *family = pgd_chat_family_name(pgd_chat_template_family(t));
        CHECK(!pgd_chat_template_renders_tools(t));
        pgd_chat_prompt p;
        CHECK_EQ_INT(pgd_chat_render_tools(t, plain.m, plain.n, &k_tools, true, &p), PGD_EINVAL);
        CHECK(strstr(pgd_error_detail(), "tool calling needs a chat template with a tool format"));
        CHECK(strstr(pgd_error_detail(), "chatml, qwen3 and qwq (Hermes <tool_call>)"));
        CHECK(strstr(pgd_error_detail(), family));
        CHECK(strstr(pgd_error_detail(), "tools were offered"));
        CHECK(p.text.data == NULL && p.special == NULL && p.n_special == 0);
        CHECK_EQ_INT(pgd_chat_render_tools(t, tool.m, tool.n, NULL, true, &p), PGD_EINVAL);
        CHECK(strstr(pgd_error_detail(), "tool format"));
        CHECK(strstr(pgd_error_detail(), "message 1 is 'tool'"));
        CHECK_EQ_INT(pgd_chat_render(t, calls.m, calls.n, true, &p), PGD_EINVAL);
        CHECK(strstr(pgd_error_detail(), "tool format"));
        CHECK(strstr(pgd_error_detail(), "message 1 has tool calls"));
        /* no tools offered (NULL or none) and no tool messages: renders as before */
        pgd_chat_tools none = {NULL, NULL, 0};
        CHECK_EQ_INT(pgd_chat_render_tools(t, plain.m, plain.n, &none, true, &p), 0);
        pgd_chat_prompt_free(&p);
        pgd_chat_template_free(t);
    }

    /* chatml: tool calls only on an assistant's message; unknown roles list "tool" */
    pgd_chat_template *t = make(CHATML_PLAIN, NULL, NULL, NULL);
    REQUIRE(t);
    conv u = {0};
    add(&u, "user", "u");
    with_calls(&u, k_calls, 1);
    pgd_chat_prompt p;
    CHECK_EQ_INT(pgd_chat_render(t, u.m, u.n, true, &p), PGD_EINVAL);
    CHECK(strstr(pgd_error_detail(), "only assistant messages carry tool calls"));
    conv f = {0};
    add(&f, "function", "x");
    CHECK_EQ_INT(pgd_chat_render(t, f.m, f.n, true, &p), PGD_EINVAL);
    CHECK(strstr(pgd_error_detail(), "unknown role 'function'"));
    CHECK(strstr(pgd_error_detail(), "known: system, user, assistant, tool"));
    /* a call or a definition without its text */
    static const pgd_chat_tool_call broken = {{NULL, 3}, S("{}")};
    conv b = {0};
    add(&b, "assistant", "");
    with_calls(&b, &broken, 1);
    CHECK_EQ_INT(pgd_chat_render(t, b.m, b.n, true, &p), PGD_EINVAL);
    static const pgd_str bad_def = {NULL, 4};
    pgd_chat_tools bad_tools = {&bad_def, NULL, 1};
    CHECK_EQ_INT(pgd_chat_render_tools(t, plain.m, plain.n, &bad_tools, true, &p), PGD_EINVAL);
    pgd_chat_template_free(t);
}

/* With tools, calls and results, every byte of content (system text, definitions, names,
 * arguments, results) lies outside the spans and every byte of template text inside: render
 * twice with contents that differ in every byte and compare. */
static void test_tool_spans(void) {
    pgd_chat_template *t = make(QWEN25_SNIPPET, NULL, "", "<|im_end|>");
    REQUIRE(t);
    static const pgd_str defs_a[2] = {S("<|im_end|>{\"a\"}"), S("<tools>")};
    static const pgd_str defs_b[2] = {S("ZZZZZZZZZZZZZZZ"), S("ZZZZZZZ")};
    static const pgd_chat_tool_call calls_a[2] = {
        {S("<|im_start|>"), S("{\"x\": \"</tool_call>\"}")}, {S("f"), S("{}")}};
    static const pgd_chat_tool_call calls_b[2] = {{S("ZZZZZZZZZZZZ"), S("ZZZZZZZZZZZZZZZZZZZZZ")},
                                                  {S("Z"), S("ZZ")}};
    const pgd_chat_tools ta = {defs_a, NULL, 2}, tb = {defs_b, NULL, 2};
    for (int sys = 0; sys < 2; sys++) {
        conv a = {0}, b = {0};
        if (sys) {
            add(&a, "system", "<|im_end|>sys");
            add(&b, "system", "ZZZZZZZZZZZZZ");
        }
        add(&a, "user", "<tool_call>");
        add(&b, "user", "ZZZZZZZZZZZ");
        add(&a, "assistant", "<|im_start|>");
        add(&b, "assistant", "ZZZZZZZZZZZZ");
        with_calls(&a, calls_a, 2);
        with_calls(&b, calls_b, 2);
        add(&a, "tool", "</tool_response>");
        add(&b, "tool", "ZZZZZZZZZZZZZZZZ");
        add(&a, "tool", "<|im_end|>");
        add(&b, "tool", "ZZZZZZZZZZ");
        pgd_chat_prompt pa, pb;
        REQUIRE(pgd_chat_render_tools(t, a.m, a.n, &ta, true, &pa) == 0);
        if (pgd_chat_render_tools(t, b.m, b.n, &tb, true, &pb) != 0) {
            pgd_chat_prompt_free(&pa);
            REQUIRE(0);
        }
        CHECK(spans_well_formed(&pa));
        CHECK_EQ_INT(pa.text.len, pb.text.len);
        size_t want = 15 + 7 + 12 + 21 + 1 + 2 + 11 + 12 + 16 + 10 + (sys ? 13 : 0);
        CHECK_EQ_INT(content_bytes_in_spans(&pa, &pb, "llama3 dated"), want);
        pgd_chat_prompt_free(&pa);
        pgd_chat_prompt_free(&pb);
    }
    pgd_chat_template_free(t);
}

static void test_errors(void) {
    pgd_chat_template *t = make(LLAMA2, NULL, "<s>", "</s>");
    REQUIRE(t);
    pgd_chat_prompt p;
    conv c = {0};
    add(&c, "user", "a");
    add(&c, "tool", "b");
    CHECK_EQ_INT(pgd_chat_render(t, c.m, c.n, true, &p), PGD_EINVAL);
    CHECK(strstr(pgd_error_detail(), "'tool'") != NULL);
    CHECK(strstr(pgd_error_detail(), "tool calling needs a chat template with a tool format"));
    conv x = {0};
    add(&x, "user", "a");
    add(&x, "critic", "b");
    CHECK_EQ_INT(pgd_chat_render(t, x.m, x.n, true, &p), PGD_EINVAL);
    CHECK(strstr(pgd_error_detail(), "unknown role 'critic' in message 1 (known: system, user, "
                                     "assistant)") != NULL);

    conv d = {0};
    add(&d, "user", "a");
    add(&d, "user", "b");
    CHECK_EQ_INT(pgd_chat_render(t, d.m, d.n, true, &p), PGD_EINVAL);
    CHECK(strstr(pgd_error_detail(), "roles must alternate") != NULL);
    conv e = {0};
    add(&e, "assistant", "a");
    CHECK_EQ_INT(pgd_chat_render(t, e.m, e.n, true, &p), PGD_EINVAL);
    CHECK_EQ_INT(pgd_chat_render(t, e.m, 0, true, &p), PGD_EINVAL);
    CHECK(strstr(pgd_error_detail(), "empty") != NULL);
    pgd_chat_template_free(t);

    t = make(MISTRAL, NULL, "<s>", "</s>");
    REQUIRE(t);
    CHECK_EQ_INT(pgd_chat_render(t, d.m, d.n, true, &p), PGD_EINVAL);
    CHECK(strstr(pgd_error_detail(), "roles must alternate") != NULL);
    conv s = {0};
    add(&s, "user", "a");
    add(&s, "system", "b"); /* passes the alternation check, then is refused */
    CHECK_EQ_INT(pgd_chat_render(t, s.m, s.n, true, &p), PGD_EINVAL);
    CHECK(strstr(pgd_error_detail(), "Only user and assistant roles are supported!") != NULL);
    pgd_chat_template_free(t);

    t = make(GEMMA3_SNIPPET, NULL, "<bos>", "<eos>");
    REQUIRE(t);
    CHECK_EQ_INT(pgd_chat_render(t, d.m, d.n, true, &p), PGD_EINVAL);
    conv g = {0};
    add(&g, "system", "s");
    add(&g, "assistant", "a"); /* after the system message the first turn must be user */
    CHECK_EQ_INT(pgd_chat_render(t, g.m, g.n, true, &p), PGD_EINVAL);
    pgd_chat_template_free(t);

    /* families without the alternation rule accept consecutive user turns */
    t = make(LLAMA3, NULL, "<|begin_of_text|>", "<|eot_id|>");
    REQUIRE(t);
    CHECK_EQ_INT(pgd_chat_render(t, d.m, d.n, true, &p), 0);
    pgd_chat_prompt_free(&p);
    CHECK_EQ_INT(pgd_chat_render(t, c.m, c.n, true, &p), PGD_EINVAL); /* no tool format */
    CHECK(strstr(pgd_error_detail(), "tool format") != NULL);
    pgd_chat_template_free(t);
}

/* Render the same conversation twice, with content A and with content B that differs from A in
 * every byte (same length, no whitespace): bytes that differ are content, bytes that agree are
 * template text. Every byte must be in a span exactly when it is template text. */
static void check_spans_exact(const char *src, const char *name, const char *bos, const char *eos,
                              const char *const *roles, size_t n) {
    static const char *const A[] = {"<|im_end|><|im_start|>x", "[INST]<<SYS>>[/INST]</s>",
                                    "<start_of_turn>model\nyo", "<|eot_id|><|end|><s>",
                                    "<|user|>\n<|assistant|>"};
    char b[PGD_ARRAY_LEN(A)][64];
    conv ca = {0}, cb = {0};
    for (size_t i = 0; i < n; i++) {
        const char *a = A[i % PGD_ARRAY_LEN(A)];
        size_t k;
        for (k = 0; a[k]; k++) b[i % PGD_ARRAY_LEN(A)][k] = a[k] == 'Z' ? 'Y' : 'Z';
        b[i % PGD_ARRAY_LEN(A)][k] = '\0';
        add(&ca, roles[i], a);
        add(&cb, roles[i], b[i % PGD_ARRAY_LEN(A)]);
    }
    pgd_chat_template *t = make(src, name, bos, eos);
    REQUIRE(t);
    for (int gen = 0; gen < 2; gen++) {
        pgd_chat_prompt pa, pb;
        REQUIRE(pgd_chat_render(t, ca.m, ca.n, gen, &pa) == 0);
        if (pgd_chat_render(t, cb.m, cb.n, gen, &pb) != 0) {
            pgd_chat_prompt_free(&pa);
            REQUIRE(0);
        }
        CHECK(spans_well_formed(&pa));
        CHECK_EQ_INT(pa.text.len, pb.text.len);
        CHECK_EQ_INT(pa.n_special, pb.n_special);
        CHECK(content_bytes_in_spans(&pa, &pb, pgd_chat_family_name(pgd_chat_template_family(t))) >
              0);
        pgd_chat_prompt_free(&pa);
        pgd_chat_prompt_free(&pb);
    }
    pgd_chat_template_free(t);
}

static void test_spans_never_cover_content(void) {
    const char *const alt[] = {"user", "assistant", "user", "assistant", "user"};
    const char *const sys[] = {"system", "user", "assistant", "user"};
    check_spans_exact(SMOLLM2, NULL, "<|im_start|>", "<|im_end|>", alt, 5);
    check_spans_exact(SMOLLM2, NULL, "<|im_start|>", "<|im_end|>", sys, 4);
    check_spans_exact(LLAMA2, NULL, "<s>", "</s>", sys, 4);
    check_spans_exact(LLAMA2, NULL, "<s>", "</s>", alt, 5);
    check_spans_exact(LLAMA3, NULL, "<|begin_of_text|>", "<|eot_id|>", sys, 4);
    check_spans_exact(LLAMA32, NULL, "<|begin_of_text|>", "<|eot_id|>", sys, 4);
    check_spans_exact(LLAMA32, NULL, "<|begin_of_text|>", "<|eot_id|>", alt, 5);
    check_spans_exact(MISTRAL, NULL, "<s>", "</s>", alt, 5);
    check_spans_exact(GEMMA3_SNIPPET, NULL, "<bos>", "<eos>", sys, 4);
    check_spans_exact(ZEPHYR, NULL, "<s>", "</s>", sys, 4);
    check_spans_exact(PHI3, NULL, "<s>", "<|endoftext|>", sys, 4);
    check_spans_exact(NULL, "chatml", "", "", sys, 4);

    /* and the exact spans of one ChatML render, written out */
    pgd_chat_template *t = make(CHATML_PLAIN, NULL, NULL, NULL);
    REQUIRE(t);
    conv c = {0};
    add(&c, "user", "a<|im_end|>b");
    pgd_chat_prompt p;
    REQUIRE(pgd_chat_render(t, c.m, c.n, true, &p) == 0);
    /* "<|im_start|>user\n" [0,17) "a<|im_end|>b" [17,29) "<|im_end|>\n<|im_start|>assistant\n" */
    CHECK_EQ_STR(p.text.data, "<|im_start|>user\na<|im_end|>b<|im_end|>\n<|im_start|>assistant\n");
    CHECK_EQ_INT(p.n_special, 2);
    if (p.n_special == 2) {
        CHECK_EQ_INT(p.special[0].begin, 0);
        CHECK_EQ_INT(p.special[0].end, 17);
        CHECK_EQ_INT(p.special[1].begin, 29);
        CHECK_EQ_INT(p.special[1].end, p.text.len);
    }
    pgd_chat_prompt_free(&p);
    CHECK(p.text.data == NULL && p.special == NULL && p.n_special == 0);
    pgd_chat_prompt_free(NULL);
    pgd_chat_template_free(t);
}

static void test_parts_concatenation(void) {
    pgd_chat_template *t = make(LLAMA3, NULL, "<|begin_of_text|>", "<|eot_id|>");
    REQUIRE(t);
    pgd_str parts[3] = {{"  Hel", 5}, {"lo w", 4}, {"\xc3\xb6rld \n", 7}};
    pgd_chat_msg m[2] = {{"user", parts, 3, NULL, 0}, {"assistant", NULL, 0, NULL, 0}};
    pgd_chat_prompt p;
    REQUIRE(pgd_chat_render(t, m, 2, false, &p) == 0);
    CHECK_EQ_STR(p.text.data, "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n"
                              "Hello w\xc3\xb6rld<|eot_id|>"
                              "<|start_header_id|>assistant<|end_header_id|>\n\n<|eot_id|>");
    pgd_chat_prompt_free(&p);
    pgd_chat_template_free(t);

    /* parts are joined before anything else: a marker split across parts is still content */
    t = make(SMOLLM2, NULL, NULL, NULL);
    REQUIRE(t);
    pgd_str split[2] = {{"<|im_", 5}, {"end|>", 5}};
    pgd_chat_msg s[2] = {{"system", NULL, 0, NULL, 0}, {"user", split, 2, NULL, 0}};
    REQUIRE(pgd_chat_render(t, s, 2, false, &p) == 0);
    CHECK_EQ_STR(p.text.data,
                 "<|im_start|>system\n<|im_end|>\n<|im_start|>user\n<|im_end|><|im_end|>\n");
    size_t at = strlen("<|im_start|>system\n<|im_end|>\n<|im_start|>user\n");
    for (size_t i = at; i < at + 10; i++) CHECK(!in_span(&p, i));
    pgd_chat_prompt_free(&p);
    pgd_chat_template_free(t);
}

static void test_python_strip(void) {
    /* Python's str.isspace(): U+3000, U+00A0, U+0085, U+001C..U+001F, U+2028 are whitespace;
     * U+200B (zero width space) and U+FEFF are not */
    pgd_chat_template *t = make(LLAMA3, NULL, "", "");
    REQUIRE(t);
    conv c = {0};
    add(&c, "user",
        "\xe3\x80\x80\xc2\xa0\x1c\x1f\xc2\x85 hi\xe2\x80\xa8\xe1\x9a\x80\xe2\x81\x9f\v");
    add(&c, "assistant", "\xe2\x80\x8bx\xef\xbb\xbf");
    CHECK(renders_as(t, &c, false,
                     "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
                     "<|start_header_id|>assistant<|end_header_id|>\n\n"
                     "\xe2\x80\x8bx\xef\xbb\xbf<|eot_id|>"));
    pgd_chat_template_free(t);
}

/* A GGUF v3 image in memory: header, then `n_kv` string key/values. */
static size_t gguf_image(uint8_t *buf, const char *key, const char *val) {
    size_t o = 0;
    uint32_t u32;
    uint64_t u64;
#define PUT(x) (memcpy(buf + o, &(x), sizeof(x)), o += sizeof(x))
    memcpy(buf, "GGUF", 4);
    o = 4;
    u32 = 3;
    PUT(u32);
    u64 = 0;
    PUT(u64); /* tensors */
    u64 = key ? 1 : 0;
    PUT(u64); /* kv */
    if (key) {
        u64 = strlen(key);
        PUT(u64);
        memcpy(buf + o, key, strlen(key));
        o += strlen(key);
        u32 = 8; /* string */
        PUT(u32);
        u64 = strlen(val);
        PUT(u64);
        memcpy(buf + o, val, strlen(val));
        o += strlen(val);
    }
#undef PUT
    while (o % 32) buf[o++] = 0;
    return o;
}

static void test_from_gguf(void) {
    static uint8_t img[4096];
    size_t n = gguf_image(img, "tokenizer.chat_template", MISTRAL);
    pgd_gguf *g = NULL;
    int rc = pgd_gguf_open_memory(img, n, &g);
    if (rc) fprintf(stderr, "  gguf: %s\n", pgd_error_detail());
    REQUIRE(rc == 0);
    pgd_chat_template *t = NULL;
    CHECK_EQ_INT(pgd_chat_template_from_gguf(g, NULL, "<s>", "</s>", &t), 0);
    REQUIRE(t);
    CHECK_EQ_INT(pgd_chat_template_family(t), PGD_CHAT_MISTRAL);
    pgd_chat_template_free(t);
    CHECK_EQ_INT(pgd_chat_template_from_gguf(g, "gemma", "<s>", "</s>", &t), 0);
    REQUIRE(t);
    CHECK_EQ_INT(pgd_chat_template_family(t), PGD_CHAT_GEMMA);
    pgd_chat_template_free(t);
    pgd_gguf_close(g);

    n = gguf_image(img, NULL, NULL); /* no template */
    REQUIRE(pgd_gguf_open_memory(img, n, &g) == 0);
    t = (pgd_chat_template *)1;
    CHECK_EQ_INT(pgd_chat_template_from_gguf(g, NULL, "<s>", "</s>", &t), PGD_ENOTFOUND);
    CHECK(t == NULL);
    CHECK(strstr(pgd_error_detail(), "no chat template") != NULL);
    CHECK_EQ_INT(pgd_chat_template_from_gguf(g, "phi3", NULL, NULL, &t), 0);
    REQUIRE(t);
    CHECK_EQ_INT(pgd_chat_template_family(t), PGD_CHAT_PHI3);
    pgd_chat_template_free(t);
    pgd_gguf_close(g);
}

int main(void) {
    RUN(test_family_names);
    RUN(test_detect_each_family);
    RUN(test_default_system_extraction);
    RUN(test_unknown_template);
    RUN(test_unsupported_variants);
    RUN(test_render_chatml);
    RUN(test_render_llama2);
    RUN(test_render_llama3);
    RUN(test_render_mistral);
    RUN(test_render_gemma);
    RUN(test_render_zephyr_phi3);
    RUN(test_render_tools_chatml);
    RUN(test_tools_refused);
    RUN(test_tool_spans);
    RUN(test_chatml_tool_braces);
    RUN(test_detect_llama3_dated);
    RUN(test_render_llama3_dated);
    RUN(test_llama3_today);
    RUN(test_llama3_dated_spans);
    RUN(test_errors);
    RUN(test_spans_never_cover_content);
    RUN(test_parts_concatenation);
    RUN(test_python_strip);
    RUN(test_from_gguf);
    return test_summary();
}
