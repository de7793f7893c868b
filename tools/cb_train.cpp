// cb-train MODEL.onnx --data DIR [options]: trains an ONNX model on a data set with SMA (many
// learners per device) through the public API (include/crossbow/crossbow.h); this file only reads
// the command line, whose options come from the API's table. Exit codes: 0 trained; 1 bad input
// (the model, the data) or a diverged run; 2 usage (a flag's value); 128 + N stopped by signal N
// (SIGINT, SIGTERM) after writing a checkpoint and the model.
#include <crossbow/crossbow.h>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <map>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  std::string command_line;
  for (int i = 0; i < argc; ++i) command_line += (i ? " " : "") + std::string(argv[i]);
  CLI::App app{
      "cb-train: train an ONNX model with SMA (many learners per device) on IDX, CIFAR, image "
      "folder, .cbpack or NumPy data"};
  std::string model, data;
  app.add_option("model", model, "ONNX model file (exported in training mode)")->required();
  app.add_option("--data", data,
                 "data folder or file, format detected from its files: MNIST-style IDX "
                 "(train-/t10k- images and labels, .gz or not), CIFAR-10/100 binaries "
                 "(data_batch_N.bin + test_batch.bin, or train.bin + test.bin), an image folder "
                 "(train/<class>/ and val/<class>/, or <class>/, of .jpg/.jpeg/.png), a "
                 ".cbpack file (cb-pack), or NumPy arrays (train.npz + val.npz, or one .npz)")
      ->required();
  // Every other option from the library's table, kept as text and handed over by name.
  const std::vector<crossbow::Options::Info> infos = crossbow::Options::list();
  std::map<std::string, std::string> values;
  std::map<std::string, std::vector<std::string>> lists;
  std::map<std::string, bool> flags;
  std::vector<std::pair<std::string, CLI::Option*>> given;
  using Kind = crossbow::Options::Info::Kind;
  std::map<std::string, Kind> kinds;
  for (const crossbow::Options::Info& i : infos) {
    kinds[i.name] = i.kind;
    const std::string names =
        (i.alias.empty() ? std::string() : "-" + i.alias + ",") + "--" + i.name;
    CLI::Option* opt = nullptr;
    switch (i.kind) {
      case Kind::Flag:
        opt = app.add_flag(names, flags[i.name], i.help);
        break;
      case Kind::List:
        opt = app.add_option(names, lists[i.name], i.help)->delimiter(',');
        break;
      case Kind::Repeat:
        opt = app.add_option(names, lists[i.name], i.help);
        break;
      case Kind::Value:
        opt = app.add_option(names, values[i.name], i.help)->type_name(i.type);
        if (!i.default_value.empty()) opt->default_str(i.default_value);
        break;
    }
    given.emplace_back(i.name, opt);
  }
  // The options as Markdown, for docs/cb-train.md (tests/check_docs.py checks the page against it).
  app.add_flag_callback(
      "--help-markdown",
      [&] {
        std::string md =
            fmt::format("- **`MODEL.onnx`**: {}\n", app.get_option("model")->get_description());
        md += fmt::format("- **`--data PATH`**: {}\n", app.get_option("--data")->get_description());
        for (const crossbow::Options::Info& i : infos) {
          std::string names = "`--" + i.name + "`";
          if (!i.alias.empty()) names += ", `-" + i.alias + "`";
          std::string value;
          switch (i.kind) {
            case Kind::Flag:
              value = "on or off";
              break;
            case Kind::List:
              value = "comma-separated " + i.type;
              break;
            case Kind::Repeat:
              value = i.type + ", repeatable";
              break;
            case Kind::Value:
              value = i.type;
              break;
          }
          if (!i.default_value.empty()) value += ", default `" + i.default_value + "`";
          md += fmt::format("- **{}** ({}): {}\n", names, value, i.help);
        }
        fmt::print("{}", md);
        throw CLI::Success();
      },
      "print every option as Markdown (docs/cb-train.md) and exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  int code = 2;  // usage: every flag's value is checked before anything is read
  try {
    crossbow::Options o;
    o.label("cb-train", command_line);
    for (const auto& [name, opt] : given) {
      if (opt->count() == 0) continue;
      if (flags.count(name))
        o.set(name, flags[name] ? "true" : "false");
      else if (values.count(name))
        o.set(name, values[name]);
      else if (!lists[name].empty()) {
        const auto& v = lists[name];
        if (kinds[name] == Kind::Repeat)
          for (const std::string& x : v) o.set(name, x);
        else
          o.set(name, fmt::format("{}", fmt::join(v, ",")));
      }
    }
    crossbow::Trainer trainer(model, o);
    code = 1;
    crossbow::FitCallbacks cbs;
    cbs.handle_signals = true;
    const crossbow::History h = trainer.fit(crossbow::Data::path(data), {}, cbs);
    return h.signal ? 128 + h.signal : 0;
  } catch (const crossbow::Error& e) {
    fmt::print(stderr, "cb-train: error: {}\n", e.what());
    return e.kind() == crossbow::Error::Kind::Usage ? 2 : code;
  }
}
