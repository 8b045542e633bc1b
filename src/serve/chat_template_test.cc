// Unit tests of the chat template engine, one group per feature. Expected strings were checked
// against Python jinja2 3.1 (configured as transformers does) and @huggingface/jinja; where the
// two differ, the test says which one the engine follows (see chat_template.h).
//
// Sections: whitespace control, statements, expressions, tests, filters, tojson, methods and
// globals, undefined values and output conventions, errors, limits, context handling.
#include "serve/chat_template.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace gyre {
namespace {

using Json = nlohmann::ordered_json;
using Options = ChatTemplate::RenderOptions;

// Renders `source` with the JSON object `context`; returns the output, or "ERROR <status>".
std::string Render(std::string_view source, const std::string& context = "{}", const Options& options = {}) {
  auto t = ChatTemplate::Compile(source);
  if (!t.ok()) return "ERROR " + t.error().ToString();
  auto out = (*t)->Render(Json::parse(context), options);
  if (!out.ok()) return "ERROR " + out.error().ToString();
  return *out;
}

const char* kData = R"({"xs": [3, 1, 2], "d": {"b": 1, "a": [1, 2]}, "s": "héllo wörld", "n": null, "t": true,
  "f": 1.5, "names": ["Bob", "alice", "Carol"],
  "msgs": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})";

// --- Whitespace control -------------------------------------------------------------------------

TEST(ChatTemplateWhitespace, TrimAndLstripBlocksAreOn) {
  // lstrip_blocks drops the indentation before a block tag; trim_blocks the newline after it.
  EXPECT_EQ(Render("  {% if true %}\n    yes\n  {% endif %}\nend"), "    yes\nend");
  EXPECT_EQ(Render("{% for x in [1, 2] %}\n  {{ x }}\n{% endfor %}\n"), "  1\n  2\n");
  EXPECT_EQ(Render("a\n  {# note #}\nb"), "a\nb");
  // Not at the start of a line: nothing to strip. Variable tags are never stripped.
  EXPECT_EQ(Render("a  {% if true %}x{% endif %}  b"), "a  x  b");
  EXPECT_EQ(Render("{{ 'a' }}\n{{ 'b' }}"), "a\nb");
}

TEST(ChatTemplateWhitespace, MinusStripsAllWhitespace) {
  EXPECT_EQ(Render("a {{- ' b ' -}} c {#- comment -#} d"), "a b cd");
  EXPECT_EQ(Render("{% for x in [3, 1] -%}\n  {{ x }}\n{%- endfor %}"), "31");
  EXPECT_EQ(Render("text {%- if true -%} \t\n inner \n {%- endif -%} tail"), "textinnertail");
  EXPECT_EQ(Render("{%- set x = 1 -%}\n\n  {{ x }}  \n\n{{- x -}}\n\n"), "11");
}

TEST(ChatTemplateWhitespace, PlusDisablesLstripAndTrim) {
  EXPECT_EQ(Render("a\n  {%+ if true %}x{% endif +%}\nz"), "a\n  x\nz");
}

TEST(ChatTemplateWhitespace, OneTrailingNewlineIsDropped) {
  EXPECT_EQ(Render("hi\n"), "hi");
  EXPECT_EQ(Render("hi\n\n"), "hi\n");
}

TEST(ChatTemplateWhitespace, RawBlocksAndComments) {
  EXPECT_EQ(Render("{% raw %}{{ not rendered }} {% if %}{% endraw %}"), "{{ not rendered }} {% if %}");
  EXPECT_EQ(Render("{% raw -%}\n  {{ x }}  \n{%- endraw %}|"), "{{ x }}|");
  EXPECT_EQ(Render("a{# {{ ignored }} {% if %} #}b"), "ab");
}

// --- Statements ---------------------------------------------------------------------------------

TEST(ChatTemplateStatements, IfElifElse) {
  const char* src = "{% if x > 2 %}big{% elif x > 0 %}small{% else %}none{% endif %}";
  EXPECT_EQ(Render(src, R"({"x": 5})"), "big");
  EXPECT_EQ(Render(src, R"({"x": 1})"), "small");
  EXPECT_EQ(Render(src, R"({"x": 0})"), "none");
}

TEST(ChatTemplateStatements, LoopVariables) {
  EXPECT_EQ(
      Render("{% for x in xs %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/"
             "{{ loop.first }}/{{ loop.last }}/{{ loop.length }}/{{ loop.previtem }}/{{ loop.nextitem }};{% endfor %}",
             kData),
      "1/0/3/2/true/false/3//1;2/1/2/1/false/false/3/3/2;3/2/1/0/false/true/3/1/;");
  EXPECT_EQ(Render("{% for x in xs %}{{ loop.cycle('a', 'b') }}{% endfor %}", kData), "aba");
}

TEST(ChatTemplateStatements, LoopFilterElseAndUnpacking) {
  // The inline filter runs before the loop, so loop.length counts the selected items.
  EXPECT_EQ(Render("{% for x in xs if x > 1 %}{{ x }}:{{ loop.length }},{% endfor %}", kData), "3:2,2:2,");
  EXPECT_EQ(Render("{% for x in [] %}a{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(Render("{% for x in xs if x > 5 %}a{% else %}filtered{% endfor %}", kData), "filtered");
  EXPECT_EQ(Render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", kData), "b=1;a=[1, 2];");
  EXPECT_EQ(Render("{% for k in d %}{{ k }},{% endfor %}", kData), "b,a,");
  EXPECT_EQ(Render("{% for c in 'héj' %}[{{ c }}]{% endfor %}"), "[h][é][j]");
  EXPECT_EQ(Render("{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}"), "37");
}

TEST(ChatTemplateStatements, BreakAndContinue) {
  EXPECT_EQ(Render("{% for x in xs %}{% if x == 1 %}{% break %}{% endif %}{{ x }}{% endfor %}", kData), "3");
  EXPECT_EQ(Render("{% for x in xs %}{% if x == 1 %}{% continue %}{% endif %}{{ x }}{% endfor %}", kData), "32");
}

TEST(ChatTemplateStatements, SetScoping) {
  // Like jinja2 (not @huggingface/jinja): a set inside a loop body lasts one iteration and never
  // leaks out; a set inside an if does.
  EXPECT_EQ(Render("{% set x = 1 %}{% for i in [1, 2] %}{% set x = 2 %}{% endfor %}{{ x }}"), "1");
  EXPECT_EQ(Render("{% for i in range(3) %}{% if i == 0 %}{% set y = 'a' %}{% endif %}[{{ y }}]{% endfor %}"),
            "[a][][]");
  EXPECT_EQ(Render("{% if true %}{% set y = 5 %}{% endif %}{{ y }}"), "5");
  EXPECT_EQ(Render("{% set a, b = 1, 2 %}{{ a }}{{ b }}"), "12");
}

TEST(ChatTemplateStatements, NamespaceCarriesStateOutOfLoops) {
  EXPECT_EQ(Render("{% set ns = namespace(total=0, seen=false) %}{% for x in xs %}{% set ns.total = ns.total + x %}"
                   "{% endfor %}{{ ns.total }} {{ ns.seen }}",
                   kData),
            "6 false");
  EXPECT_EQ(Render("{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}{{ ns['a'] }}"), "121");
  EXPECT_EQ(Render("{% set d2 = {} %}{% set d2.x = 1 %}"),
            "ERROR InvalidArgument: chat template line 1: cannot assign attribute 'x' on non-namespace object 'd2'");
}

TEST(ChatTemplateStatements, BlockSet) {
  EXPECT_EQ(Render("{% set block %}  a{{ 1 + 1 }}  {% endset %}[{{ block }}]"), "[  a2  ]");
  EXPECT_EQ(Render("{% set x %}\n  line\n{% endset %}[{{ x }}]"), "[  line\n]");
  EXPECT_EQ(Render("{% set x | upper | trim %} ab {% endset %}[{{ x }}]"), "[AB]");
}

TEST(ChatTemplateStatements, Macros) {
  const char* greet = "{% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}!{% endmacro %}";
  EXPECT_EQ(Render(std::string(greet) + "{{ greet('Bob') }} {{ greet('Amy', greeting='Hi') }} {{ greet('Z', 'Yo') }}"),
            "Hello, Bob! Hi, Amy! Yo, Z!");
  EXPECT_EQ(Render(std::string(greet) + "{{ greet(greeting='Hey', name='Al') }}|{{ greet() }}"), "Hey, Al!|Hello, !");
  // Macros see the variables of the scope they were defined in, as of the call.
  EXPECT_EQ(Render("{% macro m() %}{{ x }}{% endmacro %}{% set x = 5 %}{{ m() }}"), "5");
  // Extra arguments land in varargs and kwargs.
  EXPECT_EQ(Render("{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, k=3) }}"),
            "1[2]{\"k\": 3}");
  // Recursion.
  EXPECT_EQ(Render("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}"), "321");
}

TEST(ChatTemplateStatements, CallAndFilterBlocks) {
  EXPECT_EQ(Render("{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}"
                   "{% call wrap('b') %}inner{% endcall %}"),
            "<b>inner</b>");
  EXPECT_EQ(Render("{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}"
                   "{% call(item) each([1, 2]) %}[{{ item }}]{% endcall %}"),
            "[1][2]");
  EXPECT_EQ(Render("{% filter upper %}shout {{ s }}{% endfilter %}", kData), "SHOUT HÉLLO WÖRLD");
  EXPECT_EQ(Render("{% filter indent(2, true) | trim %}a\nb{% endfilter %}"), "a\n  b");
}

TEST(ChatTemplateStatements, GenerationBlockRendersItsBody) {
  EXPECT_EQ(Render("a{% generation %}b{{ 1 }}{% endgeneration %}c"), "ab1c");
}

// --- Expressions --------------------------------------------------------------------------------

TEST(ChatTemplateExpressions, Literals) {
  EXPECT_EQ(Render(R"({{ 'it''s' }}|{{ "a\tb\n" }}|{{ '\u00e9\x41' }}|{{ 'a\qb' }}|{{ 1_000 }}|{{ 2.5e1 }})"),
            "its|a\tb\n|éA|a\\qb|1000|25.0");
  EXPECT_EQ(Render("{{ [1, 'a', [true]] }}|{{ {'k': none} }}|{{ (1, 2) }}|{{ () }}|{{ True }}{{ None }}{{ False }}"),
            "[1, \"a\", [true]]|{\"k\": null}|[1, 2]|[]|truefalse");
}

TEST(ChatTemplateExpressions, ArithmeticFollowsPython) {
  // Floor division and modulo round toward negative infinity (@huggingface/jinja gives -1 for -7 % 3).
  EXPECT_EQ(Render("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 4 / 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} "
                   "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 10 - 2 - 3 }} {{ -2 ** 2 }} {{ 7.5 // 2 }} {{ -x }}",
                   R"({"x": 4})"),
            "3 -4 2 3.5 2.0 1024 0.5 7 9 5 4 3.0 -4");
  EXPECT_EQ(Render("{{ 'x' * 3 }}|{{ [1] + [2] }}|{{ [0] * 2 }}|{{ true + 1 }}"), "xxx|[1, 2]|[0, 0]|2");
  EXPECT_EQ(Render("{{ 1 / 0 }}"), "ERROR InvalidArgument: chat template line 1: division by zero");
  EXPECT_EQ(Render("{{ 9223372036854775807 + 1 }}"), "ERROR InvalidArgument: chat template line 1: integer overflow");
}

TEST(ChatTemplateExpressions, StringConcatenation) {
  // `~` converts both sides (none is "None" there, as in Python); `+` concatenates when either
  // side is a string, like @huggingface/jinja.
  EXPECT_EQ(Render("{{ 'a' ~ 1 ~ none ~ 2.0 ~ u }}|{{ 'a' + 1 }}|{{ 1 + 'a' }}"), "a1None2.0|a1|1a");
  EXPECT_EQ(Render("{{ '%s-%d' % ('a', 3) }}|{{ '%.2f' % 1.5 }}|{{ '%(x)s!' % {'x': 1} }}"), "a-3|1.50|1!");
}

TEST(ChatTemplateExpressions, ComparisonsAndLogic) {
  EXPECT_EQ(
      Render("{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' in 'cat' }} {{ 2 in xs }} {{ 'b' in d }} {{ 5 not in xs }} "
             "{{ not true }} {{ true and 'x' }} {{ 0 or 'y' }} {{ 1 == 1.0 }} {{ [1, 2] == [1, 2] }} {{ 'a' != 'b' }} "
             "{{ 'b' > 'a' }} {{ 'x' in u }}",
             kData),
      "true false true true true true false x y true true true true false");
  // Short-circuit: the right side is not evaluated.
  EXPECT_EQ(Render("{{ false and u() }}{{ true or u() }}"), "falsetrue");
  EXPECT_EQ(Render("{{ 'yes' if t else 'no' }}|{{ 'yes' if n else 'no' }}|{{ 'a' if false }}|", kData), "yes|no||");
  EXPECT_EQ(Render("{{ 1 < 'a' }}"), "ERROR InvalidArgument: chat template line 1: cannot compare int with string");
}

TEST(ChatTemplateExpressions, SubscriptsAndSlices) {
  EXPECT_EQ(Render("{{ xs[::-1] }}|{{ xs[1:] }}|{{ xs[:-1] }}|{{ s[1:4] }}|{{ s[::-2] }}|{{ xs[-1] }}|{{ s[-1] }}|"
                   "{{ xs[5] }}|{{ xs[10:] }}|{{ xs[-100:1] }}",
                   kData),
            "[2, 1, 3]|[1, 2]|[3, 1]|éll|drwolh|2|d||[]|[3]");
  EXPECT_EQ(
      Render("{{ d['a'][1] }} {{ d.a.0 }} {{ msgs[0].role }} {{ msgs[0]['content'] }} {{ msgs[1]['role'] }}", kData),
      "2 1 user hi assistant");
  EXPECT_EQ(Render("{{ {1024: 'a'}[1024] }}{% for k, v in {2: 'x'}.items() %}{{ k + 1 }}{{ v }}{% endfor %}"), "a3x");
  EXPECT_EQ(Render("{{ xs[::0] }}", kData), "ERROR InvalidArgument: chat template line 1: slice step cannot be zero");
}

// --- Tests --------------------------------------------------------------------------------------

TEST(ChatTemplateTests, BuiltinTests) {
  EXPECT_EQ(Render("{{ u is defined }} {{ u is undefined }} {{ n is none }} {{ s is string }} {{ f is number }} "
                   "{{ 3 is integer }} {{ f is float }} {{ d is mapping }} {{ xs is iterable }} {{ xs is sequence }} "
                   "{{ t is boolean }} {{ t is true }} {{ false is false }} {{ 3 is odd }} {{ 4 is even }} "
                   "{{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ 3 is equalto 3 }} {{ 3 is eq(4) }} "
                   "{{ s is not string }} {{ 'ab' is lower }} {{ 2 is in([1, 2]) }} {{ 3 is gt 2 }} {{ 1 is number }} "
                   "{{ true is number }} {{ true is integer }} {{ d is iterable }} {{ s is mapping }}",
                   kData),
            "false true true true true true true true true true true true true true true true false true false "
            "false true true true true true false true false");
  EXPECT_EQ(Render("{{ x is unknowntest }}"),
            "ERROR InvalidArgument: chat template line 1: unknown test 'unknowntest'");
}

// --- Filters ------------------------------------------------------------------------------------

TEST(ChatTemplateFilters, Sequences) {
  EXPECT_EQ(
      Render("{{ xs | length }} {{ s | length }} {{ d | count }} {{ xs | first }} {{ xs | last }} {{ xs | sort }} "
             "{{ xs | sort(reverse=true) }} {{ names | sort }} {{ names | sort(case_sensitive=true) }} {{ xs | sum }} "
             "{{ xs | min }} {{ xs | max }} {{ names | max }} {{ xs | list }} {{ 'ab' | list }}",
             kData),
      "3 11 2 3 2 [1, 2, 3] [3, 2, 1] [\"alice\", \"Bob\", \"Carol\"] [\"Bob\", \"Carol\", \"alice\"] 6 1 3 Carol "
      "[3, 1, 2] [\"a\", \"b\"]");
  EXPECT_EQ(
      Render("{{ [1, 2, 1, 3, 2] | unique | list }} {{ ['A', 'a', 'b'] | unique | list }} {{ d | dictsort }} "
             "{{ d | items | list }} {{ xs | reverse | list }} {{ s | reverse }} {{ xs | batch(2) | list }} "
             "{{ msgs | sort(attribute='role') | map(attribute='content') | join(',') }}",
             kData),
      "[1, 2, 3] [\"A\", \"b\"] [[\"a\", [1, 2]], [\"b\", 1]] [[\"b\", 1], [\"a\", [1, 2]]] [2, 1, 3] dlröw olléh "
      "[[3, 1], [2]] yo,hi");
}

TEST(ChatTemplateFilters, MapSelectReject) {
  EXPECT_EQ(Render("{{ msgs | map(attribute='role') | join(', ') }}|{{ msgs | selectattr('role', 'equalto', 'user') | "
                   "list | length }}|{{ msgs | rejectattr('role', 'eq', 'user') | map(attribute='content') | first }}|"
                   "{{ xs | select('odd') | list }}|{{ xs | reject('odd') | list }}|{{ names | map('upper') | join }}|"
                   "{{ msgs | map(attribute='missing', default='-') | join }}|{{ msgs | selectattr('content') | list | "
                   "length }}|{{ none | selectattr('x') | list }}",
                   kData),
            "user, assistant|1|yo|[3, 1]|[2]|BOBALICECAROL|--|2|[]");
}

TEST(ChatTemplateFilters, Strings) {
  EXPECT_EQ(
      Render("{{ '  x  ' | trim }}|{{ 'hello wORLD' | title }}|{{ 'hELLO wORLD' | capitalize }}|{{ s | upper }}|"
             "{{ 'ABC' | lower }}|{{ 'a-b' | replace('-', '+') }}|{{ 'aaa' | replace('a', 'b', 2) }}|"
             "{{ 'one two  three' | wordcount }}|{{ '<a href=\"x\">' | e }}|{{ 'xx' | safe }}|{{ 'ab' | center(6) }}|"
             "{{ 'xxhixx' | trim('x') }}|{{ ' y ' | strip }}|{{ '%s=%s' | format('k', 1) }}",
             kData),
      "x|Hello World|Hello world|HÉLLO WÖRLD|abc|a+b|bba|3|&lt;a href=&#34;x&#34;&gt;|xx|  ab  |hi|y|k=1");
  EXPECT_EQ(
      Render("{{ 'a\nb\n\nc' | indent(2) }}|{{ 'a\nb' | indent(2, true) }}|{{ 'a\n\nb' | indent(2, blank=true) }}|"
             "{{ 'a\nb' | indent('> ') }}"),
      "a\n  b\n\n  c|  a\n  b|a\n  \n  b|a\n> b");
}

TEST(ChatTemplateFilters, Conversions) {
  EXPECT_EQ(
      Render("{{ '12' | int + 1 }} {{ '3.7' | int }} {{ 'x' | int(7) }} {{ ' 2.5 ' | float }} {{ 3 | float }} "
             "{{ -4 | abs }} {{ 2.567 | round(2) }} {{ 2.5 | round }} {{ 3.5 | round }} {{ 2.1 | round(0, 'ceil') }} "
             "{{ 7 | string ~ '!' }} {{ 'ff' | int(base=16) }} {{ true | int }}"),
      "13 3 7 2.5 3.0 4 2.57 2.0 4.0 3.0 7! 255 1");
  EXPECT_EQ(
      Render("{{ u | default('dflt') }}|{{ n | default('nd') }}|{{ n | default('nd', true) }}|{{ '' | d('e', true) }}|"
             "{{ 0 | default(5) }}",
             kData),
      "dflt||nd|e|0");
}

TEST(ChatTemplateFilters, UnknownFilterFailsWhenReached) {
  // Like jinja2 3, an unknown filter in a branch that never runs is not an error.
  EXPECT_EQ(Render("{% if false %}{{ x | from_json }}{% endif %}ok"), "ok");
  EXPECT_EQ(Render("{{ x | from_json }}"), "ERROR InvalidArgument: chat template line 1: unknown filter 'from_json'");
}

// --- tojson -------------------------------------------------------------------------------------

TEST(ChatTemplateTojson, MatchesTransformersJsonDumps) {
  // json.dumps(ensure_ascii=False): ", " and ": " separators, key order kept, no HTML escaping.
  EXPECT_EQ(Render("{{ d | tojson }}", kData), R"({"b": 1, "a": [1, 2]})");
  EXPECT_EQ(Render(R"({{ {'é': 'ü', 'q': '"\\\n\t\u0001'} | tojson }})"), R"({"é": "ü", "q": "\"\\\n\t\u0001"})");
  EXPECT_EQ(Render("{{ '</script> & <b>' | tojson }}"), R"("</script> & <b>")");
  // indent uses "," between items and keeps ": "; empty containers stay compact.
  EXPECT_EQ(Render("{{ {'a': [1, {}], 'b': []} | tojson(indent=2) }}"),
            "{\n  \"a\": [\n    1,\n    {}\n  ],\n  \"b\": []\n}");
  EXPECT_EQ(Render("{{ [1] | tojson(indent='\t') }}"), "[\n\t1\n]");
  EXPECT_EQ(Render("{{ {'é': '😀'} | tojson(ensure_ascii=true) }}"), R"({"\u00e9": "\ud83d\ude00"})");
  EXPECT_EQ(Render("{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}"), R"({"a": 2, "b": 1})");
  EXPECT_EQ(Render("{{ [1, {'x': none, 'y': true}] | tojson(separators=(',', ':')) }}"), R"([1,{"x":null,"y":true}])");
  // Floats print as Python does (@huggingface/jinja prints 1.0 as 1).
  EXPECT_EQ(Render("{{ [1.0, 0.5, 1e-7, 1e16, 2] | tojson }}"), "[1.0, 0.5, 1e-07, 1e+16, 2]");
  EXPECT_EQ(Render("{{ u | tojson }}|{{ {1: 2} | tojson }}"), "null|{\"1\": 2}");
}

// --- Methods and globals ------------------------------------------------------------------------

TEST(ChatTemplateMethods, StringMethods) {
  EXPECT_EQ(
      Render(
          "{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a,b,c'.split(',', 1) }} {{ 'a,b,c'.rsplit(',', 1) }} "
          "{{ 'xxhixx'.strip('x') }} {{ '\n\nhi\n'.lstrip('\n') }} {{ 'hi \n'.rstrip() }} {{ ' hi '.strip() }}"),
      "[\"a\", \"b\", \"\", \"c\"] [\"a\", \"b\"] [\"a\", \"b,c\"] [\"a,b\", \"c\"] hi hi\n hi hi");
  EXPECT_EQ(Render("{{ 'Hello'.startswith('He') }} {{ 'Hello'.endswith(('x', 'lo')) }} {{ 'héllo'.find('l') }} "
                   "{{ 'hello'.count('l') }} {{ 'hello world'.title() }} {{ '-'.join(['a', 'b']) }} "
                   "{{ '{} and {name}'.format(1, name='x') }} {{ 'abc'.upper() }} {{ '42'.isdigit() }} "
                   "{{ 'a b'.replace(' ', '_') }} {{ 'ab'.capitalize() }} {{ 'AB'.lower() }}"),
            "true true 2 2 Hello World a-b 1 and x ABC true a_b Ab ab");
  // The real Qwen3 idiom.
  EXPECT_EQ(
      Render("{{ c.split('</think>')[-1].lstrip('\n') }}|{{ c.split('</think>')[0].rstrip('\n').split('<think>')[-1]"
             ".lstrip('\n') }}",
             R"({"c": "<think>\nwhy\n</think>\n\nanswer"})"),
      "answer|why");
}

TEST(ChatTemplateMethods, DictMethods) {
  EXPECT_EQ(Render("{{ d.get('b') }} {{ d.get('zz', 'dflt') }} [{{ d.get('zz') }}] {{ d.keys() | list }} {{ d.values() "
                   "| list }}",
                   kData),
            "1 dflt [] [\"b\", \"a\"] [1, [1, 2]]");
  // A method call wins over a key of the same name, as in Python; attribute access prefers the key.
  EXPECT_EQ(Render("{% for k, v in schema.items() %}{{ k }};{% endfor %}{{ schema.items.type }}",
                   R"({"schema": {"type": "array", "items": {"type": "object"}}})"),
            "type;items;object");
}

TEST(ChatTemplateMethods, Globals) {
  EXPECT_EQ(
      Render("{{ range(3) | list }} {{ range(1, 10, 3) | list }} {{ range(5, 0, -2) | list }} {{ dict(a=1, b=2) }} "
             "{{ namespace(a=1).a }}"),
      "[0, 1, 2] [1, 4, 7] [5, 3, 1] {\"a\": 1, \"b\": 2} 1");
  Options options;
  std::tm now{};
  now.tm_year = 2026 - 1900;
  now.tm_mon = 0;
  now.tm_mday = 5;
  now.tm_hour = 9;
  now.tm_min = 7;
  now.tm_wday = 1;
  options.now = now;
  EXPECT_EQ(Render("{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%Y-%m-%d %H:%M') }}|{{ strftime_now('%A %B') }}",
                   "{}", options),
            "05 Jan 2026|2026-01-05 09:07|Monday January");
  // The context may shadow a global.
  EXPECT_EQ(Render("{{ range }}", R"({"range": "mine"})"), "mine");
}

// --- Undefined values and output conventions ----------------------------------------------------

TEST(ChatTemplateUndefined, BehavesLikeJinja) {
  // Printing, iterating, |length and tests treat undefined as jinja2 does; attributes of undefined
  // are undefined (like @huggingface/jinja; jinja2 would raise).
  EXPECT_EQ(Render("[{{ u }}]{{ u.x }}{{ u['k'] }}{{ u.x.y is defined }}{{ u | length }}{% for a in u %}x{% endfor %}"
                   "{{ u is iterable }}{{ u ~ 'a' }}{{ 'k' in u }}{{ u == u }}"),
            "[]false0trueafalsetrue");
  EXPECT_EQ(Render("{% if u %}yes{% else %}no{% endif %}{{ not u }}"), "notrue");
  // Calling an undefined value, or a method on one, is an error.
  EXPECT_EQ(Render("{{ u() }}"), "ERROR InvalidArgument: chat template line 1: 'u' is undefined");
  EXPECT_EQ(Render("{{ msg.content.strip() }}", R"({"msg": {}})"),
            "ERROR InvalidArgument: chat template line 1: 'content' is undefined");
  EXPECT_EQ(Render("{{ u + 1 }}"),
            "ERROR InvalidArgument: chat template line 1: unsupported operand type(s) for +: 'undefined' and 'int'");
}

TEST(ChatTemplateOutput, HuggingFaceConventionsByDefaultPythonOnRequest) {
  const char* src =
      "{{ none }}|{{ true }}|{{ false }}|{{ d }}|{{ xs }}|{{ 1.0 }}|{{ 1e20 }}|{{ 0.1 + 0.2 }}|{{ 3.14 }}|"
      "{{ n | string }}|{{ t | string }}|{{ ['it\\'s', none] }}";
  EXPECT_EQ(
      Render(src, kData),
      "|true|false|{\"b\": 1, \"a\": [1, 2]}|[3, 1, 2]|1.0|1e+20|0.30000000000000004|3.14|None|true|[\"it's\", null]");
  Options python;
  python.python_str = true;
  EXPECT_EQ(
      Render(src, kData, python),
      "None|True|False|{'b': 1, 'a': [1, 2]}|[3, 1, 2]|1.0|1e+20|0.30000000000000004|3.14|None|True|[\"it's\", None]");
}

// --- Errors -------------------------------------------------------------------------------------

TEST(ChatTemplateErrors, RaiseExceptionGivesTheMessage) {
  auto t =
      ChatTemplate::Compile("line1\n{% if x %}{{ raise_exception('Only user/assistant roles: ' ~ x) }}{% endif %}");
  ASSERT_TRUE(t.ok());
  auto out = (*t)->Render(Json::parse(R"({"x": "tool"})"));
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(out.error().message(), "Only user/assistant roles: tool");
}

TEST(ChatTemplateErrors, SyntaxErrorsHaveLineAndColumn) {
  auto syntax = [](std::string_view src) {
    auto t = ChatTemplate::Compile(src);
    return t.ok() ? std::string("compiled") : t.error().ToString();
  };
  EXPECT_EQ(syntax("a\nb {% if x %}\nc"),
            "InvalidArgument: chat template syntax error at line 3, column 2: unexpected end of template, expected "
            "{% elif %}");
  EXPECT_EQ(syntax("{{ 1 + }}"), "InvalidArgument: chat template syntax error at line 1, column 8: unexpected '}}'");
  EXPECT_EQ(syntax("x\n\n  {{ a b }}"),
            "InvalidArgument: chat template syntax error at line 3, column 8: expected '}}', got 'b'");
  EXPECT_EQ(syntax("{% endfor %}"),
            "InvalidArgument: chat template syntax error at line 1, column 4: unknown or unexpected tag 'endfor'");
  EXPECT_EQ(syntax("{% break %}"),
            "InvalidArgument: chat template syntax error at line 1, column 4: 'break' outside of a loop");
  EXPECT_EQ(syntax("{{ 'abc }}"),
            "InvalidArgument: chat template syntax error at line 1, column 4: unterminated string literal");
  EXPECT_EQ(syntax("{# never closed"),
            "InvalidArgument: chat template syntax error at line 1, column 1: unterminated comment");
  EXPECT_EQ(syntax("{{ x ! y }}"),
            "InvalidArgument: chat template syntax error at line 1, column 6: unexpected character '!'");
  EXPECT_EQ(
      syntax("{% macro m(a=1, b) %}{% endmacro %}"),
      "InvalidArgument: chat template syntax error at line 1, column 18: non-default parameter 'b' follows a default "
      "parameter");
  EXPECT_EQ(syntax("{% include 'x' %}"),
            "InvalidArgument: chat template syntax error at line 1, column 4: unknown or unexpected tag 'include'");
}

TEST(ChatTemplateErrors, RuntimeErrorsHaveTheLine) {
  EXPECT_EQ(Render("ok\n{{ 5 | upper }}\n{{ xs.nope() }}", kData),
            "ERROR InvalidArgument: chat template line 3: 'list' object has no attribute 'nope'");
  EXPECT_EQ(Render("\n{% for x in 5 %}{% endfor %}"),
            "ERROR InvalidArgument: chat template line 2: 'int' object is not iterable");
  EXPECT_EQ(Render("{{ 'a' in 1 }}"),
            "ERROR InvalidArgument: chat template line 1: argument of type 'int' is not iterable");
}

// --- Limits -------------------------------------------------------------------------------------

TEST(ChatTemplateLimits, RunawayTemplatesFailCleanly) {
  Options small;
  small.max_steps = 100'000;
  small.max_output_bytes = 1 << 16;
  small.max_list_length = 10'000;
  auto code = [&](std::string_view src) {
    auto t = ChatTemplate::Compile(src);
    if (!t.ok()) return std::string("compile: ") + t.error().ToString();
    auto out = (*t)->Render(Json::object(), small);
    return out.ok() ? std::string("ok") : std::string(StatusCodeName(out.error().code()));
  };
  EXPECT_EQ(code("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}"), "ResourceExhausted");
  EXPECT_EQ(code("{{ range(100000000) | length }}"), "ResourceExhausted");
  EXPECT_EQ(code("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}"), "ResourceExhausted");
  EXPECT_EQ(code("{% macro f(n) %}{{ f(n + 1) }}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"), "ResourceExhausted");
  EXPECT_EQ(code("{{ 'x' * 100000000 }}"), "ResourceExhausted");
  EXPECT_EQ(code("{% set ns = namespace(s='ab') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}"),
            "ResourceExhausted");
  EXPECT_EQ(code("{% for i in range(10000) %}xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx{% endfor %}"), "ResourceExhausted");
  EXPECT_EQ(code("{{ " + std::string(10000, '(') + "1" + std::string(10000, ')') + " }}"),
            "compile: InvalidArgument: chat template syntax error at line 1, column 67: template is nested too deeply");
  std::string chain = "{{ 1";
  for (int i = 0; i < 20000; ++i) chain += " + 1";
  EXPECT_EQ(
      code(chain + " }}"),
      "compile: InvalidArgument: chat template syntax error at line 1, column 1030: expression is nested too deeply");
  EXPECT_EQ(code("{% set ns = namespace(x=1) %}{% for i in range(5000) %}{% set ns.x = [ns.x] %}{% endfor %}"),
            "ResourceExhausted");
  EXPECT_EQ(code(std::string(1000, '{') + std::string(1000, '}')).substr(0, 24), "compile: InvalidArgument");
  EXPECT_EQ(code("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns | tojson }}"), "InvalidArgument");
}

// --- Context ------------------------------------------------------------------------------------

TEST(ChatTemplateContext, KeyOrderAndTypes) {
  auto t = ChatTemplate::Compile("{{ tool | tojson }}");
  ASSERT_TRUE(t.ok());
  // ordered_json keeps the caller's key order; json sorts keys.
  auto ordered =
      (*t)->Render(Json::parse(R"({"tool": {"name": "f", "description": "d", "big": 18446744073709551615}})"));
  ASSERT_TRUE(ordered.ok());
  EXPECT_EQ(*ordered, R"({"name": "f", "description": "d", "big": 1.8446744073709552e+19})");
  auto sorted = (*t)->Render(nlohmann::json::parse(R"({"tool": {"name": "f", "description": "d"}})"));
  ASSERT_TRUE(sorted.ok());
  EXPECT_EQ(*sorted, R"({"description": "d", "name": "f"})");
  auto not_object = (*t)->Render(Json::array());
  EXPECT_FALSE(not_object.ok());
}

TEST(ChatTemplateContext, ConcurrentRendersShareOneTemplate) {
  auto t = ChatTemplate::Compile(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + m %}{% endfor %}"
      "{{ ns.n }}");
  ASSERT_TRUE(t.ok());
  std::vector<std::thread> threads;
  std::vector<std::string> outs(4);
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      Json ctx = {{"messages", Json::array()}};
      for (int k = 0; k <= i * 100; ++k) ctx["messages"].push_back(k);
      for (int rep = 0; rep < 20; ++rep) outs[i] = (*t)->Render(ctx).value();
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(outs[0], "0");
  EXPECT_EQ(outs[1], "5050");
  EXPECT_EQ(outs[3], "45150");
}

}  // namespace
}  // namespace gyre
