#!/usr/bin/env python3
"""tests/fuzz/seeds.py — writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/).

Seeds are small valid (and a few invalid) inputs that take each target deep quickly: request
bodies for the API parsers, GGUF images, texts and id lists for the tokenizers, conversations for
the chat templates, stop strings with token streams, raw HTTP requests to every route. The files
are committed; rerun this after changing an input format (it rewrites the seed folders, except
the files named regress-*: inputs that once found a bug, kept as regression seeds).

    .venv/bin/python tests/fuzz/seeds.py
"""
import hashlib
import json
import pathlib
import struct

ROOT = pathlib.Path(__file__).resolve().parent
CORPUS = ROOT / "corpus"


def write(target, items):
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    for f in d.iterdir():  # regress-*: inputs that once failed, kept as they are
        if not f.name.startswith("regress-"):
            f.unlink()
    for data in items:
        if isinstance(data, str):
            data = data.encode()
        (d / hashlib.sha1(data).hexdigest()[:16]).write_bytes(data)
    print(f"{target}: {len(items)} seeds")


def j(obj):
    return json.dumps(obj, ensure_ascii=False)


# ---- API bodies ---------------------------------------------------------------------------------

MSG = [{"role": "user", "content": "Hello"}]
TOOL_W = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather now",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                   "unit": {"enum": ["c", "f"]}},
                   "required": ["city"]}}}
TOOL_A = {"type": "function", "function": {
    "name": "add", "parameters": {"type": "object", "properties": {"xs": {
        "type": "array", "items": {"$ref": "#/$defs/n"}}}, "$defs": {"n": {"type": "number",
                                                                         "minimum": 0.5}}}}}
SAMPLING = [
    {"temperature": 0}, {"temperature": 2.0}, {"top_p": 0.5}, {"top_k": 40}, {"top_k": -1},
    {"min_p": 0.1}, {"presence_penalty": -2}, {"frequency_penalty": 1.5},
    {"repetition_penalty": 1.1}, {"seed": -5}, {"seed": 9223372036854775807},
    {"stop": "\n"}, {"stop": ["a", "bc", "<|im_end|>"]}, {"stop_token_ids": [2, 0]},
    {"min_tokens": 3, "max_tokens": 8}, {"n": 3}, {"max_tokens": 5.0},
    {"max_completion_tokens": 7, "max_tokens": 3}, {"logit_bias": {"10": -100, "257": 5.5}},
    {"stream": True, "stream_options": {"include_usage": True}}, {"user": "u1"},
    {"ignore_eos": True}, {"priority": -3}, {"cache_salt": "salt"}, {"model": "tiny"},
    {"temperature": None, "top_p": None}, {"unknown_field": [1, {"x": 2}]},
    {"top_p": 1e-50}, {"repetition_penalty": 1e-60}, {"repetition_penalty": 1e300},
    {"min_p": 1e-50}, {"logit_bias": {"5": 1e-50}},
    {"tools": [], "tool_choice": "none", "response_format": {"type": "text"}, "suffix": ""},
    {"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "auto"},
    {"tools": [TOOL_W, TOOL_A], "tool_choice": "required", "parallel_tool_calls": False},
    {"tools": [TOOL_A], "tool_choice": "required"},
    {"tools": [TOOL_W, TOOL_A], "tool_choice": {"type": "function", "function": {"name": "add"}}},
    {"tools": [TOOL_W], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
    {"tools": [TOOL_W, TOOL_W]}, {"tools": [{"type": "function", "function": {"name": "a b"}}]},
    {"function_call": {"name": "f"}}, {"response_format": {"type": "json_object"}},
    {"response_format": {}}, {"suffix": "end"}, {"n": 2, "best_of": 2}, {"best_of": 3},
    {"response_format": {"type": "json_schema", "json_schema": {"name": "p", "strict": True,
     "schema": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}},
    {"response_format": {"type": "json_schema", "json_schema": {"schema": {"$ref": "#/x"}}}},
]
BAD = [
    "", "{", "[]", "null", "{\"a\":1}", "\xff\xfe", "{\"messages\": \"x\"}",
    "{\"prompt\": []}", "{\"temperature\": \"hot\"}", "{\"top_p\": 0}", "{\"n\": 17}",
    "{\"stop\": [\"\"]}", "{\"logit_bias\": {\"x\": 1}}", "{\"max_tokens\": 1e300}",
    "{\"stream_options\": {\"include_usage\": true}}", "{\"top_p\": 1e-50}",
    "{\"repetition_penalty\": 1e-60}", "{\"presence_penalty\": -2.0000000001}",
]


def chat_seeds():
    out = [j({"messages": MSG})]
    for s in SAMPLING:
        out.append(j({"messages": MSG, **s}))
    out += [
        j({"messages": [{"role": "system", "content": "Be brief."},
                        {"role": "user", "content": [{"type": "text", "text": "Hi "},
                                                     {"type": "text", "text": "there"}]},
                        {"role": "assistant", "content": None},
                        {"role": "user", "content": "中文 \u00e9\u2581 <|im_end|>"}],
           "logprobs": True, "top_logprobs": 5, "model": "m"}),
        j({"messages": [{"role": "tool", "content": "x", "name": "n"}]}),
        j({"messages": [{"role": "developer", "content": "Be brief."}, *MSG]}),
        j({"messages": [{"role": "assistant", "content": None, "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            *MSG]}),
        j({"messages": [{"role": "assistant", "content": "b", "tool_calls": []}, *MSG]}),
        j({"messages": []}),
        j({"messages": [{"role": "user"}]}),
        j({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}),
        j({"prompt": "tokenize me", "add_special_tokens": False}),
        j({"messages": MSG, "add_generation_prompt": False, "add_special_tokens": True}),
        j({"prompt": "x", "messages": MSG}),
    ]
    return out + BAD


def responses_seeds():
    fn = {"type": "function", "name": "get_weather", "description": "Weather",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                         "required": ["city"]}}
    out = [
        j({"input": "Hi"}),
        j({"input": "Hi", "instructions": "Be brief.", "max_output_tokens": 8, "temperature": 0,
           "top_p": 0.5, "metadata": {"a": "b"}, "user": "u", "store": True, "stream": True}),
        j({"input": [{"role": "user", "content": [{"type": "input_text", "text": "a"}]},
                     {"type": "message", "role": "assistant",
                      "content": [{"type": "output_text", "text": "b", "annotations": []}]},
                     {"role": "developer", "content": "c"}]}),
        j({"input": [{"role": "user", "content": "Weather?"},
                     {"type": "function_call", "call_id": "c1", "name": "get_weather",
                      "arguments": "{\"city\": \"Paris\"}"},
                     {"type": "function_call", "call_id": "c2", "name": "get_weather",
                      "arguments": "{}"},
                     {"type": "function_call_output", "call_id": "c1", "output": "18C"},
                     {"type": "function_call_output", "call_id": "c2",
                      "output": [{"type": "input_text", "text": "20C"}]}],
           "tools": [fn], "tool_choice": "auto", "parallel_tool_calls": False}),
        j({"input": "x", "tools": [fn], "tool_choice": {"type": "function", "name": "get_weather"}}),
        j({"input": "x", "tools": [fn], "tool_choice": "required"}),
        j({"input": "x", "text": {"format": {"type": "json_schema", "name": "s", "strict": True,
                                             "schema": {"type": "object", "properties": {
                                                 "a": {"type": "integer"}}}}}}),
        j({"input": "x", "text": {"format": {"type": "json_object"}, "verbosity": "medium"}}),
        j({"input": "x", "include": ["message.output_text.logprobs"], "top_logprobs": 3,
           "seed": 7, "stop": ["\n"], "top_k": 4}),
        j({"input": []}),
        j({"input": [{"type": "reasoning", "id": "r"}]}),
        j({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]}),
        j({"input": "x", "previous_response_id": "resp_1"}),
        j({"input": "x", "tools": [{"type": "web_search"}]}),
        j({"input": "x", "reasoning": {"effort": "high"}, "truncation": "auto"}),
        j({"input": "x", "max_output_tokens": 0}),
        j({"input": [{"role": "assistant", "content": "a"},
                     {"type": "function_call", "call_id": "c", "name": "f", "arguments": "[1]"}]}),
        j({"input": [{"type": "function_call_output", "call_id": "c1", "output": "18C"}],
           "previous_response_id": "resp_prev", "instructions": "Be brief.", "store": False}),
        j({"input": "x", "previous_response_id": "resp_other"}),
    ]
    return out + BAD


def tool_parser_seeds():
    """Byte 0: the choice (0 auto, 1 required, 2 named, 3 none) + 4 for one call at most + 8
    for the Llama 3.x JSON format; byte 1: the piece length when streamed; then an output."""
    outs = {
        0: ["Hello there.", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
            "{\"city\": \"Paris\"}}\n</tool_call>",
            "Sure.\n<tool_call>{\"name\": \"a\"}</tool_call>\n<tool_call>{\"name\": \"b\", "
            "\"parameters\": {\"x\": [1, 2.5e-07, \"\\u00e9\"]}}</tool_call>\nDone.",
            "x <tool_call>not json</tool_call> y <tool_c", "<tool_call>{\"name\": \"f\", \"argu",
            # calls from their head on: arguments cut, broken off, with keys after them, and a
            # closing tag inside a string of theirs
            "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": \"x",
            "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1 oops}}</tool_call> after",
            "<tool_call>{\"name\": \"f\", \"arguments\": {}, \"id\": 7}\n</tool_call>",
            "<tool_call>{\"name\": \"w\", \"arguments\": {\"s\": \"</tool_call>\"}}</tool_call>"],
        1: ["[{\"name\": \"g\", \"arguments\": {\"a\": 1}}, {\"name\": \"h\", "
            "\"arguments\": {}}]", "[{\"name\": \"g\"",
            "[{\"name\": \"g\", \"arguments\": {\"a\": 1}}, {\"name\": \"h\", \"arguments\": {\"b"],
        2: ["{\"city\": \"Rome\", \"unit\": \"c\"}", "{\"city\":"],
        3: ["<tool_call>{\"name\": \"e\"}</tool_call>"],
        8: ["{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
            " <|python_tag|>{\"name\": \"a\"}; {\"name\": \"b\", \"arguments\": {\"x\": [1]}}",
            "[{\"name\": \"a\"}]", "Plain text {\"name\": \"a\"}",
            "{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\"} then text",
            "[{\"name\": \"a\", \"parameters\": {\"x\": [1, {\"y\": \"]\"}]}}]"],
    }
    out = []
    for mode, texts in outs.items():
        for k, t in enumerate(texts):
            out.append(bytes([mode | (4 if k % 2 else 0), 1 + 3 * k]) + t.encode())
    return out


def completion_seeds():
    out = [j({"prompt": "Hello"})]
    for s in SAMPLING:
        out.append(j({"prompt": "Once upon", **s}))
    out += [
        j({"prompt": ["a", "b", "c"], "n": 2, "echo": True, "logprobs": 3}),
        j({"prompt": [1, 2, 3, 300], "max_tokens": 4}),
        j({"prompt": [[1, 2], [3]], "logprobs": 0}),
        j({"prompt": [[]]}),
        j({"prompt": [-1]}),
        j({"prompt": ""}),
        j({"tokens": [1, 2, 3, 255, 256]}),
        j({"tokens": []}),
        j({"tokens": [-1, 2.5]}),
        j({"model": "tiny", "tokens": [72, 105]}),
        j({"input": "Hello"}),
        j({"input": ["a", "", "c"], "encoding_format": "base64", "dimensions": 2}),
        j({"input": [[1, 2], [3]], "encoding_format": "float", "user": "u"}),
        j({"input": [5, 6], "dimensions": 0}),
        j({"input": [], "encoding_format": "int8"}),
    ]
    return out + BAD


# ---- GGUF ---------------------------------------------------------------------------------------

def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def gkv(key, vtype, payload):
    return gstr(key) + struct.pack("<I", vtype) + payload


def gguf(kvs, tensors, align=32, version=3):
    """tensors: (name, dims, ggml_type, data bytes)."""
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    body = b"".join(kvs)
    infos, datas, off = b"", b"", 0
    for name, dims, t, data in tensors:
        infos += gstr(name) + struct.pack("<I", len(dims)) + b"".join(
            struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", t, off)
        pad = (-len(data)) % align
        datas += data + b"\0" * pad
        off += len(data) + pad
    meta = head + body + infos
    meta += b"\0" * ((-len(meta)) % align)
    return meta + datas


def gguf_seeds():
    f32 = struct.pack("<8f", *[0.5 * i for i in range(8)])
    q8 = (struct.pack("<e", 0.25) + bytes(range(32))) * 2  # 2 blocks of 32
    f16 = struct.pack("<8e", *[1.0] * 8)
    arr_str = struct.pack("<IQ", 8, 3) + gstr("a") + gstr("<s>") + gstr("\u2581x")
    arr_f32 = struct.pack("<IQ", 6, 3) + struct.pack("<3f", 0.0, -1.0, 2.5)
    arr_i32 = struct.pack("<IQ", 5, 3) + struct.pack("<3i", 1, 3, 6)
    nested = struct.pack("<IQ", 9, 1) + arr_i32
    kvs = [
        gkv("general.architecture", 8, gstr("llama")),
        gkv("general.alignment", 4, struct.pack("<I", 32)),
        gkv("llama.context_length", 4, struct.pack("<I", 256)),
        gkv("llama.rope.freq_base", 6, struct.pack("<f", 10000.0)),
        gkv("tokenizer.ggml.model", 8, gstr("llama")),
        gkv("tokenizer.ggml.tokens", 9, arr_str),
        gkv("tokenizer.ggml.scores", 9, arr_f32),
        gkv("tokenizer.ggml.token_type", 9, arr_i32),
        gkv("nested", 9, nested),
        gkv("flag", 7, b"\x01"),
        gkv("u64", 10, struct.pack("<Q", 2**63)),
        gkv("f64", 12, struct.pack("<d", 1.5)),
    ]
    tensors = [("t.f32", [8], 0, f32), ("t.q8", [32, 2], 8, q8), ("t.f16", [4, 2], 1, f16)]
    full = gguf(kvs, tensors)
    out = [full, gguf(kvs[:3], []), gguf([], tensors[:1]), gguf(kvs, tensors, version=2),
           gguf([gkv("general.alignment", 4, struct.pack("<I", 64))], tensors, align=64),
           full[:100], full[:len(full) // 2], b"GGUF", b"GGML\x03\0\0\0"]
    # the harness's 0xA5 form: a built header (counts from bytes 1 and 9) before the rest
    out.append(b"\xa5" + bytes([2]) + bytes(7) + bytes([4]) + bytes(7) + b"".join(kvs[:4]) +
               gstr("t.f32") + struct.pack("<IQIQ", 1, 8, 0, 0))
    out.append(b"\xa5" + bytes(16) + b"")
    return out


# ---- tokenizers, templates, stop strings ----------------------------------------------------------

TEXTS = [
    "Hello world", " the hello world", "it's 12345 cats\n\n  and    dogs\t!", "caf\u00e9 中文字",
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", "<tool><|im<|endoftext|>",
    "\u2581leading meta", "  spaces  ", "emoji \U0001F600 and \u00e9\u0301",
]
RAW_TEXTS = [b"\xff\xfe\xc3(\xe2\x82", b"a\0b", b"\xed\xa0\x80 surrogate", b"\xf4\x90\x80\x80"]


def tokenizer_seeds():
    out = []
    for tk in range(7):
        for mode in (0, 1, 2, 3):
            for t in TEXTS[:5] if mode else TEXTS:
                body = t.encode()
                extra = bytes([2, 0, 12, 3, 40]) if mode == 2 else b""
                out.append(bytes([tk, mode]) + extra + body)
        for t in RAW_TEXTS:
            out.append(bytes([tk, 0]) + t)
        # decode: ids as 16-bit little-endian
        ids = [72, 101, 108, 108, 111, 300, 256, 1, 0xC3, 0xA9, 0xE4, 0xB8, 0x40, 0xFFFF]
        out.append(bytes([tk, 0x80]) + b"".join(struct.pack("<H", i) for i in ids))
        out.append(bytes([tk, 0x88]) + b"".join(struct.pack("<H", i) for i in ids[::-1]))
    return out


def msgs_bytes(msgs):
    """role code: 0 system, 1 user, 2 assistant, 7 custom (then a length byte and the role);
    parts in bits 3-4: a length byte and the bytes each."""
    out = b""
    for role, parts in msgs:
        code = {"system": 0, "user": 1, "assistant": 2}.get(role, 7)
        out += bytes([code | (len(parts) << 3)])
        if code == 7:
            r = role.encode()
            out += bytes([len(r)]) + r
        for p in parts:
            b = p.encode() if isinstance(p, str) else p
            out += bytes([len(b)]) + b
    return out


def template_seeds():
    convs = [
        [("user", ["Hello"])],
        [("system", ["Be brief."]), ("user", ["Hi ", "there"]), ("assistant", [" Hello! "]),
         ("user", ["<|im_end|> [INST] \u2003 trailing  \n"])],
        [("user", ["a"]), ("user", ["b"])],
        [("assistant", ["first"]), ("user", [])],
        [("system", []), ("user", ["x"])],
        [("tool", ["t"]), ("user", ["y"])],
        [("user", [b"\xff\xfe\x00 bytes"])],
    ]
    out = []
    for idx in range(17):
        for gen in (0, 1):
            for c in convs:
                out.append(bytes([idx, gen]) + msgs_bytes(c))
    tdir = ROOT.parent / "reference" / "templates"
    for p in sorted(tdir.glob("*.jinja")):
        out.append(bytes([17, 0]) + p.read_bytes())  # detection mode with 17 renderers
        out.append(bytes([17, 1]) + p.read_bytes()[:300])
    out.append(bytes([17, 0]) + b"{{ bos_token }}{% for m in messages %}<|im_start|>")
    return out


def stop_seeds():
    def enc(flags, stops, text):
        b = bytes([flags, len(stops)])
        for s in stops:
            sb = s.encode() if isinstance(s, str) else s
            b += bytes([len(sb)]) + sb
        return b + (text.encode() if isinstance(text, str) else text)
    return [
        enc(0, ["\n"], "Hello\nworld"),
        enc(1, ["world"], "Hello world and more"),
        enc(0, ["ab", "abc", "b"], "xxabcab"),
        enc(2, ["é", "中"], "caf\u00e9 中文"),
        enc(0, ["aaa", "aab"], "aaaab"),
        enc(1, ["<|im_end|>"], "text<|im_end|>after"),
        enc(0, [], "no stops at all"),
        enc(0, [""], "empty stop"),
        enc(0, ["x"], b"\xc3\xa9\xe4\xb8\xadx\xff"),
        enc(2, ["\u2581"], "a b"),
        enc(0, ["\ufffd"], b"ab\xffcd"),
        enc(0, ["lo w"], b"hel\xf0\x01lo w"),
    ]


# ---- HTTP ---------------------------------------------------------------------------------------

def req(method, path, body=b"", headers=(), version="HTTP/1.1"):
    if isinstance(body, str):
        body = body.encode()
    h = f"{method} {path} {version}\r\nHost: fuzz\r\n"
    for k, v in headers:
        h += f"{k}: {v}\r\n"
    if body and not any(k.lower() == "transfer-encoding" for k, _ in headers):
        h += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return h.encode() + b"\r\n" + body


def http_seeds():
    chat = j({"messages": MSG, "max_tokens": 4, "temperature": 0})
    chat_s = j({"messages": MSG, "max_tokens": 6, "stream": True,
                "stream_options": {"include_usage": True}})
    comp = j({"prompt": "abc", "max_tokens": 3, "n": 2, "logprobs": 2, "echo": True})
    comp_s = j({"prompt": ["a", "b"], "max_tokens": 3, "stream": True, "stop": ["x"]})
    chunked = (b"POST /v1/completions HTTP/1.1\r\nHost: fuzz\r\nTransfer-Encoding: chunked\r\n"
               b"Content-Type: application/json\r\n\r\n"
               b"5\r\n{\"pro\r\n14\r\nmpt\": \"hi\", \"max_to\r\nc\r\nkens\": 2}   \r\n0\r\n\r\n")
    reqs = [
        req("GET", "/health"), req("GET", "/v1/models"), req("GET", "/metrics"),
        req("GET", "/"), req("HEAD", "/"), req("GET", "/admin/tenants"),
        req("POST", "/v1/chat/completions", chat), req("POST", "/v1/chat/completions", chat_s),
        req("POST", "/v1/completions", comp), req("POST", "/v1/completions", comp_s),
        req("POST", "/tokenize", j({"prompt": "hello"})),
        req("POST", "/tokenize", j({"messages": MSG})),
        req("POST", "/detokenize", j({"tokens": [104, 105]})),
        req("POST", "/v1/chat/completions", "{bad json"),
        req("DELETE", "/v1/models"), req("GET", "/nowhere?x=1&y"),
        req("GET", "/health", version="HTTP/1.0"),
        req("POST", "/v1/completions", comp, headers=[("Expect", "100-continue")]),
        req("POST", "/v1/completions", comp, headers=[("Authorization", "Bearer k")]),
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\n{}",
        chunked,
        req("GET", "/health") + req("GET", "/v1/models") + req("POST", "/v1/completions", comp),
        b"GET /health HTTP/1.1\r\n\r\n", b"\r\n\r\n", b"GARBAGE\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nX: " + b"y" * 3000 + b"\r\n\r\n",
        b"GET /%00%ff HTTP/1.1\r\nHost: a\r\n\r\n",
    ]
    out = []
    for i, r in enumerate(reqs):
        for mode in (0, 1 | 4, 2 | 8, 6 | 16):
            out.append(bytes([mode]) + r)
    return out


# ---- JSON schemas and documents -----------------------------------------------------------------

SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                      "age": {"type": "integer"}},
     "required": ["name", "age"], "additionalProperties": False},
    {"$defs": {"Node": {"type": "object", "properties": {
        "v": {"type": "integer"},
        "next": {"anyOf": [{"$ref": "#/$defs/Node"}, {"type": "null"}]}}, "required": ["v"]}},
     "$ref": "#/$defs/Node"},
    {"type": "array", "minItems": 1, "maxItems": 3, "items": {"enum": ["a", "ab", 1, 10, None]}},
    {"anyOf": [{"type": "string", "minLength": 1}, {"type": "number"},
               {"type": "object", "additionalProperties": {"type": ["boolean", "null"]}}]},
    {"type": "object", "properties": {k: {"type": "array", "items": {"$ref": "#"}} for k in "abc"},
     "required": ["b"]},
    {"type": "object"}, {}, True, {"const": "x"}, {"allOf": [{"type": "integer"}]},
    {"type": "object", "properties": {"a~b/c": {"type": "boolean"}}, "required": ["a~b/c"]},
    {"type": "array", "items": {"type": "integer", "minimum": -12, "exclusiveMaximum": 345}},
    {"type": "array", "items": {"type": "number", "exclusiveMinimum": -2.5, "maximum": 0.3}},
    {"type": "number", "minimum": 1e-10, "exclusiveMaximum": 99999999999999.9},
    {"type": "array", "prefixItems": [{"type": "integer"}, {"enum": ["a", "b"]}],
     "items": {"type": "boolean"}, "minItems": 1},
    {"anyOf": [{"type": "integer"}, {"type": "number"}, {"type": "array", "items": False}]},
    {"type": "array", "items": {"anyOf": [
        {"type": "object", "properties": {"k": {"const": "a"}, "x": {"type": "integer"}},
         "required": ["k", "x"]},
        {"type": "object", "properties": {"k": {"enum": ["b", "c"]}, "y": {"type": "string"}},
         "required": ["k"]},
        {"type": "object", "properties": {"z": {"type": "null"}}, "required": ["z"]},
        {"type": "null"}]}},
]
SCHEMA_DOCS = ['{"name":"Ann","age":31}', '{"v":1,"next":{"v":2,"next":null}}', '["ab",10]',
               '{"x":true,"y":null}', '{"b":[{"b":[]}]}', '{"k":[1,{"q":"\\u00e9"}]}',
               '[1,"2",null]', '"x"', '-12', '{"a~b/c":false}', '[-12,344]', '[-2.4,0.3]',
               '0.0000000001', '[1,"a",true]', '[]', '[{"k":"a","x":1},{"k":"c"},{"z":null},null]']


def schema_seeds():
    out = []
    for i, sc in enumerate(SCHEMAS):
        out.append(j(sc).encode() + b"\0" + SCHEMA_DOCS[i % len(SCHEMA_DOCS)].encode())
        out.append(j(sc).encode())
    out.append(b'{"type":"integer","minimum":0}\x0012')
    out.append(b'{"$ref":"#"}')
    return out


if __name__ == "__main__":
    write("fuzz_api_chat", chat_seeds())
    write("fuzz_api_completions", completion_seeds())
    write("fuzz_gguf", gguf_seeds())
    write("fuzz_tokenizer", tokenizer_seeds())
    write("fuzz_chat_template", template_seeds())
    write("fuzz_stop_detok", stop_seeds())
    write("fuzz_http", http_seeds())
    write("fuzz_json_schema", schema_seeds())
    write("fuzz_tool_parser", tool_parser_seeds())
    write("fuzz_api_responses", responses_seeds())
