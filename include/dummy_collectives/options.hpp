#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <type_traits>

#include <c10/util/StringUtil.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/version.h>

#include <dummy_collectives/options_table.hpp>

namespace dummy_collectives {

// What the backend does with a collective.
enum class Mode {
  kReal,  // really communicate (the default)
  kZero,  // the PyTorch tutorial's behaviour: zero the outputs, move nothing
};

// The mode a name ("real", "zero") means; ValueError for any other (the table's choices).
Mode parseMode(const std::string& text);
std::string modeName(Mode mode);
// Validates a cross-host engine name (BackendOptions::interHost) against the table's choices.
std::string parseInterHost(const std::string& text);

// Raises ValueError where a value breaks the option's rule in options_table.def. Every value of
// Mode and bool is valid.
template <typename T>
void checkOption(const OptionSpec& spec, const T& value) {
  if constexpr (std::is_same_v<T, std::string>) {
    checkOptionChoice(spec, value);
  } else if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
    checkOptionNumber(spec, static_cast<double>(value), c10::str(value));
  }
}

// Each option's default as its environment variable would spell it ("1M", "real", "-1 (auto)"),
// in the table's order: for the README and Python's _options_table().
std::array<std::string, kOptionCount> optionDefaults();

// Backend options, the PyTorch way: a c10d::Backend::Options subclass that Python passes as
// `pg_options`. A default-constructed instance takes its values from the DUMMY_COLLECTIVES_*
// environment variables, read once here, so the environment and pg_options cannot disagree later.
// Its fields come from options_table.def, one entry per option.
struct BackendOptions : c10d::Backend::Options {
  BackendOptions();

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 15)
  // torch 2.15 copies a backend's options where it makes a child group from them (split, merge)
  // through this virtual: without it the copy would be sliced to c10d's fields, and torch would
  // then share this object instead of copying it.
  c10::intrusive_ptr<c10d::Backend::Options> clone() const override {
    return c10::make_intrusive<BackendOptions>(*this);
  }
#endif

  // The fields, their defaults and why: options_table.def (C++ code reads them as before,
  // options_->bufferBytes, ...).
#define DUMMY_COLLECTIVES_OPTION(field, type, name, env, fallback, rule, agreement, doc) \
  type field = fallback;
#include <dummy_collectives/options_table.def>
#undef DUMMY_COLLECTIVES_OPTION

  // Raises ValueError for a field some rule of the table refuses (fields are plain members, which
  // C++ code may set past the checks that the environment reading and Python's setters make).
  void validate() const;
};

} // namespace dummy_collectives
