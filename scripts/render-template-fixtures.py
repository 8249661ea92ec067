#!/usr/bin/env python3
"""Renders the chat-template fixtures of tests/engine/tst_jinja.cpp with Python's jinja2.

The reference is jinja2 set up as Hugging Face's apply_chat_template sets it up:
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the loopcontrols
extension and the `generation` tag, its tojson filter (json.dumps, ensure_ascii=False), and the
globals raise_exception, strftime_now (here on a fixed date), dict and namespace.

Writes into tests/data/templates/:
  corpus/*.jinja      real templates: llama.cpp's models/templates/*.jinja, the
                      tokenizer.chat_template of its ggml-vocab-*.gguf files, and the templates
                      quoted in its tests/test-chat-template.cpp (Llama 2, Mistral v1/v3/v7, ...)
  builtin/*.jinja     the engine's built-in fallback formats (read from engine/src/tokenizer/
                      chat_formats.cpp), rendered like the others
  conversations.json  the conversations every template is rendered with
  expected.json       per (template, conversation): the output, or the error jinja2 raised
  features.json       small templates for single language features, with their outputs
  fallbacks.json      llama.cpp's test cases: template, conversation, its built-in output

Needs: jinja2, gguf (PyPI). Usage: scripts/render-template-fixtures.py --llama-cpp DIR
"""
import argparse
import ast
import datetime
import json
import pathlib
import re
import sys

import jinja2
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "templates"
NOW = datetime.datetime(2024, 7, 26, 12, 0, 0)
BOS, EOS = "<s>", "</s>"


class Generation(Extension):
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, jinja2.ext.loopcontrols])

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: NOW.strftime(fmt)
    env.globals["dict"] = lambda *a, **k: dict(*a, **k)
    return env


TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}]

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
CONVERSATIONS = {
    "single": {"messages": [{"role": "user", "content": "Hello"}]},
    "system": {"messages": [SYSTEM, {"role": "user", "content": "Hello"}]},
    "multi": {"messages": [
        SYSTEM,
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi there"},
        {"role": "user", "content": "Who are you"},
        {"role": "assistant", "content": "   I am an assistant   "},
        {"role": "user", "content": "Another question"},
    ]},
    "multi_no_prompt": {"add_generation_prompt": False, "messages": [
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi there"},
        {"role": "user", "content": "Who are you"},
        {"role": "assistant", "content": "I am an assistant"},
    ]},
    "no_system": {"messages": [
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi there"},
        {"role": "user", "content": "How are you?"},
    ]},
    "parts": {"messages": [
        SYSTEM,
        {"role": "user", "content": [{"type": "text", "text": "Describe"}, {"type": "text", "text": " this."}]},
        {"role": "assistant", "content": [{"type": "text", "text": "It is a cat."}]},
        {"role": "user", "content": [{"type": "text", "text": "Thanks"}]},
    ]},
    "tools": {"tools": TOOLS, "messages": [
        SYSTEM,
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [{
            "id": "call12345", "type": "function",
            "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]},
        {"role": "tool", "tool_call_id": "call12345", "name": "get_weather", "content": "{\"temperature\": 21}"},
        {"role": "assistant", "content": "It is 21 degrees in Paris."},
        {"role": "user", "content": "And in Rome?"},
    ]},
    "reasoning": {"messages": [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "reasoning_content": "The user asks a sum. 2+2=4.", "content": "4"},
        {"role": "user", "content": "And 3+3?"},
    ]},
    "unicode": {"messages": [
        {"role": "system", "content": "Réponds en français, s'il te plaît."},
        {"role": "user", "content": "Grüße! 日本語 \"quotes\" \\ back\nslash\ttab 😀"},
        {"role": "assistant", "content": "Très bien — ça va ✓"},
        {"role": "user", "content": "Ünïcödé ✨"},
    ]},
}


def context(conv):
    return {
        "messages": conv["messages"],
        "tools": conv.get("tools"),
        "documents": None,
        "add_generation_prompt": conv.get("add_generation_prompt", True),
        "bos_token": BOS,
        "eos_token": EOS,
    }


def render(env, source, ctx):
    try:
        return {"output": env.from_string(source).render(**ctx)}
    except Exception as e:  # jinja2's own errors, and Python's (TypeError, ...)
        return {"error": f"{type(e).__name__}: {e}"}


def c_strings(path):
    """(name, template, expected output, bos, eos) of each case in test-chat-template.cpp."""
    text = path.read_text()
    lit = r'(?:U8C\()?((?:u8)?"(?:[^"\\]|\\.)*")'
    cases = []
    for block in re.split(r"\n        \{\n", text):
        fields = {}
        for key in ("name", "template_str", "expected_output", "bos_token", "eos_token"):
            m = re.search(r"/\* \." + key + r"= \*/\s+" + lit, block)
            if m:
                fields[key] = ast.literal_eval(m.group(1).removeprefix("u8"))
        if "name" in fields and "template_str" in fields:
            cases.append(fields)
    return cases


def slug(name):
    return re.sub(r"[^A-Za-z0-9.]+", "-", name).strip("-")[:80]


def builtin_formats():
    path = ROOT / "engine" / "src" / "tokenizer" / "chat_formats.cpp"
    if not path.exists():
        return {}
    src = path.read_text()
    prelude = re.search(r'k_prelude = R"jinja\((.*?)\)jinja"', src, re.S).group(1)
    return {m.group(1): prelude + m.group(2)
            for m in re.finditer(r'\{"([a-z0-9.-]+)",\s*R"jinja\((.*?)\)jinja"', src, re.S)}


FEATURES = [
    # whitespace control, trim_blocks and lstrip_blocks
    ("ws_minus", "a  {{- 'b' -}}  c", {}),
    ("ws_trim_blocks", "{% if true %}\nyes\n{% endif %}\nend", {}),
    ("ws_lstrip_blocks", "line\n    {% if true %}\n    x\n    {% endif %}\nend", {}),
    ("ws_plus", "a\n  {%+ if true %}b{% endif +%}\nc", {}),
    ("ws_comment", "a\n  {# note #}\nb {#- x -#} c", {}),
    ("ws_var_not_trimmed", "{{ 'a' }}\n{{ 'b' }}\n", {}),
    ("raw", "{% raw %}{{ not rendered }}{% endraw %}", {}),
    # control flow
    ("if_elif_else", "{% for x in [1, 2, 3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %};{% endfor %}", {}),
    ("for_loop_vars", "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}|{% endfor %}", {}),
    ("for_else", "{% for x in [] %}x{% else %}empty{% endfor %}", {}),
    ("for_filtered", "{% for x in range(10) if x is odd %}{{ x }}:{{ loop.index }}/{{ loop.length }} {% endfor %}", {}),
    ("for_unpack", "{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}", {}),
    ("for_dict_keys", "{% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %}", {}),
    ("for_scope", "{% set x = 1 %}{% for i in range(3) %}{% set x = i %}{% endfor %}{{ x }}", {}),
    ("loop_controls", "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}", {}),
    ("loop_cycle_prev_next", "{% for i in [1, 2, 3] %}{{ loop.cycle('a', 'b') }}{{ loop.previtem }}{{ loop.nextitem }},{% endfor %}", {}),
    ("set_block", "{% set x %}hello {{ 'world' }}{% endset %}[{{ x }}]", {}),
    ("set_block_filter", "{% set x | upper %}hello{% endset %}{{ x }}", {}),
    ("namespace", "{% set ns = namespace(n=0, found=false) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }} {{ ns.found }}", {}),
    ("macro", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Ann') }} {{ greet('Bob', punct='?') }}", {}),
    ("macro_call", "{% macro box(t) %}[{{ t }}:{{ caller() }}]{% endmacro %}{% call box('x') %}inside{% endcall %}", {}),
    ("macro_call_args", "{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}{% call(v) each([1, 2]) %}<{{ v }}>{% endcall %}", {}),
    ("macro_recursion", "{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }}", {}),
    ("filter_block", "{% filter upper %}shout {{ 'this' }}{% endfilter %}", {}),
    ("generation_tag", "{% generation %}kept{% endgeneration %}", {}),
    # literals and access
    ("literals", "{{ 'a' }}{{ \"b\" }}{{ 1 }}{{ 1.5 }}{{ true }}{{ True }}{{ none }}{{ [1, 'x'] }}{{ {'k': 'v'} }}{{ (1, 2) }}", {}),
    ("string_escapes", "{{ 'tab\\there\\nnew \\'q\\' \\u00e9' }}", {}),
    ("floats", "{{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1.0e-5 }} {{ 3 / 2 }} {{ 4 / 2 }} {{ 2.5e3 }}", {}),
    ("attr_subscript", "{{ m.role }} {{ m['content'] }} {{ l[0] }} {{ l[-1] }} {{ l.1 }} [{{ m.missing }}] [{{ l[9] }}]", {"m": {"role": "user", "content": "hi"}, "l": [1, 2, 3]}),
    ("slicing", "{{ l[1:] }} {{ l[:-1] }} {{ l[::-1] }} {{ l[::2] }} {{ s[1:3] }} {{ s[::-1] }}", {"l": [1, 2, 3, 4], "s": "héllo"}),
    ("in_not", "{{ 'a' in 'cat' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }} {{ not true }}", {}),
    ("and_or", "{{ 1 and 'x' }} {{ 0 or 'y' }} {{ none or [] }} {{ 'a' and 0 }}", {}),
    ("comparisons", "{{ 1 < 2 }} {{ 2 <= 2 }} {{ 'a' > 'b' }} {{ 1 == 1.0 }} {{ 1 != 2 }} {{ [1, 2] < [1, 3] }} {{ true == 1 }}", {}),
    ("arithmetic", "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 1 + 2 * 3 }} {{ -2 }} {{ 'ab' * 3 }} {{ [1] + [2] }}", {}),
    ("concat", "{{ 'a' ~ 1 ~ none ~ true }}", {}),
    ("conditional", "{{ 'yes' if x else 'no' }} {{ 'yes' if y else 'no' }} [{{ 'only' if false }}]", {"x": 1, "y": 0}),
    ("undefined", "[{{ nothing }}] {{ nothing is defined }} {{ nothing is undefined }} {{ nothing | default('d') }} {{ nothing | length }}", {}),
    ("precedence", "{{ 1 + 2 ~ 3 }} {{ -2 ** 2 }} {{ 'a' ~ 'b' | upper }} {{ not 1 == 2 }}", {}),
    # filters
    ("f_trim", "[{{ '  x y \\n' | trim }}]", {}),
    ("f_length", "{{ 'héllo' | length }} {{ [1, 2] | length }} {{ {'a': 1} | count }}", {}),
    ("f_tojson", "{{ d | tojson }}|{{ d | tojson(indent=2) }}|{{ 'é\"\\n' | tojson }}|{{ 'é' | tojson(ensure_ascii=true) }}|{{ [] | tojson(indent=4) }}|{{ 1.5 | tojson }}|{{ none | tojson }}", {"d": {"b": [1, 2.0, None, True], "a": {"x": "y"}, "c": {}}}),
    ("f_tojson_sort", "{{ d | tojson(sort_keys=true) }}|{{ d | tojson(separators=(',', ':')) }}", {"d": {"b": 1, "a": [1, 2]}}),
    ("f_case", "{{ 'hello World' | upper }} {{ 'Hello' | lower }} {{ 'hello WORLD' | capitalize }} {{ 'hello big-world (x)' | title }}", {}),
    ("f_replace", "{{ 'aaa' | replace('a', 'b') }} {{ 'aaa' | replace('a', 'b', 2) }}", {}),
    ("f_first_last", "{{ [1, 2, 3] | first }} {{ [1, 2, 3] | last }} {{ 'abc' | first }} {{ 'abc' | last }}", {}),
    ("f_join", "{{ [1, 2, 3] | join(', ') }} {{ ['a', 'b'] | join }} {{ users | join('/', attribute='name') }}", {"users": [{"name": "x"}, {"name": "y"}]}),
    ("f_default", "{{ none | default('d') }} {{ '' | default('d') }} {{ '' | default('d', true) }} {{ u | d('z') }}", {}),
    ("f_items_list", "{{ {'a': 1, 'b': 2} | items | list }} {{ 'ab' | list }}", {}),
    ("f_map", "{{ users | map(attribute='name') | list }} {{ ['a', 'b'] | map('upper') | join }} {{ users | map(attribute='age', default=0) | list }}", {"users": [{"name": "x", "age": 3}, {"name": "y"}]}),
    ("f_select", "{{ range(6) | select('odd') | list }} {{ range(6) | reject('even') | list }} {{ [0, 1, '', 'a'] | select | list }}", {}),
    ("f_selectattr", "{{ ms | selectattr('role', 'equalto', 'user') | map(attribute='c') | list }} {{ ms | rejectattr('role', 'equalto', 'user') | list | length }} {{ ms | selectattr('t') | list | length }}", {"ms": [{"role": "user", "c": 1}, {"role": "assistant", "c": 2, "t": True}, {"role": "user", "c": 3}]}),
    ("f_string_int_float", "{{ 1 | string }}{{ '42' | int + 1 }} {{ '3.7' | float }} {{ 3.9 | int }} {{ 'x' | int }} {{ 'x' | float }} {{ true | string }}", {}),
    ("f_safe_unique", "{{ '<b>' | safe }} {{ ['a', 'A', 'b', 'a'] | unique | list }}", {}),
    ("f_indent", "[{{ 'a\\nb\\n\\nc' | indent }}] [{{ 'a\\nb' | indent(2, first=true) }}] [{{ 'a\\n\\nb' | indent(2, blank=true) }}] [{{ 'a\\nb\\n' | indent('> ') }}]", {}),
    ("f_misc", "{{ -3 | abs }} {{ 2.567 | round(2) }} {{ [3, 1, 2] | sort }} {{ [1, 2] | reverse | list }} {{ [1, 2, 3] | sum }} {{ [4, 2, 8] | max }} {{ {'b': 1, 'a': 2} | dictsort }}", {}),
    # tests
    ("tests", "{{ none is none }} {{ 'a' is string }} {{ 1 is number }} {{ 1.5 is number }} {{ {} is mapping }} {{ [] is iterable }} {{ 'x' is sequence }} {{ true is boolean }} {{ true is true }} {{ false is false }} {{ 1 is true }}", {}),
    ("tests_args", "{{ 3 is odd }} {{ 4 is even }} {{ 'a' is equalto 'a' }} {{ 2 is eq(3) }} {{ 6 is divisibleby 3 }} {{ x is not none }} {{ [] is not mapping }}", {"x": 1}),
    # string and dict methods
    ("str_methods", "[{{ '  a b  '.strip() }}][{{ 'xxaxx'.strip('x') }}][{{ '  a'.lstrip() }}][{{ 'a  '.rstrip() }}] {{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a-b-c'.split('-', 1) }}", {}),
    ("str_methods2", "{{ 'hello'.startswith('he') }} {{ 'hello'.endswith(('x', 'lo')) }} {{ 'Ab'.upper() }} {{ 'Ab'.lower() }} {{ 'aXa'.replace('a', 'b') }} {{ '{} and {name}'.format(1, name='n') }} {{ 'a b'.title() }}", {}),
    ("dict_methods", "{{ d.items() | list }} {{ d.keys() | list }} {{ d.values() | list }} {{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 5) }}", {"d": {"a": 1, "b": [2]}}),
    ("dict_literal_global", "{{ dict(a=1, b='x') }} {{ dict({'c': 2}, d=3) | tojson }}", {}),
    ("str_repr", "{{ ['it\\'s', \"q\\\"\", 'a\\nb'] }} {{ {'k': none, 'b': false, 'f': 1.0} }}", {}),
    # globals
    ("range", "{{ range(3) | list }} {{ range(1, 4) | list }} {{ range(10, 0, -3) | list }}", {}),
    ("strftime_now", "{{ strftime_now('%d %b %Y') }} {{ strftime_now('%Y-%m-%d %H:%M') }}", {}),
    ("raise_exception", "a{{ raise_exception('Bad role') }}", {}),
    ("specials", "{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt }}|{{ messages | length }}|{{ tools }}", {"bos_token": "<s>", "eos_token": "</s>", "add_generation_prompt": True, "messages": [{"role": "user", "content": "x"}], "tools": None}),
    # printf-style '%' string formatting
    ("percent_s_d", "{{ '%s and %d' % ('a', 3) }}|{{ '%s' % 'one' }}|{{ '%d%%' % 42.9 }}|{{ '%s' % [1, 'x'] }}|{{ '%r' % 'q' }}|{{ '%s' % none }}|{{ '%d' % true }}", {}),
    ("percent_width_flags", "[{{ '%5s' % 'ab' }}][{{ '%-5s' % 'ab' }}][{{ '%.2s' % 'héllo' }}][{{ '%05d' % -42 }}][{{ '%+d' % 7 }}][{{ '% d' % 7 }}][{{ '%-6d' % 12 }}]", {}),
    ("percent_numbers", "{{ '%.2f' % 3.14159 }} {{ '%f' % 2 }} {{ '%e' % 12345.678 }} {{ '%g' % 0.0001 }} {{ '%G' % 1e20 }} {{ '%x %X %o' % (255, 255, 8) }} {{ '%#x %#o' % (255, 8) }} {{ '%08.3f' % -3.5 }} {{ '%c%c' % (72, 'i') }} {{ '%.3d' % 5 }}", {}),
    ("percent_mapping", "{{ '%(name)s is %(age)d' % {'name': 'Ann', 'age': 30} }}|{{ '%s' % {'k': 1} }}|{{ 'plain' % {} }}", {}),
    ("percent_in_template", "{% for m in messages %}{{ '<%s>%s</%s>' % (m.role, m.content, m.role) }}{% endfor %}{% set n = '%03d' % messages | length %}[{{ n }}]", {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}),
    # recursive loops
    ("loop_recursive", "{% for n in tree recursive %}<{{ n.name }}:{{ loop.depth }}/{{ loop.depth0 }}{% if n.children %}[{{ loop(n.children) }}]{% endif %}>{% endfor %}", {"tree": [{"name": "a", "children": [{"name": "b", "children": [{"name": "c"}]}, {"name": "d"}]}, {"name": "e", "children": []}]}),
    ("loop_recursive_index", "{% for x in items recursive %}{{ loop.index }}{% if x is iterable and x is not string %}({{ loop(x) }}){% else %}{{ x }}{% endif %};{% endfor %}", {"items": ["a", ["b", ["c", "d"]], "e"]}),
    ("loop_recursive_filtered_else", "{% for n in tree if n.keep recursive %}{{ n.name }}{{ loop(n.kids) }}{% else %}-{% endfor %}", {"tree": [{"name": "a", "keep": True, "kids": [{"name": "x", "keep": False}]}, {"name": "b", "keep": True, "kids": [{"name": "y", "keep": True, "kids": []}]}]}),
    # errors jinja2 raises
    ("err_call_undefined", "{{ nothing() }}", {}),
    ("err_attr_of_undefined", "{{ nothing.attr }}", {}),
    ("err_unknown_filter", "{{ 1 | no_such_filter }}", {}),
    ("err_unknown_tag", "{% frobnicate %}", {}),
    ("err_unclosed", "{% if true %}never closed", {}),
    ("err_type", "{{ 1 + 'a' }}", {}),
    ("err_div_zero", "{{ 1 / 0 }}", {}),
    ("err_not_iterable", "{% for x in 5 %}{% endfor %}", {}),
    ("err_syntax", "{{ (1 + }}", {}),
    ("err_append", "{% set l = [] %}{{ l.append(1) }}", {}),
    ("err_tojson_undefined", "{{ nothing | tojson }}", {}),
    ("err_percent_type", "{{ '%d' % 'x' }}", {}),
    ("err_percent_too_few", "{{ '%s %s' % ('a',) }}", {}),
    ("err_percent_too_many", "{{ 'x' % 5 }}", {}),
    ("err_percent_key", "{{ '%(a)s' % {'b': 1} }}", {}),
    ("err_loop_not_recursive", "{% for x in [1] %}{{ loop([2]) }}{% endfor %}", {}),
    # Floats past the range of a 64-bit integer in arithmetic with integers.
    ("float_overflow_plus_int", "{{ 78365282 + 2e228 + 2e22222 }}", {}),
    ("float_huge_minus_int", "{{ 5 - 1e300 }} {{ 3 * -1e308 * 10 }}", {}),
    # An attribute path's digits past the range of a 64-bit integer: no item, so undefined.
    ("map_attribute_huge_index",
     "{{ [[1, 2], [3]] | map(attribute='99999999999999999999') | select('defined') | list | length }}-"
     "{{ [[1, 2], [3]] | map(attribute='1') | select('defined') | list }}", {}),
    # Keys that start with a control byte or a non-ASCII letter stay strings.
    ("dict_keys_control_and_utf8",
     "{{ d | length }}{% for k, v in d | items %} {{ k | length }}:{{ v }}:{{ k is string }}{% endfor %}"
     " {{ d[5] is defined }} {% for k in {'\u00e9t\u00e9': 1, 2: 3} %}{{ k }},{% endfor %} {{ d | tojson }}",
     {"d": {"\u0001x": 1, "\u00015": 2, "\u00e9": 3, "\u0000": 4}}),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-cpp", required=True, type=pathlib.Path, help="llama.cpp source tree")
    args = ap.parse_args()
    import gguf

    env = environment()
    corpus = OUT / "corpus"
    builtin = OUT / "builtin"
    for d in (corpus, builtin):
        d.mkdir(parents=True, exist_ok=True)
        for f in d.glob("*.jinja"):
            f.unlink()

    templates = {}
    for f in sorted((args.llama_cpp / "models" / "templates").glob("*.jinja")):
        templates["llama.cpp-templates/" + f.stem] = f.read_text()
    for f in sorted((args.llama_cpp / "models").glob("ggml-vocab-*.gguf")):
        field = gguf.GGUFReader(str(f)).fields.get("tokenizer.chat_template")
        if field:
            templates["gguf/" + f.stem] = bytes(field.parts[field.data[0]]).decode()
    cases = c_strings(args.llama_cpp / "tests" / "test-chat-template.cpp")
    for c in cases:
        templates["test-chat-template/" + slug(c["name"])] = c["template_str"]
    files = {}
    for name, text in templates.items():
        fname = name.replace("/", "__") + ".jinja"
        (corpus / fname).write_text(text)
        files["corpus/" + fname] = text
    for name, text in builtin_formats().items():
        (builtin / (name + ".jinja")).write_text(text)
        files["builtin/" + name + ".jinja"] = text

    expected = []
    for fname, text in sorted(files.items()):
        for cname, conv in CONVERSATIONS.items():
            expected.append({"template": fname, "conversation": cname, **render(env, text, context(conv))})
    (OUT / "conversations.json").write_text(
        json.dumps({k: context(v) for k, v in CONVERSATIONS.items()}, ensure_ascii=False, indent=1) + "\n")
    (OUT / "expected.json").write_text(json.dumps(expected, ensure_ascii=False, indent=0) + "\n")

    features = [{"name": n, "template": t, "context": ctx, **render(env, t, ctx)} for n, t, ctx in FEATURES]
    (OUT / "features.json").write_text(json.dumps(features, ensure_ascii=False, indent=1) + "\n")

    # llama.cpp's built-in formats on its own conversation: what the fallbacks must produce.
    llama_conv = [{"role": r, "content": c} for r, c in (
        ("system", "You are a helpful assistant"), ("user", "Hello"), ("assistant", "Hi there"),
        ("user", "Who are you"), ("assistant", "   I am an assistant   "), ("user", "Another question"))]
    fallbacks = [{"name": c["name"], "template": c["template_str"], "expected": c["expected_output"]}
                 for c in cases if "expected_output" in c]
    (OUT / "fallbacks.json").write_text(
        json.dumps({"messages": llama_conv, "cases": fallbacks}, ensure_ascii=False, indent=1) + "\n")

    errors = sum("error" in e for e in expected)
    print(f"{len(files)} templates x {len(CONVERSATIONS)} conversations: {len(expected)} pairs, "
          f"{errors} raise in jinja2; {len(features)} feature cases; {len(fallbacks)} fallback cases", file=sys.stderr)


if __name__ == "__main__":
    main()
