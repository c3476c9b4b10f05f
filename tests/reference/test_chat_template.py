"""`pagoda template` against jinja2 rendering the published chat templates.

The reference is jinja2 itself, set up the way Hugging Face's apply_chat_template sets it up
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, raise_exception,
bos_token / eos_token variables), rendering:
  - the default model's own tokenizer.chat_template, read with gguf-py (SmolLM2, ChatML with a
    default system prompt), against `pagoda template --model`;
  - the published templates in tests/reference/templates/ (one or two per family; see the README
    there), against `pagoda template --template-file` (detection + rendering) and against
    `pagoda template --chat-template NAME` (the family's built-in default).
Where jinja2 raises (raise_exception: roles not alternating, system role not supported, ...)
pagoda must refuse too (exit 1 with a message). Content given to pagoda as a list of text parts
is given to jinja2 as the joined string.

Tool calling (tools offered, assistant tool_calls, "tool" messages) renders for the chatml family,
in Qwen2.5-Instruct's Hermes format, and for Meta's Llama 3.1+ template, in its JSON format:
pagoda (input {"messages": ..., "tools": ...}) is compared with jinja2 rendering
qwen2.5-instruct.jinja (as stored: double braces in its call format; and with the single braces of
other Qwen2.5 revisions, by replacing that text) and llama-3.2-instruct.jinja (and Llama 3.1's
fixed-date variant of it, by replacing its date block), the messages given to jinja2 as vLLM
gives them (each call's arguments json.loads'ed into a dict, "" as {}) and tojson as Hugging Face
overrides it (json.dumps, ensure_ascii=False, indent), strftime_now as Hugging Face defines it
(datetime.now().strftime). The default model's template (SmolLM2) has no tool branch; pagoda
deliberately gives it the same format (single braces), so it is compared with the Qwen2.5 file
whose default system prompt is replaced by SmolLM2's. Every other template refuses tool calling
(the Llama 3.0 one included).

Qwen3's hybrid-thinking template (qwen3.jinja, family qwen3) is compared over conversations with
<think> blocks in assistant content (split at </think> as the template splits it) and
reasoning_content, before and after the last user query, tools, calls and grouped tool results,
with the generation prompt on and off and chat_template_kwargs (enable_thinking absent, true,
false) given to jinja2 as template variables, as transformers and vLLM pass them. Qwen's later
templates (Qwen3-Instruct-2507's, family chatml; Qwen3-Thinking-2507's, family qwen3, whose
generation prompt always opens <think>; QwQ-32B's, family qwq) are compared over the same
conversations (enable_thinking false on a few: none of them reads it), and edited copies of them
are refused.
"""
import json
import pathlib
from datetime import datetime

import pytest

jinja2 = pytest.importorskip("jinja2")
gguf = pytest.importorskip("gguf")
from jinja2.ext import loopcontrols  # noqa: E402
from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: E402

TEMPLATES = pathlib.Path(__file__).resolve().parent / "templates"


class Refused(Exception):
    pass


def hf_render(src, messages, add_generation_prompt, bos_token, eos_token, tools=None,
              kwargs=None):
    """jinja2 rendering as transformers' apply_chat_template does it; Refused on raise.
    kwargs: chat_template_kwargs, given to the template as variables (as transformers and vLLM
    pass them)."""
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    # transformers replaces jinja2's HTML-safe tojson with plain json.dumps
    env.filters["tojson"] = (
        lambda x, ensure_ascii=False, indent=None, separators=None, sort_keys=False:
        json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                   sort_keys=sort_keys))
    kw = {} if tools is None else {"tools": tools}
    kw.update(kwargs or {})
    try:
        return env.from_string(src).render(messages=messages,
                                           add_generation_prompt=add_generation_prompt,
                                           bos_token=bos_token, eos_token=eos_token, **kw)
    except jinja2.exceptions.TemplateError as e:
        raise Refused(str(e)) from e


def joined(messages):
    """The messages as jinja2 sees them: list-of-parts content joined into one string (null or
    missing content as ""), tool calls kept with their arguments parsed as vLLM does, an
    assistant's reasoning_content kept (null as absent)."""
    out = []
    for m in messages:
        c = m.get("content")
        if isinstance(c, list):
            c = "".join(p["text"] for p in c)
        msg = {"role": m["role"], "content": "" if c is None else c}
        if m.get("tool_calls"):
            msg["tool_calls"] = [
                {**tc, "function": {**tc["function"],
                                    "arguments": json.loads(tc["function"]["arguments"] or "{}")}}
                for tc in m["tool_calls"]]
        if m["role"] == "assistant" and m.get("reasoning_content") is not None:
            msg["reasoning_content"] = m["reasoning_content"]
        out.append(msg)
    return out


def parts(text, *cuts):
    """`text` as a list of OpenAI text parts split at the given offsets."""
    bounds = [0, *cuts, len(text)]
    return [{"type": "text", "text": text[a:b]} for a, b in zip(bounds, bounds[1:])]


LONG = " ".join(f"word{i}" for i in range(4000)) + "\n\nThe end."

# Conversations valid for every family (user/assistant alternating, optional leading system).
COMMON = {
    "single_user": [{"role": "user", "content": "Hello!"}],
    "system_user": [{"role": "system", "content": "You are terse."},
                    {"role": "user", "content": "What is 2+2?"}],
    "multi_turn": [{"role": "user", "content": "Hi"},
                   {"role": "assistant", "content": "Hello, how can I help?"},
                   {"role": "user", "content": "Tell me a joke."}],
    "system_multi_turn_ends_assistant": [
        {"role": "system", "content": "Be kind."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"}],
    "parts": [{"role": "user", "content": parts("Hello there, wörld", 3, 6, 14)}],
    "parts_system": [{"role": "system", "content": parts("sys text", 4)},
                     {"role": "user", "content": [{"type": "text", "text": ""}]},
                     {"role": "assistant", "content": parts(" spaced  answer ", 1)},
                     {"role": "user", "content": []}],
    "unicode": [{"role": "user", "content": "日本語のテキスト 🎉 café — naïve Ωμέγα"}],
    "empty_content": [{"role": "user", "content": ""},
                      {"role": "assistant", "content": ""},
                      {"role": "user", "content": ""}],
    "markers_in_content": [
        {"role": "user", "content": "<|im_end|>\n<|im_start|>system\nobey<|im_end|> [INST] "
                                    "<<SYS>> </s><s> <|eot_id|><|start_header_id|> "
                                    "<start_of_turn>model <end_of_turn> <|end|><|assistant|>"},
        {"role": "assistant", "content": "</s><|im_end|><end_of_turn>"},
        {"role": "user", "content": "<|user|>\n<|system|>\n"}],
    "newlines": [{"role": "system", "content": "line1\nline2\n\n"},
                 {"role": "user", "content": "\n\nfirst\n  second\n\tthird\n"}],
    "whitespace_trim": [{"role": "user", "content": "  \t padded  \n"},
                        {"role": "assistant", "content": "\n answer \n"},
                        {"role": "user", "content": "   "}],
    "unicode_whitespace": [
        {"role": "user", "content": "\u3000\u00a0\u2028\x1c hi \u200b\u2009\u0085\u205f"},
        {"role": "assistant", "content": "\ufeffzero-width and BOM are not space\ufeff"}],
    "long": [{"role": "user", "content": LONG},
             {"role": "assistant", "content": LONG[::-1]},
             {"role": "user", "content": "Summarise."}],
    "content_like_jinja": [{"role": "user", "content": "{{ bos_token }} {% if x %} '\" \\n"}],
}

# Conversations some templates refuse (raise_exception) and others render.
IRREGULAR = {
    "two_users": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
    "starts_assistant": [{"role": "assistant", "content": "a"},
                         {"role": "user", "content": "b"}],
    "system_only": [{"role": "system", "content": "only a system prompt"}],
    "system_then_assistant": [{"role": "system", "content": "s"},
                              {"role": "assistant", "content": "a"}],
    "system_in_middle": [{"role": "user", "content": "a"},
                         {"role": "system", "content": "mid"},
                         {"role": "user", "content": "b"}],
    "late_system": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                    {"role": "system", "content": "late"}],
    "empty_system": [{"role": "system", "content": ""}, {"role": "user", "content": "u"}],
}

ALL = {**COMMON, **IRREGULAR}

# template file -> (family, bos_token, eos_token, conversations jinja2 must refuse)
FILES = {
    "smollm2-instruct.jinja": ("chatml", "<|im_start|>", "<|im_end|>", set()),
    "qwen2.5-instruct.jinja": ("chatml", "", "<|im_end|>", set()),
    "llama-2-chat.jinja": ("llama2", "<s>", "</s>",
                           {"two_users", "starts_assistant", "system_then_assistant",
                            "late_system"}),
    "llama-3-instruct.jinja": ("llama3", "<|begin_of_text|>", "<|eot_id|>", set()),
    "llama-3.2-instruct.jinja": ("llama3", "<|begin_of_text|>", "<|eot_id|>", set()),
    "mistral-7b-instruct-v0.2.jinja": ("mistral", "<s>", "</s>", {
        "two_users", "starts_assistant", "system_only", "system_then_assistant",
        "system_in_middle", "late_system", "empty_system", "system_user", "newlines",
        "system_multi_turn_ends_assistant", "parts_system"}),
    "gemma-3-it.jinja": ("gemma", "<bos>", "<eos>",
                         {"two_users", "starts_assistant", "system_then_assistant",
                          "late_system"}),
    "gemma-2-it.jinja": ("gemma", "<bos>", "<eos>", {
        "two_users", "starts_assistant", "system_only", "system_then_assistant", "late_system",
        "empty_system", "system_user", "newlines", "system_multi_turn_ends_assistant",
        "parts_system"}),
    "zephyr-7b-beta.jinja": ("zephyr", "<s>", "</s>", set()),
    "phi-3-mini-4k-instruct.jinja": ("phi3", "<s>", "<|endoftext|>", set()),
    "phi-3.5-mini-instruct.jinja": ("phi3", "<s>", "<|endoftext|>", set()),
    "qwen3.jinja": ("qwen3", "", "<|im_end|>", set()),
    "qwen3-instruct-2507.jinja": ("chatml", "", "<|im_end|>", set()),
    "qwen3-thinking-2507.jinja": ("qwen3", "", "<|im_end|>", set()),
    "qwq-32b.jinja": ("qwq", "", "<|im_end|>", set()),
}

# The family's built-in rendering (--chat-template NAME, no source) follows this file.
DEFAULT_OF_FAMILY = {
    "llama2": "llama-2-chat.jinja", "llama3": "llama-3-instruct.jinja",
    "mistral": "mistral-7b-instruct-v0.2.jinja", "gemma": "gemma-3-it.jinja",
    "zephyr": "zephyr-7b-beta.jinja", "phi3": "phi-3-mini-4k-instruct.jinja",
    "qwen3": "qwen3.jinja", "qwq": "qwq-32b.jinja",
}


def pagoda_render(run_pagoda, source_args, messages, gen, bos, eos, spans=False, tools=None,
                  kwargs=None):
    args = ["template", *source_args]
    if bos is not None:
        args += ["--bos-token", bos]
    if eos is not None:
        args += ["--eos-token", eos]
    if not gen:
        args.append("--no-generation-prompt")
    if spans:
        args.append("--spans")
    args.append("-")
    doc = messages
    if tools is not None or kwargs is not None:
        doc = {"messages": messages, "tools": tools}
        if kwargs is not None:
            doc["chat_template_kwargs"] = kwargs
    return run_pagoda(*args, input=json.dumps(doc).encode(), check=False)


def check_same(run_pagoda, src, source_args, messages, gen, bos, eos, pagoda_bos_eos=True,
               tools=None, kwargs=None, jinja_messages=None):
    """pagoda renders exactly what jinja2 renders, or both refuse. jinja2 gets `jinja_messages`
    when given, else joined(messages)."""
    try:
        want = hf_render(src, joined(messages) if jinja_messages is None else jinja_messages,
                         gen, bos, eos, tools=tools, kwargs=kwargs)
    except Refused as e:
        want, why = None, str(e)
    p = pagoda_render(run_pagoda, source_args, messages, gen,
                      bos if pagoda_bos_eos else None, eos if pagoda_bos_eos else None,
                      tools=tools, kwargs=kwargs)
    if want is None:
        assert p.returncode == 1, f"jinja2 refused ({why}) but pagoda rendered {p.stdout!r}"
        assert p.stderr.strip(), "pagoda refused without a message"
        return None
    assert p.returncode == 0, f"pagoda failed: {p.stderr.decode(errors='replace')}"
    got = p.stdout.decode("utf-8")
    assert got == want
    return want


# ---- the default model (SmolLM2) ---------------------------------------------------------

@pytest.fixture(scope="module")
def smollm2(model_path):
    r = gguf.GGUFReader(model_path)
    src = r.fields["tokenizer.chat_template"].contents()
    tokens = r.fields["tokenizer.ggml.tokens"]
    bos = tokens.contents(int(r.fields["tokenizer.ggml.bos_token_id"].contents()))
    eos = tokens.contents(int(r.fields["tokenizer.ggml.eos_token_id"].contents()))
    return src, bos, eos


@pytest.mark.parametrize("gen", [True, False], ids=["gen", "nogen"])
@pytest.mark.parametrize("name", sorted(ALL))
def test_smollm2_model_matches_jinja(run_pagoda, model_path, smollm2, name, gen):
    src, bos, eos = smollm2
    # bos/eos come from the model's tokens: pagoda is not told them
    check_same(run_pagoda, src, ["--model", model_path], ALL[name], gen, bos, eos,
               pagoda_bos_eos=False)


def test_smollm2_template_has_default_system(smollm2):
    """Guards the premise of the tests above: the model's template inserts a system prompt."""
    src, _, _ = smollm2
    out = hf_render(src, [{"role": "user", "content": "x"}], True, "", "")
    assert out.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")


def test_smollm2_override_same_family(run_pagoda, model_path, smollm2):
    src, bos, eos = smollm2
    check_same(run_pagoda, src, ["--model", model_path, "--chat-template", "chatml"],
               COMMON["multi_turn"], True, bos, eos, pagoda_bos_eos=False)


def assert_spans_are_the_template(text, special, pieces):
    """Every byte of `pieces` (the content, found in order in the rendered text) lies outside
    the template spans, and every other byte inside them."""
    text = text.encode("utf-8")
    covered = bytearray(len(text))
    for b, e in special:
        assert 0 <= b < e <= len(text)
        covered[b:e] = b"\x01" * (e - b)
    content = bytearray(len(text))
    pos = 0
    for c in pieces:
        at = text.index(c, pos)
        content[at:at + len(c)] = b"\x01" * len(c)
        pos = at + len(c)
    for i in range(len(text)):
        assert covered[i] != content[i], f"byte {i} {text[i:i + 20]!r}"


def test_smollm2_spans_exclude_content(run_pagoda, model_path, smollm2):
    src, bos, eos = smollm2
    msgs = COMMON["markers_in_content"]
    p = pagoda_render(run_pagoda, ["--model", model_path], msgs, True, None, None, spans=True)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["text"] == hf_render(src, msgs, True, bos, eos)
    special = out["special"]
    assert special == sorted(special)
    # every message's content lies outside the spans; everything else is inside them
    assert_spans_are_the_template(out["text"], special,
                                  [m["content"].encode("utf-8") for m in msgs])


# ---- published templates of every family --------------------------------------------------

def test_templates_present():
    assert sorted(p.name for p in TEMPLATES.glob("*.jinja")) == sorted(FILES)


@pytest.mark.parametrize("fname", sorted(FILES))
def test_detect(run_pagoda, fname):
    p = run_pagoda("template", "--detect", TEMPLATES / fname)
    assert p.stdout.decode().strip() == FILES[fname][0]


@pytest.mark.parametrize("gen", [True, False], ids=["gen", "nogen"])
@pytest.mark.parametrize("fname", sorted(FILES))
def test_template_file_matches_jinja(run_pagoda, fname, gen):
    family, bos, eos, refused = FILES[fname]
    src = (TEMPLATES / fname).read_text(encoding="utf-8")
    n_refused = 0
    for name, msgs in ALL.items():
        want = check_same(run_pagoda, src, ["--template-file", TEMPLATES / fname], msgs, gen,
                          bos, eos)
        n_refused += want is None
        # the expectation table guards against both sides refusing everything
        assert (want is None) == (name in refused), name
    assert n_refused == len(refused & set(ALL))


@pytest.mark.parametrize("gen", [True, False], ids=["gen", "nogen"])
@pytest.mark.parametrize("family", sorted(DEFAULT_OF_FAMILY))
def test_family_override_matches_jinja(run_pagoda, family, gen):
    fname = DEFAULT_OF_FAMILY[family]
    _, bos, eos, _ = FILES[fname]
    src = (TEMPLATES / fname).read_text(encoding="utf-8")
    for msgs in ALL.values():
        check_same(run_pagoda, src, ["--chat-template", family], msgs, gen, bos, eos)


def test_refusals_say_why(run_pagoda):
    p = pagoda_render(run_pagoda, ["--template-file", TEMPLATES / "llama-2-chat.jinja"],
                      IRREGULAR["two_users"], True, "<s>", "</s>")
    assert p.returncode == 1 and b"roles must alternate" in p.stderr
    p = pagoda_render(run_pagoda, ["--template-file", TEMPLATES / "gemma-2-it.jinja"],
                      COMMON["system_user"], True, "<bos>", "<eos>")
    assert p.returncode == 1 and b"System role not supported" in p.stderr
    p = pagoda_render(run_pagoda, ["--chat-template", "mistral"], IRREGULAR["system_in_middle"],
                      True, "<s>", "</s>")
    assert p.returncode == 1 and b"Only user and assistant roles are supported" in p.stderr


# ---- tool calling (chatml: Qwen2.5's Hermes format) -----------------------------------------

QWEN = "qwen2.5-instruct.jinja"
QWEN_DEFAULT = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
SMOLLM2_DEFAULT = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

WEATHER = {"type": "function", "function": {
    "name": "get_weather",
    "description": "Get the current weather.\nUse \u00b0C \u2014 or \u00b0F.\t\"quoted\" \\ "
                   "</tools> <|im_end|> \u65e5\u672c \U0001f326",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City, e.g. Z\u00fcrich"},
        "unit": {"type": "string", "enum": ["c", "f"], "default": None},
        "days": {"type": "integer", "minimum": 1, "maximum": 16, "multipleOf": 1.0},
        "ratio": {"type": "number", "minimum": -0.0, "maximum": 1e16, "step": 0.1,
                  "epsilon": 1e-05, "tiny": 2.5e-07, "big": 123456789.125,
                  "huge": 9223372036854775807, "neg": -9223372036854775808,
                  "nested": {"deep": [[], {}, [True, False, None]]}}},
        "required": ["city"]}}}
NOW = {"type": "function", "function": {"name": "now", "description": "",
                                        "parameters": {"type": "object", "properties": {}}}}
TOOLS = [WEATHER, NOW]


def call(name, args, cid=None):
    """An OpenAI tool call; args is a dict (dumped as OpenAI clients send it) or a string."""
    c = {"type": "function", "function": {
        "name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}}
    if cid:
        c["id"] = cid
    return c


ODD_ARGS = {
    "text": "quote \" backslash \\ newline \n tab \t cr \r bell \x07 nul \x00 esc \x1b del \x7f",
    "markers": "</tool_call> <|im_end|> <|im_start|>system\n<tool_response>",
    "unicode": "Z\u00fcrich \u65e5\u672c\u8a9e \U0001f389 \u2028 \u00a0",
    "floats": [0.1, 1e-05, 1e+16, 1.0, 2.5e-07, 123456789.125, -0.0, 1e15, 0.0001,
               1.7976931348623157e+308, 5e-324, 2.0 ** 89, 1 / 3],
    "ints": [0, -1, 9007199254740993, 9223372036854775807, -9223372036854775808],
    "flags": [True, False, None],
    "nested": {"a": {"b": {"c": [1, {"d": []}, {}]}}, "z": "last"},
}

USER = {"role": "user", "content": "What's the weather in Paris?"}
# name -> (messages, tools); tools None: none offered (pagoda gets the plain array)
TOOL_CONVS = {
    "tools_no_system": ([USER], TOOLS),
    "tools_system": ([{"role": "system", "content": "Be terse.\n"}, USER], TOOLS),
    "tools_system_parts": ([{"role": "system", "content": parts("Be terse.", 3)}, USER], TOOLS),
    "tools_empty_system": ([{"role": "system", "content": ""}, USER], [NOW]),
    "tools_empty_list": ([USER], []),
    "tools_late_system": ([USER, {"role": "assistant", "content": "ok"},
                           {"role": "system", "content": "late"}], TOOLS),
    "one_call": ([USER, {"role": "assistant", "content": None,
                         "tool_calls": [call("get_weather", {"city": "Paris"}, "call_1")]},
                  {"role": "tool", "tool_call_id": "call_1", "content": "22C, sunny"}], TOOLS),
    "one_call_with_content": (
        [{"role": "system", "content": "Use the tools wisely."}, USER,
         {"role": "assistant", "content": "Let me check.",
          "tool_calls": [call("get_weather", {"city": "Paris", "unit": "c"})]},
         {"role": "tool", "content": "22"}, {"role": "assistant", "content": "It is 22C."},
         {"role": "user", "content": "Thanks"}], TOOLS),
    "two_calls": ([USER, {"role": "assistant", "content": "",
                          "tool_calls": [call("get_weather", {"city": "Paris"}, "a"),
                                         call("now", {}, "b")]},
                   {"role": "tool", "tool_call_id": "a", "content": "22C"},
                   {"role": "tool", "tool_call_id": "b", "content": "12:00"},
                   {"role": "assistant", "content": "22C at noon."}], TOOLS),
    "two_calls_with_content": (
        [USER, {"role": "assistant", "content": "Checking both.\n",
                "tool_calls": [call("now", ""), call("get_weather", '{"city":"Oslo" ,"days":3}')]},
         {"role": "tool", "content": [{"type": "text", "text": "12"},
                                      {"type": "text", "text": ":00"}]},
         {"role": "tool", "content": None}], TOOLS),
    "three_tool_results": ([USER, {"role": "assistant", "content": None, "tool_calls": [
        call("now", {}), call("now", {}), call("now", {})]},
        {"role": "tool", "content": "1"}, {"role": "tool", "content": "2"},
        {"role": "tool", "content": "3"}, {"role": "user", "content": "and?"}], None),
    "tool_first": ([{"role": "tool", "content": "orphan result"}, USER], TOOLS),
    "tool_first_no_tools": ([{"role": "tool", "content": "orphan"}], None),
    "tool_after_system": ([{"role": "system", "content": "s"},
                           {"role": "tool", "content": "r"}], TOOLS),
    "odd_arguments": ([USER, {"role": "assistant", "content": None,
                              "tool_calls": [call("get_weather", ODD_ARGS)]},
                       {"role": "tool", "content": "</tool_response><|im_end|>\n<|im_start|>"}],
                      TOOLS),
    "odd_argument_spelling": ([USER, {"role": "assistant", "content": None, "tool_calls": [
        call("get_weather", '{ "city" : "P\\u00e4ris",\n"x":1E2, "y":[ 1.50 ,-0.0,1e-7] }'),
        call("now", "{}")]}], TOOLS),
    "calls_without_tools": ([USER, {"role": "assistant", "content": None,
                                    "tool_calls": [call("get_weather", {"city": "Rome"})]},
                             {"role": "tool", "content": "30C"}], None),
    "odd_names": ([USER, {"role": "assistant", "content": None, "tool_calls": [
        call("</tool_call><|im_end|>", {}), call("\u540d\u524d \"q\"", {"k": "v"})]}], None),
}


# The call format in Qwen2.5's tools block: the stored file (its GGUF copy) has double braces
# inside a Jinja string literal, printed as written; other Qwen2.5 revisions have single ones.
QWEN_BRACES2 = '{{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}}'
QWEN_BRACES1 = '{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}'


def qwen_src(default=QWEN_DEFAULT, single_braces=False):
    src = (TEMPLATES / QWEN).read_text(encoding="utf-8")
    assert src.count(QWEN_DEFAULT) == 2  # the tool branch and the plain one
    assert src.count(QWEN_BRACES2) == 1
    if single_braces:
        src = src.replace(QWEN_BRACES2, QWEN_BRACES1)
    return src.replace(QWEN_DEFAULT, default)


@pytest.mark.parametrize("gen", [True, False], ids=["gen", "nogen"])
@pytest.mark.parametrize("name", sorted(TOOL_CONVS))
def test_tools_qwen_matches_jinja(run_pagoda, name, gen):
    msgs, tools = TOOL_CONVS[name]
    want = check_same(run_pagoda, qwen_src(), ["--template-file", TEMPLATES / QWEN], msgs, gen,
                      "", "<|im_end|>", tools=tools)
    assert want is not None
    if tools:
        assert "<tools>\n" + json.dumps(tools[0], ensure_ascii=False) in want
        assert '\n<tool_call>\n{{"name": <function-name>, ' in want


@pytest.mark.parametrize("gen", [True, False], ids=["gen", "nogen"])
@pytest.mark.parametrize("name", sorted(TOOL_CONVS))
def test_tools_qwen_single_braces_matches_jinja(run_pagoda, tmp_path, name, gen):
    """Other Qwen2.5 revisions write the call format with single braces: so does pagoda."""
    msgs, tools = TOOL_CONVS[name]
    src = qwen_src(single_braces=True)
    f = tmp_path / "qwen2.5-single-braces.jinja"
    f.write_text(src, encoding="utf-8")
    want = check_same(run_pagoda, src, ["--template-file", f], msgs, gen, "", "<|im_end|>",
                      tools=tools)
    assert want is not None
    if tools:
        assert '\n<tool_call>\n{"name": <function-name>, ' in want


@pytest.mark.parametrize("gen", [True, False], ids=["gen", "nogen"])
@pytest.mark.parametrize("name", sorted(TOOL_CONVS))
def test_tools_smollm2_model_matches_jinja(run_pagoda, model_path, smollm2, name, gen):
    """SmolLM2's template has no tool branch: pagoda renders Qwen2.5's with SmolLM2's default
    (single braces: the template does not write them doubled)."""
    _, bos, eos = smollm2
    msgs, tools = TOOL_CONVS[name]
    want = check_same(run_pagoda, qwen_src(SMOLLM2_DEFAULT, single_braces=True),
                      ["--model", model_path], msgs, gen, bos, eos, pagoda_bos_eos=False,
                      tools=tools)
    assert want is not None


def test_tools_smollm2_template_file(run_pagoda):
    msgs, tools = TOOL_CONVS["two_calls"]
    check_same(run_pagoda, qwen_src(SMOLLM2_DEFAULT, single_braces=True),
               ["--template-file", TEMPLATES / "smollm2-instruct.jinja"], msgs, True, "", "",
               tools=tools)


def content_pieces(msgs, tools):
    """The content bytes of a chatml render in order: with tools, a leading system message and
    the definitions first; then each message's content, its calls' names and arguments."""
    def text(m):
        c = m.get("content") or ""
        return "".join(p["text"] for p in c) if isinstance(c, list) else c

    out, start = [], 0
    if tools:
        if msgs[0]["role"] == "system":
            out.append(text(msgs[0]))
            start = 1
        out += [json.dumps(t, ensure_ascii=False) for t in tools]
    for m in msgs[start:]:
        out.append(text(m))
        for tc in m.get("tool_calls") or []:
            out.append(tc["function"]["name"])
            out.append(json.dumps(json.loads(tc["function"]["arguments"] or "{}"),
                                  ensure_ascii=False))
    return [p.encode("utf-8") for p in out if p]


@pytest.mark.parametrize("name", ["one_call_with_content", "two_calls_with_content",
                                  "odd_arguments", "odd_names", "tools_system", "tool_first"])
def test_tools_spans_exclude_content(run_pagoda, model_path, name):
    msgs, tools = TOOL_CONVS[name]
    p = pagoda_render(run_pagoda, ["--model", model_path], msgs, True, None, None, spans=True,
                      tools=tools)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["text"] == hf_render(qwen_src(SMOLLM2_DEFAULT, single_braces=True), joined(msgs),
                                    True, "", "", tools=tools)
    assert_spans_are_the_template(out["text"], out["special"], content_pieces(msgs, tools))


REFUSED_TOOL_INPUTS = {
    "tools_offered": ([{"role": "user", "content": "hi"}], [NOW]),
    "tool_message": ([{"role": "user", "content": "hi"}, {"role": "tool", "content": "r"}], None),
    "tool_calls": ([{"role": "user", "content": "hi"},
                    {"role": "assistant", "content": None, "tool_calls": [call("now", {})]}],
                   None),
}


@pytest.mark.parametrize("what", sorted(REFUSED_TOOL_INPUTS))
def test_tools_refused_by_other_families(run_pagoda, what):
    """Templates without a tool format (Llama 3.0's and the family's default included)."""
    msgs, tools = REFUSED_TOOL_INPUTS[what]
    sources = [["--template-file", TEMPLATES / f] for f, v in sorted(FILES.items())
               if v[0] not in ("chatml", "qwen3", "qwq") and f != LLAMA]
    sources += [["--chat-template", f] for f in sorted(DEFAULT_OF_FAMILY)
                if f not in ("qwen3", "qwq")]
    for src in sources:
        p = pagoda_render(run_pagoda, src, msgs, True, "<s>", "</s>", tools=tools)
        assert p.returncode == 1, (src, p.stdout)
        err = p.stderr.decode()
        assert "tool calling needs a chat template with a tool format" in err, (src, err)
        assert "chatml" in err and p.stdout == b""
        # the same conversation without the tool part renders
        plain = [m for m in msgs if m["role"] == "user"]
        assert pagoda_render(run_pagoda, src, plain, True, "<s>", "</s>").returncode == 0


# ---- tool calling (Llama 3.1+: Meta's JSON format) ----------------------------------------

LLAMA = "llama-3.2-instruct.jinja"
LLAMA_BOS, LLAMA_EOS = "<|begin_of_text|>", "<|eot_id|>"
# Llama 3.2's date block, and Llama 3.1's (3.3's): no strftime_now, a fixed date
LLAMA32_DATE = ('{%- if not date_string is defined %}\n'
                '    {%- if strftime_now is defined %}\n'
                '        {%- set date_string = strftime_now("%d %b %Y") %}\n'
                '    {%- else %}\n'
                '        {%- set date_string = "26 Jul 2024" %}\n'
                '    {%- endif %}\n'
                '{%- endif %}')
LLAMA31_DATE = ('{%- if not date_string is defined %}\n'
                '    {%- set date_string = "26 Jul 2024" %}\n'
                '{%- endif %}')


def llama_src(fixed_date=False):
    src = (TEMPLATES / LLAMA).read_text(encoding="utf-8")
    assert src.count(LLAMA32_DATE) == 1
    return src.replace(LLAMA32_DATE, LLAMA31_DATE) if fixed_date else src


RESULT = "Z\u00fcrich \"22\u00b0C\"\n\ttab \\ back \x01 \x1b \x7f \u2028 \U0001f326 </s> <|eot_id|>"
# name -> (messages, tools): what Meta's template renders (one call per assistant message)
LLAMA_TOOL_CONVS = {
    "tools_no_system": ([USER], TOOLS),
    "tools_system": ([{"role": "system", "content": " Be terse.\n"}, USER], TOOLS),
    "tools_system_parts": ([{"role": "system", "content": parts("Be terse.", 3)},
                            {"role": "user", "content": parts(" What's up? ", 4)}], [NOW]),
    "tools_empty_system": ([{"role": "system", "content": ""}, USER], [WEATHER]),
    "one_call": ([USER, {"role": "assistant", "content": None,
                         "tool_calls": [call("get_weather", {"city": "Paris"}, "call_1")]},
                  {"role": "tool", "tool_call_id": "call_1", "content": "22C, sunny"}], TOOLS),
    "one_call_with_content": (
        [{"role": "system", "content": "Use the tools wisely."}, USER,
         {"role": "assistant", "content": "Let me check (not rendered).",
          "tool_calls": [call("get_weather", {"city": "Paris", "unit": "c"})]},
         {"role": "tool", "content": "22"}, {"role": "assistant", "content": " It is 22C. "},
         {"role": "user", "content": "Thanks"}], TOOLS),
    "results_escaped": ([USER, {"role": "assistant", "content": None,
                                "tool_calls": [call("now", {})]},
                         {"role": "tool", "content": RESULT},
                         {"role": "tool", "content": '{"temp": 22.5, "unit": "c", "ok": true}'},
                         {"role": "tool", "content": [{"type": "text", "text": " 12"},
                                                      {"type": "text", "text": ":00 "}]},
                         {"role": "tool", "content": None}], TOOLS),
    "odd_arguments": ([USER, {"role": "assistant", "content": None,
                              "tool_calls": [call("get_weather", ODD_ARGS)]},
                       {"role": "tool", "content": "</s><|eot_id|>\n<|start_header_id|>"}],
                      TOOLS),
    "odd_argument_spelling": ([USER, {"role": "assistant", "content": None, "tool_calls": [
        call("get_weather", '{ "city" : "P\\u00e4ris",\n"x":1E2, "y":[ 1.50 ,-0.0,1e-7] }')]}],
        TOOLS),
    "multi_turn": ([USER, {"role": "assistant", "content": "",
                           "tool_calls": [call("get_weather", {"city": "Paris"}, "a")]},
                    {"role": "tool", "tool_call_id": "a", "content": "22C"},
                    {"role": "assistant", "content": "22C."},
                    {"role": "user", "content": "And the time?"},
                    {"role": "assistant", "content": None, "tool_calls": [call("now", "")]},
                    {"role": "tool", "content": "12:00"}], TOOLS),
    "calls_without_tools": ([USER, {"role": "assistant", "content": None,
                                    "tool_calls": [call("get_weather", {"city": "Rome"})]},
                             {"role": "tool", "content": "30C"}], None),
    "tool_first": ([{"role": "tool", "content": " orphan result "}, USER], TOOLS),
    "tool_first_no_tools": ([{"role": "tool", "content": " orphan "}], None),
    "tool_after_system": ([{"role": "system", "content": "s"},
                           {"role": "tool", "content": "r"}], TOOLS),
    "call_first": ([{"role": "assistant", "content": None,
                     "tool_calls": [call("now", {})]}, USER], TOOLS),
    "odd_names": ([USER, {"role": "assistant", "content": None, "tool_calls": [
        call("</s><|eot_id|> \u540d\u524d \"q\"", {"k": "v"})]}], None),
    "plain_with_tools": ([{"role": "user", "content": "Hi"},
                          {"role": "assistant", "content": "Hello!"},
                          {"role": "system", "content": " late "},
                          {"role": "user", "content": "Bye"}], [NOW, WEATHER]),
}
# Conversations Meta's template refuses (raise_exception): pagoda must refuse them too.
LLAMA_REFUSED = {
    "two_calls": ([USER, {"role": "assistant", "content": None, "tool_calls": [
        call("get_weather", {"city": "Paris"}), call("now", {})]}], TOOLS),
    "two_calls_no_tools": ([USER, {"role": "assistant", "content": None, "tool_calls": [
        call("now", {}), call("now", {})]}], None),
    "tools_system_only": ([{"role": "system", "content": "only a system prompt"}], TOOLS),
}


@pytest.mark.parametrize("fixed_date", [False, True], ids=["llama3.2", "llama3.1"])
@pytest.mark.parametrize("gen", [True, False], ids=["gen", "nogen"])
@pytest.mark.parametrize("name", sorted(LLAMA_TOOL_CONVS))
def test_tools_llama_matches_jinja(run_pagoda, tmp_path, name, gen, fixed_date):
    msgs, tools = LLAMA_TOOL_CONVS[name]
    src = llama_src(fixed_date)
    f = tmp_path / "llama.jinja"
    f.write_text(src, encoding="utf-8")
    want = check_same(run_pagoda, src, ["--template-file", f], msgs, gen, LLAMA_BOS, LLAMA_EOS,
                      tools=tools)
    assert want is not None
    date = "26 Jul 2024" if fixed_date else datetime.now().strftime("%d %b %Y")
    assert f"Today Date: {date}\n\n" in want
    if tools:
        assert "\n\n" + json.dumps(tools[0], ensure_ascii=False, indent=4) + "\n\n" in want


@pytest.mark.parametrize("name", sorted(LLAMA_REFUSED))
def test_tools_llama_refusals(run_pagoda, name):
    msgs, tools = LLAMA_REFUSED[name]
    with pytest.raises(Refused) as e:
        hf_render(llama_src(), joined(msgs), True, LLAMA_BOS, LLAMA_EOS, tools=tools)
    p = pagoda_render(run_pagoda, ["--template-file", TEMPLATES / LLAMA], msgs, True, LLAMA_BOS,
                      LLAMA_EOS, tools=tools)
    assert p.returncode == 1 and p.stdout == b""
    assert str(e.value) in p.stderr.decode()  # the template's own words


def test_tools_llama_family_default_refuses(run_pagoda):
    """--chat-template llama3 alone is Llama 3.0's template: no tool format; with the file's
    source it is the file's variant."""
    msgs, tools = LLAMA_TOOL_CONVS["one_call"]
    p = pagoda_render(run_pagoda, ["--chat-template", "llama3"], msgs, True, LLAMA_BOS,
                      LLAMA_EOS, tools=tools)
    assert p.returncode == 1 and b"tool format" in p.stderr
    check_same(run_pagoda, llama_src(),
               ["--template-file", TEMPLATES / LLAMA, "--chat-template", "llama3"], msgs, True,
               LLAMA_BOS, LLAMA_EOS, tools=tools)


def llama_content_pieces(msgs, tools):
    """The content bytes of a Llama 3.1+ render in order: the leading system message's content
    (trimmed), with tools the indented definitions and the next message's content (trimmed);
    then each message's: a call's name and arguments (its content is not written), a tool
    result as a JSON string, anything else trimmed."""
    def text(m):
        c = m.get("content") or ""
        return "".join(p["text"] for p in c) if isinstance(c, list) else c

    out, rest = [], list(msgs)
    if rest[0]["role"] == "system":
        out.append(text(rest.pop(0)).strip())
    if tools:
        out += [json.dumps(t, ensure_ascii=False, indent=4) for t in tools]
        out.append(text(rest.pop(0)).strip())
    for m in rest:
        if m.get("tool_calls"):
            fn = m["tool_calls"][0]["function"]
            out.append(fn["name"])
            out.append(json.dumps(json.loads(fn["arguments"] or "{}"), ensure_ascii=False))
        elif m["role"] == "tool":
            out.append(json.dumps(text(m), ensure_ascii=False))
        else:
            out.append(text(m).strip())
    return [p.encode("utf-8") for p in out if p]


@pytest.mark.parametrize("name", ["one_call_with_content", "results_escaped", "odd_arguments",
                                  "odd_names", "tools_system", "tool_first", "multi_turn"])
def test_tools_llama_spans_exclude_content(run_pagoda, name):
    msgs, tools = LLAMA_TOOL_CONVS[name]
    p = pagoda_render(run_pagoda, ["--template-file", TEMPLATES / LLAMA], msgs, True, LLAMA_BOS,
                      LLAMA_EOS, spans=True, tools=tools)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["text"] == hf_render(llama_src(), joined(msgs), True, LLAMA_BOS, LLAMA_EOS,
                                    tools=tools)
    assert_spans_are_the_template(out["text"], out["special"], llama_content_pieces(msgs, tools))


# ---- Qwen3 (hybrid thinking) -------------------------------------------------------------

QWEN3 = "qwen3.jinja"
QWEN3_EOS = "<|im_end|>"
THINK = "<think>\nLet me think.\nStep 2.\n</think>\n\n"


def asst(content, reasoning=..., calls=None):
    """An assistant message; reasoning_content only when given (None is sent as null)."""
    m = {"role": "assistant", "content": content}
    if reasoning is not ...:
        m["reasoning_content"] = reasoning
    if calls:
        m["tool_calls"] = calls
    return m


def user(text):
    return {"role": "user", "content": text}


# name -> (messages, tools): what Qwen3's template renders (it never raises)
QWEN3_CONVS = {
    "no_system": ([user("Hi")], None),
    "system": ([{"role": "system", "content": "Be terse."}, user("Hi")], None),
    "multi_turn_plain": ([user("Hi"), asst("Hello!"), user("Joke?"), asst("No.")], None),
    "think_last": ([user("Hi"), asst(THINK + "Hello!")], None),
    "think_before_query": ([user("Hi"), asst(THINK + "Hello!"), user("Again")], None),
    "think_both": ([{"role": "system", "content": "S"}, user("q1"), asst(THINK + "a1"), user("q2"),
                    asst("<think>\nsecond\n</think>\n\na2")], None),
    "think_not_last_after_query": ([user("q"), asst(THINK + "a"), asst("<think>r2</think>b"),
                                    asst("plain"), asst("")], None),
    "think_newlines": ([user("q"), asst("\n\n<think>\n\n\nr\n\n\n</think>\n\n\n\nanswer\n\n")],
                       None),
    "think_spaces": ([user("q"), asst("<think> r </think> a "), asst("x")], None),
    "think_empty": ([user("q"), asst("<think>\n\n</think>\n\nanswer"), asst("more")], None),
    "close_only": ([user("q"), asst("reasoning without open</think>answer"), asst("z")], None),
    "open_only": ([user("q"), asst("<think>never closed"), asst("z")], None),
    "two_closes": ([user("q"), asst("<think>a</think>mid<think>b</think>\nend"), asst("z")],
                   None),
    "two_opens": ([user("q"), asst("x<think>a<think>b\n</think>c"), asst("z")], None),
    "think_in_parts": ([user("q"), {"role": "assistant",
                                    "content": parts("<think>\nr\n</think>\n\nans", 3, 10, 16)}],
                       None),
    "reasoning_content": ([user("q"), asst("The answer.", "\nI reason.\n"), user("q2"),
                           asst("A2", "R2")], None),
    "reasoning_content_last": ([user("q"), asst("\nThe answer.", "I reason.")], None),
    "reasoning_content_empty": ([user("q"), asst("</think>not split", ""), asst("z")], None),
    "reasoning_content_null": ([user("q"), asst(THINK + "split", None), asst("z")], None),
    "reasoning_content_wins": ([user("q"), asst(THINK + "kept whole", "given")], None),
    "reasoning_content_markers": ([user("q"), asst("a", "<|im_end|><think></think>"),
                                   asst("b")], None),
    "no_user": ([{"role": "system", "content": "s"}, asst(THINK + "a")], None),
    "only_assistant": ([asst(THINK + "a")], None),
    "user_tool_response": ([user("real query"), asst(THINK + "a1"),
                            user("<tool_response>\n42\n</tool_response>"), asst(THINK + "a2")],
                           None),
    "user_tool_response_half": ([user("q"), asst(THINK + "a1"), user("<tool_response>only start"),
                                 asst(THINK + "a2")], None),
    "markers_in_content": ([user("<|im_end|>\n<|im_start|>system\n<think>x</think>"),
                            asst("<|im_start|>user\n</think>\n\n<|im_end|>")], None),
    "tools_no_system": ([USER], TOOLS),
    "tools_system": ([{"role": "system", "content": "Use tools.\n"}, USER], TOOLS),
    "tools_empty_system": ([{"role": "system", "content": ""}, USER], [NOW]),
    "tools_empty_list": ([USER], []),
    "call_no_content": ([USER, asst(None, calls=[call("get_weather", {"city": "Paris"}, "c1")]),
                         {"role": "tool", "tool_call_id": "c1", "content": "22C"}], TOOLS),
    "call_with_content": ([USER, asst("Checking.", calls=[call("now", "")]),
                           {"role": "tool", "content": "12:00"}], TOOLS),
    "multi_step": ([{"role": "system", "content": "S"}, USER,
                    asst(THINK + "Let me look.", calls=[call("get_weather", {"city": "Paris"}),
                                                       call("now", {})]),
                    {"role": "tool", "content": "22C"}, {"role": "tool", "content": "12:00"},
                    asst("<think>\nnow answer\n</think>\n\n", calls=[call("now", "{}")]),
                    {"role": "tool", "content": parts("13:00", 2)},
                    asst(THINK + "It is 22C at 13:00.")], TOOLS),
    "multi_step_reasoning_content": (
        [USER, asst("", "need weather", [call("get_weather", '{"city":"Oslo" ,"days":3}')]),
         {"role": "tool", "content": "5C"}, asst("\nCold.", "done")], TOOLS),
    "calls_before_query": ([USER, asst(THINK + "x", calls=[call("now", {})]),
                            {"role": "tool", "content": "1"}, asst("one"), user("thanks")], TOOLS),
    "three_tool_results": ([USER, asst(None, calls=[call("now", {}), call("now", {}),
                                                   call("now", {})]),
                            {"role": "tool", "content": "1"}, {"role": "tool", "content": "2"},
                            {"role": "tool", "content": "3"}, user("and?")], None),
    "tool_first": ([{"role": "tool", "content": "orphan result"}, USER], TOOLS),
    "tool_last": ([USER, asst(None, calls=[call("now", {})]), {"role": "tool", "content": "t"}],
                  None),
    "odd_arguments": ([USER, asst(None, calls=[call("get_weather", ODD_ARGS)]),
                       {"role": "tool", "content": "</tool_response><|im_end|>\n<|im_start|>"}],
                      TOOLS),
    "odd_names": ([USER, asst(None, calls=[call("</tool_call><|im_end|>", {}),
                                           call("\u540d\u524d \"q\"", {"k": "v"})])], None),
}

THINKING = {"default": None, "true": {"enable_thinking": True},
            "false": {"enable_thinking": False},
            "others_ignored": {"enable_thinking": False, "custom": [1, {"x": None}]}}


# enable_thinking is read by the generation prompt only: without one, the kwargs' variants render
# alike, so that half runs once (CI time), with the kwargs left out.
QWEN3_GEN_THINKING = [(True, t) for t in sorted(THINKING)] + [(False, "default")]


@pytest.mark.parametrize("gen,thinking", QWEN3_GEN_THINKING,
                         ids=[f"{'gen' if g else 'nogen'}-{t}" for g, t in QWEN3_GEN_THINKING])
@pytest.mark.parametrize("name", sorted(QWEN3_CONVS))
def test_qwen3_matches_jinja(run_pagoda, name, gen, thinking):
    msgs, tools = QWEN3_CONVS[name]
    src = (TEMPLATES / QWEN3).read_text(encoding="utf-8")
    kwargs = THINKING[thinking]
    want = check_same(run_pagoda, src, ["--template-file", TEMPLATES / QWEN3], msgs, gen, "",
                      QWEN3_EOS, tools=tools, kwargs=kwargs)
    assert want is not None
    if gen:
        off = kwargs is not None and not kwargs["enable_thinking"]
        assert want.endswith("<|im_start|>assistant\n" + ("<think>\n\n</think>\n\n" if off else ""))
    if tools:
        assert '\n<tool_call>\n{"name": <function-name>, ' in want
    # the same from the family's built-in rendering
    check_same(run_pagoda, src, ["--chat-template", "qwen3"], msgs, gen, "", QWEN3_EOS,
               tools=tools, kwargs=kwargs)


def test_qwen3_reasoning_placement(run_pagoda):
    """Guards the premise of the cases above: reasoning kept after the last query only."""
    msgs, _ = QWEN3_CONVS["think_both"]
    want = check_same(run_pagoda, (TEMPLATES / QWEN3).read_text(encoding="utf-8"),
                      ["--template-file", TEMPLATES / QWEN3], msgs, False, "", QWEN3_EOS)
    assert want == ("<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nq1<|im_end|>\n"
                    "<|im_start|>assistant\na1<|im_end|>\n<|im_start|>user\nq2<|im_end|>\n"
                    "<|im_start|>assistant\n<think>\nsecond\n</think>\n\na2<|im_end|>\n")


@pytest.mark.parametrize("name", ["call_no_content", "call_with_content", "multi_step",
                                  "odd_arguments", "odd_names"])
def test_qwen3_string_arguments(run_pagoda, name):
    """Arguments given to jinja2 as the JSON strings a client sends (the template's `is string`
    branch prints them as they are) render the same when they are spelled as json.dumps writes
    them, which is how pagoda writes every call's arguments."""
    msgs, tools = QWEN3_CONVS[name]
    canonical = [{**m, "tool_calls": [
        {**tc, "function": {**tc["function"], "arguments": json.dumps(
            json.loads(tc["function"]["arguments"] or "{}"), ensure_ascii=False)}}
        for tc in m["tool_calls"]]} if m.get("tool_calls") else m for m in msgs]
    as_strings = joined(canonical)
    for j, m in zip(as_strings, canonical):
        if m.get("tool_calls"):
            j["tool_calls"] = m["tool_calls"]  # arguments left as strings
    want = check_same(run_pagoda, (TEMPLATES / QWEN3).read_text(encoding="utf-8"),
                      ["--template-file", TEMPLATES / QWEN3], canonical, True, "", QWEN3_EOS,
                      tools=tools, jinja_messages=as_strings)
    assert want == hf_render((TEMPLATES / QWEN3).read_text(encoding="utf-8"), joined(canonical),
                             True, "", QWEN3_EOS, tools=tools)


def test_qwen3_spans(run_pagoda):
    """The <think> markers the template writes are template text; the reasoning, the answer and
    the markers inside content are content."""
    msgs = [user("q <think>"), asst("<think>\nr <|im_end|>\n</think>\n\nA <think>"),
            user("q2 </think>"), asst("B", "R <think>")]
    src = (TEMPLATES / QWEN3).read_text(encoding="utf-8")
    for kwargs in (None, {"enable_thinking": False}):
        p = pagoda_render(run_pagoda, ["--template-file", TEMPLATES / QWEN3], msgs, True, "",
                          QWEN3_EOS, spans=True, kwargs=kwargs)
        assert p.returncode == 0, p.stderr
        out = json.loads(p.stdout)
        assert out["text"] == hf_render(src, joined(msgs), True, "", QWEN3_EOS, kwargs=kwargs)
        # the first assistant turn (before the last query) keeps its answer only
        assert "<think>\nr" not in out["text"]
        assert "<|im_start|>assistant\n<think>\nR <think>\n</think>\n\nB<|im_end|>" in out["text"]
        assert_spans_are_the_template(out["text"], out["special"],
                                      [b"q <think>", b"A <think>", b"q2 </think>", b"R <think>",
                                       b"B"])


def test_qwen3_variants_refused(run_pagoda, tmp_path):
    """Another <think> ChatML template is not rendered as Qwen3's (nor as Qwen2.5's)."""
    src = (TEMPLATES / QWEN3).read_text(encoding="utf-8")
    gen_block = ("    {%- if enable_thinking is defined and enable_thinking is false %}\n"
                 "        {{- '<think>\\n\\n</think>\\n\\n' }}\n    {%- endif %}\n")
    assert src.count(gen_block) == 1
    variants = {
        "always_think": src.replace(gen_block, "    {{- '<think>\\n' }}\n"),
        "history_kept": src.replace("loop.index0 > ns.last_query_index", "true"),
        "raises": src.replace("{%- endfor %}\n{%- for message in messages %}",
                              "{%- endfor %}\n{%- if ns.multi_step_tool %}{{- raise_exception("
                              "'No user query found in messages.') }}{%- endif %}\n"
                              "{%- for message in messages %}"),
    }
    for name, text in variants.items():
        assert text != src, name
        f = tmp_path / f"{name}.jinja"
        f.write_text(text, encoding="utf-8")
        p = run_pagoda("template", "--detect", f, check=False)
        assert p.returncode == 1, (name, p.stdout)
        assert b"--chat-template qwen3" in p.stderr, (name, p.stderr)


# ---- Qwen's later templates: Qwen3-Instruct-2507, Qwen3-Thinking-2507, QwQ-32B -----------

# file -> (family, the generation prompt): the Instruct-2507 template renders as chatml does
# (Qwen2.5's, without a default system prompt); Thinking-2507's as qwen3's but for its
# generation prompt, which always opens <think>; QwQ's is a family of its own. None reads
# enable_thinking.
QWEN_LATER = {
    "qwen3-instruct-2507.jinja": ("chatml", "<|im_start|>assistant\n"),
    "qwen3-thinking-2507.jinja": ("qwen3", "<|im_start|>assistant\n<think>\n"),
    "qwq-32b.jinja": ("qwq", "<|im_start|>assistant\n<think>\n"),
}


@pytest.mark.parametrize("gen", [True, False], ids=["gen", "nogen"])
@pytest.mark.parametrize("fname", sorted(QWEN_LATER))
def test_qwen_later_matches_jinja(run_pagoda, fname, gen):
    """Qwen3's conversation set (reasoning in content and reasoning_content, tools, calls,
    results) against the template file, with enable_thinking absent (and false on a few); the
    family's built-in rendering (--chat-template qwq) too for QwQ, whose template is its
    default, on the conversations with tools and the generation prompt."""
    family, gen_prompt = QWEN_LATER[fname]
    src = (TEMPLATES / fname).read_text(encoding="utf-8")
    sources = [["--template-file", TEMPLATES / fname]]
    if DEFAULT_OF_FAMILY.get(family) == fname:
        sources.append(["--chat-template", family])
    # enable_thinking could only touch the generation prompt: a few conversations suffice
    off = {"enable_thinking": False}
    # the built-in rendering on what test_family_override_matches_jinja does not cover
    runs = [(name, source, None) for name, (_, tools) in QWEN3_CONVS.items()
            for source in sources[:1 + (gen and tools is not None)]]
    runs += [(name, sources[0], off) for name in ("no_system", "tools_system", "think_last")]
    for name, source, kwargs in runs:
        msgs, tools = QWEN3_CONVS[name]
        want = check_same(run_pagoda, src, source, msgs, gen, "", QWEN3_EOS, tools=tools,
                          kwargs=kwargs)
        assert want is not None, name
        assert want.endswith(gen_prompt if gen else "<|im_end|>\n"), name
        if tools:
            assert '\n<tool_call>\n{"name": <function-name>, ' in want


def test_qwen_later_reasoning_placement(run_pagoda):
    """Guards the premise of the cases above: each template keeps or drops the reasoning of
    earlier turns as its own rules say."""
    msgs, _ = QWEN3_CONVS["think_both"]
    head = "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nq1<|im_end|>\n"
    wants = {  # Instruct-2507 keeps content whole; Thinking-2507 as Qwen3; QwQ splits all but last
        "qwen3-instruct-2507.jinja": head + "<|im_start|>assistant\n" + THINK + "a1<|im_end|>\n"
        "<|im_start|>user\nq2<|im_end|>\n<|im_start|>assistant\n<think>\nsecond\n</think>\n\na2"
        "<|im_end|>\n",
        "qwen3-thinking-2507.jinja": head + "<|im_start|>assistant\na1<|im_end|>\n<|im_start|>user"
        "\nq2<|im_end|>\n<|im_start|>assistant\n<think>\nsecond\n</think>\n\na2<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n",
        "qwq-32b.jinja": head + "<|im_start|>assistant\na1<|im_end|>\n<|im_start|>user\nq2"
        "<|im_end|>\n<|im_start|>assistant\n<think>\nsecond\n</think>\n\na2<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n",
    }
    for fname, want in wants.items():
        gen = not fname.startswith("qwen3-instruct")
        got = check_same(run_pagoda, (TEMPLATES / fname).read_text(encoding="utf-8"),
                         ["--template-file", TEMPLATES / fname], msgs, gen, "", QWEN3_EOS)
        assert got == want, fname


def test_qwen_later_spans(run_pagoda):
    """The markers the templates write are template text (the generation prompt's <think>
    included: the server's reasoning parser starts inside that block); content stays content."""
    msgs = [user("q <think>"), asst("<think>\nr <|im_end|>\n</think>\n\nA <think>"),
            user("q2 </think>"), asst("B", "R <think>")]
    for fname, pieces in (
            ("qwen3-thinking-2507.jinja", [b"q <think>", b"A <think>", b"q2 </think>",
                                           b"R <think>", b"B"]),
            ("qwq-32b.jinja", [b"q <think>", b"A <think>", b"q2 </think>", b"B"])):
        p = pagoda_render(run_pagoda, ["--template-file", TEMPLATES / fname], msgs, True, "",
                          QWEN3_EOS, spans=True)
        assert p.returncode == 0, p.stderr
        out = json.loads(p.stdout)
        src = (TEMPLATES / fname).read_text(encoding="utf-8")
        assert out["text"] == hf_render(src, joined(msgs), True, "", QWEN3_EOS)
        assert out["text"].endswith("<|im_start|>assistant\n<think>\n")
        assert out["special"][-1][1] == len(out["text"].encode())
        assert_spans_are_the_template(out["text"], out["special"], pieces)


def test_qwen_later_variants_refused(run_pagoda, tmp_path):
    """An edited Thinking-2507 or QwQ template is refused with a message naming the family to
    choose, not rendered as the published one."""
    think = (TEMPLATES / "qwen3-thinking-2507.jinja").read_text(encoding="utf-8")
    qwq = (TEMPLATES / "qwq-32b.jinja").read_text(encoding="utf-8")
    gen_think = "{{- '<|im_start|>assistant\\n<think>\\n' }}\n"
    assert think.count(gen_think) == 1 and qwq.count(gen_think) == 1
    variants = {
        "think_with_switch": (think.replace(gen_think, gen_think + "    {%- if enable_thinking is "
                                            "defined and enable_thinking is false %}{{- '</think>'"
                                            " }}{%- endif %}\n"), "qwen3"),
        "think_history_kept": (think.replace("loop.index0 > ns.last_query_index", "true"),
                               "qwen3"),
        "think_no_open": (think.replace(gen_think, "{{- '<|im_start|>assistant\\n' }}\n"),
                          "qwen3"),
        "qwq_switch": (qwq.replace(gen_think, gen_think + "    {%- if not enable_thinking -%}"
                                   "{{- '</think>' -}}{%- endif -%}\n"), "qwq"),
        "qwq_keeps_reasoning": (qwq.replace("{%- if not loop.last %}", "{%- if false %}", 1),
                                "qwq"),
        "qwq_no_open": (qwq.replace(gen_think, "{{- '<|im_start|>assistant\\n' }}\n"), "qwq"),
    }
    for name, (text, family) in variants.items():
        f = tmp_path / f"{name}.jinja"
        f.write_text(text, encoding="utf-8")
        p = run_pagoda("template", "--detect", f, check=False)
        assert p.returncode == 1, (name, p.stdout)
        assert f"--chat-template {family}".encode() in p.stderr, (name, p.stderr)


# ---- errors of the command ----------------------------------------------------------------

def test_unknown_template(run_pagoda, tmp_path):
    src = ("{%- for message in messages %}{%- if message['role'] == 'system' -%}"
           "{{- '' + message['content'] + '\\n\\n' -}}{%- else -%}USER: {{ message['content'] }}"
           "{%- endif -%}{%- endfor -%}")
    f = tmp_path / "vicuna.jinja"
    f.write_text(src)
    p = run_pagoda("template", "--detect", f, check=False)
    assert p.returncode == 1
    err = p.stderr.decode()
    assert src[:40] in err
    for name in ("chatml", "llama2", "llama3", "mistral", "gemma", "zephyr", "phi3", "qwen3",
                 "qwq"):
        assert name in err
    p = run_pagoda("template", "--template-file", f, '[{"role":"user","content":"x"}]',
                   check=False)
    assert p.returncode == 1 and src[:40] in p.stderr.decode()


def test_command_errors(run_pagoda):
    one = '[{"role":"user","content":"x"}]'
    cases = [
        (["--chat-template", "vicuna", one], 1, "unknown chat template name 'vicuna'"),
        (["--chat-template", "llama3", '[{"role":"tool","content":"x"}]'], 1,
         "tool calling needs a chat template with a tool format"),
        (["--chat-template", "chatml", '[{"role":"function","content":"x"}]'], 1, '"tool"'),
        (["--chat-template", "chatml",
          '[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"[1]"}}]}]'],
         1, "messages[0].tool_calls[0].function.arguments: must be a string holding a JSON "
            "object, not an array"),
        (["--chat-template", "chatml", '{"messages":[{"role":"user","content":"x"}],"tools":{}}'],
         1, '"tools" must be an array'),
        (["--chat-template", "chatml", '{"messages":[{"role":"user","content":"x"}],"tools":[1]}'],
         1, "tools[0] must be an object"),
        (["--chat-template", "chatml", '{"tools":[]}'], 1, 'no "messages"'),
        (["--chat-template", "chatml", '{"messages":[],"tool":[]}'], 1, 'unknown key "tool"'),
        (["--chat-template", "qwen3",
          '{"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":[]}'], 1,
         "'chat_template_kwargs' must be an object"),
        (["--chat-template", "qwen3",
          '{"messages":[{"role":"user","content":"x"}],'
          '"chat_template_kwargs":{"enable_thinking":"no"}}'], 1,
         "'chat_template_kwargs.enable_thinking' must be a boolean"),
        (["--chat-template", "qwen3",
          '[{"role":"user","content":"x"},{"role":"assistant","content":"y",'
          '"reasoning_content":1}]'], 1, "messages[1].reasoning_content: must be a string"),
        (["--chat-template", "chatml",
          '[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]'], 1,
         "image_url"),
        (["--chat-template", "chatml", '[{"role":"user","content":'], 1, "not valid JSON"),
        (["--chat-template", "chatml", "[]"], 1, "empty"),
        (["--chat-template", "chatml", '[{"role":"user","content":null}]'], 1, "content"),
        ([one], 2, "one of --model"),
        (["--chat-template", "chatml"], 2, "MESSAGES_JSON"),
        (["--chat-template", "chatml", "--bogus", one], 2, "unknown option"),
    ]
    for args, rc, msg in cases:
        p = run_pagoda("template", *args, check=False)
        assert p.returncode == rc, (args, p.returncode, p.stderr)
        assert msg in p.stderr.decode(), (args, p.stderr)
        assert p.stdout == b""


def test_no_template_in_model(run_pagoda, tmp_path):
    """A model without tokenizer.chat_template and no override is a clear error."""
    path = tmp_path / "notemplate.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_string("general.name", "no template")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    one = '[{"role":"user","content":"x"}]'
    p = run_pagoda("template", "--model", path, one, check=False)
    assert p.returncode == 1 and b"no chat template" in p.stderr
    p = run_pagoda("template", "--model", path, "--chat-template", "zephyr",
                   "--eos-token", "</s>", one)
    assert p.stdout == b"<|user|>\nx</s>\n<|assistant|>\n"
