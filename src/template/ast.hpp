// Internal: the parsed form of a template — expressions and statements, as Jinja2's parser
// builds them. Immutable after parsing; the evaluator walks it.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "template/value.hpp"

namespace loom::tmpl {

struct Pos {
  int line = 1;
  int col = 1;
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind : uint8_t {
  literal,   // value
  name,      // name
  attr,      // args[0] . name
  item,      // args[0] [ args[1] ]
  slice,     // args[0] [ args[1] : args[2] : args[3] ] (null parts absent)
  neg, pos, not_,
  binop,     // args[0] name args[1]: + - * / // % ** ~
  compare,   // args[0] then ops[k] args[k+1] (chained)
  and_, or_,
  cond,      // args[1] if args[0] else args[2] (args[2] may be null)
  list, tuple, dict,  // dict: args alternate key, value
  call,      // args[0] ( args[1..] , kwargs )
  filter,    // args[0] | name ( args[1..], kwargs )
  test,      // args[0] is [not] name ( args[1..], kwargs ); negated
};

struct Expr {
  ExprKind kind;
  Pos pos;
  Value value;
  std::string name;
  std::vector<ExprPtr> args;  // entries may be null for absent slice parts
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;  // compare operators: == != < <= > >= in notin
  bool negated = false;
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

enum class StmtKind : uint8_t {
  text,       // text
  output,     // {{ expr }}
  if_,        // conds[k] -> bodies[k]; else_body
  for_,       // targets in expr [if filter] body else_body
  set,        // targets (or ns_attr on targets[0]) = expr
  set_block,  // targets[0] = rendered body (| filters in filters)
  macro,      // name(params = defaults) body
  call_block, // expr (the call) with `caller` = body taking params
  filter_block,  // body | filters
  break_, continue_,
};

struct Param {
  std::string name;
  ExprPtr default_value;  // null: required (missing ones are undefined, as in Jinja)
};

struct Stmt {
  StmtKind kind;
  Pos pos;
  std::string text;
  ExprPtr expr;
  ExprPtr filter_cond;                 // for ... if cond
  std::vector<ExprPtr> conds;          // if / elif
  std::vector<Body> bodies;            // if / elif bodies; [0] is the body elsewhere
  Body else_body;
  std::vector<std::string> targets;    // for / set names (several: unpacking)
  std::string attr;                    // set ns.attr
  bool recursive = false;
  std::vector<Param> params;           // macro, call block
  std::vector<ExprPtr> filters;        // filter block, set block: filter chain applied to a
                                       // placeholder literal (args[0] replaced at run time)
};

// The variable a filter block's or set block's filter chain reads the rendered body from.
inline constexpr const char* kBlockValue = "\x01block";

struct Program {
  std::string name;
  Body body;
};

// Parses `source` (Jinja2 syntax with trim_blocks and lstrip_blocks on, as transformers
// configures it); throws Error(template_error) "<name>:<line>:<col>: <what>".
Program parse_template(std::string_view source, const std::string& name);

}  // namespace loom::tmpl
