#pragma once

// What options_table.def declares about each option besides its field: its names, its rule and
// who must agree on it, as constant data that the environment reading, the validation, the Python
// bindings and the README's generator all read.

#include <array>
#include <cstddef>
#include <string>

namespace dummy_collectives {

// What every value of an option must satisfy (options_table.def's `rule`).
struct OptionRule {
  enum class Kind {
    kAny,           // every value of the type
    kAtLeast,       // value >= low
    kBetween,       // low <= value <= high
    kAutoOrAtLeast, // -1 (the backend chooses) or value >= low
    kOneOf,         // text, one of choices
    kAlgorithmSelection, // text, cross-host algorithms chosen in UCC's syntax (may be empty)
  };
  Kind kind = Kind::kAny;
  // Doubles hold every bound the table uses exactly (integers below 2^53).
  double low = 0;
  double high = 0;
  // kOneOf's names, unused ones null.
  std::array<const char*, 5> choices{};
};

constexpr OptionRule anyValue() {
  return OptionRule{};
}
constexpr OptionRule atLeast(double low) {
  return OptionRule{OptionRule::Kind::kAtLeast, low, 0, {}};
}
constexpr OptionRule between(double low, double high) {
  return OptionRule{OptionRule::Kind::kBetween, low, high, {}};
}
constexpr OptionRule autoOrAtLeast(double low) {
  return OptionRule{OptionRule::Kind::kAutoOrAtLeast, low, 0, {}};
}
constexpr OptionRule oneOf(
    const char* a,
    const char* b,
    const char* c = nullptr,
    const char* d = nullptr,
    const char* e = nullptr) {
  return OptionRule{OptionRule::Kind::kOneOf, 0, 0, {a, b, c, d, e}};
}

constexpr OptionRule algorithmSelection() {
  return OptionRule{OptionRule::Kind::kAlgorithmSelection, 0, 0, {}};
}
// Which ranks must hold the same value (options_table.def's `agreement`).
enum OptionAgreement { kPerRank, kPerHost, kPerGroup };

struct OptionSpec {
  const char* field; // BackendOptions' member
  const char* type;  // its C++ type, as written in the table
  const char* name;  // Python's attribute and keyword
  const char* env;   // the environment variable
  OptionRule rule;
  OptionAgreement agreement;
  const char* doc;
};

// One enumerator per option, named after its field, in the table's order.
enum class OptionId : size_t {
#define DUMMY_COLLECTIVES_OPTION(field, ...) field,
#include <dummy_collectives/options_table.def>
#undef DUMMY_COLLECTIVES_OPTION
};

inline constexpr OptionSpec kOptionSpecs[] = {
#define DUMMY_COLLECTIVES_OPTION(field, type, name, env, fallback, rule, agreement, doc) \
  {#field, #type, name, env, rule, agreement, doc},
#include <dummy_collectives/options_table.def>
#undef DUMMY_COLLECTIVES_OPTION
};

inline constexpr size_t kOptionCount = sizeof(kOptionSpecs) / sizeof(kOptionSpecs[0]);

constexpr const OptionSpec& optionSpec(OptionId id) {
  return kOptionSpecs[static_cast<size_t>(id)];
}

// The rule as the README and error messages put it after "must be": ">= 4096",
// "between 1024 and 1048576", "-1 or >= 1", "'real' or 'zero'"; "" for kAny.
std::string ruleText(const OptionRule& rule);

// Raise c10::ValueError (Python's ValueError) for a value the option's rule refuses, naming the
// option and its environment variable. `shown` is the value as the message quotes it;
// fromEnvironment says the value came from the variable.
void checkOptionNumber(
    const OptionSpec& spec, double value, const std::string& shown, bool fromEnvironment = false);
void checkOptionChoice(
    const OptionSpec& spec, const std::string& text, bool fromEnvironment = false);

} // namespace dummy_collectives
