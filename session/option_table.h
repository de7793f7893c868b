// cb-train's options as one table: each option's name (its flag without the dashes), kind, help
// and how its text form sets SessionOptions. Every front end reads options through it: cb-train
// makes its command line from it, the C++ API's crossbow::Options and the Python module's keyword
// arguments set them by name. So a value means the same, has the same default and fails with the
// same message wherever it is given; SessionOptions::validate then checks the whole.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "session/options.h"

namespace cb {

struct OptionSpec {
  enum class Kind {
    Value,  // one value: --lr 0.1
    Flag,   // on or off: --nesterov ("true"/"false", "1"/"0", "yes"/"no", "on"/"off")
    List,   // comma-separated values: --mean 0.5,0.5,0.5 (a later setting replaces the list)
    Repeat  // repeatable, each adds one: --freeze 'conv*' --freeze 'bn*'
  };
  std::string name;   // "batch-size"
  std::string alias;  // a one-letter short form ("b"), or ""
  Kind kind = Kind::Value;
  std::string help;
  std::string type = "TEXT";  // what --help shows the value as: INT, FLOAT or TEXT
  bool show_default = true;   // --help shows the default value
  // Sets the option from its text form (for List: the whole comma-separated text); throws
  // cb::Error naming the flag and the value at fault.
  std::function<void(SessionOptions&, const std::string&)> set;
  // The option's value in text form ("" when unset).
  std::function<std::string(const SessionOptions&)> get;
};

// Every option of a training session but the model and --data, in --help order.
const std::vector<OptionSpec>& session_options();

// The option `name` ("batch-size", also "batch_size", "--batch-size" or its alias). Throws
// cb::Error for an unknown name, naming the closest known one.
const OptionSpec& find_session_option(std::string_view name);

// Sets option `name` from its text form (see OptionSpec::set).
void set_session_option(SessionOptions& o, std::string_view name, const std::string& value);

// A flag's text form: true for "true", "1", "yes", "on"; false for "false", "0", "no", "off".
bool parse_flag(const std::string& option, const std::string& value);

}  // namespace cb
