// The options table's rules (options_table.def) as the environment and validate() apply them:
// each refusal a ValueError naming the option, its variable and the value.

#include <cstdlib>
#include <functional>
#include <string>

#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <dummy_collectives/options.hpp>

namespace dummy_collectives {
namespace {

// Sets (or, given null, unsets) an environment variable for one test and restores it after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) {
      old_ = old;
      hadOld_ = true;
    }
    value != nullptr ? ::setenv(name, value, 1) : ::unsetenv(name);
  }
  ~ScopedEnv() {
    hadOld_ ? ::setenv(name_, old_.c_str(), 1) : ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::string old_;
  bool hadOld_ = false;
};

std::string refusal(const std::function<void()>& make) {
  try {
    make();
  } catch (const c10::ValueError& e) {
    return e.what_without_backtrace();
  }
  return "";
}

TEST(Options, EveryDefaultKeepsItsOwnRule) {
  const BackendOptions options;
  EXPECT_NO_THROW(options.validate());
  for (size_t i = 0; i < kOptionCount; ++i) {
    EXPECT_EQ(std::string(kOptionSpecs[i].env).rfind("DUMMY_COLLECTIVES_", 0), 0u)
        << kOptionSpecs[i].env;
  }
}

TEST(Options, SizesTakeBinarySuffixesFromTheEnvironment) {
  ScopedEnv env("DUMMY_COLLECTIVES_BUFFER_BYTES", "2M");
  EXPECT_EQ(BackendOptions().bufferBytes, size_t{2} << 20);
}

TEST(Options, AnEmptyVariableIsUnset) {
  size_t unset = 0;
  {
    ScopedEnv env("DUMMY_COLLECTIVES_BUFFER_BYTES", nullptr);
    unset = BackendOptions().bufferBytes;
  }
  ScopedEnv env("DUMMY_COLLECTIVES_BUFFER_BYTES", "");
  EXPECT_EQ(BackendOptions().bufferBytes, unset);
}

TEST(Options, TextThatIsNoNumberIsRefusedNamingTheVariable) {
  ScopedEnv env("DUMMY_COLLECTIVES_BUFFER_BYTES", "lots");
  const std::string message = refusal([] { BackendOptions(); });
  EXPECT_NE(message.find("buffer_bytes must be an integer"), std::string::npos) << message;
  EXPECT_NE(message.find("DUMMY_COLLECTIVES_BUFFER_BYTES"), std::string::npos) << message;
  EXPECT_NE(message.find("'lots' from the environment"), std::string::npos) << message;
}

TEST(Options, ANegativeSizeIsRefusedNotWrapped) {
  ScopedEnv env("DUMMY_COLLECTIVES_BUFFER_BYTES", "-4096");
  EXPECT_NE(refusal([] { BackendOptions(); }).find("'-4096'"), std::string::npos);
}

TEST(Options, AutoOrAtLeastTakesMinusOneAndRefusesBelow) {
  {
    ScopedEnv env("DUMMY_COLLECTIVES_SPIN_US", "-1");
    EXPECT_EQ(BackendOptions().spinMicros, -1);
  }
  ScopedEnv env("DUMMY_COLLECTIVES_SPIN_US", "-2");
  const std::string message = refusal([] { BackendOptions(); });
  EXPECT_NE(message.find("spin_us must be"), std::string::npos) << message;
  EXPECT_NE(message.find("-1 or >= 0"), std::string::npos) << message;
}

TEST(Options, ChoicesAreListedWhenRefused) {
  ScopedEnv env("DUMMY_COLLECTIVES_INTER_HOST", "carrier-pigeon");
  const std::string message = refusal([] { BackendOptions(); });
  for (const char* choice : {"'auto'", "'ucx'", "'gloo'"}) {
    EXPECT_NE(message.find(choice), std::string::npos) << message;
  }
  EXPECT_NE(refusal([] { parseInterHost("tcp"); }), "");
  EXPECT_NE(refusal([] { parseInterHost("sockets"); }), ""); // the engine that UCX replaced
  EXPECT_EQ(parseInterHost("ucx"), "ucx");
}

TEST(Options, ModeNamesRoundTrip) {
  for (const Mode mode : {Mode::kReal, Mode::kZero}) {
    EXPECT_EQ(parseMode(modeName(mode)), mode);
  }
  EXPECT_NE(refusal([] { parseMode("fast"); }), "");
}

TEST(Options, ValidateCatchesAFieldSetPastTheChecks) {
  BackendOptions options;
  options.interHost = "bogus";
  const std::string message = refusal([&] { options.validate(); });
  EXPECT_NE(message.find("inter_host"), std::string::npos) << message;
}

TEST(Options, AnAlgorithmSelectionIsCheckedWhereItIsRead) {
  ScopedEnv env("DUMMY_COLLECTIVES_ALGO", "allreduce:@no-such-algorithm");
  const std::string message = refusal([] { BackendOptions(); });
  EXPECT_NE(message.find("no-such-algorithm"), std::string::npos) << message;
  EXPECT_NE(message.find("DUMMY_COLLECTIVES_ALGO"), std::string::npos) << message;
}

} // namespace
} // namespace dummy_collectives
