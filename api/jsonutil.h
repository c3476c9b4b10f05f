/*
 * api/jsonutil.h — small helpers shared by the api/ builders and parsers: UTF-8 validation and
 * lossy repair (U+FFFD), JSON strings that are always valid UTF-8, float values printed in their
 * shortest round-trip form, and dumping a jansson tree into a pgd_buf (compactly, or exactly as
 * Python's json.dumps writes it, which is what chat templates' tojson filter prints).
 *
 * Why: jansson refuses to build a string from invalid UTF-8 (json_stringn returns NULL) and
 * cannot hold a non-finite real; token texts from a byte-level BPE may be half a character, and
 * logprobs may be -inf. Everything here turns such data into valid JSON.
 *
 * Invariants: pgd_api_utf8_sanitize's output is valid UTF-8, equal to its input when the input
 * is valid; each maximal ill-formed subsequence becomes one U+FFFD (the Unicode / WHATWG
 * "maximal subpart" practice, as Python's errors="replace" does).
 *
 * Threading: pure functions, no shared state.
 */
#ifndef PGD_API_JSONUTIL_H
#define PGD_API_JSONUTIL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/text.h"

/* true when p[n] is well-formed UTF-8 (no overlongs, no surrogates, nothing above U+10FFFF).
 * NUL bytes are valid. */
bool pgd_api_utf8_valid(const char *p, size_t n);

/* Appends p[n] to out with every maximal ill-formed subsequence replaced by U+FFFD (EF BF BD).
 * 0 or PGD_ENOMEM. */
int pgd_api_utf8_sanitize(const char *p, size_t n, pgd_buf *out);

/* Characters (code points) of p[n] after sanitizing: what a JSON reader sees as the string's
 * length in code points. */
size_t pgd_api_utf8_chars(const char *p, size_t n);

/* Appends `j` as Python's json.dumps(j, ensure_ascii=False) writes it — the text a chat
 * template's tojson filter produces under Hugging Face's settings: ", " and ": " separators,
 * keys in insertion order, non-ASCII characters as they are, \" \\ \n \r \t \b \f
 * escaped and other control characters as \u00xx, integers as they are, reals as Python's
 * repr (shortest round trip, and the nearest such decimal: 0.1, 1.0, 1e-05, 1e+16, 1.5e+20;
 * scientific when the exponent is < -4 or >= 16), non-finite reals as NaN / Infinity. 0 or
 * PGD_ENOMEM, also for a tree nested deeper than 2048 levels (only a cycle can be: jansson's
 * parser stops there); out is then left as it was. */
int pgd_api_json_dump_py(const json_t *j, pgd_buf *out);

/* The same with json.dumps(j, indent=indent, ensure_ascii=False)'s layout when indent > 0:
 * each item on its own line indented by `indent` spaces a level, items ended by "," (no
 * space), keys followed by ": ", empty objects and arrays as {} and []. indent 0: as above. */
int pgd_api_json_dump_py_indent(const json_t *j, int indent, pgd_buf *out);

/* ---- internal to api/ ---------------------------------------------------------------------- */

/* A new JSON string from p[n] (may hold NUL bytes), sanitized when not valid UTF-8.
 * NULL only when out of memory. */
json_t *pgd__api_jstr(const char *p, size_t n);

/* A new JSON real for a float, holding the shortest decimal that reads back as the same float
 * (so 0.1f prints as 0.1, not 0.100000001). Non-finite values and values below `floor_value`
 * become floor_value (OpenAI prints -9999.0 for logprobs of impossible tokens). */
json_t *pgd__api_jfloat(float v, double floor_value);

/* Dumps `j` compactly (keys in insertion order, reals with up to 9 significant digits) and
 * appends the text to out. 0, PGD_ENOMEM. Does not take the reference. */
int pgd__api_dump(const json_t *j, pgd_buf *out);

/* o[key], or NULL when it is absent or null (every optional field counts null as absent). */
json_t *pgd__api_field(const json_t *o, const char *key);

/* Sets key -> value (stealing value, which may be NULL: then it fails). 0 or PGD_ENOMEM. */
int pgd__api_set(json_t *obj, const char *key, json_t *value);

#endif
