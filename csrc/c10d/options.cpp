#include <dummy_collectives/options.hpp>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>

#include <c10/util/Exception.h>

#include "hierarchy/algorithm_selection.hpp"

namespace dummy_collectives {
namespace {

const char* env(const char* name) {
  const char* value = std::getenv(name);
  return (value != nullptr && *value != '\0') ? value : nullptr;
}

// A bound as people write it: 4096, not 4096.000000 or 4.096e+03.
std::string number(double value) {
  if (std::isfinite(value) && value == std::floor(value) && std::fabs(value) < 1e18) {
    return std::to_string(static_cast<long long>(value));
  }
  std::ostringstream out;
  out << value;
  return out.str();
}

// The one message every refused value gets, whichever way it came: the option's Python name,
// what it must be, its environment variable, and the value. `kind` names the type where the
// environment's text did not parse as one ("an integer").
[[noreturn]] void refuse(
    const OptionSpec& spec, const std::string& shown, bool fromEnvironment, const char* kind) {
  const std::string rule = ruleText(spec.rule);
  std::string wanted = kind != nullptr ? kind : "";
  if (!rule.empty()) {
    wanted += wanted.empty() ? rule : " " + rule;
  }
  C10_THROW_ERROR(
      ValueError,
      c10::str(
          "dummy_collectives: ",
          spec.name,
          " must be ",
          wanted,
          " (",
          spec.env,
          "), got ",
          shown,
          fromEnvironment ? " from the environment" : ""));
}

bool accepts(const OptionRule& rule, double value) {
  switch (rule.kind) {
    case OptionRule::Kind::kAtLeast:
      return value >= rule.low;
    case OptionRule::Kind::kBetween:
      return value >= rule.low && value <= rule.high;
    case OptionRule::Kind::kAutoOrAtLeast:
      return value == -1 || value >= rule.low;
    case OptionRule::Kind::kAny:
    case OptionRule::Kind::kOneOf:
    case OptionRule::Kind::kAlgorithmSelection:
      break;
  }
  return !std::isnan(value);
}

// Environment text, whole, as an integer with an optional binary suffix for sizes (4M, 256K).
bool parseInteger(const char* text, long long& value) {
  char* end = nullptr;
  value = std::strtoll(text, &end, 10);
  if (end == text) {
    return false;
  }
  int shift = 0;
  if (*end == 'K' || *end == 'k') {
    shift = 10, ++end;
  } else if (*end == 'M' || *end == 'm') {
    shift = 20, ++end;
  }
  // strtoll saturates what overflows; a suffix must not overflow either.
  const long long most = std::numeric_limits<long long>::max() >> (shift + 1);
  if (*end != '\0' || value > most || value < -most) {
    return false;
  }
  value *= 1LL << shift;
  return true;
}

bool parseNumber(const char* text, double& value) {
  char* end = nullptr;
  value = std::strtod(text, &end);
  return end != text && *end == '\0';
}

Mode modeFrom(const std::string& text, bool fromEnvironment) {
  checkOptionChoice(optionSpec(OptionId::mode), text, fromEnvironment);
  return text == "zero" ? Mode::kZero : Mode::kReal;
}

// Sets `field` from the option's environment variable, where it is set and not empty; raises
// for text that does not parse as the field's type or breaks the option's rule.
template <typename T>
void readEnvironment(const OptionSpec& spec, T& field) {
  const char* text = env(spec.env);
  if (text == nullptr) {
    return;
  }
  const std::string quoted = c10::str("'", text, "'");
  if constexpr (std::is_same_v<T, Mode>) {
    field = modeFrom(text, true);
  } else if constexpr (std::is_same_v<T, std::string>) {
    checkOptionChoice(spec, text, true);
    field = text;
  } else if constexpr (std::is_same_v<T, bool>) {
    // Any integer >= 0, as before: 0 is off, anything else on.
    long long value = 0;
    if (!parseInteger(text, value) || value < 0) {
      refuse(spec, quoted, true, "0 (off) or 1 (on)");
    }
    field = value != 0;
  } else if constexpr (std::is_floating_point_v<T>) {
    double value = 0;
    if (!parseNumber(text, value)) {
      refuse(spec, quoted, true, "a number");
    }
    checkOptionNumber(spec, value, quoted, true);
    field = static_cast<T>(value);
  } else {
    static_assert(std::is_integral_v<T>, "options_table.def: unsupported option type");
    long long value = 0;
    if (!parseInteger(text, value)) {
      refuse(spec, quoted, true, "an integer");
    }
    // Before the cast: a negative size must not wrap into a huge one.
    checkOptionNumber(spec, static_cast<double>(value), quoted, true);
    field = static_cast<T>(value);
  }
}

template <typename T>
std::string defaultText(const OptionSpec& spec, const T& value) {
  if constexpr (std::is_same_v<T, Mode>) {
    return modeName(value);
  } else if constexpr (std::is_same_v<T, std::string>) {
    return value;
  } else if constexpr (std::is_same_v<T, bool>) {
    return value ? "1" : "0";
  } else if constexpr (std::is_floating_point_v<T>) {
    return number(value);
  } else {
    if constexpr (std::is_signed_v<T>) {
      if (spec.rule.kind == OptionRule::Kind::kAutoOrAtLeast && value == -1) {
        return "-1 (auto)";
      }
    }
    // Sizes as the environment takes them, with a binary suffix.
    if constexpr (std::is_unsigned_v<T>) {
      if (value != 0 && value % (T{1} << 20) == 0) {
        return c10::str(value >> 20, "M");
      }
      if (value != 0 && value % (T{1} << 10) == 0) {
        return c10::str(value >> 10, "K");
      }
    }
    return c10::str(value);
  }
}

} // namespace

std::string ruleText(const OptionRule& rule) {
  switch (rule.kind) {
    case OptionRule::Kind::kAny:
      return "";
    case OptionRule::Kind::kAtLeast:
      return ">= " + number(rule.low);
    case OptionRule::Kind::kBetween:
      return "between " + number(rule.low) + " and " + number(rule.high);
    case OptionRule::Kind::kAutoOrAtLeast:
      return "-1 or >= " + number(rule.low);
    case OptionRule::Kind::kOneOf: {
      std::string text;
      size_t count = 0;
      while (count < rule.choices.size() && rule.choices[count] != nullptr) {
        ++count;
      }
      for (size_t i = 0; i < count; ++i) {
        text += i == 0 ? "" : (i + 1 == count ? " or " : ", ");
        text += c10::str("'", rule.choices[i], "'");
      }
      return text;
    }
    case OptionRule::Kind::kAlgorithmSelection:
      return "rules such as 'allreduce:0-64k:@records#broadcast:@engine'";
  }
  return "";
}

void checkOptionNumber(
    const OptionSpec& spec, double value, const std::string& shown, bool fromEnvironment) {
  if (!accepts(spec.rule, value)) {
    refuse(spec, shown, fromEnvironment, nullptr);
  }
}

void checkOptionChoice(const OptionSpec& spec, const std::string& text, bool fromEnvironment) {
  if (spec.rule.kind == OptionRule::Kind::kAlgorithmSelection) {
    try {
      hierarchy::parseAlgorithmSelection(text);
    } catch (const std::invalid_argument& e) {
      refuse(spec, c10::str("'", text, "' (", e.what(), ")"), fromEnvironment, nullptr);
    }
    return;
  }
  if (spec.rule.kind != OptionRule::Kind::kOneOf) {
    return;
  }
  for (const char* choice : spec.rule.choices) {
    if (choice != nullptr && text == choice) {
      return;
    }
  }
  refuse(spec, c10::str("'", text, "'"), fromEnvironment, nullptr);
}

Mode parseMode(const std::string& text) {
  return modeFrom(text, false);
}

std::string parseInterHost(const std::string& text) {
  checkOptionChoice(optionSpec(OptionId::interHost), text);
  return text;
}

std::string modeName(Mode mode) {
  return mode == Mode::kZero ? "zero" : "real";
}

std::array<std::string, kOptionCount> optionDefaults() {
  return {
#define DUMMY_COLLECTIVES_OPTION(field, type, name, env, fallback, rule, agreement, doc) \
  defaultText(optionSpec(OptionId::field), static_cast<type>(fallback)),
#include <dummy_collectives/options_table.def>
#undef DUMMY_COLLECTIVES_OPTION
  };
}

BackendOptions::BackendOptions() : c10d::Backend::Options("dummy") {
#define DUMMY_COLLECTIVES_OPTION(field, ...) readEnvironment(optionSpec(OptionId::field), field);
#include <dummy_collectives/options_table.def>
#undef DUMMY_COLLECTIVES_OPTION
}

void BackendOptions::validate() const {
#define DUMMY_COLLECTIVES_OPTION(field, ...) checkOption(optionSpec(OptionId::field), field);
#include <dummy_collectives/options_table.def>
#undef DUMMY_COLLECTIVES_OPTION
}

} // namespace dummy_collectives
