/*
 * tests/fuzz/fuzz_api_chat.c — libFuzzer target: POST /v1/chat/completions bodies through
 * pgd_api_request_parse (and /tokenize bodies through pgd_api_tokenize_parse). See fuzz_api.inc.
 * Seeds: tests/fuzz/corpus/fuzz_api_chat/; dictionary: tests/fuzz/dict/json.dict.
 */
#define FUZZ_API_CHAT 1
#include "fuzz_api.inc"
