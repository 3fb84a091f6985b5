// hyperparallel._core: the extension module behind the Python package (python/hyperparallel).
#include "bindings.h"

NB_MODULE(_core, m) {
  using namespace hp::python;
  m.doc() = "HyperParallel C++ library bindings (use the hyperparallel package, not this module)";
  m.attr("__version__") = HP_VERSION;
  bind_errors(m);
  bind_tensor(m);
  bind_ops(m);
  bind_models(m);
  bind_train(m);
  bind_loop(m);
  bind_checkpoint(m);
}
