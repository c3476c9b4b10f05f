/*
 * tests/fuzz/fuzz_api_completions.c — libFuzzer target: POST /v1/completions bodies through
 * pgd_api_request_parse (and /detokenize bodies through pgd_api_detokenize_parse, /v1/embeddings
 * bodies through it too, with their answer). See
 * fuzz_api.inc. Seeds: tests/fuzz/corpus/fuzz_api_completions/; dictionary: dict/json.dict.
 */
#define FUZZ_API_CHAT 0
#include "fuzz_api.inc"
