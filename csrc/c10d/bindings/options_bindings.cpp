// Python binding of BackendOptions as dummy_collectives.Options (a subclass of torch's
// Backend.Options, so c10d takes it as pg_options), and of the options table itself. Every
// attribute and keyword comes from options_table.def; nothing here names an option.
#include <torch/python.h>

#include <string>
#include <type_traits>

#include <dummy_collectives/options.hpp>

#include "c10d/bindings/bindings.hpp"

namespace py = pybind11;

namespace dummy_collectives::bindings {
namespace {

using OptionsClass =
    py::class_<BackendOptions, c10d::Backend::Options, c10::intrusive_ptr<BackendOptions>>;

// An option's value as Python sees it: the C++ value itself, except Mode, which is its name.
// in() checks a value from Python against the option's rule before it is stored.
template <typename T>
struct PythonValue {
  using Type = T;
  static T in(const OptionSpec& spec, const T& value) {
    checkOption(spec, value);
    return value;
  }
  static T out(const T& value) {
    return value;
  }
};

template <>
struct PythonValue<Mode> {
  using Type = std::string;
  static Mode in(const OptionSpec&, const std::string& name) {
    return parseMode(name);
  }
  static std::string out(Mode mode) {
    return modeName(mode);
  }
};

// What Options(name=value) wants, for the TypeError of a value pybind cannot convert.
template <typename T>
const char* pythonTypeName() {
  if constexpr (std::is_same_v<T, bool>) {
    return "a bool";
  } else if constexpr (std::is_unsigned_v<T>) {
    return "an int >= 0";
  } else if constexpr (std::is_integral_v<T>) {
    return "an int";
  } else if constexpr (std::is_floating_point_v<T>) {
    return "a float";
  } else {
    return "a str";
  }
}

// The attribute Options.<name>: reads the field, and checks what is assigned to it.
template <OptionId kId, typename T, T BackendOptions::*kField>
void bindAttribute(OptionsClass& cls) {
  using Value = PythonValue<T>;
  const OptionSpec& spec = optionSpec(kId);
  cls.def_property(
      spec.name,
      [](const BackendOptions& options) { return Value::out(options.*kField); },
      [](BackendOptions& options, const typename Value::Type& value) {
        options.*kField = Value::in(optionSpec(kId), value);
      },
      spec.doc);
}

// The keyword Options(<name>=value); None keeps the default (the environment's, else the table's).
template <OptionId kId, typename T, T BackendOptions::*kField>
void setKeyword(BackendOptions& options, py::handle value) {
  using Value = PythonValue<T>;
  const OptionSpec& spec = optionSpec(kId);
  typename Value::Type converted{};
  try {
    converted = value.cast<typename Value::Type>();
  } catch (const py::cast_error&) {
    throw py::type_error(c10::str(
        "dummy_collectives.Options(): ",
        spec.name,
        " must be ",
        pythonTypeName<typename Value::Type>(),
        ", got ",
        py::repr(value).cast<std::string>()));
  }
  options.*kField = Value::in(spec, converted);
}

struct OptionBinding {
  OptionId id;
  void (*bindAttribute)(OptionsClass&);
  void (*setKeyword)(BackendOptions&, py::handle);
};

constexpr OptionBinding kBindings[] = {
#define DUMMY_COLLECTIVES_OPTION(field, type, ...)                         \
  {OptionId::field,                                                        \
   &bindAttribute<OptionId::field, type, &BackendOptions::field>,          \
   &setKeyword<OptionId::field, type, &BackendOptions::field>},
#include <dummy_collectives/options_table.def>
#undef DUMMY_COLLECTIVES_OPTION
};

c10::intrusive_ptr<BackendOptions> makeOptions(const py::kwargs& keywords) {
  // The environment first (a default-constructed BackendOptions reads it), then the keywords.
  auto options = c10::make_intrusive<BackendOptions>();
  for (const auto& [key, value] : keywords) {
    const std::string name = py::cast<std::string>(key);
    const OptionBinding* found = nullptr;
    for (const OptionBinding& binding : kBindings) {
      if (name == optionSpec(binding.id).name) {
        found = &binding;
        break;
      }
    }
    if (found == nullptr) {
      throw py::type_error(c10::str(
          "dummy_collectives.Options() got an unexpected keyword argument '", name, "'"));
    }
    if (!value.is_none()) {
      found->setKeyword(*options, value);
    }
  }
  return options;
}

const char* agreementName(OptionAgreement agreement) {
  switch (agreement) {
    case kPerHost:
      return "host";
    case kPerGroup:
      return "group";
    case kPerRank:
      break;
  }
  return "rank";
}

const char* ruleKindName(OptionRule::Kind kind) {
  switch (kind) {
    case OptionRule::Kind::kAtLeast:
      return "at_least";
    case OptionRule::Kind::kBetween:
      return "between";
    case OptionRule::Kind::kAutoOrAtLeast:
      return "auto_or_at_least";
    case OptionRule::Kind::kOneOf:
      return "one_of";
    case OptionRule::Kind::kAlgorithmSelection:
      return "algorithm_selection";
    case OptionRule::Kind::kAny:
      break;
  }
  return "any";
}

// options_table.def as Python data, in its order: for the README's table
// (dummy_collectives.options_doc), the settings ranks must agree on (_registration) and tests.
py::list optionsTable() {
  const auto defaults = optionDefaults();
  py::list rows;
  for (size_t i = 0; i < kOptionCount; ++i) {
    const OptionSpec& spec = kOptionSpecs[i];
    py::list choices;
    for (const char* choice : spec.rule.choices) {
      if (choice != nullptr) {
        choices.append(choice);
      }
    }
    py::dict row;
    row["name"] = spec.name;
    row["env"] = spec.env;
    row["field"] = spec.field;
    row["type"] = spec.type;
    row["default"] = defaults[i];
    row["rule"] = ruleKindName(spec.rule.kind);
    row["low"] = spec.rule.low;
    row["high"] = spec.rule.high;
    row["choices"] = choices;
    row["accepts"] = ruleText(spec.rule);
    row["agreement"] = agreementName(spec.agreement);
    row["doc"] = spec.doc;
    rows.append(row);
  }
  return rows;
}

// Options' constructor takes every option as a keyword; pybind's signature then shows only
// **kwargs, so its docstring lists them.
std::string constructorDoc() {
  std::string doc = "Options(*";
  for (const OptionSpec& spec : kOptionSpecs) {
    doc += c10::str(", ", spec.name, "=None");
  }
  return doc +
      ")\n\nEach keyword sets one option (its attribute's docstring says what it does); None or "
      "absent keeps the default, the DUMMY_COLLECTIVES_* environment variable where set. A "
      "value an option's rule refuses raises ValueError.";
}

} // namespace

void bindOptions(py::module_& m) {
  OptionsClass cls(
      m, "Options", "Options of a dummy process group; defaults come from DUMMY_COLLECTIVES_*.");
  static const std::string initDoc = constructorDoc();
  cls.def(py::init(&makeOptions), initDoc.c_str());
  for (const OptionBinding& binding : kBindings) {
    binding.bindAttribute(cls);
  }
  cls.def(
      "validate",
      &BackendOptions::validate,
      "Raises ValueError where an option's value breaks its rule (values set through Options() "
      "or its attributes were checked already).");

  m.def(
      "_options_table",
      &optionsTable,
      "The backend's options (options_table.def) in order, one dict each: name, env, field, "
      "type, default, rule, low, high, choices, accepts, agreement, doc.");
}

} // namespace dummy_collectives::bindings
