"""JSON-schema-constrained output against an independent validator: the `jsonschema` package
(Draft 2020-12) checks every document a random walk through pagoda's recognizer writes
(build/json_schema_tool walk: each byte drawn among those the recognizer takes, as a sampler
with random logits would), and every mutation of them the recognizer calls whole. Documents
pydantic writes for its own models (compact and indented) are whole to the recognizer. Schemas:
pydantic's models as pydantic writes them and as the openai SDK sends them (strict), and
hand-written ones."""
import enum
import json
import pathlib
import random
import subprocess
from typing import Annotated, Literal, Optional, Union

import jsonschema
import pytest
from openai.lib._pydantic import to_strict_json_schema
from pydantic import BaseModel, Field


class Color(str, enum.Enum):
    red = "red"
    green = "green"
    blue = "blue"


class Address(BaseModel):
    street: str = Field(max_length=24)
    zip: Optional[str] = None


class Person(BaseModel):
    name: str = Field(min_length=1, max_length=16)
    age: int = Field(ge=0, le=150)
    rank: int = Field(gt=-1000, lt=-10)
    score: float = Field(ge=0, le=1)
    height: float
    ok: bool
    color: Color
    kind: Literal["a", "b", 3]
    tags: list[str] = Field(max_length=3)
    pair: tuple[int, str]
    rest: tuple[bool, ...]
    either: Union[int, float]
    address: Optional[Address] = None
    scores: dict[str, int] = {}


class Tree(BaseModel):
    v: int
    children: list["Tree"] = Field(default=[], max_length=3)


class Search(BaseModel):
    kind: Literal["search"]
    query: str = Field(max_length=20)
    limit: Optional[int] = None


class Answer(BaseModel):
    kind: Literal["answer", "final"]
    text: str = Field(max_length=20)
    confidence: float = Field(ge=0, le=1)


class Cat(BaseModel):
    kind: Literal["cat"]
    data: int = Field(ge=0, le=20)


class Dog(BaseModel):
    kind: Literal["dog"]
    data: str = Field(max_length=8)


class Pets(BaseModel):
    """A discriminated union whose branches share a field of different types."""
    pets: list[Annotated[Union[Cat, Dog], Field(discriminator="kind")]] = Field(max_length=4)


class Agent(BaseModel):
    steps: list[Union[Search, Answer]] = Field(max_length=3)
    last: Annotated[Union[Search, Answer], Field(discriminator="kind")]
    maybe: Union[Search, Answer, None] = None


HAND = {
    "nested-arrays": {"type": "array", "maxItems": 4,
                      "items": {"type": "array", "items": {"type": ["integer", "null"]}}},
    "any": {},
    "free-object": {"type": "object"},
    "enum-mixed": {"type": "object", "properties": {"e": {"enum": ["x", 1, 2.5, True, None]}},
                   "required": ["e"]},
    "unions": {"type": "object", "properties": {
        "u": {"anyOf": [{"type": "string", "maxLength": 5}, {"type": "number"},
                        {"type": "object", "properties": {"k": {"const": "v"}},
                         "required": ["k"], "additionalProperties": False},
                        {"type": "array", "items": {"type": "boolean"}}, {"type": "null"}]}},
        "required": ["u"]},
    "integers": {"type": "array", "items": {"anyOf": [
        {"type": "integer", "minimum": -12, "maximum": 345},
        {"type": "string", "maxLength": 2}]}},
    "big-integers": {"type": "object", "properties": {
        "a": {"type": "integer", "minimum": 9007199254740993},
        "b": {"type": "integer", "exclusiveMaximum": -77.5},
        "c": {"type": "integer", "minimum": 1000, "maximum": 1005}}, "required": ["a", "b", "c"]},
    "decimals": {"type": "array", "items": {"anyOf": [
        {"type": "number", "exclusiveMinimum": -2.5, "maximum": 0.30000000000000004},
        {"type": "object", "properties": {
            "tiny": {"type": "number", "exclusiveMinimum": 1e-10, "maximum": 1e-9},
            "neg": {"type": "number", "minimum": -1e14, "exclusiveMaximum": -99.125},
            "big": {"type": "number", "minimum": 123456789.5}},
         "required": ["tiny", "neg", "big"]}]}},
    "tool-calls": {"type": "array", "minItems": 1, "maxItems": 3, "items": {"anyOf": [
        {"type": "object", "properties": {
            "name": {"const": "get_weather"},
            "arguments": {"type": "object", "properties": {
                "city": {"type": "string", "maxLength": 10},
                "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city"],
                "additionalProperties": False}},
         "required": ["name", "arguments"], "additionalProperties": False},
        {"type": "object", "properties": {
            "name": {"const": "add"},
            "arguments": {"type": "object", "properties": {
                "xs": {"type": "array", "items": {"type": "integer"}, "maxItems": 3}},
                "required": ["xs"], "additionalProperties": False}},
         "required": ["name", "arguments"], "additionalProperties": False},
        {"type": "object", "properties": {
            "name": {"const": "ping"},
            "arguments": {"type": "object", "properties": {}, "additionalProperties": False}},
         "required": ["name", "arguments"], "additionalProperties": False}]}},
    "optional-keys": {"type": "object", "properties": {
        k: {"type": "integer"} for k in "abcdef"}, "required": ["c", "f"]},
}


def schemas():
    out = dict(HAND)
    for m in (Person, Tree, Address, Agent, Pets):
        out[m.__name__] = m.model_json_schema()
        out[m.__name__ + "-strict"] = to_strict_json_schema(m)
    return out


SCHEMAS = schemas()


@pytest.fixture(scope="module")
def tool(pagoda_bin):
    path = pathlib.Path(pagoda_bin).parent / "json_schema_tool"
    if not path.exists():
        pytest.fail(f"{path} not built; run `make build`")
    return str(path)


def schema_file(tmp_path, schema):
    p = tmp_path / "schema.json"
    p.write_text(json.dumps(schema))
    return str(p)


def walk(tool, path, seed, n):
    p = subprocess.run([tool, "walk", path, str(seed), str(n)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return [json.loads(line) for line in p.stdout.splitlines()]


def check(tool, path, docs):
    p = subprocess.run([tool, "check", path], capture_output=True, text=True,
                       input="".join(json.dumps(d) + "\n" for d in docs))
    assert p.returncode == 0, p.stderr
    out = p.stdout.split()
    assert len(out) == len(docs)
    return out


def mutations(doc, rng, k):
    """k one-edit mutations of doc: a byte deleted, inserted or replaced."""
    alphabet = '{}[],:"0123456789-.eEtruefalsn \\ax'
    out = []
    for _ in range(k):
        i = rng.randrange(len(doc) + 1)
        op = rng.randrange(3)
        c = rng.choice(alphabet)
        if op == 0 and i < len(doc):
            out.append(doc[:i] + doc[i + 1:])
        elif op == 1:
            out.append(doc[:i] + c + doc[i:])
        else:
            out.append(doc[:i] + c + doc[i + 1:])
    return out


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_walks_are_valid(tool, tmp_path, name):
    schema = SCHEMAS[name]
    validator = jsonschema.Draft202012Validator(schema)
    path = schema_file(tmp_path, schema)
    docs = walk(tool, path, seed=len(name), n=150)
    whole = [d for d in docs if d is not None]
    assert len(whole) >= 0.8 * len(docs), f"{len(docs) - len(whole)} of {len(docs)} walks cut"
    for d in whole:
        errors = list(validator.iter_errors(json.loads(d)))
        assert not errors, f"{d!r}: {errors[0].message}"
    # near misses: whatever the recognizer calls whole is valid
    rng = random.Random(name)
    near = [m for d in whole for m in mutations(d, rng, 6)]
    verdicts = check(tool, path, near)
    for m, v in zip(near, verdicts):
        if v == "whole":
            inst = json.loads(m)  # must parse
            errors = list(validator.iter_errors(inst))
            assert not errors, f"{m!r}: {errors[0].message}"
    assert verdicts.count("refused") > len(near) // 4  # the mutations do get refused


BOUNDS = [
    {"minimum": 0, "maximum": 1}, {"exclusiveMinimum": 0.1, "exclusiveMaximum": 0.3},
    {"minimum": 0.1, "maximum": 0.30000000000000004}, {"minimum": -2.5, "exclusiveMaximum": -2.25},
    {"exclusiveMinimum": 1e-10, "maximum": 1e-9}, {"minimum": 1234.5678, "maximum": 1234.568},
    {"maximum": -0.001}, {"exclusiveMinimum": 99999999999999.9}, {"minimum": 7, "maximum": 7},
]


def near(bound):
    """Numbers written near a bound: the bound itself and its neighbours a few digits away, in
    plain notation with every number of fraction digits, as a model might write them."""
    out = set()
    for digits in range(1, 17):
        for delta in (-1, 0, 1):
            x = bound + delta * 10 ** -digits * max(1, abs(bound))
            out.add(repr(x))
            out.update(f"{x:.{p}f}" for p in range(17))
    return out


@pytest.mark.parametrize("i", range(len(BOUNDS)))
def test_decimal_bounds_agree_with_the_validator(tool, tmp_path, i):
    """A bounded number (no exponent, at most 15 digits) is whole to the recognizer exactly when
    the jsonschema package (comparing doubles) says it is within the bounds: at the bounds, next
    to them, at every number of digits."""
    schema = {"type": "number", **BOUNDS[i]}
    validator = jsonschema.Draft202012Validator(schema)
    texts = set()
    for b in BOUNDS[i].values():
        texts |= near(b)
    texts = sorted(t for t in texts if "e" not in t and "inf" not in t and "nan" not in t)
    verdicts = check(tool, schema_file(tmp_path, schema), texts)
    both = 0
    for t, v in zip(texts, verdicts):
        n_digits = len(t.lstrip("-").split(".")[0].lstrip("0")) + \
            (len(t.split(".")[1]) if "." in t else 0)
        valid = validator.is_valid(json.loads(t))
        if v == "whole":
            assert valid, t
        elif valid and n_digits <= 15:
            assert False, f"{t} ({n_digits} digits) is within the bounds but {v}"
        both += valid and v == "whole"
    assert both > 5


def people():
    rng = random.Random(7)
    for i in range(40):
        yield Person(name="N" * rng.randint(1, 16), age=rng.randint(0, 150),
                     rank=rng.randint(-999, -11), score=rng.choice([0, 1, 0.5, 0.25, 0.999]),
                     height=rng.uniform(0.5, 2.5), ok=bool(i % 2), color=rng.choice(list(Color)),
                     kind=rng.choice(["a", "b", 3]), tags=["t"] * rng.randint(0, 3),
                     pair=(i, "p"), rest=(True,) * (i % 3), either=rng.choice([1, 2.5]),
                     address=None if i % 3 == 0 else Address(street="Main St é",
                                                             zip=None if i % 2 else "12345"),
                     scores={"x": i, "y": -i} if i % 4 else {})


def agents():
    s = Search(kind="search", query="q", limit=3)
    a = Answer(kind="final", text="t", confidence=0.25)
    for i in range(8):
        yield Agent(steps=[s, a, s][:i % 4], last=a if i % 2 else s, maybe=[None, s, a][i % 3])


@pytest.mark.parametrize("strict", [False, True])
def test_pydantic_unions_are_whole(tool, tmp_path, strict):
    """Unions of models (with and without pydantic's discriminator): pydantic's own documents
    are whole; a key of the other branch after the discriminator is refused."""
    schema = to_strict_json_schema(Agent) if strict else Agent.model_json_schema()
    path = schema_file(tmp_path, schema)
    docs = [a.model_dump_json(exclude_none=not strict) for a in agents()]
    assert check(tool, path, docs) == ["whole"] * len(docs)
    bad = '{"steps":[{"kind":"search","text"'
    assert check(tool, path, [bad]) == ["refused"]


@pytest.mark.parametrize("strict", [False, True])
def test_pydantic_documents_are_whole(tool, tmp_path, strict):
    schema = to_strict_json_schema(Person) if strict else Person.model_json_schema()
    path = schema_file(tmp_path, schema)
    docs = []
    for p in people():
        # pydantic writes keys in their declared order, compact; keep every key when strict
        d = p.model_dump(mode="json", exclude_none=not strict)
        docs.append(json.dumps(d, separators=(",", ":"), ensure_ascii=False))
        docs.append(json.dumps(d, indent=2, ensure_ascii=False))
        docs.append(p.model_dump_json(exclude_none=not strict))
    assert check(tool, path, docs) == ["whole"] * len(docs)
    # a key out of its declared order, or one more: refused (the recognizer writes the
    # declared keys in order only)
    d = next(people()).model_dump(mode="json")
    swapped = {"age": d["age"], "name": d["name"], **d}
    extra = {**d, "nickname": "x"}
    assert check(tool, path, [json.dumps(swapped), json.dumps(extra)]) == ["refused"] * 2


def test_refused_schema_says_why(tool, tmp_path):
    path = schema_file(tmp_path, {"type": "object", "properties": {
        "n": {"type": "number", "multipleOf": 2}}})
    p = subprocess.run([tool, "walk", path, "1", "1"], capture_output=True, text=True)
    assert p.returncode == 2
    assert "'multipleOf' is not supported" in p.stderr and "/properties/n" in p.stderr
