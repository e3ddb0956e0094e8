// loom::ChatTemplate: compile once (parse + check filter and test names, as Jinja2 does at
// compile time), render many times with the conversation as the template's variables.
#include "loom/chat_template.hpp"

#include <simdjson.h>

#include "loom/error.hpp"
#include "template/interp.hpp"

namespace loom {

struct ChatTemplate::Impl {
  std::string source;
  std::string name;
  tmpl::Program program;
};

namespace {

using tmpl::Value;

// Jinja2 refuses unknown filters and tests when it compiles the template, even in branches
// a render never takes; so does loom, naming where the name was used.
void check_names(const tmpl::Expr& e, const std::string& name) {
  auto fail = [&](const char* what) {
    throw Error(ErrorCode::template_error, name + ":" + std::to_string(e.pos.line) + ":" +
                                               std::to_string(e.pos.col) + ": no " + what +
                                               " named '" + e.name + "'");
  };
  if (e.kind == tmpl::ExprKind::filter && tmpl::find_filter(e.name) == nullptr) fail("filter");
  if (e.kind == tmpl::ExprKind::test && tmpl::find_test(e.name) == nullptr) fail("test");
  for (const auto& a : e.args) {
    if (a) check_names(*a, name);
  }
  for (const auto& kv : e.kwargs) check_names(*kv.second, name);
}

void check_names(const tmpl::Body& body, const std::string& name) {
  for (const auto& s : body) {
    if (s->expr) check_names(*s->expr, name);
    if (s->filter_cond) check_names(*s->filter_cond, name);
    for (const auto& c : s->conds) check_names(*c, name);
    for (const auto& f : s->filters) check_names(*f, name);
    for (const auto& p : s->params) {
      if (p.default_value) check_names(*p.default_value, name);
    }
    for (const auto& b : s->bodies) check_names(b, name);
    check_names(s->else_body, name);
  }
}

Value from_json(simdjson::dom::element el, int depth) {
  if (depth > 512) throw Error(ErrorCode::invalid_argument, "JSON nested too deeply");
  switch (el.type()) {
    case simdjson::dom::element_type::ARRAY: {
      tmpl::List items;
      simdjson::dom::array arr;
      if (el.get_array().get(arr)) return Value::none();
      for (simdjson::dom::element child : arr) items.push_back(from_json(child, depth + 1));
      return Value::make_list(std::move(items));
    }
    case simdjson::dom::element_type::OBJECT: {
      tmpl::Dict d;
      simdjson::dom::object obj;
      if (el.get_object().get(obj)) return Value::none();
      for (auto field : obj) {
        Value key = Value::string(std::string(field.key));
        bool replaced = false;
        for (auto& [k, v] : d) {
          if (k.str() == key.str()) {  // json.loads keeps the last duplicate
            v = from_json(field.value, depth + 1);
            replaced = true;
          }
        }
        if (!replaced) d.emplace_back(std::move(key), from_json(field.value, depth + 1));
      }
      return Value::make_dict(std::move(d));
    }
    case simdjson::dom::element_type::INT64: {
      int64_t v = 0;
      return el.get_int64().get(v) ? Value::none() : Value::integer(v);
    }
    case simdjson::dom::element_type::UINT64: {  // past int64: Python keeps it exact, loom rounds
      uint64_t v = 0;
      return el.get_uint64().get(v) ? Value::none() : Value::floating(static_cast<double>(v));
    }
    case simdjson::dom::element_type::DOUBLE: {
      double v = 0;
      return el.get_double().get(v) ? Value::none() : Value::floating(v);
    }
    case simdjson::dom::element_type::STRING: {
      std::string_view v;
      return el.get_string().get(v) ? Value::none() : Value::string(std::string(v));
    }
    case simdjson::dom::element_type::BOOL: {
      bool v = false;
      return el.get_bool().get(v) ? Value::none() : Value::boolean(v);
    }
    default: return Value::none();
  }
}

Value parse_json_value(const std::string& text, const char* what) {
  simdjson::dom::parser parser;
  simdjson::padded_string padded(text);
  simdjson::dom::element root;
  const auto err = parser.parse(padded).get(root);
  if (err) {
    throw Error(ErrorCode::invalid_argument,
                std::string(what) + " is not valid JSON: " + simdjson::error_message(err));
  }
  return from_json(root, 0);
}

Value message_value(const ChatMessage& m) {
  tmpl::Dict d;
  d.emplace_back(Value::string("role"), Value::string(m.role));
  d.emplace_back(Value::string("content"), Value::string(m.content));
  return Value::make_dict(std::move(d));
}

}  // namespace

ChatTemplate::ChatTemplate(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;
ChatTemplate::~ChatTemplate() = default;

ChatTemplate ChatTemplate::compile(std::string_view source, std::string name) {
  auto impl = std::make_unique<Impl>();
  impl->source = std::string(source);
  impl->name = std::move(name);
  impl->program = tmpl::parse_template(impl->source, impl->name);
  check_names(impl->program.body, impl->name);
  return ChatTemplate(std::move(impl));
}

const std::string& ChatTemplate::source() const noexcept { return impl_->source; }
const std::string& ChatTemplate::name() const noexcept { return impl_->name; }

std::string ChatTemplate::render(const ChatTemplateInputs& inputs) const {
  tmpl::Interp in;
  in.program = &impl_->program;
  in.now = inputs.now ? *inputs.now : std::chrono::system_clock::now();
  tmpl::install_globals(in.root);

  Value messages;
  if (!inputs.messages_json.empty()) {
    messages = parse_json_value(inputs.messages_json, "the messages");
    if (!messages.is_sequence()) throw Error(ErrorCode::invalid_argument, "the messages JSON must be an array");
  } else {
    tmpl::List list;
    for (const ChatMessage& m : inputs.messages) list.push_back(message_value(m));
    messages = Value::make_list(std::move(list));
  }
  in.root.set("messages", messages);
  if (!inputs.tools_json.empty()) in.root.set("tools", parse_json_value(inputs.tools_json, "the tools"));
  in.root.set("add_generation_prompt", Value::boolean(inputs.add_generation_prompt));
  in.root.set("bos_token", Value::string(inputs.bos_token));
  in.root.set("eos_token", Value::string(inputs.eos_token));
  if (!inputs.extra_context_json.empty()) {
    const Value extra = parse_json_value(inputs.extra_context_json, "the extra context");
    if (!extra.is_mapping()) throw Error(ErrorCode::invalid_argument, "the extra context JSON must be an object");
    for (const auto& [k, v] : *extra.dict) in.root.set(k.str(), v);
  }

  std::string out;
  try {
    tmpl::Frame& root = in.root;
    tmpl::render_body(in, impl_->program.body, root, out);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(ErrorCode::template_error, impl_->name + ":" + std::to_string(in.pos.line) + ":" +
                                               std::to_string(in.pos.col) + ": " + e.what());
  }
  return out;
}

}  // namespace loom
