// The Python module `crossbow` (pybind11) over the public C++ API (include/crossbow/crossbow.h):
//
//   import crossbow as cb
//   t = cb.Trainer("model.onnx", batch_size=16, lr=0.01, learners="auto", seed=0)
//   history = t.fit((x, y), epochs=2, validation=(xv, yv), callbacks=[print])
//   acc = t.evaluate((xv, yv))["accuracy"]
//   out = t.predict(xv)
//   t.save("trained.onnx")
//
// Data: a tuple (x, y) (x feeds a one-input model, y the target), a dict of arrays by name, a
// --data path (str or os.PathLike), or an iterable of such tuples or dicts, one per batch
// (iterated again for each epoch; fetched ahead on a thread). NumPy arrays are read in place when
// C-contiguous and of a dtype the model can take (float32/64/16, int8/32/64, uint8, bool), else
// converted once (int16/uint16 to int32, uint32/uint64 to int64). The GIL is released while the
// learners run; Ctrl-C stops after the current step (KeyboardInterrupt is raised when fit
// returns, the trainer stays usable, a checkpoint is written when checkpoint_dir is set).
// Errors: crossbow's usage and input errors are ValueError (option names spelt as keywords),
// training failures RuntimeError, wrong argument types TypeError naming the argument.
#include <crossbow/crossbow.h>
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <regex>
#include <string>

namespace py = pybind11;
using crossbow::Array;
using crossbow::Arrays;
using crossbow::Data;
using crossbow::DType;

namespace {

// An option's name as a Python keyword: "batch-size" -> "batch_size".
std::string keyword_of(std::string name) {
  for (char& c : name)
    if (c == '-') c = '_';
  return name;
}

// "--batch-size" in a message becomes "batch_size", the keyword a Python caller wrote.
std::string pythonic(const std::string& msg) {
  static const std::regex flag("--([a-z][a-z0-9]*(?:-[a-z0-9]+)*)");
  std::string out;
  auto it = std::sregex_iterator(msg.begin(), msg.end(), flag);
  size_t at = 0;
  for (; it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    out += msg.substr(at, static_cast<size_t>(m.position(0)) - at);
    out += keyword_of(m[1].str());
    at = static_cast<size_t>(m.position(0) + m.length(0));
  }
  return out + msg.substr(at);
}

[[noreturn]] void raise_error(const crossbow::Error& e) {
  const std::string msg = pythonic(e.what());
  if (e.kind() == crossbow::Error::Kind::Run) throw std::runtime_error(msg);
  throw py::value_error(msg);
}

// A Python object held from C++: released with the GIL taken, whichever thread drops it.
std::shared_ptr<const void> hold(py::object o) {
  auto* p = new py::object(std::move(o));
  return std::shared_ptr<const void>(p, [](const void* q) {
    auto* obj = static_cast<py::object*>(const_cast<void*>(q));
    if (Py_IsInitialized()) {
      py::gil_scoped_acquire g;
      delete obj;
    } else {
      obj->release();  // the interpreter is gone: nothing left to release to
      delete obj;
    }
  });
}

// A NumPy array (or anything np.asarray takes) as an Array, in place where it can be.
Array to_array(const py::handle& obj, const std::string& what) {
  py::module_ np = py::module_::import("numpy");
  py::object a;
  try {
    a = np.attr("asarray")(obj);
  } catch (py::error_already_set&) {
    throw py::type_error(what + ": expected a NumPy array of numbers, got " +
                         std::string(py::str(py::type::handle_of(obj).attr("__name__"))));
  }
  const std::string kind = py::str(a.attr("dtype").attr("kind"));
  if (kind == "O" || kind == "U" || kind == "S" || kind == "V")
    throw py::type_error(what + ": expected a NumPy array of numbers, got " +
                         std::string(py::str(py::type::handle_of(obj).attr("__name__"))));
  const int size = a.attr("dtype").attr("itemsize").cast<int>();
  DType t{};
  std::string cast;  // the dtype to convert to, when the array's is not taken as it is
  if (kind == "f" && size == 4)
    t = DType::F32;
  else if (kind == "f" && size == 8)
    t = DType::F64;
  else if (kind == "f" && size == 2)
    t = DType::F16;
  else if (kind == "i" && size == 1)
    t = DType::I8;
  else if (kind == "i" && size == 4)
    t = DType::I32;
  else if (kind == "i" && size == 8)
    t = DType::I64;
  else if (kind == "u" && size == 1)
    t = DType::U8;
  else if (kind == "b")
    t = DType::Bool;
  else if ((kind == "i" || kind == "u") && size == 2)
    t = DType::I32, cast = "int32";
  else if (kind == "u" && (size == 4 || size == 8))
    t = DType::I64, cast = "int64";
  else
    throw py::type_error(what + ": arrays of " + std::string(py::str(a.attr("dtype"))) +
                         " cannot feed a model (use float32, float64, float16, int8, int32, "
                         "int64, uint8 or bool)");
  if (!cast.empty()) a = a.attr("astype")(cast);
  // Native byte order and C order, copied once where the array has neither.
  if (!a.attr("dtype").attr("isnative").cast<bool>())
    a = a.attr("astype")(a.attr("dtype").attr("newbyteorder")("="));
  a = np.attr("ascontiguousarray")(a);
  std::vector<int64_t> shape;
  for (py::handle d : a.attr("shape")) shape.push_back(d.cast<int64_t>());
  auto info = py::array(a).request();
  return Array::view(t, std::move(shape), info.ptr, hold(a));
}

bool is_path(const py::handle& o) {
  return py::isinstance<py::str>(o) ||
         py::isinstance(o, py::module_::import("os").attr("PathLike"));
}

// One batch (or a whole data set): a tuple (x, y) or (x,), a dict, or a lone array (x).
Arrays to_arrays(const py::handle& o, const std::string& target, const std::string& what) {
  Arrays out;
  if (py::isinstance<py::dict>(o)) {
    for (auto [k, v] : py::reinterpret_borrow<py::dict>(o)) {
      if (!py::isinstance<py::str>(k))
        throw py::type_error(what + ": dict keys must be input names (str)");
      const std::string name = k.cast<std::string>();
      out.emplace_back(name, to_array(v, what + "['" + name + "']"));
    }
    return out;
  }
  if (py::isinstance<py::tuple>(o) || py::isinstance<py::list>(o)) {
    py::sequence s = py::reinterpret_borrow<py::sequence>(o);
    if (s.size() < 1 || s.size() > 2)
      throw py::type_error(what +
                           ": expected (x, y) or (x,), a dict of arrays by name, or an "
                           "array; got a sequence of " +
                           std::to_string(s.size()));
    out.emplace_back("x", to_array(s[0], what + "[0]"));
    if (s.size() == 2 && !s[1].is_none()) out.emplace_back(target, to_array(s[1], what + "[1]"));
    return out;
  }
  out.emplace_back("x", to_array(o, what));
  return out;
}

// Failures raised by Python code the C++ side calls (a batch iterator, a callback): kept, so that
// the caller gets the original exception instead of a translation.
struct PyFailure {
  std::mutex m;
  std::optional<py::error_already_set> error;
  void keep(py::error_already_set&& e) {
    std::lock_guard<std::mutex> l(m);
    if (!error) error.emplace(std::move(e));
  }
  void rethrow() {
    std::lock_guard<std::mutex> l(m);
    if (error) {
      py::error_already_set e = std::move(*error);
      error.reset();
      throw e;
    }
  }
};

bool is_batch_iterable(const py::handle& o) {
  return !py::isinstance<py::tuple>(o) && !py::isinstance<py::list>(o) &&
         !py::isinstance<py::dict>(o) && !py::isinstance<py::array>(o) &&
         py::hasattr(o, "__iter__");
}

// Any of the data forms as a crossbow::Data.
Data to_data(const py::object& o, const std::string& target, const std::string& what,
             std::shared_ptr<PyFailure> fail) {
  if (o.is_none()) return {};
  if (is_path(o)) return Data::path(py::str(py::module_::import("os").attr("fspath")(o)));
  if (!is_batch_iterable(o)) return Data::arrays(to_arrays(o, target, what));
  int64_t length = 0;
  if (py::hasattr(o, "__len__")) {
    try {
      length = py::len(o);
    } catch (py::error_already_set&) {
      length = 0;
    }
  }
  auto source = hold(o);
  auto start = [source, target, what, fail]() -> Data::Next {
    py::gil_scoped_acquire g;
    auto it = std::make_shared<py::object>();
    try {
      *it = py::iter(*static_cast<const py::object*>(source.get()));
    } catch (py::error_already_set& e) {
      fail->keep(std::move(e));
      throw crossbow::Error(crossbow::Error::Kind::Input, "the batch iterable raised");
    }
    auto count = std::make_shared<int64_t>(0);
    auto iter = hold(*it);
    return [iter, target, what, fail, count](Arrays& batch) -> bool {
      py::gil_scoped_acquire g2;
      const py::object& i = *static_cast<const py::object*>(iter.get());
      py::object item;
      try {
        PyObject* next = PyIter_Next(i.ptr());
        if (!next) {
          if (PyErr_Occurred()) throw py::error_already_set();
          return false;
        }
        item = py::reinterpret_steal<py::object>(next);
        batch = to_arrays(item, target, what + " batch " + std::to_string((*count)++));
      } catch (py::error_already_set& e) {
        fail->keep(std::move(e));
        throw crossbow::Error(crossbow::Error::Kind::Input, "the batch iterable raised");
      } catch (const py::builtin_exception& e) {
        throw crossbow::Error(crossbow::Error::Kind::Input, e.what());
      }
      return true;
    };
  };
  return Data::batches(start, length);
}

// A keyword's value in the text form options take.
std::string option_text(const std::string& key, const py::handle& v) {
  if (py::isinstance<py::bool_>(v)) return v.cast<bool>() ? "true" : "false";
  if (py::isinstance<py::int_>(v) || py::isinstance<py::float_>(v) || py::isinstance<py::str>(v))
    return py::str(v);
  if (py::isinstance(v, py::module_::import("os").attr("PathLike")))
    return py::str(py::module_::import("os").attr("fspath")(v));
  if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v)) {
    std::string s;
    for (py::handle x : v) {
      if (!(py::isinstance<py::int_>(x) || py::isinstance<py::float_>(x) ||
            py::isinstance<py::str>(x)))
        throw py::type_error(key + ": list items must be numbers or strings");
      s += (s.empty() ? "" : ",") + std::string(py::str(x));
    }
    return s;
  }
  throw py::type_error(key + ": expected a number, a string, a bool or a list, got " +
                       std::string(py::str(py::type::handle_of(v).attr("__name__"))));
}

// Sets one keyword option: repeatable options take a list as several settings.
template <class Set>
void set_keyword(const std::string& key, const py::handle& v, Set&& set) {
  if (v.is_none()) return;
  bool repeat = false;
  for (const auto& i : crossbow::Options::list()) {
    if (keyword_of(i.name) == key || i.name == key)
      repeat = i.kind == crossbow::Options::Info::Kind::Repeat;
  }
  if (repeat && (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v))) {
    for (py::handle x : v) set(key, option_text(key, x));
    return;
  }
  set(key, option_text(key, v));
}

py::object record_dict(const crossbow::Record& r) {
  return py::module_::import("json").attr("loads")(r.json);
}

py::object to_numpy(const Array& a) {
  std::string dt;
  switch (a.dtype) {
    case DType::F32:
      dt = "float32";
      break;
    case DType::F64:
      dt = "float64";
      break;
    case DType::F16:
      dt = "float16";
      break;
    case DType::BF16:
      dt = "uint16";
      break;  // bfloat16 bits: NumPy has no bfloat16
    case DType::I8:
      dt = "int8";
      break;
    case DType::I32:
      dt = "int32";
      break;
    case DType::I64:
      dt = "int64";
      break;
    case DType::U8:
      dt = "uint8";
      break;
    case DType::Bool:
      dt = "bool";
      break;
  }
  py::array out(py::dtype(dt), a.shape);
  std::memcpy(out.mutable_data(), a.data, a.bytes());
  return out;
}

class PyTrainer {
 public:
  PyTrainer(const py::object& model, const py::kwargs& kw) {
    if (!is_path(model))
      throw py::type_error("model: expected a path to an ONNX file (str or os.PathLike)");
    crossbow::Options o;
    std::string cmd = "python: crossbow.Trainer(" + std::string(py::str(model));
    for (auto [k, v] : kw) {
      const std::string key = k.cast<std::string>();
      try {
        set_keyword(key, v, [&](const std::string& n, const std::string& val) { o.set(n, val); });
      } catch (const crossbow::Error& e) {
        raise_error(e);
      }
      cmd += ", " + key + "=" + std::string(py::repr(v));
    }
    o.label("crossbow", cmd + ")");
    try {
      t_ = std::make_unique<crossbow::Trainer>(
          std::string(py::str(py::module_::import("os").attr("fspath")(model))), o);
    } catch (const crossbow::Error& e) {
      raise_error(e);
    }
  }

  py::list fit(const py::object& data, const py::object& epochs, const py::object& steps,
               const py::object& validation, const py::object& callbacks) {
    if (data.is_none()) throw py::type_error("data: expected training data, got None");
    // The length of this fit (and of later ones until given again): epochs alone clears a step
    // count an earlier call set, since steps override epochs.
    if (!epochs.is_none()) set("epochs", epochs);
    if (!steps.is_none())
      set("steps", steps);
    else if (!epochs.is_none())
      set("steps", py::int_(0));
    std::vector<py::object> cbs;
    if (!callbacks.is_none()) {
      if (!py::hasattr(callbacks, "__iter__"))
        throw py::type_error("callbacks: expected a list of callables");
      for (py::handle c : callbacks) {
        if (!PyCallable_Check(c.ptr()))
          throw py::type_error("callbacks: " + std::string(py::repr(c)) + " is not callable");
        cbs.push_back(py::reinterpret_borrow<py::object>(c));
      }
    }
    auto fail = std::make_shared<PyFailure>();
    const std::string target = t_->get("target");
    const Data train = to_data(data, target, "data", fail);
    const Data val = to_data(validation, target, "validation", fail);
    bool interrupted = false;
    crossbow::FitCallbacks fc;
    if (!cbs.empty())
      fc.on_eval = [&](const crossbow::Record& r) {
        py::gil_scoped_acquire g;
        try {
          py::object rec = record_dict(r);
          bool stop = false;
          for (py::object& c : cbs) {
            py::object res = c(rec);
            if (!res.is_none() && py::bool_(res)) stop = true;
          }
          return stop;
        } catch (py::error_already_set& e) {
          fail->keep(std::move(e));
          return true;
        }
      };
    // Ctrl-C: Python's handler only notes the signal; it is run here, after each step.
    fc.should_stop = [&] {
      py::gil_scoped_acquire g;
      if (PyErr_CheckSignals() != 0) {
        fail->keep(py::error_already_set());
        interrupted = true;
        return true;
      }
      return false;
    };
    crossbow::History h;
    try {
      py::gil_scoped_release nogil;
      h = t_->fit(train, val, fc);
    } catch (const crossbow::Error& e) {
      fail->rethrow();  // the Python exception behind it, when there is one
      raise_error(e);
    }
    fail->rethrow();  // a callback's exception, or KeyboardInterrupt after a clean stop
    py::list out;
    for (const crossbow::Record& r : h.records) out.append(record_dict(r));
    (void)interrupted;
    return out;
  }

  py::dict evaluate(const py::object& data) {
    auto fail = std::make_shared<PyFailure>();
    const Data d = to_data(data, t_->get("target"), "data", fail);
    if (d.empty()) throw py::type_error("data: expected data to evaluate on, got None");
    crossbow::Scores s;
    try {
      py::gil_scoped_release nogil;
      s = t_->evaluate(d);
    } catch (const crossbow::Error& e) {
      fail->rethrow();
      raise_error(e);
    }
    py::dict out;
    for (const auto& [k, v] : s) {
      if (k == "count")
        out[py::str(k)] = static_cast<int64_t>(v);
      else
        out[py::str(k)] = v;
    }
    return out;
  }

  py::object predict(const py::object& data) {
    auto fail = std::make_shared<PyFailure>();
    if (data.is_none()) throw py::type_error("x: expected inputs, got None");
    if (is_path(data)) throw py::type_error("x: predict takes arrays or batches, not a path");
    const Data d = to_data(data, t_->get("target"), "x", fail);
    Arrays out;
    try {
      py::gil_scoped_release nogil;
      out = t_->predict(d);
    } catch (const crossbow::Error& e) {
      fail->rethrow();
      raise_error(e);
    }
    if (out.size() == 1) return to_numpy(out[0].second);
    py::dict r;
    for (const auto& [name, a] : out) r[py::str(name)] = to_numpy(a);
    return r;
  }

  void save(const py::object& path, bool training_form) {
    if (!is_path(path)) throw py::type_error("path: expected a file name (str or os.PathLike)");
    const std::string p = py::str(py::module_::import("os").attr("fspath")(path));
    try {
      py::gil_scoped_release nogil;
      t_->save(p, training_form);
    } catch (const crossbow::Error& e) {
      raise_error(e);
    }
  }

  std::string save_checkpoint() {
    try {
      py::gil_scoped_release nogil;
      return t_->save_checkpoint();
    } catch (const crossbow::Error& e) {
      raise_error(e);
    }
  }

  void set(const std::string& key, const py::object& v) {
    try {
      set_keyword(key, v, [&](const std::string& n, const std::string& val) { t_->set(n, val); });
    } catch (const crossbow::Error& e) {
      raise_error(e);
    }
  }
  std::string get(const std::string& key) const {
    try {
      return t_->get(key);
    } catch (const crossbow::Error& e) {
      raise_error(e);
    }
  }
  int learners() const { return t_->learners(); }
  int64_t steps() const { return t_->steps(); }

 private:
  std::unique_ptr<crossbow::Trainer> t_;
};

}  // namespace

PYBIND11_MODULE(crossbow, m) {
  m.doc() =
      "crossbow: train ONNX models with SMA (many learners per device). Trainer(model, "
      "**options) takes cb-train's options as keywords (batch_size=16, learners='auto', ...).";
  m.attr("__version__") = crossbow::version();
  py::class_<PyTrainer>(m, "Trainer")
      .def(py::init<const py::object&, const py::kwargs&>(), py::arg("model"),
           "Reads an ONNX model (exported in training mode); keywords are cb-train's options "
           "(batch_size=16, lr=0.01, learners='auto', seed=0, devices='cpu', ...).")
      .def("fit", &PyTrainer::fit, py::arg("data"), py::arg("epochs") = py::none(),
           py::arg("steps") = py::none(), py::arg("validation") = py::none(),
           py::arg("callbacks") = py::none(),
           "Trains on data ((x, y), a dict of arrays, a --data path, or an iterable of batches); "
           "evaluates on validation after each epoch; each callback gets every evaluation "
           "record (a dict) and stops the run by returning True. Returns the records.")
      .def("evaluate", &PyTrainer::evaluate, py::arg("data"),
           "The trained model's test scores on data: loss, count, and accuracy, top5, mae, r2 "
           "where they apply.")
      .def("predict", &PyTrainer::predict, py::arg("x"),
           "The model's output for x (an array, a dict of arrays by input name, or an iterable "
           "of batches): one array, or a dict by output name for several outputs.")
      .def("save", &PyTrainer::save, py::arg("path"), py::arg("training_form") = false,
           "Writes the trained model as ONNX (inference form unless training_form).")
      .def("save_checkpoint", &PyTrainer::save_checkpoint,
           "Writes a checkpoint into checkpoint_dir now; returns its folder.")
      .def("set", &PyTrainer::set, py::arg("option"), py::arg("value"),
           "Changes an option between calls (after the first fit: the run's options only).")
      .def("get", &PyTrainer::get, py::arg("option"), "An option's value, as text.")
      .def_property_readonly("learners", &PyTrainer::learners, "Learners in all now.")
      .def_property_readonly("steps", &PyTrainer::steps, "Steps trained so far.");
  m.def(
      "options",
      [] {
        py::dict d;
        for (const auto& i : crossbow::Options::list()) {
          d[py::str(keyword_of(i.name))] = py::make_tuple(i.default_value, i.help);
        }
        return d;
      },
      "Every option: keyword -> (default, help).");
}
