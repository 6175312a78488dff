#include "hierarchy/algorithm_selection.hpp"

#include <cctype>
#include <limits>
#include <optional>
#include <stdexcept>

#include <c10/util/StringUtil.h>

namespace dummy_collectives::hierarchy {
namespace {

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  size_t begin = 0;
  while (true) {
    const size_t end = text.find(separator, begin);
    parts.push_back(text.substr(begin, end == std::string::npos ? std::string::npos : end - begin));
    if (end == std::string::npos) {
      return parts;
    }
    begin = end + 1;
  }
}

std::string lower(std::string text) {
  for (char& c : text) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return text;
}

// "4096", "4k", "16M", "1g", "inf"; nullopt for anything else.
std::optional<size_t> parseSize(const std::string& text) {
  if (text == "inf") {
    return SIZE_MAX;
  }
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) {
    ++digits;
  }
  if (digits == 0 || digits > 18) {
    return std::nullopt;
  }
  const std::string suffix = text.substr(digits);
  int shift = 0;
  if (suffix == "k") {
    shift = 10;
  } else if (suffix == "m") {
    shift = 20;
  } else if (suffix == "g") {
    shift = 30;
  } else if (!suffix.empty()) {
    return std::nullopt;
  }
  const unsigned long long value = std::stoull(text.substr(0, digits));
  if (value > (std::numeric_limits<size_t>::max() >> (shift + 1))) {
    return std::nullopt;
  }
  return static_cast<size_t>(value) << shift;
}

} // namespace

std::string sizeText(size_t bytes) {
  if (bytes == SIZE_MAX) {
    return "inf";
  }
  for (const auto& [shift, suffix] : {std::pair{30, "G"}, {20, "M"}, {10, "K"}}) {
    if (bytes != 0 && bytes % (size_t{1} << shift) == 0) {
      return c10::str(bytes >> shift, suffix);
    }
  }
  return std::to_string(bytes);
}

namespace {

std::optional<Collective> collectiveNamed(const std::string& text) {
  for (const Collective c :
       {Collective::kAllreduce, Collective::kBroadcast, Collective::kAllgather}) {
    if (text == collectiveName(c)) {
      return c;
    }
  }
  return std::nullopt;
}

std::string namesOf(Collective collective) {
  std::string names;
  for (const AlgorithmName& a : algorithmNames()) {
    if (a.collective == collective) {
      names += c10::str(names.empty() ? "" : ", ", a.name);
    }
  }
  return names;
}

[[noreturn]] void refuse(const std::string& rule, const std::string& why) {
  throw std::invalid_argument(c10::str("in rule '", rule, "': ", why));
}

SelectionRule parseRule(const std::string& rule) {
  std::optional<Collective> collective;
  std::vector<ByteRange> ranges;
  std::string name;
  for (const std::string& raw : split(rule, ':')) {
    const std::string field = lower(raw);
    if (field.empty()) {
      refuse(rule, "an empty field");
    }
    if (field[0] == '@') {
      if (!name.empty()) {
        refuse(rule, "two algorithms");
      }
      name = field.substr(1);
      continue;
    }
    if (auto c = collectiveNamed(field)) {
      if (collective) {
        refuse(rule, "two collectives");
      }
      collective = c;
      continue;
    }
    if (std::isdigit(static_cast<unsigned char>(field[0])) == 0) {
      refuse(rule, c10::str("'", raw, "' is no collective (allreduce, broadcast or allgather), "
                            "size range (0-4k) or algorithm (@name)"));
    }
    for (const std::string& part : split(field, ',')) {
      const auto dash = part.find('-');
      const auto begin = parseSize(part.substr(0, dash));
      const auto end = dash == std::string::npos ? std::nullopt : parseSize(part.substr(dash + 1));
      if (!begin || !end || *begin == SIZE_MAX || *begin > *end) {
        refuse(rule, c10::str("'", part, "' is no size range: begin-end in bytes, both "
                              "included (4096, 4k, 16m, 1g; end 'inf'), begin not above end"));
      }
      ranges.push_back(ByteRange{*begin, *end});
    }
  }
  if (!collective) {
    refuse(rule, "no collective (allreduce, broadcast or allgather)");
  }
  if (name.empty()) {
    refuse(rule, c10::str("no algorithm (@name; ", collectiveName(*collective), "'s: ",
                          namesOf(*collective), ")"));
  }
  for (const AlgorithmName& a : algorithmNames()) {
    if (a.collective == *collective && name == a.name) {
      if (ranges.empty()) {
        ranges.push_back(ByteRange{});
      }
      return SelectionRule{*collective, std::move(ranges), a.algorithm, rule};
    }
  }
  refuse(rule, c10::str("'", name, "' is no ", collectiveName(*collective), " algorithm (",
                        collectiveName(*collective), "'s: ", namesOf(*collective), ")"));
}

} // namespace

const std::vector<AlgorithmName>& algorithmNames() {
  static const std::vector<AlgorithmName> names{
      {Algorithm::kAllreduceRecords, Collective::kAllreduce, "records"},
      {Algorithm::kAllreduceSegments, Collective::kAllreduce, "segments"},
      {Algorithm::kAllreducePieces, Collective::kAllreduce, "pieces"},
      {Algorithm::kAllreduceRing, Collective::kAllreduce, "ring"},
      {Algorithm::kAllreduceRails, Collective::kAllreduce, "rails"},
      {Algorithm::kAllreduceLeaders, Collective::kAllreduce, "leaders"},
      {Algorithm::kAllreduceDevice, Collective::kAllreduce, "device"},
      {Algorithm::kBroadcastRecord, Collective::kBroadcast, "record"},
      {Algorithm::kBroadcastChain, Collective::kBroadcast, "chain"},
      {Algorithm::kBroadcastEngine, Collective::kBroadcast, "engine"},
      {Algorithm::kBroadcastPipeline, Collective::kBroadcast, "pipeline"},
      {Algorithm::kBroadcastDevice, Collective::kBroadcast, "device"},
      {Algorithm::kAllgatherRecords, Collective::kAllgather, "records"},
      {Algorithm::kAllgatherSwap, Collective::kAllgather, "swap"},
      {Algorithm::kAllgatherRails, Collective::kAllgather, "rails"},
      {Algorithm::kAllgatherLeaders, Collective::kAllgather, "leaders"},
      {Algorithm::kAllgatherDevice, Collective::kAllgather, "device"},
  };
  return names;
}

const char* collectiveName(Collective collective) {
  switch (collective) {
    case Collective::kAllreduce:
      return "allreduce";
    case Collective::kBroadcast:
      return "broadcast";
    case Collective::kAllgather:
      return "allgather";
  }
  return "?";
}

std::string qualifiedName(Algorithm algorithm) {
  for (const AlgorithmName& a : algorithmNames()) {
    if (a.algorithm == algorithm) {
      return c10::str(collectiveName(a.collective), ":", a.name);
    }
  }
  return "?";
}

Collective collectiveOf(Algorithm algorithm) {
  for (const AlgorithmName& a : algorithmNames()) {
    if (a.algorithm == algorithm) {
      return a.collective;
    }
  }
  return Collective::kAllreduce;
}

std::string rangeText(const ByteRange& range) {
  auto round = [](size_t bytes) {
    return sizeText(bytes).find_first_of("KMG") != std::string::npos;
  };
  // An end just past a round size is open: (16K, ...; ..., 1M).
  const bool openBegin = range.begin > 0 && !round(range.begin) && round(range.begin - 1);
  const bool openEnd = range.end != SIZE_MAX && !round(range.end) && round(range.end + 1);
  return c10::str(openBegin ? "(" : "[", sizeText(openBegin ? range.begin - 1 : range.begin), ", ",
                  sizeText(openEnd ? range.end + 1 : range.end), openEnd ? ")" : "]");
}

std::vector<SelectionRule> parseAlgorithmSelection(const std::string& text) {
  std::vector<SelectionRule> rules;
  if (text.empty()) {
    return rules;
  }
  for (const std::string& rule : split(text, '#')) {
    rules.push_back(parseRule(rule));
  }
  return rules;
}

} // namespace dummy_collectives::hierarchy
