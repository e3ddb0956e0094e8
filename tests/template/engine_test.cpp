// The template engine's features one by one. Each case's expected text was rendered by
// Python's Jinja2 configured as transformers configures it (the script below); where
// python3 with jinja2 is installed, a second test renders the same cases (and a few more)
// through it live and compares.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <thread>

#include <simdjson.h>

#include "loom/chat_template.hpp"
#include "loom/error.hpp"
#include "support/test_support.hpp"

namespace {

struct Case {
  const char* name;
  const char* source;
  const char* vars;      // JSON object: the template's variables
  const char* expected;  // the rendering, or "ERROR:" + the message Jinja2 raised
};

// Rendered by Jinja2 3.1 (Debian 12's python3-jinja2) through kRenderScript.
const Case kCases[] = {
    {"ws lstrip and trim",
     R"J(  {% if true %}
    x
  {% endif %}
)J",
     R"J({})J",
     R"J(    x
)J"},
    {"ws minus both sides",
     R"J(a  {%- if true -%}  b  {%- endif -%}  c)J",
     R"J({})J",
     R"J(abc)J"},
    {"ws variable minus",
     R"J(a 
 {{- ' x ' -}} 
 b)J",
     R"J({})J",
     R"J(a x b)J"},
    {"ws plus keeps lstrip",
     R"J(line
    {%+ if true %}y{% endif %})J",
     R"J({})J",
     R"J(line
    y)J"},
    {"ws comments",
     R"J({# comment #}
A
  {#- c -#}  B
  {# d #}
C)J",
     R"J({})J",
     R"J(AB
C)J"},
    {"ws raw",
     R"J({% raw %}{{ not parsed }}{% endraw %}
{%- raw -%}  {% x %}  {%- endraw %})J",
     R"J({})J",
     R"J({{ not parsed }}{% x %})J"},
    {"ws trailing newline dropped",
     R"J(a
{{ 1 }}
{% if 1 %}
b
{% endif %}
c
)J",
     R"J({})J",
     R"J(a
1
b
c)J"},
    {"ws loop lines",
     R"J({% for i in range(3) %}
  {{ i }}
{% endfor %})J",
     R"J({})J",
     R"J(  0
  1
  2
)J"},
    {"ws crlf",
     R"J(x
y
{% if 1 %}
z{% endif %})J",
     R"J({})J",
     R"J(x
y
z)J"},
    {"ws variable not lstripped",
     R"J(a
    {{ 'v' }}
  {% if 1 %}b{% endif %})J",
     R"J({})J",
     R"J(a
    v
b)J"},
    {"ws plus end keeps newline",
     R"J({% if 1 +%}
x{% endif %})J",
     R"J({})J",
     R"J(
x)J"},
    {"loop vars",
     R"J({% for x in [1,2,3] %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }};{% endfor %})J",
     R"J({})J",
     R"J(10TrueFalse332;21FalseFalse321;32FalseTrue310;)J"},
    {"loop else",
     R"J({% for x in [] %}a{% else %}empty{% endfor %})J",
     R"J({})J",
     R"J(empty)J"},
    {"loop filter",
     R"J({% for x in range(10) if x is odd %}{{ x }}{{ loop.last }},{% endfor %})J",
     R"J({})J",
     R"J(1False,3False,5False,7False,9True,)J"},
    {"loop unpack items",
     R"J({% for k, v in {'a': 1, 'b': [2]}.items() %}{{ k }}={{ v }};{% endfor %})J",
     R"J({})J",
     R"J(a=1;b=[2];)J"},
    {"loop break continue",
     R"J({% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %})J",
     R"J({})J",
     R"J(0134)J"},
    {"loop scope",
     R"J({% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{{ x }}{% endfor %}{{ x }})J",
     R"J({})J",
     R"J(21)J"},
    {"loop string chars",
     R"J({% for a in 'héllo' %}[{{ a }}]{% endfor %}[{{ loop }}])J",
     R"J({})J",
     R"J([h][é][l][l][o][])J"},
    {"loop cycle prev next",
     R"J({% for x in [1,2,3] %}{{ loop.cycle('a','b') }}{{ loop.previtem }}{{ loop.nextitem }}|{% endfor %})J",
     R"J({})J",
     R"J(a2|b13|a2|)J"},
    {"loop over dict keys",
     R"J({% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %})J",
     R"J({})J",
     R"J(xy)J"},
    {"loop nested",
     R"J({% for a in [1,2] %}{% for b in 'xy' %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}{{ loop.index }};{% endfor %})J",
     R"J({})J",
     R"J(11x 21y 1;12x 22y 2;)J"},
    {"namespace",
     R"J({% set ns = namespace(c=0, items=[]) %}{% for i in range(4) %}{% set ns.c = ns.c + i %}{% endfor %}{{ ns.c }}{{ ns.items }})J",
     R"J({})J",
     R"J(6[])J"},
    {"macro defaults",
     R"J({% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', punct='?') }} {{ greet() }})J",
     R"J({})J",
     R"J(Hi A! Hi B? Hi !)J"},
    {"macro varargs kwargs",
     R"J({% macro m() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, a=3) }})J",
     R"J({})J",
     R"J((1, 2){'a': 3})J"},
    {"macro call block",
     R"J({% macro wrap(x) %}<{{ caller() }}{{ x }}>{% endmacro %}{% call wrap(1) %}inner{% endcall %})J",
     R"J({})J",
     R"J(<inner1>)J"},
    {"macro recursion",
     R"J({% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }})J",
     R"J({})J",
     R"J(54321)J"},
    {"macro sees globals",
     R"J({% set g = 'G' %}{% macro m() %}{{ g }}{{ messages | length }}{% endmacro %}{{ m() }})J",
     R"J({"messages": [1, 2]})J",
     R"J(G2)J"},
    {"filters strings",
     R"J({{ '  a b  ' | trim }}|{{ 'abc' | upper }}|{{ 'ABC' | lower }}|{{ 'hello World' | capitalize }}|{{ 'hello big-world (x)' | title }}|{{ 'xxaxx' | trim('x') }})J",
     R"J({})J",
     R"J(a b|ABC|abc|Hello world|Hello Big-World (X)|a)J"},
    {"filters join length",
     R"J({{ [1, 2, 3] | join(', ') }}|{{ [1,2,3] | length }}|{{ 'héllo' | length }}|{{ {'a':1} | count }}|{{ [3,1,2] | first }}{{ [3,1,2] | last }}|{{ [{'n': 'a'}, {'n': 'b'}] | join('-', attribute='n') }})J",
     R"J({})J",
     R"J(1, 2, 3|3|5|1|32|a-b)J"},
    {"filters selectattr map",
     R"J({{ [{'a': 1, 'b': true}, {'a': 2}, {'a': 3, 'b': false}] | selectattr('b') | list }}|{{ [{'a': 1, 'b': true}, {'a': 2}] | rejectattr('b', 'defined') | map(attribute='a') | list }}|{{ [{'t': 'x'}, {'t': 'y'}] | selectattr('t', 'equalto', 'y') | list }})J",
     R"J({})J",
     R"J([{'a': 1, 'b': True}]|[2]|[{'t': 'y'}])J"},
    {"filters select reject",
     R"J({{ [1,2,3,4] | select('even') | list }}{{ [1,2,3,4] | reject('odd') | list }}{{ ['a','b'] | map('upper') | join }}{{ [0, 1, '', 'x'] | select | list }})J",
     R"J({})J",
     R"J([2, 4][2, 4]AB[1, 'x'])J"},
    {"filters dictsort items unique sort",
     R"J({{ {'b': 1, 'a': 2} | dictsort }}|{{ {'b': 1, 'a': 2} | items | list }}|{{ [3,1,2,1] | unique | list }}|{{ ['B','a','c'] | sort }}|{{ [3,1,2] | sort(reverse=true) }}|{{ ['A', 'a', 'b'] | unique | list }})J",
     R"J({})J",
     R"J([('a', 2), ('b', 1)]|[('b', 1), ('a', 2)]|[3, 1, 2]|['a', 'B', 'c']|[3, 2, 1]|['A', 'b'])J"},
    {"filters default int string",
     R"J({{ x | default('d') }}|{{ '' | default('e', true) }}|{{ none | d('n') }}|{{ 5 | string }}{{ '12' | int + 1 }}|{{ 'x' | int }}|{{ 3.9 | int }}|{{ '2.5' | float }}|{{ none | string }})J",
     R"J({})J",
     R"J(d|e|None|513|0|3|2.5|None)J"},
    {"filters replace indent escape",
     R"J({{ 'a-b-c' | replace('-', '+') }}|{{ 'aaa' | replace('a', 'b', 2) }}|{{ 'x
y

z' | indent(2) }}|{{ 'x
y' | indent(2, true) }}|{{ 'x

y' | indent(width='> ', blank=true) }}|{{ '<a href="x">&\'' | e }}|{{ '<b>' | safe }})J",
     R"J({})J",
     R"J(a+b+c|bba|x
  y

  z|  x
  y|x
> 
> y|&lt;a href=&#34;x&#34;&gt;&amp;&#39;|<b>)J"},
    {"filters list reverse sum",
     R"J({{ [1,[2,3]] | list | length }}{{ 'abc' | list }}{{ [1,2,3] | reverse | list }}{{ [1,2,3] | sum }}{{ [1,5,3] | max }}{{ [4,2] | min }}{{ -3 | abs }}{{ 2.567 | round(2) }}{{ 2.5 | round }}{{ 'a b  c' | wordcount }})J",
     R"J({})J",
     R"J(2['a', 'b', 'c'][3, 2, 1]65232.572.03)J"},
    {"filters items undefined",
     R"J([{% for k, v in missing | items %}{{ k }}{% endfor %}])J",
     R"J({})J",
     R"J([])J"},
    {"tojson basic",
     R"J({{ {'a': [1, 2.5, true, none, 'é"\\
	'], 'b': {}} | tojson }})J",
     R"J({})J",
     R"J({"a": [1, 2.5, true, null, "é\"\\\n\t\u0001"], "b": {}})J"},
    {"tojson indent",
     R"J({{ {'a': [1, {'c': []}], 'b': 'x'} | tojson(indent=2) }})J",
     R"J({})J",
     R"J({
  "a": [
    1,
    {
      "c": []
    }
  ],
  "b": "x"
})J"},
    {"tojson options",
     R"J({{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}|{{ [1, 2] | tojson(separators=(',', ':')) }}|{{ ['x'] | tojson(indent='	') }}|{{ [] | tojson(indent=2) }}|{{ {'k': 1} | tojson(indent=0) }})J",
     R"J({})J",
     R"J({"a": 2, "b": 1}|[1,2]|[
	"x"
]|[]|{
"k": 1
})J"},
    {"tojson floats",
     R"J({{ [1.0, 0.1, 1e16, 1e15, 1e-5, 0.0001, 123456789.123, -0.0, 2.5e-300, 1/3, 1e100] | tojson }}|{{ 1e16 }}|{{ 1/3 }}|{{ 10/2 }}|{{ 0.1 + 0.2 }})J",
     R"J({})J",
     R"J([1.0, 0.1, 1e+16, 1000000000000000.0, 1e-05, 0.0001, 123456789.123, -0.0, 2.5e-300, 0.3333333333333333, 1e+100]|1e+16|0.3333333333333333|5.0|0.30000000000000004)J"},
    {"tojson of input",
     R"J({{ tools | tojson }}|{{ tools[0].function.parameters | tojson(indent=4) }})J",
     R"J({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "number", "default": 1.5}}, "required": ["x"]}}}]})J",
     R"J([{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "number", "default": 1.5}}, "required": ["x"]}}}]|{
    "type": "object",
    "properties": {
        "x": {
            "type": "number",
            "default": 1.5
        }
    },
    "required": [
        "x"
    ]
})J"},
    {"repr printing",
     R"J({{ [1, 'a', none, true, 2.5, {'k': 'v'}, (1,), (1, 2)] }}|{{ {'a': "it's"} }}|{{ 'x' }}|{{ none }}|{{ true }}|{{ ['a\nb', 'q"', "'", 'é', 'a\'b"c'] }})J",
     R"J({})J",
     R"J([1, 'a', None, True, 2.5, {'k': 'v'}, (1,), (1, 2)]|{'a': "it's"}|x|None|True|['a\nb', 'q"', "'", 'é', 'a\'b"c'])J"},
    {"repr of input",
     R"J({{ messages }})J",
     R"J({"messages": [{"role": "user", "content": "hi", "n": 3, "f": 1.0, "t": null, "b": false}]})J",
     R"J([{'role': 'user', 'content': 'hi', 'n': 3, 'f': 1.0, 't': None, 'b': False}])J"},
    {"undefined semantics",
     R"J([{{ missing }}][{{ missing is defined }}][{{ {'a': 1}.b }}][{{ [1][5] }}][{{ missing | length }}]{% for x in missing %}x{% endfor %}[{{ missing | default('z') }}][{{ missing == missing }}][{{ missing ~ 'a' }}][{{ none.x }}])J",
     R"J({})J",
     R"J([][False][][][0][z][True][a][])J"},
    {"undefined attribute error",
     R"J({{ missing.attr }})J",
     R"J({})J",
     R"J(ERROR:'missing' is undefined)J"},
    {"undefined nested error",
     R"J({{ {'a': 1}.b.c }})J",
     R"J({})J",
     R"J(ERROR:'dict object' has no attribute 'b')J"},
    {"tests",
     R"J({{ none is none }}{{ 1 is number }}{{ 1.5 is integer }}{{ 'a' is string }}{{ {} is mapping }}{{ [] is iterable }}{{ 'a' is sequence }}{{ true is boolean }}{{ true is true }}{{ false is false }}{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 'a' is equalto 'a' }}{{ 1 is eq 1 }}{{ none is sameas none }}{{ x is undefined }}{{ 1 is not string }}{{ true is number }}{{ 1 is integer }}{{ 2 is ge 1 }}{{ 'b' is in 'abc' }})J",
     R"J({})J",
     R"J(TrueTrueFalseTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrue)J"},
    {"slicing",
     R"J({{ [1,2,3,4,5][1:3] }}{{ [1,2,3,4,5][::-1] }}{{ 'héllo'[::-1] }}{{ 'hello'[1:] }}{{ [1,2,3][-1] }}{{ 'abc'[-2:] }}{{ [1,2,3,4,5][::2] }}{{ [1,2,3][5:] }}{{ [1,2,3,4][-3:-1] }}{{ 'abcdef'[4:1:-1] }}{{ messages[1:] | length }})J",
     R"J({"messages": [1, 2, 3]})J",
     R"J([2, 3][5, 4, 3, 2, 1]olléhello3bc[1, 3, 5][][2, 3]edc2)J"},
    {"arithmetic",
     R"J({{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 7 / 2 }} {{ 'a' ~ 1 ~ none }} {{ 'ab' * 3 }} {{ [1] + [2] }} {{ 1 + 2.5 }} {{ true + 1 }} {{ 3 - 5 }} {{ -(3) }} {{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 2 ** 3 ** 2 }} {{ 1 + 2 * 3 - 4 / 2 }})J",
     R"J({})J",
     R"J(3 -4 1 2 1024 0.5 3.5 a1None ababab [1, 2] 3.5 2 -2 -3 3.0 0.5 64 5.0)J"},
    {"concat binds tighter than plus",
     R"J({{ 'x' ~ 1 + 2 }})J",
     R"J({})J",
     R"J(ERROR:can only concatenate str (not "int") to str)J"},
    {"logic",
     R"J({{ 1 < 2 < 3 }}{{ 'a' in 'abc' }}{{ 2 not in [1, 2] }}{{ 'k' in {'k': 1} }}{{ 1 if false }}{{ 'y' if 0 else 'n' }}{{ 0 or 'x' }}{{ 1 and 2 }}{{ not 0 }}{{ 1 == 1.0 }}{{ [1, 2] == [1, 2] }}{{ not 1 == 2 }}{{ 'a' < 'b' }}{{ [1, 2] < [1, 3] }}{{ none == 0 }})J",
     R"J({})J",
     R"J(TrueTrueFalseTruenx2TrueTrueTrueTrueTrueTrueFalse)J"},
    {"string methods",
     R"J({{ 'a,b,,c'.split(',') }}{{ ' a  b '.split() }}{{ 'a b c'.split(' ', 1) }}{{ 'a b c'.rsplit(' ', 1) }}{{ '  x '.strip() }}{{ 'xxyxx'.strip('x') }}{{ '  x'.lstrip() }}{{ 'x  '.rstrip() }}{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'c')) }}{{ 'a-b'.replace('-', '') }}{{ 'Hello World'.upper() }}{{ 'hello world'.title() }}{{ 'hello'.find('l') }}{{ 'hello'.find('z') }}{{ '{} and {}'.format(1, 'b') }}{{ 'AbC'.lower() }}{{ 'a\nb'.splitlines() }}{{ 'x'.join(['1', '2']) }}{{ 'aXbXc'.count('X') }})J",
     R"J({})J",
     R"J(['a', 'b', '', 'c']['a', 'b']['a', 'b c']['a b', 'c']xyxxTrueTrueabHELLO WORLDHello World2-11 and babc['a', 'b']1x22)J"},
    {"dict methods",
     R"J({% set d = {'a': 1, 'b': 2} %}{{ d.keys() | list }}{{ d.values() | list }}{{ d.get('a') }}{{ d.get('z') }}{{ d.get('z', 'def') }}{{ d['a'] }}{{ d.a }}{{ d.items() | list }}{{ d | length }})J",
     R"J({})J",
     R"J(['a', 'b'][1, 2]1Nonedef11[('a', 1), ('b', 2)]2)J"},
    {"literals",
     R"J({{ 'a\tb' }}|{{ "it's" }}|{{ 'x' 'y' }}|{{ 1_000 }}|{{ 1.5e3 }}|{{ True }}{{ False }}{{ None }}|{{ (1, 2) }}|{{ () }}|{{ {'a': 1, 'a': 2} }}|{{ [1, 2,] }}|{{ '\u00e9\x41\101' }}|{{ 'a\qb' }})J",
     R"J({})J",
     R"J(a	b|it's|xy|1000|1500.0|TrueFalseNone|(1, 2)|()|{'a': 2}|[1, 2]|éAA|a\qb)J"},
    {"set and filter blocks",
     R"J({% set x %}  hello {{ 1 }}{% endset %}[{{ x }}]{% filter upper %}abc{% endfilter %}{% set y | trim %}  z  {% endset %}[{{ y }}]{% set a, b = 1, 2 %}{{ a }}{{ b }})J",
     R"J({})J",
     R"J([  hello 1]ABC[z]12)J"},
    {"globals",
     R"J({{ range(3) | list }}{{ range(1, 7, 2) | list }}{{ range(3, 0, -1) | list }}{{ dict(a=1) }}{{ strftime_now('%d %b %Y') }}{{ strftime_now('%Y-%m-%d') }})J",
     R"J({})J",
     R"J([0, 1, 2][1, 3, 5][3, 2, 1]{'a': 1}26 Jul 20242024-07-26)J"},
    {"raise exception",
     R"J({% if true %}{{ raise_exception('boom: ' ~ 1) }}{% endif %})J",
     R"J({})J",
     R"J(ERROR:boom: 1)J"},
    {"unsafe append",
     R"J({% set l = [] %}{{ l.append(1) }})J",
     R"J({})J",
     R"J(ERROR:access to attribute 'append' of 'list' object is unsafe.)J"},
    {"chatml",
     R"J({% for message in messages %}{{ '<|im_start|>' + message['role'] + '
' + message['content'] + '<|im_end|>' + '
' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant
' }}{% endif %})J",
     R"J({"messages": [{"role": "user", "content": "Hi é 😀"}, {"role": "assistant", "content": "Yo"}], "add_generation_prompt": true})J",
     R"J(<|im_start|>user
Hi é 😀<|im_end|>
<|im_start|>assistant
Yo<|im_end|>
<|im_start|>assistant
)J"},
    {"tool calls",
     R"J({%- for m in messages %}{%- if m.tool_calls is defined %}{%- for tc in m.tool_calls %}{{ tc.function.name }}({{ tc.function.arguments | tojson }}){%- endfor %}{%- else %}{{ m.content }}{%- endif %}
{% endfor %})J",
     R"J({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "get", "arguments": {"city": "Paris", "n": 2}}}]}]})J",
     R"J(xget({"city": "Paris", "n": 2}))J"},
    {"content parts",
     R"J({% for m in messages %}{% if m.content is string %}{{ m.content }}{% else %}{% for p in m.content %}{% if p.type == 'text' %}{{ p.text }}{% else %}<{{ p.type }}>{% endif %}{% endfor %}{% endif %}{% endfor %})J",
     R"J({"messages": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "what?"}]}]})J",
     R"J(<image>what?)J"},
};

std::chrono::system_clock::time_point pinned_now() {
  std::tm tm{};
  tm.tm_year = 2024 - 1900;
  tm.tm_mon = 6;
  tm.tm_mday = 26;
  tm.tm_hour = 12;
  return std::chrono::system_clock::from_time_t(timegm(&tm));
}

loom::ChatTemplateInputs inputs_with(const std::string& vars_json) {
  loom::ChatTemplateInputs in;
  in.extra_context_json = vars_json;
  in.now = pinned_now();
  return in;
}

// Renders, or returns "ERROR:" + the error's message.
std::string render_or_error(const std::string& source, const std::string& vars_json) {
  try {
    return loom::ChatTemplate::compile(source, "t").render(inputs_with(vars_json));
  } catch (const loom::Error& e) {
    CHECK(e.code() == loom::ErrorCode::template_error);
    return std::string("ERROR:") + e.what();
  }
}

void check_case(const std::string& name, const std::string& source, const std::string& vars,
                const std::string& expected) {
  INFO("case '" << name << "': " << source);
  const std::string got = render_or_error(source, vars);
  if (expected.rfind("ERROR:", 0) == 0) {
    REQUIRE(got.rfind("ERROR:", 0) == 0);
    CHECK_THAT(got, Catch::Contains(expected.substr(6)));
  } else {
    CHECK(got == expected);
  }
}

std::string error_of(const std::string& source, const std::string& vars = "{}") {
  const std::string got = render_or_error(source, vars);
  REQUIRE(got.rfind("ERROR:", 0) == 0);
  return got.substr(6);
}

// The reference configuration of Jinja2 (as in ../shared/reference/chat/README.md).
const char* kRenderScript = R"PY(
import json, sys
from datetime import datetime
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.ext import loopcontrols
from jinja2.exceptions import TemplateError

def raise_exception(message):
    raise TemplateError(message)

def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

def strftime_now(fmt):
    return datetime(2024, 7, 26, 12).strftime(fmt)

env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = strftime_now
out = []
for case in json.load(open(sys.argv[1], encoding="utf-8")):
    try:
        out.append({"output": env.from_string(case["source"]).render(**json.loads(case["vars"]))})
    except Exception as e:
        out.append({"error": type(e).__name__ + ": " + str(e)})
json.dump(out, open(sys.argv[2], "w", encoding="utf-8"), ensure_ascii=False)
)PY";

void append_json_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
}

}  // namespace

TEST_CASE("template engine features render as recorded from Jinja2") {
  for (const Case& c : kCases) check_case(c.name, c.source, c.vars, c.expected);
}

TEST_CASE("template engine features match a live Jinja2") {
  if (std::system("python3 -c 'import jinja2' >/dev/null 2>&1") != 0) {
    WARN("SKIPPED: python3 with jinja2 is not installed");
    return;
  }
  // The recorded cases plus a few whose output is long or machine-specific to record.
  std::vector<std::pair<std::string, std::string>> sources;
  for (const Case& c : kCases) sources.emplace_back(c.source, c.vars);
  sources.emplace_back("{% for i in range(300) %}{{ i }}{{ ',' if not loop.last }}{% endfor %}", "{}");
  sources.emplace_back("{{ range(50) | list | tojson(indent=1) }}", "{}");
  sources.emplace_back("{% for x in [0.5, 1.5, 1e-7, 12345678901234567.0, 3.14159, -2.0] %}{{ x }} {{ x | tojson }} {% endfor %}", "{}");
  sources.emplace_back("{{ messages | tojson }}{{ messages[0].content | length }}{{ messages[0].content[::-1] }}",
                       R"({"messages": [{"role": "user", "content": "a\u00e9\u4e2d\ud83d\ude00\u2028\u0000\u007f"}]})");
  loom::test::TempDir dir;
  std::string input = "[";
  for (size_t k = 0; k < sources.size(); ++k) {
    if (k) input += ",";
    input += "{\"source\":";
    append_json_string(input, sources[k].first);
    input += ",\"vars\":";
    append_json_string(input, sources[k].second);
    input += "}";
  }
  input += "]";
  std::ofstream(dir / "render.py") << kRenderScript;
  std::ofstream(dir / "in.json", std::ios::binary) << input;
  const std::string cmd = "python3 '" + (dir / "render.py").string() + "' '" + (dir / "in.json").string() +
                          "' '" + (dir / "out.json").string() + "'";
  REQUIRE(std::system(cmd.c_str()) == 0);
  simdjson::dom::parser parser;
  simdjson::padded_string text(loom::test::read_file_text(dir / "out.json"));
  simdjson::dom::element results = parser.parse(text);
  size_t k = 0;
  for (simdjson::dom::element r : results.get_array()) {
    REQUIRE(k < sources.size());
    std::string_view v;
    std::string expected;
    if (r["output"].get(v) == simdjson::SUCCESS) {
      expected = std::string(v);
    } else {
      const std::string err{std::string_view(r["error"])};
      expected = "ERROR:" + err.substr(err.find(": ") + 2);
    }
    check_case("live #" + std::to_string(k), sources[k].first, sources[k].second, expected);
    ++k;
  }
  CHECK(k == sources.size());
}

TEST_CASE("template syntax errors name the template and line:column") {
  auto compile_error = [](const std::string& source) {
    try {
      (void)loom::ChatTemplate::compile(source, "my.jinja");
    } catch (const loom::Error& e) {
      CHECK(e.code() == loom::ErrorCode::template_error);
      return std::string(e.what());
    }
    FAIL("no error for " << source);
    return std::string();
  };
  CHECK_THAT(compile_error("a\n{{ 1 + }}"), Catch::Contains("my.jinja:2:8:"));
  CHECK_THAT(compile_error("{% if x %}never closed"), Catch::Contains("endif"));
  CHECK_THAT(compile_error("x\n  {% foo %}"), Catch::Contains("my.jinja:2:6: unknown tag 'foo'"));
  CHECK_THAT(compile_error("{{ x | nosuchfilter }}"), Catch::Contains("no filter named 'nosuchfilter'"));
  CHECK_THAT(compile_error("{% if x is nosuchtest %}{% endif %}"), Catch::Contains("no test named 'nosuchtest'"));
  CHECK_THAT(compile_error("{{ 'unterminated }}"), Catch::Contains("my.jinja:1:4: unterminated string"));
  CHECK_THAT(compile_error("{% endfor %}"), Catch::Contains("my.jinja:1:"));
  CHECK_THAT(compile_error("{% break %}"), Catch::Contains("outside of a loop"));
  CHECK_THAT(compile_error("{# open comment"), Catch::Contains("missing end of comment tag"));
  CHECK_THAT(compile_error("{% include 'x' %}"), Catch::Contains("not supported"));
  CHECK_THAT(compile_error("{{ 99999999999999999999 }}"), Catch::Contains("too large"));
}

TEST_CASE("template run-time errors carry the template's message and position") {
  CHECK_THAT(error_of("line1\n  {{ raise_exception('Only user and assistant roles') }}"),
             Catch::Contains("t:2:") && Catch::Contains("Only user and assistant roles"));
  CHECK_THAT(error_of("{{ 1 / 0 }}"), Catch::Contains("division by zero"));
  CHECK_THAT(error_of("{{ 1 + 'a' }}"), Catch::Contains("unsupported operand type(s) for +: 'int' and 'str'"));
  CHECK_THAT(error_of("{{ x.y }}"), Catch::Contains("'x' is undefined"));
  CHECK_THAT(error_of("{{ 1 < 'a' }}"), Catch::Contains("'<' not supported between instances of 'int' and 'str'"));
  CHECK_THAT(error_of("{{ missing | tojson }}"), Catch::Contains("not JSON serializable"));
  CHECK_THAT(error_of("{% for a, b in [1] %}{% endfor %}"), Catch::Contains("is not iterable"));
  CHECK_THAT(error_of("{{ 9223372036854775807 + 1 }}"), Catch::Contains("integer overflow"));
}

TEST_CASE("template sandbox limits stop hostile templates with an error") {
  // a billion loop iterations
  CHECK_THAT(error_of("{% for i in range(1000) %}{% for j in range(1000) %}{% for k in range(1000) %}"
                      "{% endfor %}{% endfor %}{% endfor %}"),
             Catch::Contains("limit"));
  // unbounded recursion
  CHECK_THAT(error_of("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}"), Catch::Contains("limit"));
  // a string that doubles forty times
  CHECK_THAT(error_of("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}"),
             Catch::Contains("limit"));
  CHECK_THAT(error_of("{{ 'a' * 100000000000 }}"), Catch::Contains("limit"));
  CHECK_THAT(error_of("{{ [1] * 100000000 }}"), Catch::Contains("limit"));
  CHECK_THAT(error_of("{{ range(100000000) | length }}"), Catch::Contains("limit"));
  // a string joined character by character, again and again (found by fuzzing: each
  // join turned its input into a list of one-character strings, under every byte limit)
  CHECK_THAT(error_of("{{ ('x' * 100) | join('-' * 30) | join('-' * 30) | join('-' * 30) | join('-') }}"),
             Catch::Contains("iterated characters (limit)"));
  CHECK_THAT(error_of("{% for i in range(100) %}{{ ('x' * 100000) | list | length }}{% endfor %}"),
             Catch::Contains("iterated characters (limit)"));
  // control characters escaped to six bytes each past the string cap (found by fuzzing)
  CHECK_THAT(error_of("{{ ('\x06' * 3000000) | tojson | length }}"), Catch::Contains("limit"));
  CHECK(render_or_error("{{ ('a\x06\x1f' * 2) | tojson }}", "{}") == "\"a\\u0006\\u001fa\\u0006\\u001f\"");
  // ...while iterating a string at all stays allowed
  CHECK(render_or_error("{{ 'abc' | join('-') }}|{% for c in 'hé' %}[{{ c }}]{% endfor %}", "{}") == "a-b-c|[h][é]");
  // output larger than the cap, built from pieces that are each small
  CHECK_THAT(error_of("{% for i in range(1000) %}{{ 'x' * 100000 }}{% endfor %}"), Catch::Contains("limit"));
  // deep nesting is refused by the parser, not by a stack overflow
  CHECK_THAT(error_of("{{ " + std::string(100000, '(')), Catch::Contains("t:1:"));
  std::string deep = "{{ ";
  for (int k = 0; k < 5000; ++k) deep += "not ";
  deep += "1 }}";
  CHECK_THAT(error_of(deep), Catch::Contains("nested too deeply"));
  std::string ifs;
  for (int k = 0; k < 2000; ++k) ifs += "{% if 1 %}";
  CHECK_THAT(error_of(ifs), Catch::Contains("nested too deeply"));
  // a namespace that would hold itself (a cycle nothing could free, printed forever)
  CHECK_THAT(error_of("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}"), Catch::Contains("cannot hold itself"));
  CHECK_THAT(error_of("{% set ns = namespace() %}{% set ns.l = [1, {'a': ns}] %}"), Catch::Contains("cannot hold itself"));
}

TEST_CASE("chat template inputs become the template's variables") {
  const auto t = loom::ChatTemplate::compile(
      "{{ bos_token }}{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}"
      "{% if add_generation_prompt %}<gen>{% endif %}{{ eos_token }}{{ tools | length }}{{ enable_thinking }}",
      "inputs");
  CHECK(t.name() == "inputs");
  loom::ChatTemplateInputs in;
  in.messages = {{"system", "S"}, {"user", "U"}};
  in.bos_token = "<s>";
  in.eos_token = "</s>";
  CHECK(t.render(in) == "<s>[system:S][user:U]<gen></s>0");
  in.add_generation_prompt = false;
  in.tools_json = R"([{"type": "function"}, {"type": "function"}])";
  in.extra_context_json = R"({"enable_thinking": false})";
  CHECK(t.render(in) == "<s>[system:S][user:U]</s>2False");
  in.messages_json = R"([{"role": "tool", "content": "42"}])";
  CHECK(t.render(in) == "<s>[tool:42]</s>2False");
  in.messages_json = "{not json";
  CHECK_THROWS_AS(t.render(in), loom::Error);
  in.messages_json = R"({"role": "user"})";
  CHECK_THROWS_AS(t.render(in), loom::Error);
}

TEST_CASE("strftime_now uses the pinned time") {
  const auto t = loom::ChatTemplate::compile("{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%Y') }}");
  loom::ChatTemplateInputs in;
  in.now = pinned_now();
  CHECK(t.render(in) == "26 Jul 2024|2024");
  in.now.reset();
  CHECK(t.render(in).size() >= 11);  // today's date
}

TEST_CASE("a compiled chat template renders on many threads at once") {
  const auto t = loom::ChatTemplate::compile(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + m.content | length %}{% endfor %}{{ ns.n }}");
  std::vector<std::thread> threads;
  std::vector<std::string> results(4);
  for (size_t k = 0; k < results.size(); ++k) {
    threads.emplace_back([&, k] {
      loom::ChatTemplateInputs in;
      for (size_t j = 0; j <= k; ++j) in.messages.push_back({"user", "abc"});
      for (int rep = 0; rep < 50; ++rep) results[k] = t.render(in);
    });
  }
  for (auto& th : threads) th.join();
  for (size_t k = 0; k < results.size(); ++k) CHECK(results[k] == std::to_string(3 * (k + 1)));
}
