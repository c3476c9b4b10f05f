/*
 * api/json_schema.h — a request's JSON Schema (response_format.json_schema.schema) compiled
 * into the tables constrained output reads (engine/sampling/json_schema.h).
 *
 * What is followed: type (a name or a list), enum, const, properties (keys written in their
 * declared order, only those), required, additionalProperties (false, true or a schema; with
 * properties only the declared keys are written, which every value of it allows), items,
 * prefixItems (or items as a list with additionalItems),
 * minItems, maxItems, minLength, maxLength (code points), minimum / maximum / exclusiveMinimum /
 * exclusiveMaximum (on integers; on other numbers, which are then written without exponent in
 * at most PGD_JSON_DEC_DIGITS digits; on enum values), anyOf and oneOf whose branches begin
 * in different JSON types (a string, a number, an object, ...: the first byte of a value then
 * picks its branch; unbounded integer and number branches are any number; several object
 * branches — a union of models — are read together while keys and discriminating enum values
 * tell them apart, where a key shared by branches holds alike values in each or an enum in
 * each, or comes after a required discriminator that leaves one of them live), allOf of one
 * schema,
 * local $ref ("#", "#/$defs/Name", any JSON pointer into the document; recursion allowed), boolean
 * schemas. Annotations (title, description, default, examples, format, ...) and unknown keywords
 * are ignored, as JSON Schema has it. Enum and const values are written in compact JSON text (an
 * enum of numbers: as jansson prints them).
 *
 * Refused, by name and with where in the schema (a JSON pointer): keywords constraining what
 * this does not follow (pattern, multipleOf, uniqueItems: true, not, if, contains,
 * patternProperties, min/maxProperties, ...), anyOf branches that begin alike (but numbers and
 * objects with declared properties), allOf of several
 * schemas, $ref next to constraints, remote $ref, an enum of objects or arrays, bounds the
 * wrong way round or that no number of at most PGD_JSON_DEC_DIGITS digits meets, required keys
 * that are not properties, and any subschema no finite value satisfies (so that a constrained
 * walk never meets a dead end).
 * Limits: PGD_API_SCHEMA_MAX_NODES subschemas, 64 levels of nesting.
 *
 * Threading: pure functions; the result is read-only and counted (pgd_json_schema_unref).
 */
#ifndef PGD_API_JSON_SCHEMA_H
#define PGD_API_JSON_SCHEMA_H

#include <jansson.h>
#include <stddef.h>

#include "engine/sampling/json_schema.h"

#define PGD_API_SCHEMA_MAX_NODES 4096

/* Compiles `schema`: 0 and *out (one reference), PGD_EINVAL with a message in msg[cap] naming
 * the keyword and where it is, or PGD_ENOMEM. */
int pgd_api_json_schema_compile(const json_t *schema, const pgd_json_schema **out, char *msg,
                                size_t cap);

#endif
